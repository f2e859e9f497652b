// The slot actor: one per worker slot of a pool, a thin shell over the slot's
// control operations (WorkerControl, implemented by the Pipeline; a fake in
// actor-level tests).  Any exception in it becomes the loader's fatal error naming
// the worker and what it was doing; it never dies silently and never waits for a
// process (a dead one is reaped by its reader thread, a frozen one is SIGKILLed).
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loader/runtime/protocol.h"

namespace loader::runtime {

/// What the worker and pool actors act on.  restart/flush/watch of worker k are
/// called on slot actor k's thread only (so one thread at a time per worker);
/// fail_all on any actor's thread.
class WorkerControl {
 public:
  virtual ~WorkerControl() = default;
  /// Starts the next incarnation of `worker`, whose incarnation `gen` went down.
  virtual void restart(int worker, uint32_t gen) = 0;
  /// Writes the frames queued for `worker`.
  virtual void flush(int worker) = 0;
  /// Looks at `worker`'s process (frozen, exited, never started); called every `tick`.
  virtual void watch(int worker, std::chrono::milliseconds tick) = 0;
  /// num_workers = auto: retires `worker` (it holds no task: its process exits) or
  /// starts it again; slot actor k's thread.
  virtual void park(int /*worker*/) {}
  virtual void unpark(int /*worker*/) {}
  /// num_workers = auto: the autotuner looks at the figures (pool actor's thread, every
  /// 100 ms); returns the workers to retire (false) or start (true).
  virtual std::vector<std::pair<int, bool>> tune() { return {}; }
  /// The loader fails with this error (something unexpected in the runtime).
  virtual void fail_all(const std::string& type, const std::string& message) = 0;
};

/// Spawns the actor of worker slot `worker`.  It holds `control` weakly: once the
/// pipeline is gone its messages do nothing.  `own_thread`: detached (a thread of its
/// own), for a slot whose work can block (a remote worker's start: a connection probe
/// and requests, each bounded by remote_timeout), so that it never holds one of the
/// scheduler's threads, which the pool actor's clock and the other slots need.
slot_actor spawn_slot_actor(caf::actor_system& sys, std::weak_ptr<WorkerControl> control, int worker,
                            bool own_thread = false);

}  // namespace loader::runtime
