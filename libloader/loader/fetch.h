// Fetchers: one task's indices -> one batch.  The same code runs in the main
// thread (num_workers = 0) and inside every worker, so both give identical batches
// (PyTorch's _MapDatasetFetcher / _IterableDatasetFetcher).
//
//   loader::MapFetcher f(dataset, /*auto_collation=*/true, /*collate=*/{});
//   loader::Value batch = f.fetch({4, 1, 7});
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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
  /// Nanoseconds the last fetch() spent in the collate function (0 on the
  /// sample_spec() fast path, which writes the samples in place, and with LOADER_STATS=0).
  uint64_t last_collate_ns() const { return collate_ns_; }

 private:
  Value fetch_into_spec(const IndexBatch& indices);
  uint64_t collate_ns_ = 0;
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
  /// Nanoseconds the last fetch() spent in the collate function (0 with LOADER_STATS=0).
  uint64_t last_collate_ns() const { return collate_ns_; }
  /// Passes the next `results` results of fetch(n), as a resumed stream does
  /// (IterableDataset's state hooks): through the dataset's skip() when it offers one
  /// (results * n samples, or `results` without auto-collation; no sample built), else
  /// by fetching them and dropping them (a fetch that throws counts as one result, as
  /// its error was one).  Returns how many it passed: fewer only when the stream ended.
  uint64_t skip(uint64_t results, size_t n);

 private:
  std::shared_ptr<IterableDataset> dataset_;
  std::unique_ptr<Cursor<Value>> cursor_;
  bool auto_collation_;
  CollateFn collate_;
  bool drop_last_;
  bool ended_ = false;
  uint64_t collate_ns_ = 0;
};

/// A resumed stream of an IterableDataset with state hooks (DataLoader checkpoints),
/// in a worker or, with num_workers=0, in the main process: `dataset.load_state(state)`,
/// what it throws coming back with its Python type and a message naming the dataset.
void load_stream_state(IterableDataset& dataset, const std::string& state);
/// ... then, once the fetcher made the stream, `fetcher.skip(results, n)`: ValueError
/// naming the dataset when the stream ended first.
void skip_stream(IterableFetcher& fetcher, const IterableDataset& dataset, uint64_t results, size_t n);

}  // namespace loader

namespace loader {

/// A running 64-bit hash of the items an epoch handed out (its index batches, or an
/// IterableDataset's results), for verified replays of checkpoints: H_0 = 0, H_k =
/// chain(H_(k-1), hash of item k).  Kept: H at every count up to kExact and at every power
/// of two (the marks a checkpoint carries, so that a replay names the first item that
/// differs), and at each of the last kRecent counts (a checkpoint's `consumed`, behind
/// the tasks in flight).  Thread-safe: the pipeline's dispatcher adds, the application
/// thread's state_dict reads.
class HashChain {
 public:
  static constexpr uint64_t kExact = 16;
  static constexpr uint64_t kRecent = 4096;
  void add(uint64_t item_hash);
  uint64_t count() const;
  /// H after `count` items, when kept and known.
  std::optional<uint64_t> at(uint64_t count) const;
  /// The marks (count, H) up to `upto`: counts 1..kExact and powers of two.
  std::vector<std::pair<uint64_t, uint64_t>> marks(uint64_t upto) const;
  /// A resumed epoch: the chain as a checkpoint had it after `count` items (`hash`
  /// nullopt: not known, and then neither is any H after it), with its marks up to there.
  void restart_at(uint64_t count, std::optional<uint64_t> hash, std::vector<std::pair<uint64_t, uint64_t>> marks);
  static uint64_t chain(uint64_t h, uint64_t item_hash);
  static uint64_t of_indices(const IndexBatch& indices);

 private:
  mutable std::mutex mu_;
  uint64_t count_ = 0;
  bool known_ = true;
  uint64_t hash_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> marks_;
  std::deque<uint64_t> recent_;  ///< H after count_ - size() + 1 .. count_
};

/// What a checkpoint says of the batches its epoch handed out (DataLoader checkpoints,
/// verified replay): the hash of the first `sampled` ones and marks along the way.
struct ReplayCheck {
  std::optional<uint64_t> hash;                          ///< H after the checkpoint's last batch
  std::vector<std::pair<uint64_t, uint64_t>> marks;      ///< (count, H): 1..16, powers of two, consumed
  std::string differs;  ///< appended to a refusal: what the checkpointed loader was, what this one is
  std::optional<uint64_t> at(uint64_t count) const {
    for (const auto& [c, h] : marks)
      if (c == count) return h;
    return std::nullopt;
  }
};

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
  ///
  /// With `check` (a checkpoint that carries the hashes of its batches), the replay is
  /// verified: the first min(consumed, HashChain::kExact) tasks are pulled and hashed, not
  /// skipped, and compared with the checkpoint's marks, and the tasks in flight at the
  /// checkpoint (consumed..pulled) with its hash; the first batch that differs (or the
  /// range of in-flight ones) is refused with a ValueError.  The skipped tasks between are
  /// not built, so not verified (the cost of a resume stays the sampler's skip).
  ///
  /// `delivered` (an in_order=false checkpoint): tasks between consumed and pulled the
  /// application already had, ascending; they are pulled (the sampler's draws, the hash)
  /// and not given again.
  void fast_forward(uint64_t consumed, uint64_t pulled, bool exhausted = false, const ReplayCheck* check = nullptr,
                    const std::vector<uint64_t>* delivered = nullptr);
  /// The hashes of the tasks the sampler gave this pass (kept by the loader's iterator:
  /// the source itself moves into the epoch's pipeline).
  const std::shared_ptr<HashChain>& hashes() const noexcept { return hashes_; }

 private:
  std::optional<IndexBatch> pull();  ///< the sampler's next task (none once it ran out)
  uint64_t skip(uint64_t k);         ///< drops the sampler's next k tasks; how many it had
  std::deque<IndexBatch> pending_;
  bool ended_ = false;  ///< the sampler ran out: it is not asked again
  std::unique_ptr<Cursor<IndexBatch>> batches_;
  std::unique_ptr<Cursor<int64_t>> indices_;
  std::shared_ptr<HashChain> hashes_ = std::make_shared<HashChain>();
};

}  // namespace loader
