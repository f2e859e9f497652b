#include "loader/datasets.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include "loader/batch_copy.h"
#include "loader/error.h"
#include "loader/worker_info.h"

namespace loader {

namespace {

// A nested handle inside a composite's parameters: {"type": str, "params": Value}.
Value handle_to_value(const DatasetHandle& h) {
  return Value::dict({{"type", Value(h.type)}, {"params", h.params}});
}

DatasetHandle handle_from_value(const Value& v, const char* where) {
  if (!v.is_dict() || !v.contains("type"))
    throw ValueError(std::string(where) +
                     ": expected a dataset handle {\"type\": name, \"params\": {...}}, got " +
                     v.repr());
  return DatasetHandle{v.at("type").to_string(), v.get("params", Value())};
}

// Python's list indexing: one wrap of a negative index, IndexError outside.
int64_t wrap_list_index(int64_t index, int64_t n, const char* what) {
  int64_t i = index < 0 ? index + n : index;
  if (i < 0 || i >= n)
    throw IndexError(std::string(what) + " index " + std::to_string(index) +
                     " is out of range for " + std::to_string(n) +
                     " samples (list index out of range)");
  return i;
}

Tensor indices_tensor(const std::vector<int64_t>& indices) {
  if (indices.empty()) return Tensor::empty({0}, DType::Int64);
  return Tensor::from_vector<int64_t>(indices);
}

std::vector<int64_t> indices_from_value(const Value& v) {
  if (v.is_tensor()) {
    if (v.to_tensor().dim() != 1)
      throw ValueError("subset: \"indices\" must be a 1-D tensor, got shape " +
                       v.to_tensor().sizes().str());
    return v.to_tensor().to_int64_vector();
  }
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (const Value& i : v.items()) out.push_back(i.to_int());
  return out;
}

template <class Member>
std::vector<std::shared_ptr<Member>> cast_members(const std::vector<std::shared_ptr<DatasetBase>>& in,
                                                  const char* assertion) {
  std::vector<std::shared_ptr<Member>> out;
  out.reserve(in.size());
  for (const auto& d : in) {
    auto m = std::dynamic_pointer_cast<Member>(d);
    if (d && !m) throw AssertionError(assertion);
    out.push_back(std::move(m));  // null stays null: the typed constructor names it
  }
  return out;
}

// Sets a composite's handle when every member has one, so a worker can rebuild it.
template <class Member>
void set_composite_handle(DatasetBase& self, const char* type,
                          const std::vector<std::shared_ptr<Member>>& members) {
  std::vector<Value> handles;
  handles.reserve(members.size());
  for (const auto& m : members) {
    if (!m->handle()) return;
    handles.push_back(handle_to_value(*m->handle()));
  }
  self.set_handle({type, Value::dict({{"datasets", Value::list(std::move(handles))}})});
}

}  // namespace

// ------------------------------------------------------------------ TensorDataset

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  if (tensors_.empty())
    throw ValueError("TensorDataset needs at least one tensor (got none): pass the tensors whose "
                     "first dimension indexes the samples");
  for (size_t k = 0; k < tensors_.size(); ++k) {
    if (!tensors_[k].defined())
      throw ValueError("TensorDataset: tensor " + std::to_string(k) + " is undefined");
    if (tensors_[k].dim() == 0)
      throw IndexError("TensorDataset: tensor " + std::to_string(k) +
                       " is 0-dim (dimension specified as 0 but tensor has no dimensions); every "
                       "tensor needs a first dimension that indexes the samples");
  }
  size_ = tensors_[0].size(0);
  for (const auto& t : tensors_)
    if (t.size(0) != size_) throw AssertionError("Size mismatch between tensors");
}

Value TensorDataset::get(int64_t index) {
  std::vector<Value> items;
  items.reserve(tensors_.size());
  for (const auto& t : tensors_) items.emplace_back(t.select(0, index));
  return Value::tuple(std::move(items));
}

std::optional<Value> TensorDataset::sample_spec() const {
  std::vector<Value> items;
  items.reserve(tensors_.size());
  for (const auto& t : tensors_) {
    Dims row(t.sizes().data() + 1, t.sizes().size() - 1);
    items.emplace_back(Tensor::empty(row, t.dtype()));
  }
  return Value::tuple(std::move(items));
}

void TensorDataset::get_into(int64_t index, void* const* leaves) {
  const int64_t i = index < 0 ? index + size_ : index;
  if (i < 0 || i >= size_)
    throw IndexError("index " + std::to_string(index) + " is out of bounds for dimension 0 with size " +
                     std::to_string(size_));
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const Tensor& t = tensors_[k];
    if (t.is_contiguous()) {
      const size_t row_bytes = t.nbytes() / static_cast<size_t>(size_);
      copy_into_batch(leaves[k], static_cast<const uint8_t*>(t.data_ptr()) + static_cast<size_t>(i) * row_bytes,
                      row_bytes);
    } else {
      copy_to_contiguous(t.select(0, i), leaves[k]);
    }
  }
}

void TensorDataset::get_batch_into(const IndexBatch& indices, const BatchRows& rows) {
  for (int64_t index : indices)  // every index first: a bad one fails the batch before any copy
    if (index < -size_ || index >= size_)
      throw IndexError("index " + std::to_string(index) + " is out of bounds for dimension 0 with size " +
                       std::to_string(size_));
  const size_t n = indices.size();
  auto row_of = [&](size_t r) { return indices[r] < 0 ? indices[r] + size_ : indices[r]; };
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const Tensor& t = tensors_[k];
    if (!t.is_contiguous()) {
      for (size_t r = 0; r < n; ++r) copy_to_contiguous(t.select(0, row_of(r)), rows.row(k, r));
      continue;
    }
    const auto* src = static_cast<const uint8_t*>(t.data_ptr());
    const size_t bytes = rows.row_bytes[k];
    uint8_t* dst = rows.base[k];
    // Rows are read at random: ask for the row 8 ahead while this one is copied.
    constexpr size_t kAhead = 8;
    for (size_t r = 0; r < n; ++r) {
      if (r + kAhead < n) __builtin_prefetch(src + static_cast<size_t>(row_of(r + kAhead)) * bytes);
      copy_into_batch(dst + r * bytes, src + static_cast<size_t>(row_of(r)) * bytes, bytes);
    }
  }
}

// ------------------------------------------------------------------ ConcatDataset

ConcatDataset::ConcatDataset(std::vector<std::shared_ptr<Dataset>> datasets)
    : datasets_(std::move(datasets)) {
  if (datasets_.empty()) throw AssertionError("datasets should not be an empty iterable");
  cumulative_sizes_.reserve(datasets_.size());
  int64_t total = 0;
  for (size_t k = 0; k < datasets_.size(); ++k) {
    if (!datasets_[k])
      throw ValueError("ConcatDataset: dataset " + std::to_string(k) + " is null");
    total += datasets_[k]->size();
    cumulative_sizes_.push_back(total);
  }
  set_composite_handle(*this, "concat", datasets_);
}

ConcatDataset::ConcatDataset(std::initializer_list<std::shared_ptr<Dataset>> datasets)
    : ConcatDataset(std::vector<std::shared_ptr<Dataset>>(datasets)) {}

ConcatDataset::ConcatDataset(const std::vector<std::shared_ptr<DatasetBase>>& datasets)
    : ConcatDataset([&] {
        if (datasets.empty()) throw AssertionError("datasets should not be an empty iterable");
        return cast_members<Dataset>(datasets, "ConcatDataset does not support IterableDataset");
      }()) {}

std::pair<size_t, int64_t> ConcatDataset::locate(int64_t index) const {
  const int64_t n = size();
  if (index < 0) {
    if (-index > n) throw ValueError("absolute value of index should not exceed dataset length");
    index += n;
  }
  // bisect.bisect_right(cumulative_sizes, index)
  auto it = std::upper_bound(cumulative_sizes_.begin(), cumulative_sizes_.end(), index);
  auto member = static_cast<size_t>(it - cumulative_sizes_.begin());
  // PyTorch then evaluates self.datasets[member]; past the end that is Python's list error.
  if (member >= datasets_.size()) throw IndexError("list index out of range");
  return {member, member == 0 ? index : index - cumulative_sizes_[member - 1]};
}

Value ConcatDataset::get(int64_t index) {
  auto [member, local] = locate(index);
  return datasets_[member]->get(local);
}

std::vector<Value> ConcatDataset::get_batch(const IndexBatch& indices) {
  std::vector<Value> out;
  out.reserve(indices.size());
  IndexBatch run;
  size_t run_member = 0;
  auto flush = [&] {
    if (run.empty()) return;
    auto part = datasets_[run_member]->get_batch(run);
    for (auto& v : part) out.push_back(std::move(v));
    run.clear();
  };
  for (int64_t index : indices) {
    auto [member, local] = locate(index);
    if (member != run_member) flush();
    run_member = member;
    run.push_back(local);
  }
  flush();
  return out;
}

// ------------------------------------------------------------------ ChainDataset

ChainDataset::ChainDataset(std::vector<std::shared_ptr<IterableDataset>> datasets)
    : datasets_(std::move(datasets)) {
  for (size_t k = 0; k < datasets_.size(); ++k)
    if (!datasets_[k]) throw ValueError("ChainDataset: dataset " + std::to_string(k) + " is null");
  set_composite_handle(*this, "chain", datasets_);
}

ChainDataset::ChainDataset(std::initializer_list<std::shared_ptr<IterableDataset>> datasets)
    : ChainDataset(std::vector<std::shared_ptr<IterableDataset>>(datasets)) {}

ChainDataset::ChainDataset(const std::vector<std::shared_ptr<DatasetBase>>& datasets)
    : ChainDataset(cast_members<IterableDataset>(datasets, "ChainDataset only supports IterableDataset")) {}

namespace {
class ChainCursor final : public Cursor<Value> {
 public:
  explicit ChainCursor(std::vector<std::shared_ptr<IterableDataset>> datasets)
      : datasets_(std::move(datasets)) {}
  std::optional<Value> next() override {
    for (;;) {
      if (!current_) {
        if (next_member_ >= datasets_.size()) return std::nullopt;
        current_ = datasets_[next_member_++]->iter();
      }
      if (auto v = current_->next()) return v;
      current_.reset();
    }
  }

 private:
  std::vector<std::shared_ptr<IterableDataset>> datasets_;
  size_t next_member_ = 0;
  std::unique_ptr<Cursor<Value>> current_;
};
}  // namespace

std::unique_ptr<Cursor<Value>> ChainDataset::iter() {
  return std::make_unique<ChainCursor>(datasets_);
}

std::optional<int64_t> ChainDataset::size() const {
  int64_t total = 0;
  for (const auto& d : datasets_) {
    auto n = d->size();
    if (!n) return std::nullopt;
    total += *n;
  }
  return total;
}

// ------------------------------------------------------------------ Subset

Subset::Subset(std::shared_ptr<Dataset> dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  if (!dataset_) throw ValueError("Subset: the dataset is null");
  if (dataset_->handle()) {
    set_handle({"subset", Value::dict({{"dataset", handle_to_value(*dataset_->handle())},
                                       {"indices", Value(indices_tensor(indices_))}})});
  }
}

int64_t Subset::map_index(int64_t index) const {
  return indices_[static_cast<size_t>(wrap_list_index(index, size(), "Subset"))];
}

Value Subset::get(int64_t index) { return dataset_->get(map_index(index)); }

std::vector<Value> Subset::get_slice(std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) {
  return get_batch(slice_indices(size(), start, stop, step));
}

std::vector<Value> Subset::get_batch(const IndexBatch& indices) {
  IndexBatch mapped;
  mapped.reserve(indices.size());
  for (int64_t i : indices) mapped.push_back(map_index(i));
  return dataset_->get_batch(mapped);
}

void Subset::get_into(int64_t index, void* const* leaves) { dataset_->get_into(map_index(index), leaves); }

void Subset::get_batch_into(const IndexBatch& indices, const BatchRows& rows) {
  IndexBatch mapped;
  mapped.reserve(indices.size());
  for (int64_t i : indices) mapped.push_back(map_index(i));
  dataset_->get_batch_into(mapped, rows);
}

std::vector<int64_t> slice_indices(int64_t size, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   int64_t step) {
  if (step == 0) throw ValueError("slice step cannot be zero");
  if (size < 0) throw ValueError("slice_indices: size must be non-negative, but got " + std::to_string(size));
  // CPython's PySlice_Unpack + PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> v, int64_t omitted) -> int64_t {
    if (!v) return omitted;
    int64_t x = *v;
    if (x < 0) {
      x += size;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= size) {
      x = step < 0 ? size - 1 : size;
    }
    return x;
  };
  const int64_t first = adjust(start, step < 0 ? size - 1 : 0);
  const int64_t last = adjust(stop, step < 0 ? -1 : size);
  // The count as PySlice_AdjustIndices computes it (bounds lie in [-1, size], so no overflow).
  int64_t count = 0;
  if (step > 0 && first < last) count = (last - first - 1) / step + 1;
  if (step < 0 && last < first) count = (first - last - 1) / (step == INT64_MIN ? INT64_MAX : -step) + 1;
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) out.push_back(first + k * step);  // |k * step| <= size + 1
  return out;
}

// ------------------------------------------------------------------ StackDataset

StackDataset::StackDataset(std::vector<std::shared_ptr<Dataset>> datasets) : datasets_(std::move(datasets)) {
  init();
}

StackDataset::StackDataset(std::initializer_list<std::shared_ptr<Dataset>> datasets)
    : StackDataset(std::vector<std::shared_ptr<Dataset>>(datasets)) {}

StackDataset::StackDataset(std::vector<std::pair<std::string, std::shared_ptr<Dataset>>> datasets) {
  for (auto& [key, d] : datasets) {
    if (std::find(keys_.begin(), keys_.end(), key) != keys_.end())
      throw ValueError("StackDataset: the key '" + key + "' is given twice: each keyword names one dataset");
    keys_.push_back(key);
    datasets_.push_back(std::move(d));
  }
  init();
}

StackDataset::StackDataset(std::initializer_list<std::pair<std::string, std::shared_ptr<Dataset>>> datasets)
    : StackDataset(std::vector<std::pair<std::string, std::shared_ptr<Dataset>>>(datasets)) {}

void StackDataset::init() {
  if (datasets_.empty()) throw ValueError("At least one dataset should be passed");
  for (size_t k = 0; k < datasets_.size(); ++k)
    if (!datasets_[k]) throw ValueError("StackDataset: dataset " + std::to_string(k) + " is null");
  size_ = datasets_[0]->size();
  for (const auto& d : datasets_)
    if (d->size() != size_) throw ValueError("Size mismatch between datasets");

  // The members' specs side by side, when each has one.
  std::vector<Value> specs;
  size_t leaves = 0;
  for (const auto& d : datasets_) {
    std::optional<Value> spec = d->sample_spec();
    if (!spec) {
      specs.clear();
      first_leaf_.clear();
      break;
    }
    first_leaf_.push_back(leaves);
    spec->for_each_tensor([&](const Tensor&) { ++leaves; });
    specs.push_back(std::move(*spec));
  }
  if (!specs.empty()) spec_ = combine(std::move(specs));

  // A handle when every member has one: {"datasets": [handles], "keys": [str] (dict form)}.
  std::vector<Value> handles;
  for (const auto& d : datasets_) {
    if (!d->handle()) return;
    handles.push_back(handle_to_value(*d->handle()));
  }
  std::vector<std::pair<Value, Value>> params{{Value("datasets"), Value::list(std::move(handles))}};
  if (is_dict()) {
    std::vector<Value> keys;
    for (const auto& key : keys_) keys.emplace_back(key);
    params.emplace_back(Value("keys"), Value::list(std::move(keys)));
  }
  set_handle({"stack", Value::dict(std::move(params))});
}

Value StackDataset::combine(std::vector<Value> parts) const {
  if (!is_dict()) return Value::tuple(std::move(parts));
  std::vector<std::pair<Value, Value>> items;
  items.reserve(parts.size());
  for (size_t k = 0; k < parts.size(); ++k) items.emplace_back(Value(keys_[k]), std::move(parts[k]));
  return Value::dict(std::move(items));
}

Value StackDataset::get(int64_t index) {
  std::vector<Value> parts;
  parts.reserve(datasets_.size());
  for (const auto& d : datasets_) parts.push_back(d->get(index));
  return combine(std::move(parts));
}

std::vector<Value> StackDataset::get_batch(const IndexBatch& indices) {
  std::vector<std::vector<Value>> samples(indices.size());
  for (const auto& d : datasets_) {
    std::vector<Value> items = d->get_batch(indices);
    if (items.size() != indices.size())
      throw ValueError("Nested dataset's output size mismatch. Expected " + std::to_string(indices.size()) +
                       ", got " + std::to_string(items.size()));
    for (size_t r = 0; r < items.size(); ++r) samples[r].push_back(std::move(items[r]));
  }
  std::vector<Value> out;
  out.reserve(samples.size());
  for (auto& parts : samples) out.push_back(combine(std::move(parts)));
  return out;
}

void StackDataset::get_into(int64_t index, void* const* leaves) {
  for (size_t k = 0; k < datasets_.size(); ++k) datasets_[k]->get_into(index, leaves + first_leaf_[k]);
}

void StackDataset::get_batch_into(const IndexBatch& indices, const BatchRows& rows) {
  for (size_t k = 0; k < datasets_.size(); ++k) {
    const size_t begin = first_leaf_[k];
    const size_t end = k + 1 < datasets_.size() ? first_leaf_[k + 1] : rows.leaves();
    BatchRows mine;
    mine.base.assign(rows.base.begin() + static_cast<std::ptrdiff_t>(begin),
                     rows.base.begin() + static_cast<std::ptrdiff_t>(end));
    mine.row_bytes.assign(rows.row_bytes.begin() + static_cast<std::ptrdiff_t>(begin),
                          rows.row_bytes.begin() + static_cast<std::ptrdiff_t>(end));
    datasets_[k]->get_batch_into(indices, mine);
  }
}

std::vector<std::shared_ptr<Subset>> make_subsets(std::shared_ptr<Dataset> dataset,
                                                  const std::vector<std::vector<int64_t>>& index_lists) {
  std::vector<std::shared_ptr<Subset>> out;
  out.reserve(index_lists.size());
  for (const auto& indices : index_lists) out.push_back(std::make_shared<Subset>(dataset, indices));
  return out;
}

std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<Dataset> dataset,
                                                  const SplitLengths& lengths,
                                                  std::shared_ptr<Generator> generator) {
  if (!dataset) throw ValueError("random_split: the dataset is null");
  return make_subsets(dataset, random_split(dataset->size(), lengths, std::move(generator)));
}

std::shared_ptr<ConcatDataset> operator+(std::shared_ptr<Dataset> a, std::shared_ptr<Dataset> b) {
  return std::make_shared<ConcatDataset>(
      std::vector<std::shared_ptr<Dataset>>{std::move(a), std::move(b)});
}

std::shared_ptr<ChainDataset> operator+(std::shared_ptr<IterableDataset> a,
                                        std::shared_ptr<IterableDataset> b) {
  return std::make_shared<ChainDataset>(
      std::vector<std::shared_ptr<IterableDataset>>{std::move(a), std::move(b)});
}

// ------------------------------------------------------------------ built-in datasets

RangeDataset::RangeDataset(int64_t n, int64_t start) : n_(n), start_(start) {
  if (n < 0) throw ValueError("range dataset: \"n\" must be >= 0, got " + std::to_string(n));
}

Value RangeDataset::get(int64_t index) {
  int64_t i = index < 0 ? index + n_ : index;
  if (i < 0 || i >= n_)
    throw IndexError("range object index out of range: index " + std::to_string(index) +
                     " of a range dataset of " + std::to_string(n_) + " samples");
  return Value(start_ + i);
}

RangeIterableDataset::RangeIterableDataset(int64_t start, int64_t end) : start_(start), end_(end) {
  if (end < start)
    throw ValueError("range_iterable dataset: \"end\" (" + std::to_string(end) +
                     ") must be >= \"start\" (" + std::to_string(start) + ")");
}

std::unique_ptr<Cursor<Value>> RangeIterableDataset::iter() {
  int64_t first = start_, last = end_;
  if (const WorkerInfo* info = get_worker_info(); info && info->num_workers > 0) {
    // The IterableDataset docstring, example 1:
    //   per_worker = int(math.ceil((self.end - self.start) / float(worker_info.num_workers)))
    //   iter_start = self.start + worker_id * per_worker
    //   iter_end = min(iter_start + per_worker, self.end)
    const int64_t workers = info->num_workers;
    const int64_t per_worker = (end_ - start_ + workers - 1) / workers;
    first = start_ + info->id * per_worker;
    last = std::min(first + per_worker, end_);
  }
  return make_cursor<Value>([i = first, last]() mutable -> std::optional<Value> {
    if (i >= last) return std::nullopt;
    return Value(i++);
  });
}

CountingDataset::CountingDataset(int64_t n) : n_(n) {
  if (n < 0) throw ValueError("counting dataset: \"n\" must be >= 0, got " + std::to_string(n));
}

std::unique_ptr<Cursor<Value>> CountingDataset::iter() {
  return make_cursor<Value>([i = int64_t{0}, n = n_]() mutable -> std::optional<Value> {
    if (i >= n) return std::nullopt;
    return Value(i++);
  });
}

namespace {

std::shared_ptr<Dataset> make_range(const Value& p) {
  return std::make_shared<RangeDataset>(p.at("n").to_int(), p.get("start", Value(0)).to_int());
}

std::shared_ptr<IterableDataset> make_range_iterable(const Value& p) {
  return std::make_shared<RangeIterableDataset>(p.get("start", Value(0)).to_int(),
                                                p.at("end").to_int());
}

std::shared_ptr<IterableDataset> make_counting(const Value& p) {
  return std::make_shared<CountingDataset>(p.at("n").to_int());
}

std::shared_ptr<Dataset> make_subset(const Value& p) {
  auto inner = make_dataset(handle_from_value(p.at("dataset"), "subset \"dataset\""));
  return std::make_shared<Subset>(std::move(inner), indices_from_value(p.at("indices")));
}

std::shared_ptr<Dataset> make_concat(const Value& p) {
  std::vector<std::shared_ptr<Dataset>> members;
  for (const Value& h : p.at("datasets").items())
    members.push_back(make_dataset(handle_from_value(h, "concat \"datasets\"")));
  return std::make_shared<ConcatDataset>(std::move(members));
}

std::shared_ptr<Dataset> make_stack(const Value& p) {
  std::vector<std::shared_ptr<Dataset>> members;
  for (const Value& h : p.at("datasets").items())
    members.push_back(make_dataset(handle_from_value(h, "stack \"datasets\"")));
  if (!p.contains("keys")) return std::make_shared<StackDataset>(std::move(members));
  const auto& keys = p.at("keys").items();
  if (keys.size() != members.size())
    throw ValueError("stack: " + std::to_string(keys.size()) + " keys for " + std::to_string(members.size()) +
                     " datasets");
  std::vector<std::pair<std::string, std::shared_ptr<Dataset>>> named;
  for (size_t k = 0; k < keys.size(); ++k) named.emplace_back(keys[k].to_string(), std::move(members[k]));
  return std::make_shared<StackDataset>(std::move(named));
}

std::shared_ptr<IterableDataset> make_chain(const Value& p) {
  std::vector<std::shared_ptr<IterableDataset>> members;
  for (const Value& h : p.at("datasets").items())
    members.push_back(make_iterable_dataset(handle_from_value(h, "chain \"datasets\"")));
  return std::make_shared<ChainDataset>(std::move(members));
}

void register_missing() {
  auto map_style = [](const char* name, MapDatasetFactory f) {
    if (!is_registered_dataset(name) && !is_registered_iterable_dataset(name))
      register_dataset(name, std::move(f));
  };
  auto iterable = [](const char* name, IterableDatasetFactory f) {
    if (!is_registered_dataset(name) && !is_registered_iterable_dataset(name))
      register_iterable_dataset(name, std::move(f));
  };
  map_style("range", make_range);
  map_style("subset", make_subset);
  map_style("concat", make_concat);
  map_style("stack", make_stack);
  iterable("range_iterable", make_range_iterable);
  iterable("counting", make_counting);
  iterable("chain", make_chain);
}

}  // namespace

void register_builtin_datasets() { register_missing(); }

}  // namespace loader
