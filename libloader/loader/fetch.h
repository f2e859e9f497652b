// Fetchers: one task's indices -> one batch.  The same code runs in the main
// thread (num_workers = 0) and inside every worker, so both give identical batches
// (PyTorch's _MapDatasetFetcher / _IterableDatasetFetcher).
//
//   loader::MapFetcher f(dataset, /*auto_collation=*/true, /*collate=*/{});
//   loader::Value batch = f.fetch({4, 1, 7});
#pragma once

#include <deque>
#include <memory>
#include <optional>

#include "loader/collate.h"
#include "loader/dataset.h"

namespace loader {

/// Map-style: with auto-collation, get_batch(indices) then collate; without it,
/// `indices` holds one index and the sample goes through collate (default_convert
/// when no collate function is given).
class MapFetcher {
 public:
  MapFetcher(std::shared_ptr<Dataset> dataset, bool auto_collation, CollateFn collate);
  Value fetch(const IndexBatch& indices);

 private:
  Value fetch_into_spec(const IndexBatch& indices);
  std::shared_ptr<Dataset> dataset_;
  bool auto_collation_;
  CollateFn collate_;
  std::optional<Value> spec_;  // dataset->sample_spec(), when the fast path applies
  std::vector<Tensor> spec_leaves_;
};

/// The structure default_collate gives for samples shaped like `spec` (tuples become
/// lists, namedtuples and dicts keep their type), with each tensor leaf k replaced by
/// `leaves[k]`.
Value collated_structure(const Value& spec, const std::vector<Tensor>& leaves);

/// Iterable-style: pulls up to `n` samples from the dataset's stream per fetch.
/// Returns nullopt when the stream is exhausted (and, with drop_last, when fewer
/// than `n` samples were left), as PyTorch's StopIteration.
class IterableFetcher {
 public:
  IterableFetcher(std::shared_ptr<IterableDataset> dataset, bool auto_collation, CollateFn collate,
                  bool drop_last);
  std::optional<Value> fetch(size_t n);

 private:
  std::shared_ptr<IterableDataset> dataset_;
  std::unique_ptr<Cursor<Value>> cursor_;
  bool auto_collation_;
  CollateFn collate_;
  bool drop_last_;
  bool ended_ = false;
};

}  // namespace loader

namespace loader {

/// The indices of successive tasks: batches from a batch sampler (auto-collation)
/// or single indices from a sampler (batch_size = nullopt), as one stream.
class TaskSource {
 public:
  TaskSource(std::shared_ptr<BatchSamplerBase> batch_sampler, std::shared_ptr<Sampler> sampler);
  /// Indices of the next task, or nullopt when the pass is over.
  std::optional<IndexBatch> next();
  /// Resuming a pass from a checkpoint (DataLoader::load_state_dict): skips the first
  /// `consumed` tasks (Cursor::skip: the sampler makes the draws it had made for them
  /// without building their index lists) and takes the next `pulled - consumed` now, to
  /// give them first.  Throws ValueError
  /// when the pass has fewer than `pulled` tasks.  `exhausted`: the checkpointed pass had
  /// also been asked for a task after its last one; it is asked now too, so that the
  /// draws a sampler makes as its pass ends (RandomSampler's trailing randperm) are made
  /// here, before the checkpoint's random state is loaded, and never again (ValueError
  /// when it gives one more task).  REQUIRES: consumed <= pulled.
  void fast_forward(uint64_t consumed, uint64_t pulled, bool exhausted = false);

 private:
  std::optional<IndexBatch> pull();  ///< the sampler's next task (none once it ran out)
  uint64_t skip(uint64_t k);         ///< drops the sampler's next k tasks; how many it had
  std::deque<IndexBatch> pending_;
  bool ended_ = false;  ///< the sampler ran out: it is not asked again
  std::unique_ptr<Cursor<IndexBatch>> batches_;
  std::unique_ptr<Cursor<int64_t>> indices_;
};

}  // namespace loader
