// WorkerPool: the worker processes (or in-process worker actors) of one
// DataLoader, their slab pools, and the actor system they run in.  Made per epoch,
// or once for persistent_workers.  Destroying it ends every worker (socket closed,
// SIGTERM, then SIGKILL after a grace period), reaps every process, and returns the
// slabs: segments are unmapped once no batch the application still holds uses them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "loader/runtime/epoch.h"

namespace loader::runtime {

class WorkerPool;

/// Builds a pool for `state`'s dataset and options, workers seeded base_seed + id.
std::shared_ptr<WorkerPool> make_worker_pool(const LoaderState& state, uint64_t base_seed);

/// Pids of the pool's worker processes (empty for in-process workers); for tests.
std::vector<int> worker_pids(WorkerPool& pool);

}  // namespace loader::runtime
