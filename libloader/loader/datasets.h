// The concrete datasets of torch.utils.data: TensorDataset, ConcatDataset, ChainDataset,
// Subset, StackDataset, plus small built-in datasets that can be made from a handle
// ("range", "range_iterable", "counting", and the composites "subset", "concat", "chain",
// "stack").
//
//   auto features = loader::Tensor::zeros({100, 16}, loader::DType::Float32);
//   auto labels = loader::Tensor::arange(100);
//   auto ds = std::make_shared<loader::TensorDataset>(std::vector<loader::Tensor>{features, labels});
//   loader::Value sample = ds->get(3);          // (features[3], labels[3]): views, no copy
//
//   auto both = ds + other;                     // ConcatDataset([ds, other]), as Dataset.__add__
//   auto parts = loader::random_split(ds, {80, 20}, generator);   // two Subsets
//
//   auto stream = loader::make_iterable_dataset({"range_iterable",
//                                                loader::Value::dict({{"start", 3}, {"end", 7}})});
//
// Composites (Subset, ConcatDataset, ChainDataset, StackDataset) built from datasets that
// carry a handle get a handle of their own ("subset", "concat", "chain", "stack"), so
// worker processes can rebuild them; a composite over a dataset without a handle has
// none (load it with num_workers=0, or register the inner type).
//
// Differences from PyTorch that C++ forces:
//   - ConcatDataset over an IterableDataset cannot be written with the typed constructor; the
//     overload over DatasetBase checks at run time and raises PyTorch's AssertionError.
//   - ChainDataset over a map-style dataset is refused when it is constructed (PyTorch raises
//     the same AssertionError later, when iterating).
//   - Subset takes a list of indices (as torch 1.13), no slices.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loader/dataset.h"
#include "loader/random_split.h"
#include "loader/tensor.h"
#include "loader/value.h"

namespace loader {

/// torch.utils.data.TensorDataset: sample i is the tuple (t0[i], t1[i], ...) of views.
/// Every tensor must have the same first dimension (AssertionError "Size mismatch
/// between tensors" otherwise).  It describes its samples (sample_spec), so the default
/// collate writes rows straight into the batch tensors.
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(std::vector<Tensor> tensors);
  Value get(int64_t index) override;  ///< negative indices count from the end
  int64_t size() const override { return size_; }
  std::optional<Value> sample_spec() const override;
  void get_into(int64_t index, void* const* leaves) override;
  /// Checks every index, then gathers the rows of each tensor in one loop (the next
  /// rows prefetched while one is copied): index_select into the batch.
  void get_batch_into(const IndexBatch& indices, const BatchRows& rows) override;
  const std::vector<Tensor>& tensors() const noexcept { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
  int64_t size_ = 0;
};

/// torch.utils.data.ConcatDataset: the members one after another.  Index i is found by a
/// binary search (bisect_right) over cumulative_sizes(), so empty members are skipped.
class ConcatDataset : public Dataset {
 public:
  explicit ConcatDataset(std::vector<std::shared_ptr<Dataset>> datasets);
  ConcatDataset(std::initializer_list<std::shared_ptr<Dataset>> datasets);
  /// Checks at run time that every member is map-style: AssertionError "ConcatDataset does
  /// not support IterableDataset" otherwise (the C++ form of PyTorch's check).
  explicit ConcatDataset(const std::vector<std::shared_ptr<DatasetBase>>& datasets);

  /// Negative indices wrap once; ValueError "absolute value of index should not exceed
  /// dataset length" below -size(), IndexError "list index out of range" at size() and above.
  Value get(int64_t index) override;
  int64_t size() const override { return cumulative_sizes_.back(); }
  /// Forwards consecutive runs of indices that fall in one member to its get_batch.
  std::vector<Value> get_batch(const IndexBatch& indices) override;

  const std::vector<int64_t>& cumulative_sizes() const noexcept { return cumulative_sizes_; }
  const std::vector<std::shared_ptr<Dataset>>& datasets() const noexcept { return datasets_; }

 private:
  /// (member, index inside the member) for a dataset index, with PyTorch's errors.
  std::pair<size_t, int64_t> locate(int64_t index) const;
  std::vector<std::shared_ptr<Dataset>> datasets_;
  std::vector<int64_t> cumulative_sizes_;
};

/// torch.utils.data.ChainDataset: iterates the member streams one after another.
class ChainDataset : public IterableDataset {
 public:
  explicit ChainDataset(std::vector<std::shared_ptr<IterableDataset>> datasets);
  ChainDataset(std::initializer_list<std::shared_ptr<IterableDataset>> datasets);
  /// Checks at run time that every member is iterable: AssertionError "ChainDataset only
  /// supports IterableDataset" otherwise.
  explicit ChainDataset(const std::vector<std::shared_ptr<DatasetBase>>& datasets);

  std::unique_ptr<Cursor<Value>> iter() override;
  /// The sum of the members' sizes when every member has one, nullopt otherwise.
  std::optional<int64_t> size() const override;
  const std::vector<std::shared_ptr<IterableDataset>>& datasets() const noexcept { return datasets_; }

 private:
  std::vector<std::shared_ptr<IterableDataset>> datasets_;
};

/// torch.utils.data.Subset: dataset[indices[i]].  A subset of a subset works (indices are
/// mapped through both); indices are checked by the inner dataset when it is read.
/// The positions `start:stop:step` picks from a sequence of `size` elements, as Python's
/// slice does (PySlice_AdjustIndices): nullopt means omitted, negative bounds count from
/// the end, bounds beyond either end are clamped, a negative step walks backwards.
/// ValueError "slice step cannot be zero".
std::vector<int64_t> slice_indices(int64_t size, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   int64_t step = 1);

class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<Dataset> dataset, std::vector<int64_t> indices);
  /// Negative indices count from the end (a Python list); IndexError beyond the ends.
  Value get(int64_t index) override;
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  /// Maps the indices and calls the inner dataset's get_batch once (PyTorch's __getitems__).
  std::vector<Value> get_batch(const IndexBatch& indices) override;
  /// The inner dataset's sample_spec / get_into, with mapped indices.
  std::optional<Value> sample_spec() const override { return dataset_->sample_spec(); }
  void get_into(int64_t index, void* const* leaves) override;
  void get_batch_into(const IndexBatch& indices, const BatchRows& rows) override;

  /// PyTorch 2.x's `subset[start:stop:step]`: the samples at those positions of the
  /// subset (Python's slice rules, see slice_indices), fetched with one get_batch of
  /// the inner dataset.  A subset of a subset slices through both.
  std::vector<Value> get_slice(std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step = 1);

  const std::shared_ptr<Dataset>& dataset() const noexcept { return dataset_; }
  const std::vector<int64_t>& indices() const noexcept { return indices_; }

 private:
  int64_t map_index(int64_t index) const;
  std::shared_ptr<Dataset> dataset_;
  std::vector<int64_t> indices_;
};

/// torch.utils.data.StackDataset (PyTorch 2.1+): datasets of one length side by side.
/// Sample i is the tuple (a[i], b[i], ...) for StackDataset({a, b, ...}) (PyTorch's
/// positional form) or the dict {"x": a[i], "y": b[i]} for StackDataset({{"x", a},
/// {"y", b}}) (PyTorch's keyword form, keys in the order given).  ValueError "At least
/// one dataset should be passed" and "Size mismatch between datasets", as PyTorch.
class StackDataset : public Dataset {
 public:
  explicit StackDataset(std::vector<std::shared_ptr<Dataset>> datasets);
  StackDataset(std::initializer_list<std::shared_ptr<Dataset>> datasets);
  explicit StackDataset(std::vector<std::pair<std::string, std::shared_ptr<Dataset>>> datasets);
  StackDataset(std::initializer_list<std::pair<std::string, std::shared_ptr<Dataset>>> datasets);

  /// Each member's get(index): indices (negative ones too) mean what they mean to the members.
  Value get(int64_t index) override;
  int64_t size() const override { return size_; }
  /// PyTorch's __getitems__: each member's get_batch once; ValueError "Nested dataset's
  /// output size mismatch. Expected N, got M" when a member returns another count.
  std::vector<Value> get_batch(const IndexBatch& indices) override;
  /// The members' sample_spec side by side, when every member has one: their get_into /
  /// get_batch_into write their own rows of the batch.
  std::optional<Value> sample_spec() const override { return spec_; }
  void get_into(int64_t index, void* const* leaves) override;
  void get_batch_into(const IndexBatch& indices, const BatchRows& rows) override;

  /// Whether samples are dicts (keyword form); keys() is empty otherwise.
  bool is_dict() const noexcept { return !keys_.empty(); }
  const std::vector<std::string>& keys() const noexcept { return keys_; }
  const std::vector<std::shared_ptr<Dataset>>& datasets() const noexcept { return datasets_; }

 private:
  void init();
  Value combine(std::vector<Value> parts) const;
  std::vector<std::shared_ptr<Dataset>> datasets_;
  std::vector<std::string> keys_;
  int64_t size_ = 0;
  std::optional<Value> spec_;
  std::vector<size_t> first_leaf_;  ///< member k's first leaf in spec_ (when spec_ is set)
};

/// One Subset per index list, e.g. from random_split(dataset->size(), lengths, generator).
std::vector<std::shared_ptr<Subset>> make_subsets(std::shared_ptr<Dataset> dataset,
                                                  const std::vector<std::vector<int64_t>>& index_lists);

/// random_split(dataset, lengths, generator): make_subsets over random_split(dataset->size(),
/// ...), with the same errors, warnings and draws (a null generator uses the default one).
std::vector<std::shared_ptr<Subset>> random_split(std::shared_ptr<Dataset> dataset,
                                                  const SplitLengths& lengths,
                                                  std::shared_ptr<Generator> generator = nullptr);

/// Dataset.__add__: ConcatDataset([a, b]) (nested, not flattened, as PyTorch).
std::shared_ptr<ConcatDataset> operator+(std::shared_ptr<Dataset> a, std::shared_ptr<Dataset> b);
/// IterableDataset.__add__: ChainDataset([a, b]).
std::shared_ptr<ChainDataset> operator+(std::shared_ptr<IterableDataset> a,
                                        std::shared_ptr<IterableDataset> b);

// ------------------------------------------------------------------ built-in registered datasets

/// "range" {"n", optional "start" (0)}: sample i is the int start + i (like Python's range).
class RangeDataset : public Dataset {
 public:
  explicit RangeDataset(int64_t n, int64_t start = 0);
  Value get(int64_t index) override;  ///< negative indices count from the end
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
  int64_t start_;
};

/// "range_iterable" {"end", optional "start" (0)}: yields the ints of [start, end), split
/// across workers as in the IterableDataset docstring (example 1): with W workers each takes
/// per_worker = ceil((end - start) / W) values, worker w the range
/// [start + w * per_worker, min(start + (w + 1) * per_worker, end)).  No length.
class RangeIterableDataset : public IterableDataset {
 public:
  RangeIterableDataset(int64_t start, int64_t end);
  std::unique_ptr<Cursor<Value>> iter() override;

 private:
  int64_t start_;
  int64_t end_;
};

/// "counting" {"n"}: yields the ints 0..n-1 in every copy, without splitting, so each worker
/// produces the whole stream (the duplication PyTorch warns about); size() is n.
class CountingDataset : public IterableDataset {
 public:
  explicit CountingDataset(int64_t n);
  std::unique_ptr<Cursor<Value>> iter() override;
  std::optional<int64_t> size() const override { return n_; }

 private:
  int64_t n_;
};

/// Registers every built-in dataset type that is not registered yet ("range",
/// "range_iterable", "counting", "subset", "concat", "chain", "stack").  Safe to call any number of
/// times; never replaces a factory the program registered under the same name.  The
/// registry calls it on its first use (dataset.h), so programs need not.
void register_builtin_datasets();

}  // namespace loader
