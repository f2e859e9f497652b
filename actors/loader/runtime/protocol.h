// The runtime's protocol: every message between its actors, in one place.
//
// Actors (docs/architecture.md has the picture):
//   sampler      owns the epoch's index stream and the credits (TaskDispatcher)
//   worker       turns (task, indices) into a batch in a shared-memory slab;
//                either an in-process actor or the proxy of a worker process
//   reorder      releases results in task order (ReorderBuffer)
//   pin memory   page-locks slabs once, before they carry batches (pin_memory)
//   iterator     the application thread, through a scoped actor
//
// Messages (sender -> receiver: when):
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace loader::runtime {

/// sampler -> worker: load task `task` (of epoch `epoch`) from these dataset indices.
using task_atom = caf::atom_constant<caf::atom("task")>;
/// batch lease (application drops a batch) -> worker: slab `slab` is free again.
using release_atom = caf::atom_constant<caf::atom("release")>;
/// sampler -> worker, before the epoch's first task: results of epoch `epoch` go to
/// this reorder actor; unfinished work of older epochs is discarded.
using epoch_atom = caf::atom_constant<caf::atom("epoch")>;
/// worker -> reorder: the outcome of one task (a batch_msg).
using result_atom = caf::atom_constant<caf::atom("result")>;
/// iterator -> reorder (request): the next batch in order; answered with a batch_msg
/// once one is releasable (status End at the end of the epoch).
using next_atom = caf::atom_constant<caf::atom("next")>;
/// iterator -> sampler: the application took the batch of task `task` (uint64):
/// one more task may go out.
using credit_atom = caf::atom_constant<caf::atom("credit")>;
/// sampler -> reorder: the epoch has `total` tasks (sent when the sampler ran dry).
using end_atom = caf::atom_constant<caf::atom("end")>;
/// worker -> sampler: this worker takes no more tasks (`died`: it is gone for good;
/// otherwise its iterable stream ran dry).
using retire_atom = caf::atom_constant<caf::atom("retire")>;
/// iterator -> sampler (request): stop dispatching; answered when stopped.
using stop_atom = caf::atom_constant<caf::atom("stop")>;
/// reader thread -> worker proxy: a frame arrived from the worker process.
using frame_atom = caf::atom_constant<caf::atom("frame")>;
/// reader thread -> worker proxy: the link to the worker process broke (EOF).
using linkdown_atom = caf::atom_constant<caf::atom("linkdown")>;
/// worker -> itself, every 250 ms: the watchdog looks at its worker process.
using tick_atom = caf::atom_constant<caf::atom("tick")>;
/// iterator -> reorder (request): the task index awaited next (uint64).
/// iterator -> sampler (request, with a task index): the worker it went to (int32).
/// sampler -> worker (request): the worker process's pid (int32).
/// Used for timeout messages and worker_pids().
using status_atom = caf::atom_constant<caf::atom("status")>;
/// worker proxy -> pin memory (request): page-lock this slab before first use.
using pin_atom = caf::atom_constant<caf::atom("pin")>;
/// -> pin memory: forget (unregister) a slab that is being destroyed.
using unpin_atom = caf::atom_constant<caf::atom("unpin")>;

/// The outcome of one task, as the reorder buffer and the iterator see it.
struct batch_msg {
  enum Status : uint8_t {
    Ok = 0,       ///< payload is an encoded batch in slab `slab`
    Error = 1,    ///< the task failed (dataset threw): raise for this batch, continue
    Skipped = 2,  ///< an iterable worker ran dry: no batch for this task
    Fatal = 3,    ///< the loader cannot continue (worker died, shared memory full, ...)
    End = 4,      ///< (reorder -> iterator) the epoch is over
  };
  uint64_t task = 0;
  int32_t worker = -1;
  uint8_t status = Ok;
  uint64_t slab = 0;
  std::string payload;
  std::string error_type;
  std::string error_message;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, batch_msg& x) {
  return f(caf::meta::type_name("batch_msg"), x.task, x.worker, x.status, x.slab, x.payload, x.error_type,
           x.error_message);
}

/// The typed interface of every worker, in-process or a proxy of a process: the
/// sampler cannot tell the two apart.
using worker_actor = caf::typed_actor<
    caf::reacts_to<epoch_atom, uint64_t /*epoch*/, caf::actor /*sampler*/, caf::actor /*reorder*/>,
    caf::reacts_to<task_atom, uint64_t /*epoch*/, uint64_t /*task*/, std::vector<int64_t>>,
    caf::reacts_to<release_atom, uint64_t /*slab*/>,
    /// -> worker (request): the worker process's pid, -1 when in-process or not running.
    caf::replies_to<status_atom>::with<int32_t>>;

/// What a worker actor implements: the worker interface plus the notices of its
/// own reader thread (frames from the worker process, link down).  Handles of this
/// type convert to worker_actor, which is all the sampler sees.
using worker_impl_actor = worker_actor::extend<
    caf::reacts_to<frame_atom, uint8_t /*FrameType*/, std::string /*body*/>,
    caf::reacts_to<linkdown_atom>,
    caf::reacts_to<tick_atom>>;

/// The CAF configuration the runtime uses: message types registered, scheduler
/// tuned for short blocking round trips (see docs/architecture.md, "Scheduler").
class RuntimeConfig : public caf::actor_system_config {
 public:
  RuntimeConfig();
};

}  // namespace loader::runtime
