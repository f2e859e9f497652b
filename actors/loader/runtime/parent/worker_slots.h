// WorkerSlots: the worker stage's logic in the main process, one slot per worker of a
// pool: each worker's lifecycle (incarnations, the tasks it holds until answered), the
// slabs its tasks' batches go into, the tasks waiting for a slab, its random streams and
// its counters.  What carries a slot's tasks and results is its transport
// (worker_transport.h: shared memory for a local worker), which the slot drives and the
// pool owns.  The link actors are its shells (link_actor.h): a `task_msg` sent to link k
// is take_task(k, ...), a reply the transport brings is take_result(k, ...) before link k
// sends it on.  No other stage reaches into it: the pool (Pipeline) acts on a slot only
// through the operations below.
//
// Thread use: on the strand (StageActors::enter() held), like every stage's plain
// class: the link actors' messages, and the pool when it starts, restarts or stops a
// worker, begins or ends an epoch, or reads a position or the stats.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "loader/epoch_stats.h"
#include "loader/runtime/os/proc_stat.h"
#include "loader/runtime/parent/stage_actors.h"
#include "loader/runtime/parent/worker_lifecycle.h"
#include "loader/runtime/parent/worker_transport.h"
#include "loader/runtime/wire.h"

namespace loader::runtime {

class SlabStore;

/// How the worker stage fails the epoch (the pool's: Pipeline).  On the strand.
class WorkerStageEvents {
 public:
  virtual ~WorkerStageEvents() = default;
  /// The epoch fails with this error (a worker died, no slab for a task, a slab too
  /// large for the budget).
  virtual void epoch_failed(const std::string& type, const std::string& message, int worker) = 0;
  /// Incarnation `gen` of worker `worker` went down and is to be restarted (`warning`
  /// says why): the pool starts the next one off the strand (a process spawn).
  virtual void worker_restarting(int worker, uint32_t gen, const std::string& warning) = 0;
  /// Worker `worker` finished its start-up (Ready): the autotuner's new worker gets tasks.
  virtual void worker_ready(int /*worker*/) {}
};

class WorkerSlots final : public WorkerStage {
 public:
  /// One transport per worker (`transports[k]`); they, `slabs` and `events` outlive the
  /// slots.  `rng_slots`: before-records per state page.  `executable`: the worker
  /// program (empty: this one), named when a worker exits before it said hello.
  WorkerSlots(std::vector<WorkerTransport*> transports, int max_restarts, bool restartable, SlabStore& slabs,
              uint64_t rng_slots, WorkerStageEvents& events, std::string executable);

  int size() const { return static_cast<int>(slots_.size()); }

  // ---- the pool's epoch and end, as the pool tells the stage
  /// Tasks taken from now on belong to `epoch` (0: none runs; answers of an ended epoch
  /// give their slabs back).
  void set_epoch(uint64_t epoch);
  /// No task goes out any more (the pool shut down).
  void close() { closed_ = true; }

  // ---- incarnations
  /// A new generation for worker `w` (lifecycle Starting, hello reset, its transport
  /// reset); its tasks wait until attach().
  uint32_t begin_incarnation(int w);
  /// Incarnation `gen` started (process `pid`): its first frames are queued (the
  /// transport's, the configuration `init`, an encoded WorkerConfig, then the epoch's
  /// task seeds), and from now on its tasks go out.
  void attach(int w, uint32_t gen, int pid, std::string init);
  /// The incarnation is attached and accepts tasks (starting or running).
  bool accepting(int w) const;
  /// Worker `w` is dead for good (its fatal error is kept).
  bool dead(int w) const { return at(w).life.dead(); }
  const std::string& fatal_type(int w) const { return at(w).life.fatal_type(); }
  const std::string& fatal_message(int w) const { return at(w).life.fatal_message(); }
  WorkerLifecycle::State state(int w) const { return at(w).life.state(); }
  uint32_t generation(int w) const { return at(w).life.generation(); }
  /// The pid of a starting or running local incarnation, else -1.
  int live_pid(int w) const;
  /// What the watchdog knows of the incarnation; nullopt: nothing to watch.
  std::optional<Liveness> liveness(int w) const;
  /// Worker `w`'s incarnations go through `t` from the next one on (a remote slot whose
  /// host was lost: another host's session or a local stand-in; home again later).  Its
  /// random stream goes on from the last state the old transport recorded, and states
  /// of tasks the old one ran are still read from it.  Call between begin_incarnation
  /// and attach.
  void set_transport(int w, WorkerTransport* t);
  /// How worker `w`'s last incarnation was lost, when its host was (HostLost), until an
  /// incarnation is attached.
  const std::optional<WorkerExit>& host_lost(int w) const { return at(w).lost; }
  /// Worker `w`'s unfinished tasks.
  size_t held(int w) const { return at(w).life.held().size(); }
  /// num_workers = auto: worker `w` is retired (WorkerLifecycle::park: never started, or
  /// holding no task); its transport is the caller's to stop.  False: nothing changed.
  bool park(int w);
  bool parked(int w) const { return at(w).life.parked(); }
  /// Every worker's busy time in this epoch (their replies so far), in ns, and their
  /// batches next() returned.
  uint64_t busy_ns_total() const;
  uint64_t delivered_total() const;
  /// Worker `w` gets a new configuration `init` for the epoch whose first task is
  /// `first_task` (a kept pool re-initialised: its stream starts anew).  A parked worker
  /// gets it when it starts again (its stream then starts from the configuration).
  void renew(int w, uint64_t first_task, std::string init);
  /// WorkerSeeding::PerTask: the current epoch's task seeds (base_seed, task_base), which
  /// every later incarnation gets after its Init.
  void set_task_seeds(const TaskSeeds& seeds) { task_seeds_ = seeds; }
  const std::optional<TaskSeeds>& task_seeds() const { return task_seeds_; }
  /// After a restart: slabs of other epochs' tasks come back, the generator goes back
  /// to where the first unfinished task began, and every held task goes out again.
  /// `moved`: the slot moved to another transport (a lost host); holding nothing, its
  /// stream goes on from the last state recorded (with its next task), unless the
  /// worker was re-initialised since (a fresh generator).
  void resend_held(int w, bool moved = false);
  /// Worker `w` is dead (`type`, `message`: its current incarnation fails, unless it
  /// is dead already): every task it held is answered (its slab comes back), and the
  /// running epoch fails with the worker's error.
  void fail(int w, const std::string& type, const std::string& message);
  /// Gives back the slabs of every task `w` holds (shutdown).
  void release_all(int w);

  // ---- epochs
  /// An epoch begins: each worker's counters start again; `worker_rng[k]` (when a
  /// resumed epoch gives any) is the state worker k's first task of it starts from.
  void begin_epoch_counters(std::vector<std::optional<std::string>>* worker_rng);
  /// Worker `w`'s figures of the epoch (its pid, state, restarts, tasks held, batches
  /// delivered, inline batches, busy time).
  EpochStats::Worker stats(int w) const;
  /// A batch of worker `w` was handed to the application.
  void delivered(int w) { ++at(w).delivered; }
  /// Where worker `w`'s random stream stands before task `task` of the epoch (a
  /// resumed state not yet sent, or the state recorded when it started).
  std::optional<std::string> resume_state(int w, uint64_t task) const;
  /// How worker `w`'s stream of the epoch beginning at `first_task` began (none yet: nullopt).
  std::optional<StreamStart> stream_start(int w, uint64_t first_task) const;

  // ---- what the workers are told, in order with their tasks
  /// Worker `w`'s iterable stream starts anew (persistent workers, a new epoch).
  void restart_stream(int w) { at(w).transport->restart_stream(); }
  /// Worker `w`'s iterable stream begins from a checkpoint's state.
  void resume_stream(int w, const StreamResume& resume) { at(w).transport->resume_stream(resume); }
  /// Worker `w` gets the epoch's task seeds (set_task_seeds).  REQUIRES: task_seeds().
  void send_task_seeds(int w) { at(w).transport->task_seeds(*task_seeds_); }
  /// Workers with frames waiting for their transport's flush.
  std::vector<int> dirty() const;

  // ---- the link actors' messages (WorkerStage)
  void take_task(int worker, task_msg& task) override;
  Outcome take_result(int worker, result_msg& r) override;
  bool current(int worker, uint32_t gen) const override { return at(worker).life.current(gen); }
  void hello(int worker, uint32_t gen) override;
  void ready(int worker, uint32_t gen) override;
  bool failed(int worker, uint32_t gen, const std::string& type, const std::string& message) override;
  /// Restart (WorkerStageEvents::worker_restarting), fail, or ignore (an older
  /// incarnation), as its lifecycle decides.
  bool down(int worker, uint32_t gen, const WorkerExit& how) override;
  /// Kept when it is the latest (a stream of an older epoch reports before a newer one).
  void stream_started(int worker, uint32_t gen, uint64_t task, StreamStart start) override;

  /// A batch of worker `w` was dropped (its slab is back): its tasks waiting for a slab
  /// go out.  True when any did.
  bool slab_released(int w);
  /// The application is about to wait for a task that waits for a slab (it holds every
  /// slab of its worker): that task goes out for a batch in the frame.  `in_order`,
  /// `next_expected`: the reorder stage's order.  True when one was sent.
  bool send_starved_inline(bool in_order, uint64_t next_expected);

  // ---- random streams
  /// Before-records per state page: more than the tasks that can be in flight, at most 1024.
  uint64_t rng_slots() const { return rng_slots_; }
  /// The state at the start of worker `w`'s task `task` (its page, or a resumed epoch's state).
  std::optional<std::string> state_before(int w, uint64_t task) const;

 private:
  struct Slot {
    Slot(int id, int max_restarts, bool restartable, WorkerTransport* t)
        : life(id, max_restarts, restartable), transport(t) {}
    WorkerLifecycle life;
    WorkerTransport* transport;       ///< the pool's; carries this slot's frames
    WorkerTransport* previous = nullptr;  ///< the one before set_transport (states of its tasks)
    std::optional<WorkerExit> lost;   ///< the host of the last incarnation was lost
    bool attached = false;            ///< the incarnation's transport started: its tasks go out
    std::deque<uint64_t> waiting;     ///< held tasks with no slab yet (pool spent)
    bool hello = false;
    std::chrono::steady_clock::time_point started;
    uint64_t rng_floor = 0;           ///< RNG records of tasks below this predate the last Init
    bool renewed = false;             ///< this incarnation was re-initialised for an epoch (reinit)
    uint64_t delivered = 0;           ///< its batches next() returned in this epoch
    uint64_t inline_batches = 0;      ///< its tasks of this epoch sent for a batch in the frame
    uint64_t busy_ns = 0;             ///< its time on the tasks whose replies came in this epoch
    uint64_t collate_ns = 0;          ///< the collate and write part of busy_ns
    uint64_t tasks = 0;               ///< its Result and Error replies of this epoch
    /// Its process's /proc/<pid>/stat as the epoch began (pid 0: not read), so that
    /// stats() reports the epoch's CPU time and minor faults.
    int proc_pid = 0;
    ProcStat proc_base;
    /// A resumed epoch's generator state to send before this worker's first task of it.
    std::optional<std::string> resume_rng;
    /// The task that state was sent with (a restart before the task started sends it again).
    std::optional<std::pair<uint64_t, std::string>> resume_sent;
    /// IterableDataset: how its latest stream began (the task its first reply answered,
    /// the StreamStart its worker reported); reset as an epoch begins.
    std::optional<std::pair<uint64_t, StreamStart>> stream_start;
  };
  Slot& at(int worker) { return *slots_[static_cast<size_t>(worker)]; }
  const Slot& at(int worker) const { return *slots_[static_cast<size_t>(worker)]; }
  void send_task(int w, uint64_t task);
  void drain_waiting(int w);
  void release_task_slab(int w, const HeldTask& t);

  std::vector<std::unique_ptr<Slot>> slots_;
  SlabStore& slabs_;
  uint64_t rng_slots_;
  WorkerStageEvents& events_;
  std::string executable_;
  uint64_t epoch_ = 0;
  bool closed_ = false;
  std::optional<TaskSeeds> task_seeds_;
};

}  // namespace loader::runtime
