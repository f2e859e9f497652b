// What every stage actor does with an exception of its logic: the epoch fails with a
// message naming the stage and what it was handling (never a silent actor death).
#pragma once

#include <exception>
#include <string>

#include "loader/runtime/parent/stage_actors.h"

namespace loader::runtime {

template <class F>
void stage_guarded(StageFailures* stage, const std::string& who, const char* what, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    stage->stage_failed("DataLoader runtime: " + who + " failed while handling " + what + ": " + e.what());
  } catch (...) {
    stage->stage_failed("DataLoader runtime: " + who + " failed while handling " + what + ": an unknown exception");
  }
}

}  // namespace loader::runtime
