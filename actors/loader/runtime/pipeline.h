// Pipeline: the worker pool of one DataLoader in the main process: its worker slots
// (the worker stage's logic: each worker's lifecycle, link, frames, slabs) and the
// stage actors its batches travel through (stage_actors.h):
//
//   sampler actor  SamplerStage: TaskSource (the index stream) + TaskDispatcher
//                  (credits, PyTorch's round robin, the in_order=false capacity rule)
//   link actor k   worker slot k (WorkerStage, implemented here), a CAF actor proxy
//                  (link_actor.h): a task sent to it is held until answered and sent
//                  at once with a slab over the task ring (or the socket); a result
//                  from the ring or the socket goes on to the reorder stage
//   reorder actor  ReorderBuffer: results leave in task order (or completion order)
//   pin actor      Handoff: each result handed over, marked page-locked when its slab
//                  is (SlabStore pins a slab once, when made)
//
// Task (task_msg) and result (result_msg) are actor messages.  The stage actors run
// on the pool's strand: an InlineExecutor that whoever holds mu_ runs, so a batch
// costs mailbox messages but no thread hand-off or wake-up (the measurement that chose
// this is in docs/architecture.md):
//
//   application thread  next(): when the handoff is empty, takes the Result frames the
//                       workers published in the result rings (shared memory, no system
//                       call) and gives each to its link actor; runs the strand
//                       (reorder -> pin); takes
//                       the next handed-over result, sends the sampler its credit back
//                       and runs the strand again (the sampler's next task goes to a
//                       link, which posts it in the worker's task ring; the worker is
//                       woken only if it sleeps).  Sleeps on the rings' doorbell only
//                       when nothing is ready.
//   reader thread k     on_frame(): every other frame of worker k (ready, errors, a
//                       batch too large for a ring...), results given to link k as
//                       above; on_down(): takes what the dead incarnation left in its
//                       ring first.  The application thread is woken (doorbell) only if
//                       it sleeps.  Readers never write to a socket (a full socket
//                       could then deadlock both sides): frames they queue are flushed
//                       by the slot actor (hooks.flush_later).
//   any thread          release_slab(): a batch was dropped; a task waiting for a
//                       slab goes out.
//   slot actor k        restart(k), watch(k), flush(k) (WorkerControl): everything
//                       that starts or kills worker k's process runs there or in the
//                       application thread (slot_actor.h, pool_actor.h).
//
// Locks: flush_mu of a slot (orders the frames written to one link) before mu_
// before SlabStore's lock.  No socket write and no process wait happens under mu_.
// mu_ is also the strand's: every message to a stage actor is sent, and the strand
// run, under it; between two runs every stage mailbox is empty, and the pipeline
// reads the stages' plain classes (position, stats).
//
// Why the reorder buffer cannot overflow: a task goes out only against a credit
// (TaskDispatcher::can_send, in the sampler stage), and a credit comes back only when
// next() hands a result to the application or a task is skipped, so at most
// prefetch_factor * num_workers results are ever held (or in flight).
//
// Why every sample arrives exactly once after a restart: a slot keeps each task
// until its answer arrives from the incarnation the task was sent to; an answer
// from another incarnation is dropped (generations), and a restart re-sends every
// held task of the epoch to the new incarnation, with the generator state saved at
// the start of the first one (RngStatePage), so the batches are byte-identical.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "loader/epoch_stats.h"
#include "loader/fetch.h"
#include "loader/runtime/epoch.h"
#include "loader/runtime/parent/reorder_buffer.h"
#include "loader/runtime/worker_rings.h"
#include "loader/runtime/os/shm.h"
#include "loader/runtime/parent/slab_store.h"
#include "loader/runtime/parent/slot_actor.h"
#include "loader/runtime/parent/stage_actors.h"
#include "loader/runtime/parent/task_dispatcher.h"
#include "loader/runtime/child/worker_core.h"
#include "loader/runtime/parent/worker_lifecycle.h"
#include "loader/runtime/parent/worker_link.h"

namespace loader::runtime {

/// What next() hands the application thread.
struct Delivery {
  enum class Kind { Batch, Error, End, Fatal, Timeout } kind = Kind::End;
  uint64_t task = 0;
  int worker = -1;
  uint64_t slab = 0;          ///< Batch: the slab the batch is in (0: inline payload)
  std::string payload;        ///< Batch: encoded batch (descriptors into the slab)
  std::string error_type;     ///< Error/Fatal
  std::string error_message;  ///< Error/Fatal
  bool pinned = false;        ///< Batch: its slab is page-locked (the pin stage says so)
};

using loader::EpochPosition;  // epoch.h
using loader::EpochResume;

struct PipelineConfig {
  /// The actor system the pool's stage actors live in (required).
  caf::actor_system* system = nullptr;
  std::vector<WorkerConfig> workers;  ///< one per worker slot
  int prefetch_factor = 2;
  bool in_order = true;
  int max_restarts = 0;
  bool in_process = false;   ///< workers are threads of this process (tests, debugging)
  std::string executable;    ///< worker program; empty: this program
  std::optional<uint64_t> batch_bytes;  ///< slab size hint from sample_spec()
  /// How long a started process may take to say hello (enter run_worker_if_requested).
  std::chrono::milliseconds hello_deadline{10000};
  /// Makes each incarnation's link; empty: a WorkerLink (a local process or thread).
  LinkFactory make_link;
};

/// How the pipeline asks worker k's actor to act outside the calling thread
/// (PoolActors::hooks).  Set once, before start_workers().
struct PipelineHooks {
  std::function<void(int worker, uint32_t gen)> restart_later;
  std::function<void(int worker)> flush_later;
};

class Pipeline final : public LinkEvents,
                       public WorkerControl,
                       public WorkerStage,
                       public std::enable_shared_from_this<Pipeline> {
 public:
  Pipeline(PipelineConfig config, std::shared_ptr<SlabStore> slabs);
  ~Pipeline() override;

  // ---- application thread
  /// How reader threads reach the worker actors.  Once, before start_workers()
  /// (no reader thread exists before it).
  void set_hooks(PipelineHooks hooks);
  /// Starts every worker (processes spawn in parallel).  A worker that cannot start
  /// is dead: its error is delivered by the first epoch.
  void start_workers();
  /// Gives every (idle) worker a new configuration, as a fresh worker would start:
  /// the dataset is rebuilt from its handle, the generator seeded anew, and
  /// worker_init_fn run again (the pool of a non-persistent loader, kept between
  /// epochs).  Tasks of the next epoch start from the new state.  Returns false, and
  /// changes nothing, when a worker is dead or restarting (make a new pool instead).
  bool reinit(std::vector<WorkerConfig> workers);
  /// True while every worker is starting or running (none dead or restarting).
  bool healthy() const;
  /// Starts an epoch (its tasks numbered on from every earlier epoch's) and returns its id.
  /// A live epoch ends first (PyTorch resets its one persistent iterator).
  /// `source`: the index stream (nullopt for iterable datasets).  `reset_streams`:
  /// persistent workers restart their iterable streams.
  /// `resume`: where a resumed epoch starts (a checkpoint's position).
  uint64_t begin_epoch(std::optional<TaskSource> source, bool reset_streams, EpochResume resume = {});
  /// The id the next begin_epoch() gives its first task (WorkerSeeding::PerTask: the
  /// workers' configurations name it, reinit() before begin_epoch()).
  uint64_t next_first_task() const;
  /// Where epoch `epoch` stands (DataLoader::Iterator::state_dict).  Application thread;
  /// reads the workers' state pages while they run.  Throws RuntimeError for an epoch
  /// that is not the current one.
  EpochPosition position(uint64_t epoch) const;
  /// The next result of epoch `epoch` in order (End once another epoch began);
  /// waits until `deadline` (nullopt: forever).
  Delivery next(uint64_t epoch, std::optional<std::chrono::steady_clock::time_point> deadline);
  /// Ends epoch `epoch` (nothing if another one began since): no more dispatching
  /// (so no more sampler draws); results still to come give their slabs back.
  void end_epoch(uint64_t epoch);
  /// Stops every worker (links in a fixed order) and refuses all further work.
  /// The pool's actors must be gone first (PoolActors::stop).
  void shutdown();
  /// Ends the stage actors (after shutdown(), before the actor system goes; the
  /// destructor does it otherwise).  Not at exit: CAF may be gone.
  void stop_stages();
  /// The task awaited next and the worker it went to (for timeout messages).
  std::pair<uint64_t, int> awaited() const;
  /// Pids of the worker processes (-1: in-process, or not running).
  std::vector<int> pids() const;
  /// The stage figures of epoch `epoch` (tasks sent, in flight, ready, waits, each
  /// worker): its counters while it runs; nothing is filled for another epoch.  Any thread.
  void stats(uint64_t epoch, EpochStats& out) const;

  // ---- any thread but a reader
  /// A batch in `slab` was dropped by the application.
  void release_slab(int worker, uint64_t slab);

  // ---- worker actor k (WorkerControl), one thread at a time per worker
  /// Starts the next incarnation of `worker`, whose incarnation `gen` went down.
  void restart(int worker, uint32_t gen) override;
  /// Writes the frames queued for `worker` (also from the application thread and
  /// release_slab; serialised by the slot's flush_mu).
  void flush(int worker) override;
  /// Looks at `worker`'s process: frozen (SIGSTOP) for 1 s, exited while its socket
  /// stays open, or no hello within the deadline: killed, and reported through the
  /// reader.  Called every `tick`.
  void watch(int worker, std::chrono::milliseconds tick) override;
  /// Anything unexpected in the runtime itself: the loader fails with this message.
  void fail_all(const std::string& type, const std::string& message) override;

  // ---- the strand (WorkerStage: link actor k), under mu_
  void take_task(int worker, task_msg& task) override;
  Outcome take_result(int worker, result_msg& r) override;
  void stage_failed(const std::string& message) override;

  // ---- reader threads (LinkEvents)
  void on_frame(int worker, uint32_t gen, Frame& frame) override;
  void on_down(int worker, uint32_t gen, const WorkerExit& how) override;

  const std::shared_ptr<SlabStore>& slabs() const { return slabs_; }
  int num_workers() const { return static_cast<int>(slots_.size()); }
  /// State of a worker slot (tests).
  WorkerLifecycle::State worker_state(int worker) const;

 private:
  struct OutFrame {
    FrameType type;
    std::string body;
    std::shared_ptr<ShmSegment> fd_owner;  ///< passes its descriptor, kept alive until written
  };
  struct Slot {
    explicit Slot(int id, int max_restarts, bool restartable) : life(id, max_restarts, restartable) {}
    WorkerLifecycle life;
    std::unique_ptr<Link> link;
    std::shared_ptr<ShmSegment> state_page;  ///< RngStatePage, kept across incarnations
    std::vector<OutFrame> outbox;
    uint64_t socket_queued = 0;       ///< frames queued for the socket of this incarnation (worker_rings.h)
    std::mutex flush_mu;
    std::set<uint64_t> announced;     ///< slabs the current incarnation has mapped
    size_t dropped_cursor = 0;        ///< SlabStore::dropped_since
    std::deque<uint64_t> waiting;     ///< held tasks with no slab yet (pool spent)
    bool hello = false;
    std::chrono::steady_clock::time_point started;
    int stopped_ticks = 0;            ///< worker actor only
    uint64_t rng_floor = 0;           ///< RNG records of tasks below this predate the last Init
    bool renewed = false;             ///< this incarnation was re-initialised for an epoch (reinit)
    uint64_t delivered = 0;           ///< its batches next() returned in this epoch
    uint64_t inline_batches = 0;      ///< its tasks of this epoch sent for an inline batch
    uint64_t busy_ns = 0;             ///< its time on the tasks whose replies came in this epoch
    /// A resumed epoch's generator state to send before this worker's first task of it.
    std::optional<std::string> resume_rng;
    /// The task that state was sent with (a restart before the task started sends it again).
    std::optional<std::pair<uint64_t, std::string>> resume_sent;
    /// IterableDataset: how its stream of the current epoch began, once its StreamStart
    /// frame (sent with its first task of the stream) came; reset as an epoch begins.
    std::optional<StreamStart> stream_start;
    /// The pid of a starting or running incarnation, else -1.  REQUIRES: mu_ held.
    int live_pid() const { return link && life.accepting() ? link->pid() : -1; }
  };

  /// A new generation for `s` (lifecycle Starting, hello/watchdog state reset).
  uint32_t begin_incarnation_locked(Slot& s);
  /// Queues the first frames of the incarnation (state page, configuration).
  void start_locked_prepare(Slot& s);
  /// Writes the frames queued for `s`.  REQUIRES: s.flush_mu held, mu_ not held.
  void write_outbox(Slot& s);
  /// The id the next epoch's first task gets.  REQUIRES: mu_ held.
  uint64_t next_first_task_locked() const;
  /// Before-records per state page: more than the tasks that can be in flight, at most 1024.
  uint64_t rng_slots() const;
  /// The state at the start of `worker`'s task `task` (its page, or a resumed epoch's state).
  std::optional<std::string> state_before_locked(const Slot& s, uint64_t task) const;
  /// Runs the stage actors until every mailbox is empty; a sampler that failed fails
  /// the epoch.
  void run_stages_locked();
  /// Workers with frames queued for their socket.
  std::vector<int> dirty_locked() const;
  /// Gives back the slabs of every result of the epoch not taken (reorder, handoff).
  void release_undelivered_locked();
  /// The task the application gets next.
  uint64_t next_for_application_locked() const;
  void send_task_locked(int worker, uint64_t task);
  void drain_waiting_locked(int worker);
  void announce_locked(int worker, uint64_t slab);
  void queue_locked(int worker, FrameType type, std::string body, std::shared_ptr<ShmSegment> fd_owner = nullptr);
  void worker_failed_locked(int worker, const std::string& type, const std::string& message);
  void set_fatal_locked(const std::string& type, const std::string& message, int worker);
  void release_task_slab_locked(int worker, const HeldTask& t);
  /// next() is about to wait for a task that waits for a slab (the application holds
  /// every slab of its worker): sends it for an inline batch.  True when one was sent.
  bool send_starved_inline_locked();
  bool releasable_locked() const;
  bool healthy_locked() const;
  void notify_locked();
  void flush_all();
  std::unique_ptr<Link> make_link(const Link::Spec& spec);
  /// Takes every Result frame the workers have published in the result rings (all
  /// rings, or only `worker`'s) into the reorder buffer, as on_frame would.
  /// Returns how many it took.
  size_t drain_rings_locked(bool& flush_needed, int worker = -1);

  PipelineConfig config_;
  std::shared_ptr<SlabStore> slabs_;
  PipelineHooks hooks_;
  std::vector<std::unique_ptr<Slot>> slots_;
  bool iterable_ = false;

  mutable std::mutex mu_;
  std::unique_ptr<WorkerRings> rings_;  ///< Task and Result frames in shared memory; its doorbell wakes next()
  bool closed_ = false;
  uint64_t epoch_ = 0;             ///< 0: no epoch running
  uint64_t epochs_started_ = 0;
  uint64_t first_task_ = 0;        ///< the current epoch's first task
  uint64_t next_task_ = 0;         ///< task ids are unique across epochs
  std::optional<Delivery> fatal_;
  bool stopped_ = false;
  uint64_t waits_ = 0;             ///< next() calls of this epoch that found nothing ready
  std::unique_ptr<StageActors> stages_;  ///< the stage actors and their strand (mu_)
};

}  // namespace loader::runtime
