// WorkerPool: the worker processes (or in-process worker threads) of one
// DataLoader, the pipeline their batches flow through, and the actors that restart
// and watch them (PoolActors: a slot actor per worker, a pool actor).  Made per
// epoch, or once for persistent_workers.
//
// Owns, and tears down in this order: the actors (so nothing restarts a worker
// during teardown), then the pipeline's links (every socket told first, then
// each reader joined and each process reaped).  The slabs are the loader's
// (LoaderState::slab_store) and outlive the pool.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "loader/runtime/epoch.h"

namespace loader::runtime {

class WorkerPool;
class Pipeline;

/// Builds a pool for `state`'s dataset and options, workers seeded base_seed + id.
/// `first_index`: the epoch's first task is its index batch `first_index` (a resumed
/// epoch's consumed batches; WorkerSeeding::PerTask seeds by the index in the epoch).
std::shared_ptr<WorkerPool> make_worker_pool(LoaderState& state, uint64_t base_seed, uint64_t first_index = 0);

}  // namespace loader::runtime
