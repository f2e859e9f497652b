// The supervisor actor of a worker pool: a thin shell over Pipeline::restart,
// Pipeline::flush and Pipeline::watchdog.  Any exception in it becomes the
// loader's fatal error (it never dies silently).
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "loader/runtime/protocol.h"

namespace loader::runtime {

/// What the supervisor acts on (the Pipeline; a fake in actor-level tests).  Its
/// methods are called on the supervisor's thread only.
class Supervised {
 public:
  virtual ~Supervised() = default;
  /// Starts the next incarnation of `worker`, whose incarnation `gen` went down.
  virtual void restart(int worker, uint32_t gen) = 0;
  /// Writes the frames queued for `worker`.
  virtual void flush(int worker) = 0;
  /// Looks at every worker process (frozen, exited, never started).
  virtual void watchdog(std::chrono::milliseconds tick) = 0;
  /// The loader fails with this error (something unexpected in the runtime).
  virtual void fail_all(const std::string& type, const std::string& message) = 0;
};

/// The process's actor system (RuntimeConfig), shared by every loader and alive
/// while any pool needs it.
std::shared_ptr<caf::actor_system> acquire_system();

/// Spawns the supervisor of `pipeline`.  `tick`: the watchdog period (0: no
/// watchdog, for tests that send tick_atom themselves).
supervisor_actor spawn_supervisor(caf::actor_system& sys, std::weak_ptr<Supervised> pipeline,
                                  std::chrono::milliseconds tick);

}  // namespace loader::runtime
