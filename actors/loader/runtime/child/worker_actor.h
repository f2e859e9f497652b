// The worker actor: where a worker's tasks become batches.  A thin shell over
// WorkerCore (worker_core.h): a task_msg (task_idx, indices) is answered with a
// result_msg (task_idx, batch) sent to the worker's uplink; the batch is written into
// the shared-memory slab the task names.  It also records, on the generator state page,
// the state each task starts from and ends with (rng_state_page.h), so a restarted
// worker resumes the random stream of its first unfinished task.
//
// One per worker incarnation, hosted where the worker runs: in its child process, or in
// the main process for in-process workers (threads); its mailbox is fed by the worker
// host (worker_host.h).  What cannot go on (the dataset or worker_init_fn failed, an
// iterable stream could not be made again, a message it cannot act on) is one `fatal`
// to the uplink, naming it, and the actor quits.
//
// State machine:
//
//       init ok                      task / useslab / setrng / epoch / slab
//   new ───────► ready (a WorkerCore) ◄────────────────────────────────┘
//    │ init failed          │ any failure it cannot answer as a task error
//    ▼                      ▼
//  fatal ──► quit         fatal ──► quit
#pragma once

#include <caf/all.hpp>

#include "loader/runtime/protocol.h"

namespace loader::runtime {

/// Why the worker's stream failed when it was made again (`when` of a fatal).
constexpr const char* kStreamAgain = "as its epoch began (the IterableDataset's iter())";
/// ... and when it resumed from a checkpoint (state hooks: load_state, iter(), skip).
constexpr const char* kStreamResumed = "to resume its stream from the checkpoint";

/// Spawns a worker actor answering to `uplink`.  Spawned lazily: it runs on the thread
/// of the first message sent to it (the worker host's, InlineExecutor).
worker_actor spawn_worker_actor(caf::actor_system& sys, uplink_actor uplink);

}  // namespace loader::runtime
