#include "loader/equibatch_sampler.h"

#include <string>
#include <unordered_map>
#include <utility>

#include "loader/error.h"

namespace loader {

namespace {

const char* const kWho = "EquiBatchSampler: ";

/// One pass over pools drawn by bless(): batch t is class t mod |C|, round t / |C|; this
/// rank keeps positions rank, rank + num_replicas, ... < batch_size of it.
class EquiBatchCursor final : public Cursor<IndexBatch> {
 public:
  EquiBatchCursor(std::shared_ptr<const std::vector<std::vector<int64_t>>> pools, int64_t num_batches,
                  int64_t batch_size, int64_t num_replicas, int64_t rank)
      : pools_(std::move(pools)),
        num_batches_(num_batches),
        batch_size_(batch_size),
        num_replicas_(num_replicas),
        rank_(rank) {}

  std::optional<IndexBatch> next() override {
    if (t_ >= num_batches_) return std::nullopt;
    const int64_t classes = static_cast<int64_t>(pools_->size());
    const std::vector<int64_t>& pool = (*pools_)[static_cast<size_t>(t_ % classes)];
    const int64_t start = (t_ / classes) * batch_size_;
    IndexBatch batch;
    batch.reserve(static_cast<size_t>((batch_size_ - rank_ + num_replicas_ - 1) / num_replicas_));
    for (int64_t j = rank_; j < batch_size_; j += num_replicas_) batch.push_back(pool[static_cast<size_t>(start + j)]);
    ++t_;
    return batch;
  }

 private:
  std::shared_ptr<const std::vector<std::vector<int64_t>>> pools_;
  int64_t num_batches_, batch_size_, num_replicas_, rank_;
  int64_t t_ = 0;
};

}  // namespace

EquiBatchSampler::EquiBatchSampler(const std::vector<std::vector<int64_t>>& idx2labels, int64_t batch_size,
                                   const EquiBatchSamplerOptions& options)
    : batch_size_(batch_size),
      balanced_coef_(options.balanced_coef),
      num_replicas_(options.num_replicas),
      rank_(options.rank),
      generator_(options.generator ? options.generator : std::make_shared<PythonRandom>(options.seed)) {
  if (batch_size_ <= 0)
    throw ValueError("batch_size should be a positive integer value, but got batch_size=" + std::to_string(batch_size_));
  if (balanced_coef_ < 1)
    throw ValueError(std::string(kWho) + "balanced_coef should be a positive integer value (the pool size drawn " +
                     "per class each epoch), but got balanced_coef=" + std::to_string(balanced_coef_));
  if (num_replicas_ < 1)
    throw ValueError(std::string(kWho) + "num_replicas should be a positive integer value, but got num_replicas=" +
                     std::to_string(num_replicas_));
  if (rank_ < 0 || rank_ >= num_replicas_)
    throw ValueError("Invalid rank " + std::to_string(rank_) + ", rank should be in the interval [0, " +
                     std::to_string(num_replicas_ - 1) + "]");
  if (batch_size_ < num_replicas_)
    throw ValueError(std::string(kWho) + "batch_size=" + std::to_string(batch_size_) + " is smaller than num_replicas=" +
                     std::to_string(num_replicas_) + ": ranks " + std::to_string(batch_size_) + ".." +
                     std::to_string(num_replicas_ - 1) +
                     " would get only empty batches (each rank keeps batch[rank:batch_size:num_replicas]); "
                     "use batch_size >= num_replicas");
  if (idx2labels.empty())
    throw ValueError(std::string(kWho) + "idx2labels is empty; pass, for each dataset index, the list of its labels");
  std::unordered_map<int64_t, size_t> slot;  // label -> position in classes_
  for (size_t i = 0; i < idx2labels.size(); ++i) {
    if (idx2labels[i].empty())
      throw ValueError(std::string(kWho) + "index " + std::to_string(i) +
                       " has no labels; give every index at least one label (or leave the index out of the "
                       "dataset, e.g. with a Subset, and of idx2labels)");
    for (int64_t label : idx2labels[i]) {
      auto [it, added] = slot.emplace(label, classes_.size());
      if (added) {
        classes_.push_back(label);
        members_.emplace_back();
      }
      members_[it->second].push_back(static_cast<int64_t>(i));
    }
  }
}

EquiBatchSampler::EquiBatchSampler(const std::vector<std::vector<int64_t>>& idx2labels, int64_t batch_size,
                                   int64_t num_replicas, int64_t rank, int64_t balanced_coef, uint64_t seed)
    : EquiBatchSampler(idx2labels, batch_size, [&] {
        EquiBatchSamplerOptions o;
        o.num_replicas = num_replicas;
        o.rank = rank;
        o.balanced_coef = balanced_coef;
        o.seed = seed;
        return o;
      }()) {}

std::unique_ptr<Cursor<IndexBatch>> EquiBatchSampler::iter() {
  // bless(): for each class, shuffle a copy of its indices; subsample or oversample to
  // balanced_coef (random.choice over the pool as it grows).
  const auto coef = static_cast<size_t>(balanced_coef_);
  auto pools = std::make_shared<std::vector<std::vector<int64_t>>>();
  pools->reserve(members_.size());
  for (const auto& members : members_) {
    std::vector<int64_t> pool = members;
    generator_->shuffle(pool);
    if (pool.size() > coef) pool.resize(coef);
    pool.reserve(coef);
    while (pool.size() < coef) {
      const int64_t picked = generator_->choice(pool);
      pool.push_back(picked);
    }
    pools->push_back(std::move(pool));
  }
  return std::make_unique<EquiBatchCursor>(std::move(pools), *size(), batch_size_, num_replicas_, rank_);
}

std::optional<int64_t> EquiBatchSampler::size() const {
  return num_classes() * (balanced_coef_ / batch_size_);
}

std::vector<RandomStream> EquiBatchSampler::random_streams() const {
  std::shared_ptr<PythonRandom> g = generator_;
  return {RandomStream{g.get(), [g] { return g->state(); }, [g](const std::string& b) { return g->set_state(b); }}};
}

}  // namespace loader
