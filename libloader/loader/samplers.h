// The samplers of torch.utils.data, with PyTorch 1.13's exact index sequences.
//
// Same names, same arguments, same order for the same seed (DESIGN.md section 5),
// including *when* each random draw happens: a pass draws lazily, at its first
// next(), as PyTorch's generator-based __iter__ does.  A null generator means the
// default generator (loader::default_generator(), seeded by loader::manual_seed), as
// generator=None does in PyTorch.
//
//   auto g = std::make_shared<loader::Generator>(42);
//   loader::RandomSampler shuffle(1000, g);                  // RandomSampler(range(1000), generator=g)
//   auto pass = shuffle.iter();                              // iter(sampler)
//   while (auto i = pass->next()) use(*i);
//
//   loader::RandomSamplerOptions o;                          // keyword arguments ...
//   o.replacement = true;
//   o.num_samples = 64;
//   loader::RandomSampler with_repl(1000, o);                // ... or positionally:
//   loader::RandomSampler same(1000, /*replacement=*/true, /*num_samples=*/64);
//
//   loader::BatchSampler batches(std::make_shared<loader::SequentialSampler>(10), 3, false);
//   // [[0,1,2],[3,4,5],[6,7,8],[9]]
//
//   loader::DistributedSampler part(ds_size, /*num_replicas=*/4, /*rank=*/1);
//   part.set_epoch(epoch);                                   // reshuffles as seed + epoch
//
// Validation errors carry PyTorch's messages and exception types (ValueError,
// RuntimeError, ...).  Checks that only exist because Python is dynamically typed
// (e.g. "replacement should be a boolean value") cannot fail in C++.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "loader/dataset.h"
#include "loader/generator.h"
#include "loader/sampler.h"
#include "loader/tensor.h"

namespace loader {

/// What a sampler draws indices for: a fixed length, or a dataset whose size() is read
/// when PyTorch would call len(data_source) (at construction for validation and again
/// at the start of each pass), so a dataset that grows between epochs is followed.
class SampleSource {
 public:
  /// A fixed length (range(n)).  Throws ValueError when n < 0.
  SampleSource(int64_t n);  // NOLINT(google-explicit-constructor): implicit on purpose
  /// A dataset; it is kept alive by the sampler.
  template <class D, std::enable_if_t<std::is_base_of_v<Dataset, D>, int> = 0>
  SampleSource(std::shared_ptr<D> dataset)  // NOLINT(google-explicit-constructor)
      : SampleSource(from_dataset(std::shared_ptr<Dataset>(std::move(dataset)))) {}
  /// Any callable returning the current length.
  static SampleSource from_size_function(std::function<int64_t()> size_fn);

  int64_t size() const;

 private:
  SampleSource() = default;
  static SampleSource from_dataset(std::shared_ptr<Dataset> dataset);

  int64_t n_ = 0;
  std::function<int64_t()> size_fn_;
};

/// SequentialSampler(data_source): 0, 1, ..., n-1.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(SampleSource source);
  std::unique_ptr<Cursor<int64_t>> iter() override;
  std::optional<int64_t> size() const override;

 private:
  SampleSource source_;
};

/// Keyword arguments of RandomSampler.
struct RandomSamplerOptions {
  /// Draw with replacement (torch.randint in chunks of 32) instead of permutations.
  bool replacement = false;
  /// How many indices one pass yields; default len(data_source).  Without replacement,
  /// more than n gives num_samples // n full permutations and then a partial one.
  std::optional<int64_t> num_samples;
  /// Null: each pass draws a seed from the default generator and shuffles with a fresh
  /// Generator seeded with it (PyTorch's generator=None behaviour).
  std::shared_ptr<Generator> generator;
};

/// RandomSampler(data_source, replacement=False, num_samples=None, generator=None).
class RandomSampler : public Sampler {
 public:
  /// Throws ValueError "num_samples should be a positive integer value, but got
  /// num_samples=K" when num_samples (or the data source's length, by default) is <= 0.
  explicit RandomSampler(SampleSource source, bool replacement = false,
                         std::optional<int64_t> num_samples = std::nullopt,
                         std::shared_ptr<Generator> generator = nullptr);
  RandomSampler(SampleSource source, std::shared_ptr<Generator> generator);
  RandomSampler(SampleSource source, const RandomSamplerOptions& options);

  std::unique_ptr<Cursor<int64_t>> iter() override;
  std::optional<int64_t> size() const override { return num_samples(); }
  std::vector<RandomStream> random_streams() const override;

  int64_t num_samples() const;
  bool replacement() const noexcept { return replacement_; }
  const std::shared_ptr<Generator>& generator() const noexcept { return generator_; }

 private:
  SampleSource source_;
  bool replacement_;
  std::optional<int64_t> num_samples_;
  std::shared_ptr<Generator> generator_;
};

/// A shuffled order whose k-th index is computed on its own, so that a pass's skip(k) and
/// each next() cost O(1): a resumed epoch starts at once wherever its checkpoint was taken
/// (RandomSampler's PyTorch-exact randperm must redo every swap before the position).  Not
/// one of PyTorch's samplers and not RandomSampler's order: opt in where resume time
/// matters more than matching PyTorch's indices.
///
/// Each pass draws one key, `random64()` of its generator, at its first next() or skip()
/// (lazily, as RandomSampler draws), and reads the data source's length then.  Its order
/// is a keyed bijection of [0, n): a Feistel network over [0, 2^b), 2^b the smallest
/// power of two >= n (8 rounds, each XORing one half with a 64-bit mix of the other half
/// and a round key derived from the pass's key), with cycle walking: index k of the pass
/// is the first of F(k), F(F(k)), ... below n (fewer than two steps on average, as
/// 2^b < 2n).  Every pass (epoch) has its own key, so its own order; the generator is the
/// sampler's stream (random_streams), saved and replayed by DataLoader checkpoints.
///
///   loader::IndexShuffleSampler s(1000000, /*seed=*/7);   // own Generator(7)
///   auto pass = s.iter();
///   pass->skip(990000);                                   // O(1)
///   auto i = pass->next();                                // the pass's 990,000th index
class IndexShuffleSampler : public Sampler {
 public:
  /// Draws its keys from its own Generator(seed).
  IndexShuffleSampler(SampleSource source, uint64_t seed);
  /// Draws its keys from `generator`; null: the default generator.
  IndexShuffleSampler(SampleSource source, std::shared_ptr<Generator> generator);

  std::unique_ptr<Cursor<int64_t>> iter() override;
  std::optional<int64_t> size() const override { return source_.size(); }
  std::vector<RandomStream> random_streams() const override;
  const std::shared_ptr<Generator>& generator() const noexcept { return generator_; }

  /// The index at position k (0 <= k < n) of the order keyed `key` over [0, n).  Throws
  /// ValueError when k is outside [0, n).
  static int64_t index_at(uint64_t key, int64_t n, int64_t k);

 private:
  SampleSource source_;
  std::shared_ptr<Generator> generator_;
};

/// SubsetRandomSampler(indices, generator=None): indices[i] for i in randperm(len(indices)).
/// Unlike RandomSampler, a null generator means the default generator is used directly.
class SubsetRandomSampler : public Sampler {
 public:
  explicit SubsetRandomSampler(std::vector<int64_t> indices, std::shared_ptr<Generator> generator = nullptr);
  std::unique_ptr<Cursor<int64_t>> iter() override;
  std::optional<int64_t> size() const override;
  std::vector<RandomStream> random_streams() const override;
  const std::vector<int64_t>& indices() const noexcept { return *indices_; }

 private:
  std::shared_ptr<const std::vector<int64_t>> indices_;
  std::shared_ptr<Generator> generator_;
};

/// torch.multinomial(weights (float64, 1-D), num_samples, replacement, generator) on the
/// CPU of a non-MKL PyTorch 1.13 build, bit for bit:
///  - with replacement: cumulative sum normalised by the total, last bucket forced to 1.0,
///    one uniform double per draw, binary search for the first bucket >= it;
///  - without replacement: key_i = w_i / Exp(1)_i with Exp(1) = -log(1 - u) drawn for every
///    category in order, then the k largest keys (torch.topk, same tie order; argmax for k=1).
/// Errors are RuntimeError with PyTorch's messages (e.g. "invalid multinomial distribution
/// (sum of probabilities <= 0)").  Without replacement and fewer than k positive weights,
/// zero-weight categories fill the tail, as in 1.13 (no error).
std::vector<int64_t> multinomial(const std::vector<double>& weights, int64_t num_samples, bool replacement,
                                 Generator& generator);

/// WeightedRandomSampler(weights, num_samples, replacement=True, generator=None): one
/// torch.multinomial draw per pass, made at the pass's first next() (where invalid
/// weights are reported, as in PyTorch).  A null generator uses the default generator.
class WeightedRandomSampler : public Sampler {
 public:
  /// Throws ValueError when num_samples <= 0.
  WeightedRandomSampler(std::vector<double> weights, int64_t num_samples, bool replacement = true,
                        std::shared_ptr<Generator> generator = nullptr);
  /// Weights from a tensor (any real dtype, converted to float64).  Throws ValueError
  /// "weights should be a 1d sequence but given weights have shape (1, 2)" unless 1-D.
  WeightedRandomSampler(const Tensor& weights, int64_t num_samples, bool replacement = true,
                        std::shared_ptr<Generator> generator = nullptr);

  std::unique_ptr<Cursor<int64_t>> iter() override;
  std::optional<int64_t> size() const override { return num_samples_; }
  std::vector<RandomStream> random_streams() const override;
  const std::vector<double>& weights() const noexcept { return *weights_; }
  int64_t num_samples() const noexcept { return num_samples_; }
  bool replacement() const noexcept { return replacement_; }

 private:
  std::shared_ptr<const std::vector<double>> weights_;
  int64_t num_samples_;
  bool replacement_;
  std::shared_ptr<Generator> generator_;
};

/// A fixed sequence of indices used as a sampler: PyTorch accepts any iterable as
/// `sampler=` (e.g. range(2, 12) or a list).
class ListSampler : public Sampler {
 public:
  explicit ListSampler(std::vector<int64_t> indices);
  /// range(start, stop, step).  Throws ValueError when step is 0.
  static std::shared_ptr<ListSampler> range(int64_t start, int64_t stop, int64_t step = 1);
  std::unique_ptr<Cursor<int64_t>> iter() override;
  std::optional<int64_t> size() const override;
  const std::vector<int64_t>& indices() const noexcept { return *indices_; }

 private:
  std::shared_ptr<const std::vector<int64_t>> indices_;
};
using IterableSampler = ListSampler;

/// BatchSampler(sampler, batch_size, drop_last): groups the sampler's indices into lists
/// of batch_size; the last, shorter one is kept unless drop_last.  Pulls the wrapped
/// sampler lazily, one batch per next(), exactly as PyTorch's generator does.
class BatchSampler : public BatchSamplerBase {
 public:
  /// Throws ValueError "batch_size should be a positive integer value, but got
  /// batch_size=B" when batch_size <= 0, and ValueError when sampler is null.
  BatchSampler(std::shared_ptr<Sampler> sampler, int64_t batch_size, bool drop_last);
  /// Over a plain list of indices (BatchSampler([5, 3, 8, ...], 3, False)).
  BatchSampler(std::vector<int64_t> indices, int64_t batch_size, bool drop_last);

  std::unique_ptr<Cursor<IndexBatch>> iter() override;
  /// len(): n // batch_size with drop_last, else ceil(n / batch_size); nullopt when the
  /// wrapped sampler has no length.
  std::optional<int64_t> size() const override;
  std::vector<RandomStream> random_streams() const override { return sampler_->random_streams(); }

  const std::shared_ptr<Sampler>& sampler() const noexcept { return sampler_; }
  int64_t batch_size() const noexcept { return batch_size_; }
  bool drop_last() const noexcept { return drop_last_; }

 private:
  std::shared_ptr<Sampler> sampler_;
  int64_t batch_size_;
  bool drop_last_;
};

/// A fixed list of index lists used as `batch_sampler=` (PyTorch accepts any iterable
/// of lists, e.g. a list of tuples of sizes 2, 3, 2, 3, ...).
class ListBatchSampler : public BatchSamplerBase {
 public:
  explicit ListBatchSampler(std::vector<IndexBatch> batches);
  std::unique_ptr<Cursor<IndexBatch>> iter() override;
  std::optional<int64_t> size() const override;
  const std::vector<IndexBatch>& batches() const noexcept { return *batches_; }

 private:
  std::shared_ptr<const std::vector<IndexBatch>> batches_;
};

/// Keyword arguments of DistributedSampler.
struct DistributedSamplerOptions {
  /// World size.  nullopt: the WORLD_SIZE environment variable (set by torchrun), the
  /// C++ stand-in for torch.distributed.get_world_size().
  std::optional<int64_t> num_replicas;
  /// This process's rank in [0, num_replicas).  nullopt: the RANK environment variable.
  std::optional<int64_t> rank;
  /// Shuffle with randperm(n) from a fresh Generator seeded seed + epoch.
  bool shuffle = true;
  /// Must be the same on every replica.
  int64_t seed = 0;
  /// Drop the tail so that every replica gets floor-equal shares, instead of padding
  /// by repeating indices from the start.
  bool drop_last = false;
};

/// DistributedSampler(dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
/// drop_last=False): this rank's share, indices[rank:total_size:num_replicas].
class DistributedSampler : public Sampler {
 public:
  /// Throws ValueError "Invalid rank R, rank should be in the interval [0, W-1]", and
  /// RuntimeError when num_replicas/rank are not given and not in the environment.
  explicit DistributedSampler(SampleSource source, std::optional<int64_t> num_replicas = std::nullopt,
                              std::optional<int64_t> rank = std::nullopt, bool shuffle = true, int64_t seed = 0,
                              bool drop_last = false);
  DistributedSampler(SampleSource source, const DistributedSamplerOptions& options);

  /// Computes this pass's share now (fresh generator seeded seed + epoch).  Throws
  /// AssertionError when the data source changed length since construction.
  std::unique_ptr<Cursor<int64_t>> iter() override;
  std::optional<int64_t> size() const override { return num_samples_; }
  /// A pass draws from a generator seeded seed + epoch: its one stream is the epoch, so
  /// a DataLoader checkpoint taken during an epoch brings that epoch back (a resumed
  /// loader need not call set_epoch first); after a finished epoch's checkpoint the
  /// program's set_epoch() for the next one stands (a per-epoch setting, not a stream
  /// that runs on).  The stream's state also names num_replicas, rank, seed, shuffle,
  /// drop_last and the dataset size; loading another rank's or another setting's state
  /// throws ValueError saying what differs (each rank resumes its own checkpoint).
  std::vector<RandomStream> random_streams() const override;

  /// Call at the start of every epoch, before iter(), so shuffling differs per epoch.
  void set_epoch(int64_t epoch) noexcept { epoch_ = epoch; }
  int64_t epoch() const noexcept { return epoch_; }
  int64_t num_samples() const noexcept { return num_samples_; }
  int64_t total_size() const noexcept { return total_size_; }
  int64_t num_replicas() const noexcept { return num_replicas_; }
  int64_t rank() const noexcept { return rank_; }
  bool shuffle() const noexcept { return shuffle_; }
  int64_t seed() const noexcept { return seed_; }
  bool drop_last() const noexcept { return drop_last_; }

 private:
  SampleSource source_;
  int64_t n_;
  int64_t num_replicas_;
  int64_t rank_;
  bool shuffle_;
  int64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
  int64_t num_samples_;
  int64_t total_size_;
};

}  // namespace loader
