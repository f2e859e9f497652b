// The pool actor and the owner of a pool's actors.
//
// The pool actor (one per worker pool) keeps the watchdog clock (every `tick` it
// tells each slot actor to look at its process), with num_workers = auto the
// autotuner's clock (every 100 ms it asks the pipeline to tune, and tells the worker
// slot actors of the workers to retire or start: park, unpark), and supervises the slot actors:
// it monitors each, and a slot actor that stops while the pool lives (it cannot
// by design; an exception CAF caught, a bug) fails the loader with a message that
// names the worker and the reason, instead of leaving its restarts undone.
//
// PoolActors owns every actor of one pool: made before any worker starts (so every
// death and every queued frame has an actor to go to), stopped before the pipeline
// shuts down, in a fixed order: the pool actor first (no watchdog look during
// teardown), then the slot actors (no restart during teardown).
#pragma once

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <vector>

#include "loader/runtime/protocol.h"
#include "loader/runtime/parent/slot_actor.h"

namespace loader::runtime {

struct PipelineHooks;

/// Spawns the pool actor over `workers`.  `tick`: the watchdog period (0: no clock,
/// for tests that send tick_atom themselves).  `tune_every`: the autotuner's period
/// (num_workers = auto; 0: none, or tests that send autotune_atom themselves).
pool_actor spawn_pool_actor(caf::actor_system& sys, std::weak_ptr<WorkerControl> control,
                            std::vector<slot_actor> workers, std::chrono::milliseconds tick,
                            std::chrono::milliseconds tune_every = std::chrono::milliseconds(0));

class PoolActors {
 public:
  /// One slot actor per slot (0 .. workers-1), then the pool actor over them.  The
  /// slots from `own_thread_from` on (a pool's remote workers) get actors of their own
  /// thread (spawn_slot_actor).  Called on the application thread.
  PoolActors(caf::actor_system& sys, std::weak_ptr<WorkerControl> control, int workers,
             std::chrono::milliseconds tick, std::chrono::milliseconds tune_every = std::chrono::milliseconds(0),
             int own_thread_from = -1);
  PoolActors(const PoolActors&) = delete;
  PoolActors& operator=(const PoolActors&) = delete;
  /// stop() unless send_exits() or stop() ran.
  ~PoolActors();

  /// How the pipeline's reader threads reach the slot actors (restart_later: a
  /// down to slot actor k; flush_later: a flush).  The hooks hold actor handles
  /// only; sending to a stopped actor does nothing.  Callable from any thread.
  PipelineHooks hooks() const;

  /// Tells every actor to exit (the pool actor first).  Does not wait: tests on the
  /// deterministic scheduler run the exits themselves.
  void send_exits();
  /// send_exits(), then waits until every actor has terminated (never call it on the
  /// deterministic scheduler).  Afterwards no actor touches the pipeline.
  void stop();

  const pool_actor& pool() const noexcept { return pool_; }
  const std::vector<slot_actor>& workers() const noexcept { return workers_; }

 private:
  caf::actor_system& sys_;
  std::vector<slot_actor> workers_;
  pool_actor pool_;
  bool exits_sent_ = false;
  bool stopped_ = false;
};

}  // namespace loader::runtime
