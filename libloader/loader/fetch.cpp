#include "loader/fetch.h"

#include <chrono>
#include <string>

#include "loader/detail/splitmix64.h"
#include "loader/epoch_stats.h"
#include "loader/error.h"

namespace loader {

namespace {
Value collate_samples(const CollateFn& collate, std::vector<Value>& samples, bool auto_collation) {
  if (collate) return collate(samples);
  if (auto_collation) return default_collate(samples);
  return default_convert(std::move(samples.front()));
}
// The collate, its time into `ns` (EpochStats::Worker::collate_s; 0 with LOADER_STATS=0).
Value apply_collate(const CollateFn& collate, std::vector<Value>& samples, bool auto_collation, uint64_t& ns) {
  if (!stats_recording()) return collate_samples(collate, samples, auto_collation);
  const auto t0 = std::chrono::steady_clock::now();
  Value v = collate_samples(collate, samples, auto_collation);
  ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  return v;
}
}  // namespace

MapFetcher::MapFetcher(std::shared_ptr<Dataset> dataset, bool auto_collation, CollateFn collate)
    : dataset_(std::move(dataset)), auto_collation_(auto_collation), collate_(std::move(collate)) {
  if (auto_collation_ && !collate_) {
    spec_ = dataset_->sample_spec();
    if (spec_) spec_->for_each_tensor([&](const Tensor& t) { spec_leaves_.push_back(t); });
  }
}

namespace {
Value build_structure(const Value& spec, const std::vector<Tensor>& leaves, size_t& k) {
  switch (spec.kind()) {
    case Value::Kind::Tensor: return Value(leaves.at(k++));
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      std::vector<Value> items;
      items.reserve(spec.items().size());
      for (const auto& x : spec.items()) items.push_back(build_structure(x, leaves, k));
      if (!spec.field_names().empty())
        return Value::namedtuple(spec.type_name(), spec.field_names(), std::move(items));
      return Value::list(std::move(items), spec.is_list() ? spec.type_name() : "");
    }
    case Value::Kind::Dict: {
      std::vector<std::pair<Value, Value>> items;
      for (const auto& [key, x] : spec.dict_items()) items.emplace_back(key, build_structure(x, leaves, k));
      return Value::dict(std::move(items), spec.type_name());
    }
    default:
      throw TypeError("sample_spec() may hold only tensors, lists, tuples and dicts; found " +
                      spec.python_type() + " (give numbers as 0-dim tensors)");
  }
}
}  // namespace

Value collated_structure(const Value& spec, const std::vector<Tensor>& leaves) {
  size_t k = 0;
  return build_structure(spec, leaves, k);
}

Value MapFetcher::fetch_into_spec(const IndexBatch& indices) {
  const auto b = static_cast<int64_t>(indices.size());
  TensorAllocator& alloc = current_tensor_allocator();
  std::vector<Tensor> batch;
  BatchRows rows;
  batch.reserve(spec_leaves_.size());
  rows.base.reserve(spec_leaves_.size());
  rows.row_bytes.reserve(spec_leaves_.size());
  for (const auto& leaf : spec_leaves_) {
    Dims shape = leaf.sizes();
    shape.push_front(b);
    batch.push_back(Tensor::empty(shape, leaf.dtype(), &alloc));
    rows.base.push_back(static_cast<uint8_t*>(batch.back().data_ptr()));
    rows.row_bytes.push_back(leaf.nbytes());
  }
  dataset_->get_batch_into(indices, rows);
  return collated_structure(*spec_, batch);
}

Value MapFetcher::fetch(const IndexBatch& indices) {
  collate_ns_ = 0;
  if (spec_) return fetch_into_spec(indices);
  std::vector<Value> samples;
  if (auto_collation_) {
    samples = dataset_->get_batch(indices);
  } else {
    samples.push_back(dataset_->get(indices.at(0)));
  }
  return apply_collate(collate_, samples, auto_collation_, collate_ns_);
}

IterableFetcher::IterableFetcher(std::shared_ptr<IterableDataset> dataset, bool auto_collation,
                                 CollateFn collate, bool drop_last)
    : dataset_(std::move(dataset)), cursor_(dataset_->iter()), auto_collation_(auto_collation),
      collate_(std::move(collate)), drop_last_(drop_last) {}

std::optional<Value> IterableFetcher::fetch(size_t n) {
  collate_ns_ = 0;
  if (ended_) return std::nullopt;
  std::vector<Value> samples;
  if (auto_collation_) {
    samples.reserve(n);
    while (samples.size() < n) {
      auto v = cursor_->next();
      if (!v) {
        ended_ = true;
        break;
      }
      samples.push_back(std::move(*v));
    }
    if (samples.empty() || (drop_last_ && samples.size() < n)) return std::nullopt;
  } else {
    auto v = cursor_->next();
    if (!v) {
      ended_ = true;
      return std::nullopt;
    }
    samples.push_back(std::move(*v));
  }
  return apply_collate(collate_, samples, auto_collation_, collate_ns_);
}

uint64_t IterableFetcher::skip(uint64_t results, size_t n) {
  if (ended_ || results == 0) return 0;
  const int64_t per = auto_collation_ ? static_cast<int64_t>(n) : 1;
  const int64_t want = static_cast<int64_t>(results) * per;
  if (std::optional<int64_t> passed = dataset_->skip(*cursor_, want)) {
    if (*passed >= want) return results;
    ended_ = true;
    // A last short batch counts as a result (unless drop_last dropped it).
    const int64_t whole = *passed / per, part = *passed % per;
    return static_cast<uint64_t>(whole + (part > 0 && !drop_last_ ? 1 : 0));
  }
  uint64_t passed = 0;
  for (; passed < results; ++passed) {
    try {
      if (!fetch(n)) break;
    } catch (...) {
      // The checkpointed epoch gave this result as its error too.
    }
  }
  return passed;
}

namespace {
std::string iterable_name(const IterableDataset& dataset) {
  return dataset.handle() ? dataset.handle()->type : std::string("IterableDataset");
}
}  // namespace

void load_stream_state(IterableDataset& dataset, const std::string& state) {
  const std::string what = "the IterableDataset " + iterable_name(dataset) + " refused the state (" +
                           std::to_string(state.size()) + " bytes) its stream is resumed from: load_state(): ";
  try {
    dataset.load_state(state);
  } catch (const Error& e) {
    throw_error(e.python_type(), what + e.what());
  } catch (const std::exception& e) {
    throw RuntimeError(what + e.what());
  }
}

void skip_stream(IterableFetcher& fetcher, const IterableDataset& dataset, uint64_t results, size_t n) {
  const uint64_t passed = fetcher.skip(results, n);
  if (passed < results)
    throw ValueError("resuming the stream of the IterableDataset " + iterable_name(dataset) + ": it ended after " +
                     std::to_string(passed) + " result(s), where the checkpointed iterator had taken " +
                     std::to_string(results) +
                     " of it: the dataset's stream is not the one checkpointed (other data, or another dataset)");
}

}  // namespace loader

namespace loader {

namespace {
bool is_mark(uint64_t count) { return count <= HashChain::kExact || (count & (count - 1)) == 0; }
}  // namespace

uint64_t HashChain::chain(uint64_t h, uint64_t item_hash) { return detail::splitmix64_mix(h ^ detail::splitmix64_mix(item_hash + detail::kSplitmix64Gamma)); }

uint64_t HashChain::of_indices(const IndexBatch& indices) {
  uint64_t h = detail::splitmix64_mix(indices.size());
  for (int64_t i : indices) h = (h ^ static_cast<uint64_t>(i)) * 0x100000001b3ULL + detail::kSplitmix64Gamma;
  return detail::splitmix64_mix(h);
}

void HashChain::add(uint64_t item_hash) {
  std::lock_guard<std::mutex> lock(mu_);
  ++count_;
  if (!known_) return;
  hash_ = chain(hash_, item_hash);
  if (is_mark(count_)) marks_.emplace_back(count_, hash_);
  recent_.push_back(hash_);
  if (recent_.size() > kRecent) recent_.pop_front();
}

uint64_t HashChain::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

std::optional<uint64_t> HashChain::at(uint64_t count) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (count == 0) return uint64_t{0};
  if (count <= count_ && count_ - count < recent_.size())
    return recent_[recent_.size() - 1 - static_cast<size_t>(count_ - count)];
  for (const auto& [c, h] : marks_)
    if (c == count) return h;
  return std::nullopt;
}

std::vector<std::pair<uint64_t, uint64_t>> HashChain::marks(uint64_t upto) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (const auto& m : marks_)
    if (m.first <= upto) out.push_back(m);
  return out;
}

void HashChain::restart_at(uint64_t count, std::optional<uint64_t> hash,
                           std::vector<std::pair<uint64_t, uint64_t>> marks) {
  std::lock_guard<std::mutex> lock(mu_);
  count_ = count;
  known_ = hash.has_value();
  hash_ = hash.value_or(0);
  marks_.clear();
  recent_.clear();
  if (!known_) return;
  for (const auto& m : marks)
    if (m.first <= count && is_mark(m.first)) marks_.push_back(m);
  recent_.push_back(hash_);
}

TaskSource::TaskSource(std::shared_ptr<BatchSamplerBase> batch_sampler, std::shared_ptr<Sampler> sampler) {
  if (batch_sampler) batches_ = batch_sampler->iter();
  else indices_ = sampler->iter();
}

std::optional<IndexBatch> TaskSource::next() {
  if (!pending_.empty()) {
    IndexBatch b = std::move(pending_.front());
    pending_.pop_front();
    return b;
  }
  return pull();
}

std::optional<IndexBatch> TaskSource::pull() {
  // A pass that ended is not asked again: a sampler asked after its end may draw again.
  if (ended_) return std::nullopt;
  std::optional<IndexBatch> out;
  if (batches_) {
    out = batches_->next();
  } else if (auto i = indices_->next()) {
    out = IndexBatch{*i};
  }
  if (!out) ended_ = true;
  else hashes_->add(HashChain::of_indices(*out));
  return out;
}

uint64_t TaskSource::skip(uint64_t k) {
  if (ended_ || k == 0) return 0;
  const size_t got = batches_ ? batches_->skip(static_cast<size_t>(k)) : indices_->skip(static_cast<size_t>(k));
  if (got < k) ended_ = true;
  return got;
}

void TaskSource::fast_forward(uint64_t consumed, uint64_t pulled, bool exhausted, const ReplayCheck* check,
                              const std::vector<uint64_t>* delivered) {
  auto fewer = [pulled](uint64_t k) {
    return ValueError("cannot resume the epoch: the checkpoint says its sampler had given " + std::to_string(pulled) +
                      " batches, but this loader's sampler gives only " + std::to_string(k) +
                      " (load the checkpoint into a DataLoader over the same dataset, sampler and batch size)");
  };
  if (check && !check->hash) check = nullptr;  // a checkpoint without hashes: not verified
  auto differs = [&](const std::string& which) {
    return ValueError("cannot resume the epoch: replaying it, this loader's sampler gives other indices than the "
                      "checkpointed one in " + which + check->differs +
                      ": resume with the sampler of the loader checkpointed (the same shuffle, indices, weights "
                      "and seed)");
  };
  // The first batches are built and compared with the checkpoint's marks (they name the
  // first one that differs); the rest of the consumed ones are skipped (Cursor::skip: the
  // sampler's draws without the index lists), the ones in flight at the checkpoint pulled
  // again, to go out first.
  const uint64_t verified = check ? std::min<uint64_t>(consumed, HashChain::kExact) : 0;
  for (uint64_t k = 0; k < verified; ++k) {
    if (!pull()) throw fewer(k);
    const std::optional<uint64_t> want = check->at(k + 1);
    if (want && hashes_->at(k + 1) != want) throw differs("its batch " + std::to_string(k + 1) + " (counting from 1)");
  }
  const uint64_t skipped = skip(consumed - verified);
  if (skipped < consumed - verified) throw fewer(verified + skipped);
  if (verified < consumed)  // the chain goes on from the checkpoint's, where it is known
    hashes_->restart_at(consumed, check ? check->at(consumed) : std::nullopt, check ? check->marks : decltype(check->marks){});
  size_t next_delivered = 0;
  for (uint64_t k = consumed; k < pulled; ++k) {
    auto b = pull();
    if (!b) throw fewer(k);
    if (delivered && next_delivered < delivered->size() && (*delivered)[next_delivered] == k) {
      ++next_delivered;  // the application had it: drawn, not given again
      continue;
    }
    pending_.push_back(std::move(*b));
  }
  if (check && pulled > consumed) {
    const std::optional<uint64_t> mine = hashes_->at(pulled);
    if (mine && mine != check->hash)
      throw differs("one of its batches " + std::to_string(consumed + 1) + ".." + std::to_string(pulled) +
                    " (those in flight at the checkpoint)");
  }
  if (exhausted && pull())
    throw ValueError("cannot resume the epoch: the checkpoint says its sampler had run out after " +
                     std::to_string(pulled) + " batches, but this loader's sampler gives more (load the checkpoint "
                     "into a DataLoader over the same dataset, sampler and batch size)");
}

}  // namespace loader
