// The supervisor actor of a worker pool: a thin shell over Pipeline::restart,
// Pipeline::flush and Pipeline::watchdog.  Any exception in it becomes the
// loader's fatal error (it never dies silently).
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <memory>

#include "loader/runtime/protocol.h"

namespace loader::runtime {

class Pipeline;

/// The process's actor system (RuntimeConfig), shared by every loader and alive
/// while any pool needs it.
std::shared_ptr<caf::actor_system> acquire_system();

/// Spawns the supervisor of `pipeline`.  `tick`: the watchdog period (0: no
/// watchdog, for tests that send tick_atom themselves).
supervisor_actor spawn_supervisor(caf::actor_system& sys, std::weak_ptr<Pipeline> pipeline,
                                  std::chrono::milliseconds tick);

}  // namespace loader::runtime
