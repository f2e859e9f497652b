// Internal: what a DataLoader shares with its epochs, and the epoch interface that
// the single-process path and the actor runtime implement.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "loader/dataloader_options.h"
#include "loader/dataset.h"
#include "loader/epoch_stats.h"
#include "loader/fetch.h"
#include "loader/pinned.h"
#include "loader/value.h"

namespace loader {

namespace runtime {
class WorkerPool;
class SlabStore;
}

/// One pass over the data.
class EpochBackend {
 public:
  virtual ~EpochBackend() = default;
  /// Next batch, nullopt at the end; throws for a batch that failed.
  virtual std::optional<Value> next() = 0;
  /// Pids of the worker processes serving this epoch (empty without workers).
  virtual std::vector<int> worker_pids() { return {}; }
  /// Ends the epoch now (its next() returns nullopt from then on).
  virtual void end() {}
  /// Fills the stage figures of `out` (tasks, in flight, ready, workers, waits);
  /// the Iterator fills batches and next_s.
  virtual void stats(EpochStats& out) const = 0;
};

/// State of one DataLoader, shared with its live epoch.
class LoaderState {
 public:
  std::shared_ptr<Dataset> dataset;            // map-style, or
  std::shared_ptr<IterableDataset> iterable;   // iterable-style
  DataLoaderOptions options;
  std::shared_ptr<Sampler> sampler;            // map-style only
  std::shared_ptr<BatchSamplerBase> batch_sampler;  // when auto-collation
  bool auto_collation = true;
  std::optional<int64_t> iterable_len_called;  // len(dataset) once len(loader) was asked
  /// The worker processes kept between epochs (persistent_workers).
  std::shared_ptr<runtime::WorkerPool> persistent_pool;
  /// persistent_workers=false: the pool of the last epoch, idle; the next epoch
  /// re-initialises its workers (fresh dataset, seeds, worker_init_fn) instead of
  /// starting new processes.  Shut down with the loader (DataLoader::shutdown).
  std::shared_ptr<runtime::WorkerPool> idle_pool;
  /// The shared-memory slabs of every worker index, made once and kept for the
  /// loader's life (pools of non-persistent epochs reuse them).
  std::shared_ptr<runtime::SlabStore> slab_store;
  /// The excessive-workers warning was given (once per loader).
  bool warned_worker_count = false;
  /// What pin_memory achieved (DataLoader::pin_memory_status()), shared with the
  /// loader's slab store; made by the DataLoader constructor.
  std::shared_ptr<PinTracker> pin_tracker;
  /// The collate function to use in this process.
  CollateFn collate() const;
  Generator& generator() const;
};

/// num_workers == 0: fetch in the calling thread.
std::unique_ptr<EpochBackend> make_single_process_epoch(LoaderState& state);

namespace runtime {
/// num_workers > 0: the actor runtime with worker processes (runtime.cpp).
std::unique_ptr<EpochBackend> make_multi_process_epoch(const std::shared_ptr<LoaderState>& state,
                                                       uint64_t base_seed);
/// PyTorch's _check_worker_number_rationality: warns once per loader when num_workers
/// exceeds the CPUs this process may use (runtime.cpp).
void check_worker_number(LoaderState& state);
}  // namespace runtime

}  // namespace loader
