// Pipeline: the worker pool of one DataLoader in the main process: it starts, restarts,
// watches and stops its workers, begins and ends epochs, and hands the application
// its results.  The batches travel through the stage actors (stage_actors.h), each a
// thin shell over its stage's plain class, which no other stage reaches into:
//
//   sampler actor  SamplerStage: TaskSource (the index stream) + TaskDispatcher
//                  (credits, PyTorch's round robin, the in_order=false capacity rule)
//   link actor k   WorkerSlots' slot k (worker_slots.h: the worker's lifecycle, held
//                  tasks, slabs), a CAF actor proxy (link_actor.h): a task sent to it
//                  is held until answered and handed at once to worker k's transport
//                  (worker_transport.h; ShmTransport: the task ring or the socket, a
//                  slab); a result the transport brings goes on to the reorder stage;
//                  hello, ready, fatal and down change the slot
//   reorder actor  ReorderBuffer: results leave in task order (or completion order)
//   pin actor      Handoff: each result handed over, marked page-locked when its slab
//                  is (SlabStore pins a slab once, when made)
//
// Task (task_msg), result (result_msg) and every event of a worker are actor messages.
// The stage actors run on the pool's strand: an InlineExecutor that whichever thread
// has entered the strand (StageActors::enter) runs, so a batch costs mailbox messages
// but no thread hand-off or wake-up (the measurement that chose this is in
// docs/architecture.md).  The pool's roles are classes of their own: SlotPlacement
// (slot_placement.h: which transport serves slot k, failover, every slot's owner
// lock), BatchDelivery (batch_delivery.h: the per-batch path) and PoolTuning
// (pool_tuning.h: the autotuner's setting); this class begins and ends epochs, starts,
// restarts and watches workers, and turns their events into messages.  Threads that
// enter the strand:
//
//   application thread  next() (BatchDelivery::next): when the handoff is empty, takes
//                       the Result frames the workers published in the result rings
//                       and gives each to its link actor; runs the strand (reorder ->
//                       pin); takes the next handed-over result, sends the sampler its
//                       credit back and runs the strand again.  Sleeps on the rings'
//                       doorbell only when nothing is ready.
//   reader thread k     on_hello, on_ready, on_stream_start, on_init_error, on_result,
//                       on_unreadable (LinkEvents: what worker k's transport decoded of
//                       every other frame: a batch too large for a ring...), each a
//                       message to link k;
//                       on_down(): takes what the dead incarnation left in its ring
//                       first, then `down` to link k.  The application thread is woken
//                       (doorbell) only if it sleeps.  Readers never write to a socket
//                       (a full socket could then deadlock both sides): frames they
//                       queue are flushed by the slot actor (hooks.flush_later).
//   any thread          release_slab() (BatchDelivery::release_slab): a batch was
//                       dropped; a task waiting for a slab goes out.
//   slot actor k        restart(k), watch(k), flush(k) (WorkerControl): everything
//                       that starts or kills worker k's incarnation runs there or in
//                       the application thread (slot_actor.h, pool_actor.h), off the
//                       strand, as the owner of worker k's transport; it enters the
//                       strand only to tell the worker stage (begin_incarnation, attach).
//
// Locks: a slot's owner lock (SlotPlacement::owner: orders what is written to one
// worker) before the strand before SlabStore's lock and a transport's queue lock.  The
// strand's lock is the executor's, and it also guards the stages' plain classes: each
// stage's state is its own class, changed only through its operations, but those
// operations are not all messages yet: with the strand entered, this class and
// BatchDelivery call some directly (SamplerStage begin/halt, ReorderBuffer reset,
// Handoff restart/clear/take, and WorkerSlots' incarnation and epoch operations).
// This class's own fields (PoolEpoch: epoch, fatal error) are read and written only on
// the strand.  No socket write and no process wait happens on the strand.  Between two
// runs every stage mailbox is empty, and the pool reads the stages' plain classes
// (position, stats).
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
#include "loader/runtime/parent/autotuner.h"
#include "loader/runtime/parent/batch_delivery.h"
#include "loader/runtime/parent/pool_tuning.h"
#include "loader/runtime/parent/reorder_buffer.h"
#include "loader/runtime/child/worker_core.h"  // WorkerConfig
#include "loader/runtime/parent/remote_transport.h"
#include "loader/runtime/parent/shm_transport.h"
#include "loader/runtime/parent/slab_store.h"
#include "loader/runtime/parent/slot_actor.h"
#include "loader/runtime/parent/slot_placement.h"
#include "loader/runtime/parent/stage_actors.h"
#include "loader/runtime/parent/task_dispatcher.h"
#include "loader/runtime/parent/worker_lifecycle.h"
#include "loader/runtime/parent/worker_link.h"
#include "loader/runtime/parent/worker_slots.h"
#include "loader/runtime/worker_rings.h"

namespace loader::runtime {

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
  /// Makes each incarnation's link of a local worker (its frames go to the worker's
  /// ShmTransport); empty: a WorkerLink (a local process or thread).
  LinkFactory make_link;
  /// Workers on other hosts: the last remote.size() of `workers` (a local worker's id
  /// is below every remote one's).
  std::vector<RemoteWorkerSpec> remote;
  /// num_workers = auto: the autotuner's bounds, and the workers that run (the first
  /// `workers_now` slots) and the prefetch depth as the pool starts (the loader's last
  /// setting).  The other slots are parked until the tuner starts them.
  struct Autotune {
    WorkerTuner::Limits limits;
    int workers_now = 1;
    int prefetch_now = 2;
  };
  std::optional<Autotune> autotune;
};

/// How the pipeline asks worker k's actor to act outside the calling thread
/// (PoolActors::hooks).  Set once, before start_workers().
struct PipelineHooks {
  std::function<void(int worker, uint32_t gen)> restart_later;
  std::function<void(int worker)> flush_later;
};

class Pipeline final : public LinkEvents,
                       public WorkerControl,
                       public StageFailures,
                       public WorkerStageEvents,
                       public BatchDelivery::Pool,
                       public std::enable_shared_from_this<Pipeline> {
 public:
  Pipeline(PipelineConfig config, std::shared_ptr<SlabStore> slabs);
  ~Pipeline() override;

  // ---- application thread
  /// How reader threads reach the slot actors.  Once, before start_workers() (no
  /// reader thread exists before it); and empty after shutdown(), whose readers are
  /// joined, to let go of the actors' handles.
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

  // ---- slot actor k (WorkerControl), one thread at a time per worker
  /// Starts the next incarnation of `worker`, whose incarnation `gen` went down.
  void restart(int worker, uint32_t gen) override;
  /// Writes the frames queued for `worker` (also from the application thread and
  /// release_slab; serialised by its transport's owner lock).
  void flush(int worker) override;
  /// Looks at `worker`'s process: frozen (SIGSTOP) for 1 s, exited while its socket
  /// stays open, or no hello within the deadline: killed, and reported through the
  /// reader.  Called every `tick`.
  void watch(int worker, std::chrono::milliseconds tick) override;
  /// Anything unexpected in the runtime itself: the loader fails with this message.
  void fail_all(const std::string& type, const std::string& message) override;

  // ---- on the strand: a stage actor's fault (StageFailures), the worker stage's
  // ---- (WorkerStageEvents)
  void stage_failed(const std::string& message) override;
  void epoch_failed(const std::string& type, const std::string& message, int worker) override;
  void worker_restarting(int worker, uint32_t gen, const std::string& warning) override;

  // ---- a transport's own thread (LinkEvents: a local reader, a remote client actor or
  // ---- bulk reader): each event a message to link k
  void on_hello(int worker, uint32_t gen) override;
  void on_ready(int worker, uint32_t gen) override;
  void on_stream_start(int worker, uint32_t gen, uint64_t task, StreamStart start) override;
  void on_init_error(int worker, uint32_t gen, const std::string& type, const std::string& message,
                     const std::string& when) override;
  void on_result(int worker, uint32_t gen, WorkerReply&& reply) override;
  void on_unreadable(int worker, uint32_t gen, const std::string& what) override;
  void on_down(int worker, uint32_t gen, const WorkerExit& how) override;

  const std::shared_ptr<SlabStore>& slabs() const { return slabs_; }
  int num_workers() const { return workers_->size(); }
  /// State of a worker slot (tests).
  WorkerLifecycle::State worker_state(int worker) const;

  // ---- num_workers = auto (PipelineConfig::autotune)
  /// Pool actor's thread, every 100 ms: the figures to the tuner, its step applied (on
  /// the strand: the sampler told which workers get tasks and how many may be out).
  /// Returns the workers whose slot actors must retire (false) or start (true) them.
  std::vector<std::pair<int, bool>> tune() override;
  /// Slot actor k: retires worker k once it holds nothing (its process exits, reaped
  /// here), or starts it again (its random stream goes on where it stopped).
  void park(int worker) override;
  void unpark(int worker) override;
  /// On the strand (WorkerStageEvents): a worker the tuner started is ready.
  void worker_ready(int worker) override;
  /// The workers and prefetch depth the tuner has now (the loader starts its next pool
  /// with them).  Any thread.
  std::pair<int, int> tuned() const;

 private:
  /// The id the next epoch's first task gets.
  uint64_t next_first_task_locked() const;
  /// begin_epoch on the strand: the stages reset for the new epoch, the workers told
  /// (resumed streams, task seeds), the slabs sized.  Returns the epoch's id.
  uint64_t begin_epoch_locked(std::optional<TaskSource> source, bool reset_streams, EpochResume resume);
  /// The epoch's first tasks go out one at a time, each written at once (off the strand).
  void send_first_tasks(uint64_t epoch);
  /// On the strand (BatchDelivery::Pool): runs the stage actors until every mailbox is
  /// empty; a sampler that failed fails the epoch.
  void run_stages_locked() override;
  /// Tells the sampler to hand out no more tasks (urgent: before what its mailbox holds).
  void halt_sampler_locked();
  /// On the strand: worker `worker` is dead (`fatal` to its link: its tasks are
  /// answered, the sampler retires it, the epoch fails).
  void worker_failed_locked(int worker, const std::string& type, const std::string& message) override;
  void set_fatal_locked(const std::string& type, const std::string& message, int worker);
  bool healthy_locked() const;
  void notify_locked();
  void flush_all();
  /// Sends link `worker` what `send` sends it (with the strand entered), runs the
  /// stages, and has the frames this queued flushed by the slot actors.
  template <class F>
  void to_link(int worker, F&& send);
  /// A local worker's transport (slot `worker`; a remote slot's stand-in).
  std::unique_ptr<WorkerTransport> make_local_transport(int worker, uint64_t rng_slots);
  /// Runs incarnation `gen` of worker `worker` (begin_incarnation done, its owner lock
  /// held): the last one's transport stopped, the new one started where it can run
  /// (SlotPlacement::start), attached, and its held tasks sent again.  When it cannot
  /// start, the worker fails with "could not be `verb`".
  void run_incarnation(int worker, uint32_t gen, bool carry_stream, const char* verb);
  /// Incarnation `gen`, started on `t`, gets its configuration and its held tasks again;
  /// `carry_stream`: its random stream goes on from where the last one stopped
  /// (WorkerSlots::resend_held's `moved`; a lost host's slot always).  REQUIRES: its
  /// owner lock held.
  void attach_started(int worker, uint32_t gen, WorkerTransport& t, bool carry_stream);
  /// A remote slot away from its host (moved after a loss) tries its host again as an
  /// epoch begins; if the host cannot take it, it stays where it is (a warning says so).
  void take_home(int worker);
  // Set at construction (hooks_: before the first reader thread); config_.workers
  // also by reinit(), on the strand.
  PipelineConfig config_;
  std::shared_ptr<SlabStore> slabs_;
  PipelineHooks hooks_;
  bool iterable_ = false;
  std::unique_ptr<WorkerRings> rings_;  ///< Task and Result frames in shared memory; its doorbell wakes next()
  /// Every slot's transports and owner lock (made with the pipeline, stopped by shutdown()).
  std::unique_ptr<SlotPlacement> placement_;

  // The pool's own state: on the strand (the *_locked methods: StageActors::enter() held).
  PoolEpoch pool_;                 ///< closed, the running epoch, its first task, its fatal error
  uint64_t epochs_started_ = 0;
  uint64_t next_task_ = 0;         ///< task ids are unique across epochs
  uint64_t slab_grown_at_begin_ = 0;  ///< SlabStore::stats().grown as the epoch began
  /// num_workers = auto (null otherwise): the slots the tuner wants running, the
  /// prefetch depth, this epoch's decisions (on the strand) and the tuner (observe: the
  /// pool actor's thread).
  std::unique_ptr<PoolTuning> tuning_;
  /// The slots' states as the tuning sees them.  On the strand.
  std::vector<PoolTuning::Slot> tuning_slots_locked() const;
  struct RestartDue {
    int worker;
    uint32_t gen;
    std::string warning;
  };
  std::vector<RestartDue> restarts_due_;  ///< worker_restarting, taken by on_down off the strand

  // The stages: the worker stage's slots (behind the link actors; they drive the
  // transports above), then the stage actors with the other stages' plain classes and
  // the strand (destroyed first).
  std::unique_ptr<WorkerSlots> workers_;
  std::unique_ptr<StageActors> stages_;
  /// The per-batch path (next(), release_slab(), the rings taken), over the above.
  std::unique_ptr<BatchDelivery> delivery_;
};

}  // namespace loader::runtime
