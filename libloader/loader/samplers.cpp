#include "loader/samplers.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "loader/detail/splitmix64.h"
#include "loader/error.h"

namespace loader {

namespace {

/// The generator a pass draws from: the given one, or the default generator.
Generator& generator_or_default(const std::shared_ptr<Generator>& g) { return g ? *g : default_generator(); }

/// ceil(a / b) for b > 0, as Python's math.ceil(a / b) for the small values used here.
int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

std::string positive_int_message(const std::string& name, int64_t value) {
  return name + " should be a positive integer value, but got " + name + "=" + std::to_string(value);
}

/// Python's tuple formatting of a shape: (), (3,), (1, 2).
std::string shape_tuple(const Dims& sizes) {
  std::string s = "(";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(sizes[i]);
  }
  if (sizes.size() == 1) s += ",";
  return s + ")";
}

/// A pass over a shared, immutable vector (ListSampler, ListBatchSampler).
template <class T>
class VectorCursor final : public Cursor<T> {
 public:
  explicit VectorCursor(std::shared_ptr<const std::vector<T>> items) : items_(std::move(items)) {}
  std::optional<T> next() override {
    if (pos_ >= items_->size()) return std::nullopt;
    return (*items_)[pos_++];
  }
  size_t next_many(std::vector<T>& out, size_t k) override {
    const size_t got = std::min(k, items_->size() - std::min(pos_, items_->size()));
    out.insert(out.end(), items_->begin() + static_cast<std::ptrdiff_t>(pos_),
               items_->begin() + static_cast<std::ptrdiff_t>(pos_ + got));
    pos_ += got;
    return got;
  }
  size_t skip(size_t k) override {
    const size_t got = std::min(k, items_->size() - std::min(pos_, items_->size()));
    pos_ += got;
    return got;
  }

 private:
  std::shared_ptr<const std::vector<T>> items_;
  size_t pos_ = 0;
};

// ------------------------------------------------------------------ RandomSampler pass
//
// Mirrors torch/utils/data/sampler.py (1.13) RandomSampler.__iter__, a Python generator:
//
//   n = len(data_source)
//   generator = self.generator or Generator().manual_seed(<int64 random_() from default>)
//   if replacement:
//       for _ in range(num_samples // 32): yield from randint(high=n, size=(32,))
//       yield from randint(high=n, size=(num_samples % 32,))
//   else:
//       for _ in range(num_samples // n): yield from randperm(n)
//       yield from randperm(n)[:num_samples % n]
//
// Every block is drawn when the consumer asks for its first element, so draws from a
// shared generator interleave with other users exactly as in PyTorch; the trailing
// randperm is drawn (and possibly discarded) at the next() that ends the pass.  A randperm
// block is a LazyPermutation (generator.h): its swaps run as its elements are asked for,
// on a copy of the generator's stream, while the generator owes those draws, so another
// user of the generator still sees them made at the block's start.
class RandomCursor final : public Cursor<int64_t> {
 public:
  RandomCursor(SampleSource source, bool replacement, std::optional<int64_t> num_samples,
               std::shared_ptr<Generator> generator)
      : source_(std::move(source)),
        replacement_(replacement),
        requested_(num_samples),
        generator_(std::move(generator)) {}

  size_t next_many(std::vector<int64_t>& out, size_t k) override {
    size_t got = 0;
    while (got < k) {
      if (!done_ && perm_left_ > 0) {  // inside a randperm block: in bulk
        const auto m = static_cast<size_t>(std::min<int64_t>(perm_left_, static_cast<int64_t>(k - got)));
        perm_->take(out, m);
        got += m;
        perm_left_ -= static_cast<int64_t>(m);
        if (perm_left_ == 0) perm_->finish();  // randperm(n)[:k]: the pass's other draws
        continue;
      }
      std::optional<int64_t> v = next();
      if (!v) break;
      out.push_back(*v);
      ++got;
    }
    return got;
  }

  // Resuming at position p must redo the swaps of randperm before p (the elements after
  // p depend on them), and nothing else: no element is handed out, and a block skipped
  // to its end only makes its draws (LazyPermutation::finish, no swaps).
  size_t skip(size_t k) override {
    size_t got = 0;
    while (got < k) {
      if (!done_ && perm_left_ > 0) {
        const auto m = static_cast<size_t>(std::min<int64_t>(perm_left_, static_cast<int64_t>(k - got)));
        perm_left_ -= static_cast<int64_t>(m);
        if (perm_left_ == 0) perm_->finish();  // what next() does after the block's last element
        else perm_->skip(m);
        got += m;
        continue;
      }
      if (!done_ && pos_ < block_.size()) {  // the rest of a block of randint draws
        const size_t m = std::min(block_.size() - pos_, k - got);
        pos_ += m;
        got += m;
        continue;
      }
      if (!next()) break;  // starts the pass or the next block (its draws), or finds the end
      ++got;
    }
    return got;
  }

  std::optional<int64_t> next() override {
    if (done_) return std::nullopt;
    if (!started_) start();
    while (true) {
      if (perm_left_ > 0) {
        const int64_t v = perm_->next();
        if (--perm_left_ == 0) perm_->finish();  // randperm(n)[:k]: the pass's other draws
        return v;
      }
      if (pos_ < block_.size()) return block_[pos_++];
      if (!draw_block()) {
        done_ = true;
        block_ = {};
        perm_.reset();
        return std::nullopt;
      }
    }
  }

 private:
  void start() {
    started_ = true;
    n_ = source_.size();
    if (!generator_) {
      int64_t seed = default_generator().random_int64();
      generator_ = std::make_shared<Generator>(static_cast<uint64_t>(seed));
    }
    num_samples_ = requested_ ? *requested_ : n_;
    if (replacement_) {
      full_blocks_ = num_samples_ / kChunk;
      tail_size_ = num_samples_ % kChunk;
    } else {
      if (n_ == 0) {
        done_ = true;
        throw ValueError("RandomSampler: cannot draw num_samples=" + std::to_string(num_samples_) +
                         " samples without replacement from an empty data source (PyTorch raises "
                         "ZeroDivisionError here); give the sampler a non-empty dataset");
      }
      full_blocks_ = num_samples_ / n_;
      tail_size_ = num_samples_ % n_;
    }
  }

  /// Draws the next block; false when the pass is over.
  bool draw_block() {
    pos_ = 0;
    int64_t size = 0;
    if (full_blocks_ > 0) {
      --full_blocks_;
      size = replacement_ ? kChunk : n_;
    } else if (!tail_drawn_) {
      tail_drawn_ = true;
      size = tail_size_;
    } else {
      return false;
    }
    if (replacement_) {
      if (n_ <= 0) {
        done_ = true;
        throw RuntimeError("random_ expects 'from' to be less than 'to', but got from=0 >= to=" +
                           std::to_string(n_) + " (RandomSampler with replacement over an empty data source)");
      }
      block_.resize(static_cast<size_t>(size));
      for (auto& v : block_) v = generator_->randint(n_);
    } else if (size == 0 && full_blocks_ == 0) {
      // The trailing randperm(n)[:0] contributes nothing but still advances the
      // generator: randperm draws one random() per position 0..n-2, so draw exactly
      // those instead of building (and discarding) a second permutation of n.
      for (int64_t i = 0; i + 1 < n_; ++i) generator_->random();
      block_.clear();
    } else {
      // randperm(n) drawn lazily: the generator owes the pass's draws until the
      // permutation has made them (LazyPermutation), so the first index costs O(1)
      // and any other user of the generator sees PyTorch's stream all the same.
      block_.clear();
      perm_.emplace(n_, *generator_);
      perm_left_ = size;
    }
    return true;
  }

  static constexpr int64_t kChunk = 32;

  SampleSource source_;
  bool replacement_;
  std::optional<int64_t> requested_;
  std::shared_ptr<Generator> generator_;
  bool started_ = false;
  bool done_ = false;
  bool tail_drawn_ = false;
  int64_t n_ = 0;
  int64_t num_samples_ = 0;
  int64_t full_blocks_ = 0;
  int64_t tail_size_ = 0;
  std::vector<int64_t> block_;  // a block of randint draws (replacement)
  size_t pos_ = 0;
  std::optional<LazyPermutation> perm_;  // a randperm block; after generator_ (it points to it)
  int64_t perm_left_ = 0;                // elements of perm_ this block still yields
};

// ------------------------------------------------------------------ BatchSampler pass
class BatchCursor final : public Cursor<IndexBatch> {
 public:
  BatchCursor(std::shared_ptr<Sampler> sampler, int64_t batch_size, bool drop_last)
      : sampler_(std::move(sampler)), batch_size_(batch_size), drop_last_(drop_last) {}

  std::optional<IndexBatch> next() override {
    if (done_) return std::nullopt;
    // iter(self.sampler) runs in the generator body, i.e. at the first next().
    if (!inner_) inner_ = sampler_->iter();
    IndexBatch batch;
    batch.reserve(static_cast<size_t>(std::min<int64_t>(batch_size_, 1 << 16)));
    const auto want = static_cast<size_t>(batch_size_);
    if (inner_->next_many(batch, want) < want) {
      done_ = true;
      inner_.reset();
      if (drop_last_ || batch.empty()) return std::nullopt;
    }
    return batch;
  }

  /// k batches are k * batch_size indices of the wrapped pass, skipped without building
  /// the lists; a pass that ends inside them ends as next() ends it (a last, shorter
  /// batch counts unless drop_last).
  size_t skip(size_t k) override {
    if (done_ || k == 0) return 0;
    if (!inner_) inner_ = sampler_->iter();
    const auto b = static_cast<size_t>(batch_size_);
    size_t got = 0;
    // In chunks, so that k * batch_size never overflows.
    const size_t per_call = std::max<size_t>(1, (size_t{1} << 40) / b);
    while (got < k) {
      const size_t want = std::min(k - got, per_call);
      const size_t indices = inner_->skip(want * b);
      got += indices / b;
      if (indices < want * b) {
        done_ = true;
        inner_.reset();
        if (indices % b != 0 && !drop_last_) ++got;
        break;
      }
    }
    return got;
  }

 private:
  std::shared_ptr<Sampler> sampler_;
  int64_t batch_size_;
  bool drop_last_;
  std::unique_ptr<Cursor<int64_t>> inner_;
  bool done_ = false;
};

}  // namespace

// ------------------------------------------------------------------ SampleSource
SampleSource::SampleSource(int64_t n) : n_(n) {
  if (n < 0)
    throw ValueError("sampler: the data source length must be >= 0, but got " + std::to_string(n));
}

SampleSource SampleSource::from_size_function(std::function<int64_t()> size_fn) {
  if (!size_fn) throw ValueError("SampleSource::from_size_function: the size function is empty");
  SampleSource s;
  s.size_fn_ = std::move(size_fn);
  return s;
}

SampleSource SampleSource::from_dataset(std::shared_ptr<Dataset> dataset) {
  if (!dataset) throw ValueError("sampler: the dataset is null; pass a dataset or a length");
  return from_size_function([ds = std::move(dataset)] { return ds->size(); });
}

int64_t SampleSource::size() const {
  if (!size_fn_) return n_;
  int64_t n = size_fn_();
  if (n < 0)
    throw ValueError("__len__() should return >= 0, but the sampler's data source reported " + std::to_string(n));
  return n;
}

// ------------------------------------------------------------------ SequentialSampler
SequentialSampler::SequentialSampler(SampleSource source) : source_(std::move(source)) {}

namespace {
/// range(n): a position, so skip(k) is a jump.
class RangeCursor final : public Cursor<int64_t> {
 public:
  explicit RangeCursor(int64_t n) : n_(n) {}
  std::optional<int64_t> next() override {
    if (i_ >= n_) return std::nullopt;
    return i_++;
  }
  size_t skip(size_t k) override {
    const auto got = static_cast<size_t>(std::min<uint64_t>(k, static_cast<uint64_t>(std::max<int64_t>(n_ - i_, 0))));
    i_ += static_cast<int64_t>(got);
    return got;
  }

 private:
  int64_t n_;
  int64_t i_ = 0;
};
}  // namespace

std::unique_ptr<Cursor<int64_t>> SequentialSampler::iter() {
  // iter(range(len(data_source))): the length is read now, not lazily.
  return std::make_unique<RangeCursor>(source_.size());
}

std::optional<int64_t> SequentialSampler::size() const { return source_.size(); }

// ------------------------------------------------------------------ RandomSampler
RandomSampler::RandomSampler(SampleSource source, bool replacement, std::optional<int64_t> num_samples,
                             std::shared_ptr<Generator> generator)
    : source_(std::move(source)),
      replacement_(replacement),
      num_samples_(num_samples),
      generator_(std::move(generator)) {
  int64_t k = this->num_samples();
  if (k <= 0) throw ValueError(positive_int_message("num_samples", k));
}

RandomSampler::RandomSampler(SampleSource source, std::shared_ptr<Generator> generator)
    : RandomSampler(std::move(source), false, std::nullopt, std::move(generator)) {}

RandomSampler::RandomSampler(SampleSource source, const RandomSamplerOptions& options)
    : RandomSampler(std::move(source), options.replacement, options.num_samples, options.generator) {}

int64_t RandomSampler::num_samples() const { return num_samples_ ? *num_samples_ : source_.size(); }

namespace {
/// The stream of a sampler's own generator (none when it draws from the default one).
std::vector<RandomStream> streams_of(const std::shared_ptr<Generator>& g) {
  if (!g) return {};
  return {RandomStream{g.get(), [g] { return g->state(); }, [g](const std::string& b) { return g->set_state(b); }}};
}
}  // namespace

std::vector<RandomStream> RandomSampler::random_streams() const { return streams_of(generator_); }
std::vector<RandomStream> SubsetRandomSampler::random_streams() const { return streams_of(generator_); }
std::vector<RandomStream> WeightedRandomSampler::random_streams() const { return streams_of(generator_); }

std::unique_ptr<Cursor<int64_t>> RandomSampler::iter() {
  return std::make_unique<RandomCursor>(source_, replacement_, num_samples_, generator_);
}

// ------------------------------------------------------------------ IndexShuffleSampler
namespace {
/// The keyed bijection of [0, n) behind IndexShuffleSampler (see samplers.h).
class KeyedShuffle {
 public:
  KeyedShuffle(uint64_t key, int64_t n) : n_(static_cast<uint64_t>(n)) {
    int bits = 0;
    while (bits < 63 && (uint64_t{1} << bits) < n_) ++bits;
    lo_bits_ = bits / 2;
    lo_mask_ = (uint64_t{1} << lo_bits_) - 1;
    hi_mask_ = (uint64_t{1} << (bits - lo_bits_)) - 1;
    uint64_t state = key;
    for (auto& k : round_keys_) k = detail::splitmix64_next(state);
  }

  /// Position k in [0, n) -> its index: the Feistel permutation of [0, 2^b), applied
  /// until the value is below n (cycle walking keeps it a bijection of [0, n)).
  uint64_t at(uint64_t k) const {
    uint64_t x = k;
    do x = permute(x);
    while (x >= n_);
    return x;
  }

 private:
  static constexpr int kRounds = 8;


  /// Each round XORs one half with a keyed mix of the other, which it leaves as it is:
  /// invertible whatever the halves' sizes (b odd: the high half is a bit longer).
  uint64_t permute(uint64_t x) const {
    uint64_t lo = x & lo_mask_;
    uint64_t hi = x >> lo_bits_;
    for (int r = 0; r < kRounds; ++r) {
      if (r % 2 == 0) lo ^= detail::splitmix64_mix(hi ^ round_keys_[r]) & lo_mask_;
      else hi ^= detail::splitmix64_mix(lo ^ round_keys_[r]) & hi_mask_;
    }
    return (hi << lo_bits_) | lo;
  }

  uint64_t n_;
  int lo_bits_ = 0;
  uint64_t lo_mask_ = 0;
  uint64_t hi_mask_ = 0;
  uint64_t round_keys_[kRounds] = {};
};

/// A pass of IndexShuffleSampler: a key and a position.
class IndexShuffleCursor final : public Cursor<int64_t> {
 public:
  IndexShuffleCursor(SampleSource source, std::shared_ptr<Generator> generator)
      : source_(std::move(source)), generator_(std::move(generator)) {}

  std::optional<int64_t> next() override {
    if (!shuffle_) start();
    if (pos_ >= n_) return std::nullopt;
    return static_cast<int64_t>(shuffle_->at(static_cast<uint64_t>(pos_++)));
  }
  size_t next_many(std::vector<int64_t>& out, size_t k) override {
    if (k == 0) return 0;
    if (!shuffle_) start();
    const auto got = static_cast<size_t>(std::min<uint64_t>(k, static_cast<uint64_t>(n_ - pos_)));
    const KeyedShuffle& shuffle = *shuffle_;
    for (size_t j = 0; j < got; ++j) out.push_back(static_cast<int64_t>(shuffle.at(static_cast<uint64_t>(pos_++))));
    return got;
  }
  size_t skip(size_t k) override {
    if (k == 0) return 0;  // no next() call: no key drawn yet
    if (!shuffle_) start();
    const auto got = static_cast<size_t>(std::min<uint64_t>(k, static_cast<uint64_t>(n_ - pos_)));
    pos_ += static_cast<int64_t>(got);
    return got;
  }

 private:
  void start() {
    n_ = source_.size();
    shuffle_.emplace(generator_or_default(generator_).random64(), n_);
  }

  SampleSource source_;
  std::shared_ptr<Generator> generator_;
  std::optional<KeyedShuffle> shuffle_;  // the pass's order, from its first next() or skip()
  int64_t n_ = 0;
  int64_t pos_ = 0;
};
}  // namespace

IndexShuffleSampler::IndexShuffleSampler(SampleSource source, uint64_t seed)
    : IndexShuffleSampler(std::move(source), std::make_shared<Generator>(seed)) {}

IndexShuffleSampler::IndexShuffleSampler(SampleSource source, std::shared_ptr<Generator> generator)
    : source_(std::move(source)), generator_(std::move(generator)) {}

std::unique_ptr<Cursor<int64_t>> IndexShuffleSampler::iter() {
  return std::make_unique<IndexShuffleCursor>(source_, generator_);
}

std::vector<RandomStream> IndexShuffleSampler::random_streams() const { return streams_of(generator_); }

int64_t IndexShuffleSampler::index_at(uint64_t key, int64_t n, int64_t k) {
  if (k < 0 || k >= n)
    throw ValueError("IndexShuffleSampler::index_at: position " + std::to_string(k) + " is outside [0, " +
                     std::to_string(n) + ")");
  return static_cast<int64_t>(KeyedShuffle(key, n).at(static_cast<uint64_t>(k)));
}

// ------------------------------------------------------------------ SubsetRandomSampler
SubsetRandomSampler::SubsetRandomSampler(std::vector<int64_t> indices, std::shared_ptr<Generator> generator)
    : indices_(std::make_shared<const std::vector<int64_t>>(std::move(indices))), generator_(std::move(generator)) {}

std::unique_ptr<Cursor<int64_t>> SubsetRandomSampler::iter() {
  // for i in torch.randperm(len(indices), generator): yield indices[i]  -- drawn at first next().
  return make_cursor<int64_t>([indices = indices_, generator = generator_, perm = std::vector<int64_t>(),
                               pos = size_t{0}, started = false]() mutable -> std::optional<int64_t> {
    if (!started) {
      started = true;
      perm = randperm(static_cast<int64_t>(indices->size()), generator_or_default(generator));
    }
    if (pos >= perm.size()) {
      perm = {};
      return std::nullopt;
    }
    return (*indices)[static_cast<size_t>(perm[pos++])];
  });
}

std::optional<int64_t> SubsetRandomSampler::size() const { return static_cast<int64_t>(indices_->size()); }

// ------------------------------------------------------------------ multinomial
std::vector<int64_t> multinomial(const std::vector<double>& weights, int64_t num_samples, bool replacement,
                                 Generator& generator) {
  // The checks of aten/src/ATen/native/Distributions.cpp multinomial_out (1.13), in order.
  if (num_samples <= 0) throw RuntimeError("cannot sample n_sample <= 0 samples");
  const int64_t n = static_cast<int64_t>(weights.size());
  if (!replacement && num_samples > n)
    throw RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  if (n > (int64_t{1} << 24)) throw RuntimeError("number of categories cannot exceed 2^24");

  std::vector<int64_t> result(static_cast<size_t>(num_samples));
  if (!replacement) {
    // (max < inf) & (min >= 0): NaN fails both, as torch's NaN-propagating max/min do.
    bool all_zero = true;
    for (double w : weights) {
      if (!(w >= 0.0) || !(w < std::numeric_limits<double>::infinity()))
        throw RuntimeError("probability tensor contains either `inf`, `nan` or element < 0");
      if (w != 0.0) all_zero = false;
    }
    if (all_zero) throw RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)");
    // Gumbel-max trick in exponential form: argmax / topk of w_i / q_i, q_i ~ Exp(1),
    // drawn for every category in order (CPU exponential_: -1/lambda * log(1 - u)).
    using Elem = std::pair<double, int64_t>;
    std::vector<Elem> queue(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      double u = generator.uniform_double();
      double q = -1.0 * std::log(1.0 - u);
      queue[static_cast<size_t>(i)] = {weights[static_cast<size_t>(i)] / q, i};
    }
    if (num_samples == 1) {
      // argmax: the first maximum, a NaN counting as the maximum.
      int64_t best = 0;
      for (int64_t i = 1; i < n; ++i) {
        double b = queue[static_cast<size_t>(best)].first;
        double v = queue[static_cast<size_t>(i)].first;
        if (std::isnan(b)) break;
        if (std::isnan(v) || v > b) best = i;
      }
      result[0] = best;
      return result;
    }
    // torch.topk(largest=True, sorted=True) on CPU (aten/src/ATen/native/TopKImpl.h): the
    // same standard-library calls with the same comparator, so ties fall the same way.
    auto greater = [](const Elem& x, const Elem& y) {
      return (std::isnan(x.first) && !std::isnan(y.first)) || (x.first > y.first);
    };
    const int64_t k = num_samples;
    if (k * 64 <= n) {
      std::partial_sort(queue.begin(), queue.begin() + k, queue.end(), greater);
    } else {
      std::nth_element(queue.begin(), queue.begin() + (k - 1), queue.end(), greater);
      std::sort(queue.begin(), queue.begin() + (k - 1), greater);
    }
    for (int64_t j = 0; j < k; ++j) result[static_cast<size_t>(j)] = queue[static_cast<size_t>(j)].second;
    return result;
  }

  // multinomial_with_replacement (aten/src/ATen/native/cpu/MultinomialKernel.cpp), double.
  std::vector<double> cum_dist(static_cast<size_t>(n));
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    double val = weights[static_cast<size_t>(j)];
    if (!(val >= 0.0))
      throw RuntimeError("invalid multinomial distribution (encountering probability entry < 0)");
    if (!std::isfinite(val))
      throw RuntimeError("invalid multinomial distribution (encountering probability entry = infinity or NaN)");
    sum += val;
    cum_dist[static_cast<size_t>(j)] = sum;
  }
  if (!(sum > 0.0)) throw RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)");
  for (auto& c : cum_dist) c /= sum;
  cum_dist[static_cast<size_t>(n - 1)] = 1.0;
  for (int64_t j = 0; j < num_samples; ++j) {
    double u = generator.uniform_double();
    int64_t left = 0;
    int64_t right = n;
    while (right - left > 0) {
      int64_t mid = left + (right - left) / 2;
      if (cum_dist[static_cast<size_t>(mid)] < u) {
        left = mid + 1;
      } else {
        right = mid;
      }
    }
    result[static_cast<size_t>(j)] = left;
  }
  return result;
}

// ------------------------------------------------------------------ WeightedRandomSampler
WeightedRandomSampler::WeightedRandomSampler(std::vector<double> weights, int64_t num_samples, bool replacement,
                                             std::shared_ptr<Generator> generator)
    : weights_(std::make_shared<const std::vector<double>>(std::move(weights))),
      num_samples_(num_samples),
      replacement_(replacement),
      generator_(std::move(generator)) {
  if (num_samples <= 0) throw ValueError(positive_int_message("num_samples", num_samples));
}

static std::vector<double> weights_from_tensor(const Tensor& weights, int64_t num_samples) {
  // PyTorch checks num_samples before converting the weights.
  if (num_samples <= 0) throw ValueError(positive_int_message("num_samples", num_samples));
  if (!weights.defined()) throw ValueError("WeightedRandomSampler: the weights tensor is undefined");
  if (weights.dim() != 1)
    throw ValueError("weights should be a 1d sequence but given weights have shape " + shape_tuple(weights.sizes()));
  return weights.to_double_vector();
}

WeightedRandomSampler::WeightedRandomSampler(const Tensor& weights, int64_t num_samples, bool replacement,
                                             std::shared_ptr<Generator> generator)
    : WeightedRandomSampler(weights_from_tensor(weights, num_samples), num_samples, replacement,
                            std::move(generator)) {}

std::unique_ptr<Cursor<int64_t>> WeightedRandomSampler::iter() {
  return make_cursor<int64_t>([weights = weights_, k = num_samples_, replacement = replacement_,
                               generator = generator_, drawn = std::vector<int64_t>(), pos = size_t{0},
                               started = false, done = false]() mutable -> std::optional<int64_t> {
    if (done) return std::nullopt;
    if (!started) {
      started = true;
      done = true;  // an invalid distribution ends the pass, as the Python generator does
      drawn = multinomial(*weights, k, replacement, generator_or_default(generator));
      done = false;
    }
    if (pos >= drawn.size()) {
      done = true;
      drawn = {};
      return std::nullopt;
    }
    return drawn[pos++];
  });
}

// ------------------------------------------------------------------ ListSampler
ListSampler::ListSampler(std::vector<int64_t> indices)
    : indices_(std::make_shared<const std::vector<int64_t>>(std::move(indices))) {}

std::shared_ptr<ListSampler> ListSampler::range(int64_t start, int64_t stop, int64_t step) {
  if (step == 0) throw ValueError("range() arg 3 must not be zero (ListSampler::range step)");
  std::vector<int64_t> v;
  if (step > 0) {
    for (int64_t i = start; i < stop; i += step) v.push_back(i);
  } else {
    for (int64_t i = start; i > stop; i += step) v.push_back(i);
  }
  return std::make_shared<ListSampler>(std::move(v));
}

std::unique_ptr<Cursor<int64_t>> ListSampler::iter() { return std::make_unique<VectorCursor<int64_t>>(indices_); }

std::optional<int64_t> ListSampler::size() const { return static_cast<int64_t>(indices_->size()); }

// ------------------------------------------------------------------ BatchSampler
BatchSampler::BatchSampler(std::shared_ptr<Sampler> sampler, int64_t batch_size, bool drop_last)
    : sampler_(std::move(sampler)), batch_size_(batch_size), drop_last_(drop_last) {
  if (batch_size <= 0) throw ValueError(positive_int_message("batch_size", batch_size));
  if (!sampler_) throw ValueError("BatchSampler: sampler is null; pass a sampler (or a list of indices)");
}

BatchSampler::BatchSampler(std::vector<int64_t> indices, int64_t batch_size, bool drop_last)
    : BatchSampler(std::make_shared<ListSampler>(std::move(indices)), batch_size, drop_last) {}

std::unique_ptr<Cursor<IndexBatch>> BatchSampler::iter() {
  return std::make_unique<BatchCursor>(sampler_, batch_size_, drop_last_);
}

std::optional<int64_t> BatchSampler::size() const {
  std::optional<int64_t> n = sampler_->size();
  if (!n) return std::nullopt;
  return drop_last_ ? *n / batch_size_ : (*n + batch_size_ - 1) / batch_size_;
}

// ------------------------------------------------------------------ ListBatchSampler
ListBatchSampler::ListBatchSampler(std::vector<IndexBatch> batches)
    : batches_(std::make_shared<const std::vector<IndexBatch>>(std::move(batches))) {}

std::unique_ptr<Cursor<IndexBatch>> ListBatchSampler::iter() {
  return std::make_unique<VectorCursor<IndexBatch>>(batches_);
}

std::optional<int64_t> ListBatchSampler::size() const { return static_cast<int64_t>(batches_->size()); }

// ------------------------------------------------------------------ DistributedSampler
static int64_t from_environment(const char* variable, const char* argument) {
  const char* text = std::getenv(variable);
  std::string what = std::string("DistributedSampler: ") + argument;
  if (!text || !*text)
    throw RuntimeError(what + " was not given and the " + variable +
                       " environment variable is not set (PyTorch would ask the default process group, "
                       "which requires init_process_group); pass num_replicas and rank explicitly");
  char* end = nullptr;
  long long v = std::strtoll(text, &end, 10);
  if (*end != '\0') throw ValueError(what + ": the " + variable + " environment variable is not an integer: '" + text + "'");
  return v;
}

DistributedSampler::DistributedSampler(SampleSource source, std::optional<int64_t> num_replicas,
                                       std::optional<int64_t> rank, bool shuffle, int64_t seed, bool drop_last)
    : source_(std::move(source)), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  num_replicas_ = num_replicas ? *num_replicas : from_environment("WORLD_SIZE", "num_replicas");
  rank_ = rank ? *rank : from_environment("RANK", "rank");
  if (rank_ >= num_replicas_ || rank_ < 0)
    throw ValueError("Invalid rank " + std::to_string(rank_) + ", rank should be in the interval [0, " +
                     std::to_string(num_replicas_ - 1) + "]");
  n_ = source_.size();
  // If the length is evenly divisible, no data is dropped; otherwise drop the tail so
  // that every replica gets the same amount (ceil of a possibly negative quotient).
  if (drop_last_ && n_ % num_replicas_ != 0) {
    num_samples_ = ceil_div(n_ - num_replicas_, num_replicas_);
  } else {
    num_samples_ = ceil_div(n_, num_replicas_);
  }
  total_size_ = num_samples_ * num_replicas_;
}

DistributedSampler::DistributedSampler(SampleSource source, const DistributedSamplerOptions& options)
    : DistributedSampler(std::move(source), options.num_replicas, options.rank, options.shuffle, options.seed,
                         options.drop_last) {}

std::unique_ptr<Cursor<int64_t>> DistributedSampler::iter() {
  const int64_t n = source_.size();
  if (n != n_)
    throw AssertionError("DistributedSampler: the data source has " + std::to_string(n) +
                         " samples but had " + std::to_string(n_) +
                         " when the sampler was built; build a new DistributedSampler after resizing the dataset");
  std::vector<int64_t> indices;
  if (shuffle_) {
    Generator g(static_cast<uint64_t>(seed_) + static_cast<uint64_t>(epoch_));
    indices = randperm(n, g);
  } else {
    indices.resize(static_cast<size_t>(n));
    std::iota(indices.begin(), indices.end(), int64_t{0});
  }
  // Pad by repeating from the start (cyclically when the padding exceeds n), or drop the tail.
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total_size_; i += num_replicas_) {
    mine.push_back(indices[static_cast<size_t>(i < n ? i : (i - n) % n)]);
  }
  return std::make_unique<VectorCursor<int64_t>>(std::make_shared<const std::vector<int64_t>>(std::move(mine)));
}

namespace {
/// "DistributedSampler/1 <num_replicas> <rank> <seed> <shuffle> <drop_last> <n> <epoch>".
constexpr const char* kDistributedState = "DistributedSampler/1";

std::string describe_distributed(int64_t replicas, int64_t rank, int64_t seed, bool shuffle, bool drop_last,
                                 int64_t n) {
  return "rank " + std::to_string(rank) + " of " + std::to_string(replicas) + " (seed " + std::to_string(seed) +
         (shuffle ? ", shuffle" : ", no shuffle") + (drop_last ? ", drop_last" : "") + ", " + std::to_string(n) +
         " samples)";
}
}  // namespace

std::vector<RandomStream> DistributedSampler::random_streams() const {
  // The loader's checkpoint holds the sampler (shared_ptr) for as long as it uses the
  // stream; loading it sets the epoch, the one thing of this sampler a pass depends on
  // that changes between epochs.
  auto* self = const_cast<DistributedSampler*>(this);
  auto save = [self] {
    return std::string(kDistributedState) + " " + std::to_string(self->num_replicas_) + " " +
           std::to_string(self->rank_) + " " + std::to_string(self->seed_) + " " + (self->shuffle_ ? "1" : "0") +
           " " + (self->drop_last_ ? "1" : "0") + " " + std::to_string(self->n_) + " " + std::to_string(self->epoch_);
  };
  auto load = [self](const std::string& state) {
    std::istringstream in(state);
    std::string tag;
    long long replicas = 0, rank = 0, seed = 0, n = 0, epoch = 0;
    int shuffle = -1, drop_last = -1;
    if (!(in >> tag >> replicas >> rank >> seed >> shuffle >> drop_last >> n >> epoch) || tag != kDistributedState ||
        (shuffle != 0 && shuffle != 1) || (drop_last != 0 && drop_last != 1))
      return false;
    std::string rest;
    if (in >> rest) return false;
    if (replicas != self->num_replicas_ || rank != self->rank_ || seed != self->seed_ ||
        (shuffle == 1) != self->shuffle_ || (drop_last == 1) != self->drop_last_ || n != self->n_)
      throw ValueError("the checkpoint's DistributedSampler is " +
                       describe_distributed(replicas, rank, seed, shuffle == 1, drop_last == 1, n) + ", this one is " +
                       describe_distributed(self->num_replicas_, self->rank_, self->seed_, self->shuffle_,
                                            self->drop_last_, self->n_) +
                       ": each rank resumes the checkpoint it saved, with the sampler options it had");
    self->epoch_ = epoch;
    return true;
  };
  return {RandomStream{this, std::move(save), std::move(load), /*per_epoch_setting=*/true}};
}

}  // namespace loader
