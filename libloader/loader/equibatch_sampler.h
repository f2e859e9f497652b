// EquiBatchSampler: class-balanced batches for imbalanced (multi-label) data, the
// `DistributedEquiBatchSampler` of the samplers document, with its exact batches.
//
//   // labels per dataset index; an index may carry several labels
//   std::vector<std::vector<int64_t>> idx2labels = {{0}, {1, 2}, {0}, {2}, {0, 1}, ...};
//   loader::EquiBatchSamplerOptions o;
//   o.balanced_coef = 64;                            // pool size per class and epoch
//   o.seed = 42;                                     // random.seed(42)
//   auto sampler = std::make_shared<loader::EquiBatchSampler>(idx2labels, /*batch_size=*/16, o);
//
//   loader::DataLoaderOptions d;
//   d.batch_sampler = sampler;                       // one batch sampler, any num_workers
//   d.num_workers = 2;
//   loader::DataLoader dl(dataset, d);               // every epoch: iter() draws new pools
//
//   o.num_replicas = 4; o.rank = 1;                  // distributed: this rank's share of
//   loader::EquiBatchSampler part(idx2labels, 16, o);//   every batch, batch[1:16:4]
//
// What one pass (one iter(), one epoch) does, as the document's bless() then __iter__:
//  - bless: for each class, in the order the labels first appear in idx2labels, take the
//    indices carrying that label, random.shuffle them, keep the first balanced_coef; while
//    there are fewer than balanced_coef, append random.choice(of the pool so far).
//  - iterate: batch t takes batch_size indices in order from the pool of class t mod |C|, so
//    consecutive batches come from consecutive classes and each class fills one batch in every
//    |C|.  The pass ends when the current class's pool cannot fill another batch (a partial
//    batch is dropped): |C| * (balanced_coef / batch_size) batches.
//  - distributed: every rank draws the same pools (same seed) and keeps
//    batch[rank:batch_size:num_replicas] of each batch.
//
// Randomness is Python's `random` (loader::PythonRandom), seeded once at construction with
// `seed`, or a generator you pass and may share; the stream continues from one epoch to the
// next (epoch e's pools depend on every earlier epoch's draws, as in the document's training
// loop: random.seed(s); then for each epoch sampler.bless(); for batch in sampler: ...).
// All draws happen in iter(); next() never draws.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "loader/python_random.h"
#include "loader/sampler.h"

namespace loader {

/// Keyword arguments of EquiBatchSampler.
struct EquiBatchSamplerOptions {
  /// Pool size per class and epoch: a class with more indices is subsampled, one with fewer
  /// is oversampled with random choices.  Must be >= 1 (the document's value is 3000).
  int64_t balanced_coef = 3000;
  /// World size; 1 is the non-distributed sampler.  Must be >= 1 and <= batch_size (a larger
  /// world would give some ranks empty batches).
  int64_t num_replicas = 1;
  /// This process's rank, in [0, num_replicas).
  int64_t rank = 0;
  /// random.seed(seed) of a generator the sampler owns.  Every rank must use the same seed.
  uint64_t seed = 0;
  /// Draw from this generator instead (seed is then ignored), e.g. one PythonRandom shared
  /// with other transcribed code to reproduce Python's single global `random` stream.
  std::shared_ptr<PythonRandom> generator;
};

/// DistributedEquiBatchSampler(idx2labels, batch_size, num_replicas=1, rank=0,
/// balanced_coef=3000) of the samplers document, seeded as random.seed(seed).
class EquiBatchSampler : public BatchSamplerBase {
 public:
  /// `idx2labels[i]` lists the labels of dataset index i (at least one each; a label listed
  /// twice puts i twice in that class).  Throws ValueError:
  ///  - "batch_size should be a positive integer value, but got batch_size=B" when B <= 0;
  ///  - when idx2labels is empty, an index has no labels, balanced_coef < 1,
  ///    num_replicas < 1, batch_size < num_replicas, or the rank is out of range
  ///    ("Invalid rank R, rank should be in the interval [0, W-1]").
  EquiBatchSampler(const std::vector<std::vector<int64_t>>& idx2labels, int64_t batch_size,
                   const EquiBatchSamplerOptions& options = {});
  /// The document's positional order: (idx2labels, batch_size, num_replicas, rank,
  /// balanced_coef), plus the seed.
  EquiBatchSampler(const std::vector<std::vector<int64_t>>& idx2labels, int64_t batch_size, int64_t num_replicas,
                   int64_t rank, int64_t balanced_coef = 3000, uint64_t seed = 0);

  /// One epoch: draws every class's pool now (bless), then yields its batches.
  std::unique_ptr<Cursor<IndexBatch>> iter() override;
  /// Batches per pass, without drawing: num_classes() * (balanced_coef / batch_size).
  std::optional<int64_t> size() const override;
  /// Its PythonRandom (its own, or the one given), whose stream runs on across epochs.
  std::vector<RandomStream> random_streams() const override;

  int64_t batch_size() const noexcept { return batch_size_; }
  int64_t balanced_coef() const noexcept { return balanced_coef_; }
  int64_t num_replicas() const noexcept { return num_replicas_; }
  int64_t rank() const noexcept { return rank_; }
  /// The classes, in the order their labels first appear in idx2labels (the order batches
  /// visit them).
  const std::vector<int64_t>& classes() const noexcept { return classes_; }
  int64_t num_classes() const noexcept { return static_cast<int64_t>(classes_.size()); }
  /// The indices carrying classes()[c], in index order.
  const std::vector<int64_t>& members(size_t c) const { return members_.at(c); }
  const std::shared_ptr<PythonRandom>& generator() const noexcept { return generator_; }

 private:
  int64_t batch_size_;
  int64_t balanced_coef_;
  int64_t num_replicas_;
  int64_t rank_;
  std::vector<int64_t> classes_;
  std::vector<std::vector<int64_t>> members_;
  std::shared_ptr<PythonRandom> generator_;
};

/// The document's name for the same sampler (num_replicas = 1 is EquiBatchSampler).
using DistributedEquiBatchSampler = EquiBatchSampler;

}  // namespace loader
