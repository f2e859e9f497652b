// The runtime's actor protocol: every message and every actor handle, in one place.
//
// The design card's messages are the types below: a task `(task_idx, indices)` goes
// to a worker actor (`task_msg`), a result `(task_idx, batch)` comes back from it
// (`result_msg`: the batch is a handle into a shared-memory slab, the bytes only for a
// worker without slabs, or an error).
//
//   worker actor  one per worker incarnation, hosted where the worker runs: in its
//                 child process (a CAF actor system of its own, started by
//                 run_worker_if_requested), or in the main process's system for
//                 in-process workers (threads).  A thin shell over WorkerCore
//                 (child/worker_actor.h).  Its mailbox is fed by the worker host
//                 (child/worker_host.h), which turns the frames of the task ring and of
//                 the socket into these messages and runs the actors on its own thread
//                 (InlineExecutor): a task costs no thread hand-off.
//   uplink actor  the main process as a worker actor sees it (child/uplink_actor.h):
//                 receives the worker's results and events and writes them into the
//                 result ring (or the socket).  A worker on another host will have an
//                 uplink over CAF's network layer instead; the worker actor is the same.
//   slot actor    one per worker slot in the main process (slot_actor.h): restarts its
//                 worker after a death, writes the frames a reader thread queued for it,
//                 looks at its process when the pool actor says so.  A restart of
//                 worker 0 (a process spawn) never delays worker 1's frames.
//   pool actor    one per worker pool (pool_actor.h): the 250 ms watchdog clock,
//                 fanned out to the slot actors; supervises the slot actors (one that
//                 stops for any reason but the pool's shutdown fails the loader with a
//                 message naming it).
//
// Messages (sender -> receiver: when), atoms at most 10 characters (CAF 0.17).
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loader/runtime/worker_exit.h"
#include "loader/value.h"  // link k's down message

namespace loader::runtime {

// ---------------------------------------------------------------- the card's messages

/// The slab id of a task whose batch must come back inline (its bytes in the result,
/// decoded into the main process's heap): sent when the application waits for that
/// batch and every slab of the worker is held by batches it keeps.
constexpr uint64_t kInlineSlab = ~uint64_t{0};

/// (task_idx, indices): main process (the sampler's dispatch, over the task ring) ->
/// worker actor, against one credit.  `slab`: the shared-memory slab the batch goes
/// into (0: none yet, the worker answers Need; kInlineSlab: bytes in the result).
struct task_msg {
  uint64_t task_idx = 0;
  std::vector<int64_t> indices;
  uint64_t slab = 0;
};

/// What a worker answers a task with: the batch (a handle into a slab plus its
/// descriptors, never the tensor bytes unless the slab is kInlineSlab), the bytes it
/// needs (a larger slab), the error of a sample, or the end of an iterable stream.
struct WorkerReply {
  enum class Kind : uint8_t { Result, Need, Error, IterEnd } kind = Kind::Result;
  uint64_t task = 0;
  uint64_t slab = 0;
  uint64_t bytes = 0;         ///< Result: bytes used in the slab; Need: bytes required
  std::string payload;        ///< Result: the encoded batch (descriptors into the slab)
  /// Result of an inline task (kInlineSlab), in the process that holds it: the batch
  /// itself, not encoded (payload is empty then).  Never serialized: what sends the
  /// reply to another process encodes it (encode_reply, encode_inline_batch, the bulk
  /// stream's split_batch), and the bulk stream's reader in the main process fills it.
  std::shared_ptr<Value> value;
  std::string error_type;     ///< Error: Python-style exception type
  std::string error_message;  ///< Error: "Caught ... in DataLoader worker process N ..."
  /// Result, Error: nanoseconds the worker spent on the task (fetch, collate, the copy
  /// into its slab, including a first try that answered Need): EpochStats busy_s.
  uint64_t busy_ns = 0;
  /// Result, Error: the part of busy_ns spent in the collate function and writing the
  /// batch (into the slab, or encoded inline): EpochStats collate_s; the rest is fetch_s.
  uint64_t collate_ns = 0;
};

/// (task_idx, batch): worker actor -> uplink actor (and on, over the result ring, to
/// the main process's reorder stage), once per task_msg or use_slab.
struct result_msg {
  uint64_t task_idx = 0;
  WorkerReply batch;
  /// The worker slot it came from, set by the main process's link actor (the worker
  /// itself leaves -1: it does not know its slot's place in the pool).
  int32_t worker = -1;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, task_msg& x) {
  return f(caf::meta::type_name("task_msg"), x.task_idx, x.indices, x.slab);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WorkerReply& x) {
  return f(caf::meta::type_name("WorkerReply"), x.kind, x.task, x.slab, x.bytes, x.payload, x.error_type,
           x.error_message, x.busy_ns, x.collate_ns);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, result_msg& x) {
  return f(caf::meta::type_name("result_msg"), x.task_idx, x.batch, x.worker);
}

/// How a worker incarnation ended (parent/worker_lifecycle.h): reader thread -> link k.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WorkerExit& x) {
  return f(caf::meta::type_name("WorkerExit"), x.kind, x.code, x.detail, x.pid, x.oom_killed, x.oom_evidence);
}

// ---------------------------------------------------------------- worker actor

/// worker host -> worker actor, an incarnation's first message and again when a
/// non-persistent pool is re-initialised for an epoch: the encoded WorkerConfig (the
/// dataset handle, seeds, options).  Answered with `ready` or `fatal`.
using init_atom = caf::atom_constant<caf::atom("init")>;
/// worker host -> worker actor: the generator state page (address, bytes) the host
/// mapped; the actor records each task's state on it (rng_state_page.h).
using page_atom = caf::atom_constant<caf::atom("page")>;
/// worker host -> worker actor: slab `id` is mapped at (address, bytes); a size of 0
/// drops it (the host unmaps it after the message is handled).
using slab_atom = caf::atom_constant<caf::atom("slab")>;
/// worker host -> worker actor: a larger slab for a task that answered Need.
using use_slab_atom = caf::atom_constant<caf::atom("useslab")>;
/// worker host -> worker actor: the generator state task `task` starts from (a
/// restart, a resumed epoch).
using set_rng_atom = caf::atom_constant<caf::atom("setrng")>;
/// worker host -> worker actor: a new epoch of a persistent pool (iterable streams
/// begin again).
using epoch_atom = caf::atom_constant<caf::atom("epoch")>;
/// worker host -> worker actor: a resumed epoch of an IterableDataset with state hooks:
/// the stream begins again from (generator state, the dataset's state) and passes the
/// results the checkpointed iterator had taken.  A failure is the worker's `fatal`.
using resume_atom = caf::atom_constant<caf::atom("resume")>;
/// worker host -> worker actor, WorkerSeeding::PerTask: the epoch's (base_seed,
/// task_base): task t is seeded task_seed(base_seed, t - task_base) (an epoch of
/// persistent workers, and after the Init of a worker restarted mid-epoch).
using seeds_atom = caf::atom_constant<caf::atom("seeds")>;

/// The worker actor: where a worker's tasks are computed.
using worker_actor = caf::typed_actor<
    caf::reacts_to<task_msg>,
    caf::reacts_to<use_slab_atom, uint64_t /*task*/, uint64_t /*slab*/>,
    caf::reacts_to<init_atom, std::string /*encoded WorkerConfig*/>,
    caf::reacts_to<page_atom, uint64_t /*address*/, uint64_t /*bytes*/>,
    caf::reacts_to<slab_atom, uint64_t /*id*/, uint64_t /*address*/, uint64_t /*bytes; 0: dropped*/>,
    caf::reacts_to<set_rng_atom, uint64_t /*task*/, std::string /*generator state*/>,
    caf::reacts_to<epoch_atom>,
    caf::reacts_to<seeds_atom, uint64_t /*base_seed*/, uint64_t /*task_base*/>,
    caf::reacts_to<resume_atom, uint64_t /*results to skip*/, std::string /*generator state*/,
                   std::string /*dataset state*/>>;

// ---------------------------------------------------------------- uplink actor

/// worker actor -> uplink actor: the dataset was built and worker_init_fn ran.
using ready_atom = caf::atom_constant<caf::atom("ready")>;
/// worker actor -> uplink actor: the worker cannot go on (its dataset or
/// worker_init_fn failed, its iterable stream could not be made again, a message it
/// cannot act on).  (type, message, when: empty at start, exit status of the worker).
using fatal_atom = caf::atom_constant<caf::atom("fatal")>;

/// worker actor -> uplink actor, just before the first reply of each iterable stream
/// (the stream its Init, an epoch or a resume began): how it began (StreamStart of
/// epoch.h: the generator state and the dataset's state(), if it has state hooks),
/// tagged with the task that reply answers.
using stream_atom = caf::atom_constant<caf::atom("stream")>;

/// The main process as a worker actor sees it.
using uplink_actor = caf::typed_actor<
    caf::reacts_to<result_msg>,
    caf::reacts_to<ready_atom>,
    caf::reacts_to<stream_atom, uint64_t /*task*/, std::string /*generator state*/, bool /*has state*/,
                   std::string /*state*/>,
    caf::reacts_to<fatal_atom, std::string /*type*/, std::string /*message*/, std::string /*when*/, int32_t /*status*/>>;

// ---------------------------------------------------------------- main process stages
//
// The batch path of a pool (parent/stage_actors.h): sampler -> link k -> (worker k) ->
// link k -> reorder -> pin -> the application.  These actors run on the pool's
// strand (one InlineExecutor, run by whichever thread has entered it,
// StageActors::enter(): the application thread in next(), a reader thread with a
// frame, a slot actor restarting its worker), so a batch costs mailbox messages and
// no thread hand-off.

/// What the sampler sends tasks to: a worker actor, or whatever stands for one (the
/// link actor of a worker process or thread, parent/link_actor.h: a proxy that hands
/// each task to the transport at once; next, a worker on another host).  The sampler
/// sees nothing else of a worker.
using task_sink = caf::typed_actor<caf::reacts_to<task_msg>>;

/// reader thread of worker k -> link k: incarnation `gen` went down (a WorkerExit);
/// Pipeline -> slot actor k (hooks.restart_later): its lifecycle decided to restart it.
using down_atom = caf::atom_constant<caf::atom("down")>;
/// reader thread of worker k -> link k: incarnation `gen` said hello (its process
/// entered the worker loop; the watchdog stops waiting for it).
using hello_atom = caf::atom_constant<caf::atom("hello")>;

/// Link k: worker k as the main process's stages see it (parent/link_actor.h).  Every
/// event of worker k reaches its slot in the worker stage (WorkerSlots) as one of
/// these messages, each naming the incarnation (`gen`) it comes from; an older
/// incarnation's is dropped:
///   task_msg                 sampler -> link k: a task for worker k (its task_sink face)
///   (gen, result_msg)        reader thread k -> link k: a result that came over the
///                            socket (a result from the result ring, which is the
///                            incarnation's own, goes to LinkProxy::deliver)
///   (hello, gen)             reader thread k: the process entered the worker loop
///   (ready, gen)             reader thread k: the worker actor built its dataset (what
///                            it sent its uplink as `ready`)
///   (fatal, gen, type, msg)  reader thread k: the worker cannot go on (its uplink's
///                            `fatal`); the pool: worker k could not be started or sent
///                            what the main process cannot read
///   (stream, gen, task, rng, has_state, state)
///                            reader thread k: how worker k's iterable stream answering
///                            `task` began (its uplink's `stream`: state hooks)
///   (down, gen, WorkerExit)  reader thread k: the incarnation is gone (reaped)
/// A worker that is dead after `fatal` or `down` is retired: link k -> sampler `retire`.
using link_actor = caf::typed_actor<
    caf::reacts_to<task_msg>,
    caf::reacts_to<uint32_t /*gen*/, result_msg>,
    caf::reacts_to<hello_atom, uint32_t /*gen*/>,
    caf::reacts_to<ready_atom, uint32_t /*gen*/>,
    caf::reacts_to<fatal_atom, uint32_t /*gen*/, std::string /*type*/, std::string /*message*/>,
    caf::reacts_to<stream_atom, uint32_t /*gen*/, uint64_t /*task*/, std::string /*generator state*/,
                   bool /*has state*/, std::string /*state*/>,
    caf::reacts_to<down_atom, uint32_t /*gen*/, WorkerExit>>;

/// pin (the application took the result of `task` from `worker`: take_atom) ->
/// sampler: the task is done and its credit comes back.
using credit_atom = caf::atom_constant<caf::atom("credit")>;
/// link k -> sampler: worker k's iterable stream ran dry at task `task` (no result:
/// its credit comes back, the worker gets no more tasks this epoch).
using dry_atom = caf::atom_constant<caf::atom("dry")>;
/// link k -> sampler: worker k is gone for good (it gets no more tasks).
using retire_atom = caf::atom_constant<caf::atom("retire")>;
/// Pipeline -> sampler: send up to `max` tasks (-1: as many as credits allow); an
/// epoch's first tasks go out one at a time, each written to its worker at once.
using dispatch_atom = caf::atom_constant<caf::atom("dispatch")>;
/// Pipeline (the autotuner) -> sampler: worker `worker` gets tasks (`active`) or no more
/// (-1: none changes), and at most `max_in_flight` tasks are out from now on.
using tune_atom = caf::atom_constant<caf::atom("tune")>;
/// link k -> reorder: task `task` produced nothing (an iterable ran dry); the order
/// moves past it.
using skip_atom = caf::atom_constant<caf::atom("skip")>;

/// Pipeline -> sampler: an epoch begins (its index stream and credits, SamplerBegin);
/// Pipeline -> reorder: an epoch whose first task is `first_task` begins, nothing held;
/// Pipeline -> pin: the same (nothing held or taken).
using begin_atom = caf::atom_constant<caf::atom("begin")>;
/// Pipeline -> sampler: hand out no more tasks (the epoch ended or failed, the pool closed).
using halt_atom = caf::atom_constant<caf::atom("halt")>;
/// Pipeline -> reorder, pin: forget every result held (an epoch ended): each one's slab
/// goes back to the SlabStore; the order stays where it was.
using drop_atom = caf::atom_constant<caf::atom("drop")>;
/// application thread (BatchDelivery::next) -> pin: the next result, answered into the
/// request's slot (PinTake) while the same strand run goes on; its credit goes back to
/// the sampler from the pin stage.
using take_atom = caf::atom_constant<caf::atom("take")>;

struct SamplerBegin;
struct HandedOver;
/// What begin_atom carries to the sampler (a TaskSource cannot be copied: shared, local only).
using sampler_begin = std::shared_ptr<SamplerBegin>;
/// Where the pin stage answers a take: the application thread's slot, filled while the
/// strand runs on that thread (local only).
struct PinTake {
  std::optional<HandedOver>* out = nullptr;
};

/// The sampler stage: TaskSource + TaskDispatcher (credits, PyTorch's round robin,
/// the in_order=false capacity rule).  It sends `task_msg` to task sinks.
using sampler_actor = caf::typed_actor<
    caf::reacts_to<begin_atom, sampler_begin>,
    caf::reacts_to<halt_atom>,
    caf::reacts_to<credit_atom, int32_t /*worker*/, uint64_t /*task*/>,
    caf::reacts_to<dry_atom, int32_t /*worker*/, uint64_t /*task*/>,
    caf::reacts_to<retire_atom, int32_t /*worker*/>,
    caf::reacts_to<dispatch_atom, int32_t /*max*/>,
    caf::reacts_to<tune_atom, int32_t /*worker*/, bool /*active*/, uint64_t /*max_in_flight*/>>;

/// The reorder stage: results leave in task order (in_order) or as they come.
using reorder_actor = caf::typed_actor<caf::reacts_to<result_msg>, caf::reacts_to<skip_atom, uint64_t /*task*/>,
                                       caf::reacts_to<begin_atom, uint64_t /*first task*/, bool /*in_order*/>,
                                       caf::reacts_to<drop_atom>>;

/// The pin-memory stage: hands each result over to the application, its slab
/// page-locked (a slab is pinned once, when made: SlabStore).
using pin_actor = caf::typed_actor<caf::reacts_to<result_msg>, caf::reacts_to<begin_atom, uint64_t /*first task*/>,
                                   caf::reacts_to<drop_atom>, caf::reacts_to<take_atom, PinTake>>;

// ---------------------------------------------------------------- main process control

/// a transport's thread (Pipeline::to_link) -> slot actor k: frames are queued for worker
/// k (a larger slab for a batch that did not fit, the next task of an iterable).
/// Readers never write to a socket themselves.
using flush_atom = caf::atom_constant<caf::atom("flush")>;
/// pool actor -> slot actor k, every tick: look at the process (frozen, exited
/// with its socket held open, no hello within the deadline).  Carries the tick in ms.
using watch_atom = caf::atom_constant<caf::atom("watch")>;
/// pool actor -> itself, every 250 ms: the watchdog clock.
using tick_atom = caf::atom_constant<caf::atom("tick")>;
/// pool actor -> itself, every 100 ms with num_workers = auto: the autotuner's clock.
using autotune_atom = caf::atom_constant<caf::atom("autotune")>;
/// pool actor (the autotuner) -> slot actor k: retire worker k (it holds no task and
/// gets none: its process is told to exit and reaped), or start it again.
using park_atom = caf::atom_constant<caf::atom("park")>;
using unpark_atom = caf::atom_constant<caf::atom("unpark")>;

/// The actor of one worker slot in the main process.
using slot_actor = caf::typed_actor<
    caf::reacts_to<down_atom, uint32_t /*generation*/>,
    caf::reacts_to<flush_atom>,
    caf::reacts_to<watch_atom, int64_t /*tick, ms*/>,
    caf::reacts_to<park_atom>,
    caf::reacts_to<unpark_atom>>;

/// The actor of one worker pool.
using pool_actor = caf::typed_actor<caf::reacts_to<tick_atom>, caf::reacts_to<autotune_atom>>;

}  // namespace loader::runtime

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(loader::runtime::sampler_begin)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(loader::runtime::PinTake)
