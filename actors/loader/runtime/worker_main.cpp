#include "loader/runtime/worker_main.h"

#include <cstdlib>

namespace loader::runtime {

std::optional<int> run_worker_if_requested(int /*argc*/, char** /*argv*/) {
  if (std::getenv("LOADER_WORKER_FD") == nullptr) return std::nullopt;
  return 3;  // replaced by the worker loop (runtime issue)
}

}  // namespace loader::runtime
