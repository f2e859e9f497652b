// The stage actors of one worker pool in the main process, and the strand they run on.
//
//   sampler --task_msg--> link k --(task ring / socket)--> worker actor k
//   worker actor k --(result ring / socket)--> link k --result_msg--> reorder
//   link k --dry--> sampler                     reorder --result_msg--> pin
//   application thread (BatchDelivery::next) --take--> pin --credit--> sampler
//   (the taken result is the pin stage's answer, into the asking thread's slot)
//
// Each actor is a thin shell over a plain class: the sampler over SamplerStage, each
// link over the worker stage's slot (WorkerStage: WorkerSlots), the reorder actor over
// a ReorderBuffer, the pin actor over a Handoff.  They share no state: what one stage
// tells another is a message.  The links are actor proxies (link_actor.h): a message
// sent to one goes to the worker stage at once, no activation.
//
// The strand: all of them are spawned lazily and only ever receive messages through
// one InlineExecutor, which whichever thread has entered the strand (enter()) runs:
// the application thread in next(), a reader thread with a frame, a slot actor
// restarting its worker.  So the stages of a pool share one thread at a time, and a
// batch costs a few mailbox messages and no thread hand-off or wake-up
// (docs/architecture.md has the figures).
//
// What changes a stage's state is a message to its actor (an epoch's begin and end,
// halt, drop, the application's take: protocol.h); other code gets the plain classes
// const only.
//
// Thread use: every method, and every message to these actors, with the strand
// entered.  The pool reads the stages' plain classes between two run() calls.
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "loader/runtime/epoch.h"
#include "loader/runtime/inline_executor.h"
#include "loader/runtime/parent/handoff.h"
#include "loader/runtime/parent/reorder_buffer.h"
#include "loader/runtime/parent/sampler_stage.h"
#include "loader/runtime/protocol.h"

namespace loader::runtime {

class SlabStore;

/// Where a stage actor reports something unexpected in its logic (the pool: the epoch
/// fails with this message).  On the strand.
class StageFailures {
 public:
  virtual ~StageFailures() = default;
  virtual void stage_failed(const std::string& message) = 0;
};

/// The worker stage's logic behind the link actors (WorkerSlots; a fake in the actor
/// tests).  On the strand.
class WorkerStage {
 public:
  virtual ~WorkerStage() = default;
  /// Worker `worker` is to compute `task`: held until answered, sent with a slab.
  virtual void take_task(int worker, task_msg& task) = 0;
  enum class Outcome {
    Deliver,  ///< a batch or a sample's error: on to the reorder stage
    Dry,      ///< the worker's iterable ran dry: the order moves past the task
    None,     ///< nothing to forward (a larger slab was sent, a stale or unknown task)
  };
  /// Worker `worker` answered: its lifecycle takes the task back; `r` is completed
  /// (its slab, its worker) for delivery.
  virtual Outcome take_result(int worker, result_msg& r) = 0;
  /// Whether `gen` is worker `worker`'s current incarnation (an older one's events
  /// are dropped).
  virtual bool current(int worker, uint32_t gen) const = 0;
  /// Incarnation `gen` said hello / is ready.
  virtual void hello(int worker, uint32_t gen) = 0;
  virtual void ready(int worker, uint32_t gen) = 0;
  /// Incarnation `gen` cannot go on: the worker is dead, its tasks answered with this
  /// error.  True when it died now (the link retires it in the sampler).
  virtual bool failed(int worker, uint32_t gen, const std::string& type, const std::string& message) = 0;
  /// Incarnation `gen` went down (`how`): restarted, or dead.  True when it died now.
  virtual bool down(int worker, uint32_t gen, const WorkerExit& how) = 0;
  /// How incarnation `gen`'s iterable stream answering `task` began (state hooks).
  virtual void stream_started(int worker, uint32_t gen, uint64_t task, StreamStart start) = 0;
};

class StageActors {
 public:
  /// Spawns the sampler, one link per worker, the reorder and the pin actor.
  StageActors(caf::actor_system& sys, int workers, WorkerStage& stage, StageFailures& failures,
              std::shared_ptr<SlabStore> slabs);
  /// stop() unless it ran.
  ~StageActors();
  StageActors(const StageActors&) = delete;
  StageActors& operator=(const StageActors&) = delete;

  /// Enters the strand: one thread at a time sends to the stages, runs them, or reads
  /// or changes a stage's plain class (of this pool, or the worker stage's slots) while
  /// the returned lock is held.  It is the executor's lock, as a scheduler's run queue
  /// has one: no stage's state is reachable from another stage, and a thread that
  /// enters does so to send a message or to act as the pool, never to share data
  /// between two stages.
  std::unique_lock<std::mutex> enter() const { return std::unique_lock<std::mutex>(strand_mu_); }
  /// Puts a message into an actor's mailbox; it runs at the next run().
  template <class Dest, class... Ts>
  void send(const Dest& dest, Ts&&... xs) {
    exec_.send(dest, std::forward<Ts>(xs)...);
  }
  /// The same, handled before the normal messages in the actor's mailbox.
  template <class Dest, class... Ts>
  void send_urgent(const Dest& dest, Ts&&... xs) {
    exec_.send_urgent(dest, std::forward<Ts>(xs)...);
  }
  /// Runs the stages until none has a message left.  Re-entered (a stage calls back
  /// into the pipeline, which sends): returns at once, the outer run takes the rest.
  void run();
  /// Ends every actor (on the strand); later messages go nowhere.
  void stop();

  const sampler_actor& sampler() const { return sampler_; }
  const reorder_actor& reorder() const { return reorder_; }
  const pin_actor& pin() const { return pin_; }
  /// The application's next result: the pin stage's answer to a `take` (its credit goes
  /// on to the sampler, whose next task goes out in the same run), nullopt when it holds
  /// none.  Runs the strand: not from a stage.  Strand entered.
  std::optional<HandedOver> take();
  /// Worker `worker`'s link (0 <= worker < workers; a null handle after stop()).
  link_actor link(int worker) const;
  /// A result of `worker`, taken from the transport: to its link, which passes it on.
  void deliver(int worker, result_msg r);

  /// The stages' plain classes, to read (position, stats, the delivery loop's tests):
  /// only their actors' handlers change them.
  const SamplerStage& sampling() const { return sampling_; }
  const ReorderBuffer<result_msg>& reordering() const { return reordering_; }
  const Handoff& handoff() const { return handoff_; }

 private:
  mutable std::mutex strand_mu_;
  InlineExecutor exec_;
  bool running_ = false;
  bool stopped_ = false;
  // The stages' plain classes (declared before the actors that point at them).
  SamplerStage sampling_;
  ReorderBuffer<result_msg> reordering_;
  Handoff handoff_;
  sampler_actor sampler_;
  std::vector<task_sink> links_;  ///< worker k's link at [k], as the sampler sees them
  reorder_actor reorder_;
  pin_actor pin_;
};

}  // namespace loader::runtime
