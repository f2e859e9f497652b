// WorkerLifecycle: the state machine of one worker slot, with no thread, process or
// actor in it.  The worker stage (worker_slots.h) drives it on the strand; tests drive it
// directly.
//
//                start(g)              ready(g)
//     Idle ───────────────► Starting ───────────► Running
//                              │ down(g)             │ down(g)
//                              ▼                     ▼
//                 ┌──── restartable and restarts left? ────┐
//                 │ yes                                     │ no
//                 ▼                                         ▼
//            Restarting ── start(g+1) ──► Starting        Dead  (the fatal error is
//                                                               kept: every later epoch
//     fail(g, why) from any state ─────────────────────►  Dead  gets it at once)
//
//     down(g, between_epochs) ──► Restarting, always (not counted: see down())
//
//     park(g): Idle, or Starting/Running holding no task ──► Parked (the autotuner retired
//     the slot, or never started it; its process is told to exit, and that exit, down(g),
//     is ignored); start(g+1) from Parked starts it again.
//
// Generations: every process (or thread) incarnation of the slot gets a new
// generation g, and every event names the generation it comes from.  An event of an
// older generation is stale and ignored, so a link-down posted by the reader of a
// stopped process can never be applied to its successor.
//
// Tasks: the slot keeps every task sent to it and not answered yet, in task order.
// When the worker dies they are either re-issued to the next incarnation (restart)
// or answered with the fatal error: no task is ever left without an answer.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "loader/fetch.h"
#include "loader/runtime/worker_exit.h"

namespace loader::runtime {

/// A task sent to the worker and not answered yet.
struct HeldTask {
  uint64_t epoch = 0;
  IndexBatch indices;
  uint64_t slab = 0;  ///< slab the batch is written into (0: none yet)
  /// The batch comes back inline, in the frame (kInlineSlab on the wire): no slab was
  /// free when the application had to have it (Pipeline::send_starved_inline_locked).
  bool inline_batch = false;
};

class WorkerLifecycle {
 public:
  enum class State { Idle, Starting, Running, Restarting, Dead, Parked };

  /// What the slot's owner must do after a worker went down.
  struct Decision {
    enum class Kind { Ignore, Restart, Fail } kind = Kind::Ignore;
    std::vector<uint64_t> reissue;  ///< Restart: tasks to send again, in order
    std::string message;            ///< Restart: the warning; Fail: the fatal error
  };

  WorkerLifecycle(int worker_id, int max_restarts, bool restartable)
      : id_(worker_id), max_restarts_(max_restarts), restartable_(restartable) {}

  // ---- events (each names its generation; stale ones are ignored)
  /// A new incarnation is being started; returns its generation.  From Idle or
  /// Restarting; the slot is Starting afterwards.
  uint32_t start();
  /// The incarnation `gen` runs as process `pid` (-1 for a thread).
  void set_pid(uint32_t gen, int pid);
  /// The slot is retired on purpose (num_workers = auto): from Idle, or from the current
  /// incarnation `gen` Starting or Running with no task held.  False (nothing changed)
  /// otherwise.
  bool park(uint32_t gen);
  bool parked() const { return state_ == State::Parked; }
  /// The incarnation `gen` finished its start-up handshake.
  bool ready(uint32_t gen);
  /// The incarnation `gen` is gone (`how`): restart it or fail for good.
  /// `between_epochs`: it was a kept worker of a non-persistent pool that died before it
  /// started any task of the epoch it was re-initialised for.  PyTorch would have
  /// started a fresh process for that epoch anyway, so it is replaced without counting
  /// against max_restarts (also for iterable datasets: it produced nothing yet).
  Decision down(uint32_t gen, const WorkerExit& how, bool between_epochs = false);
  /// The slot fails for good (init error, protocol error, failed restart).
  /// Returns false when `gen` is stale or the slot is already dead.
  bool fail(uint32_t gen, const std::string& type, const std::string& message);

  // ---- tasks
  void hold(uint64_t task, HeldTask t) { held_[task] = std::move(t); }
  /// Removes and returns task `task` if this slot holds it.
  std::optional<HeldTask> release(uint64_t task);
  HeldTask* find(uint64_t task);
  const std::map<uint64_t, HeldTask>& held() const { return held_; }
  /// Drops every task of an epoch other than `epoch`; returns their slabs.
  std::vector<uint64_t> drop_other_epochs(uint64_t epoch);
  /// Removes every held task (they are answered by the caller); returns them.
  std::map<uint64_t, HeldTask> take_all();

  // ---- queries
  State state() const { return state_; }
  uint32_t generation() const { return gen_; }
  bool current(uint32_t gen) const { return gen == gen_ && state_ != State::Dead; }
  bool dead() const { return state_ == State::Dead; }
  bool accepting() const { return state_ == State::Starting || state_ == State::Running; }
  int pid() const { return pid_; }
  int restarts() const { return restarts_; }
  int id() const { return id_; }
  const std::string& fatal_type() const { return fatal_type_; }
  const std::string& fatal_message() const { return fatal_message_; }
  /// "task 5: [20, 21, 22, 23]; task 7: [...]" for messages.
  std::string describe_held() const;

 private:
  int id_;
  int max_restarts_;
  bool restartable_;
  State state_ = State::Idle;
  uint32_t gen_ = 0;
  int pid_ = -1;
  int restarts_ = 0;
  std::map<uint64_t, HeldTask> held_;
  std::string fatal_type_;
  std::string fatal_message_;
};

const char* to_string(WorkerLifecycle::State s);

}  // namespace loader::runtime
