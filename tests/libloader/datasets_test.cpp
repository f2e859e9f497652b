// TensorDataset, ConcatDataset, ChainDataset, Subset and the built-in registered datasets:
// PyTorch's own dataset tests (TORCH_TESTS.md D1-D13, D15, D16) and the golden messages
// of tests/golden/errors.json (section "datasets") and iterable_dataset.json.
#include "loader/datasets.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "loader/collate.h"
#include "loader/error.h"
#include "loader/random_split.h"
#include "loader/worker_info.h"
#include "test_util.h"

namespace loader {
namespace {

using nlohmann::json;

json load_json(const std::string& name) {
  std::string text = testing::read_file(testing::golden_path(name));
  if (text.empty()) throw std::runtime_error("cannot read " + testing::golden_path(name));
  return json::parse(text);
}

const json& golden_datasets() {
  static const json j = load_json("errors.json").at("datasets");
  return j;
}

// Runs fn and checks the golden exception type and message recorded under `name`.
void expect_golden_error(const std::string& name, const std::function<void()>& fn) {
  SCOPED_TRACE("errors.json datasets." + name);
  const json& want = golden_datasets().at(name);
  ASSERT_FALSE(want.at("ok").get<bool>());
  try {
    fn();
    ADD_FAILURE() << "expected " << want.at("type").get<std::string>() << ": " << want.at("message");
  } catch (const Error& e) {
    EXPECT_EQ(e.python_type(), want.at("type").get<std::string>());
    EXPECT_EQ(std::string(e.what()), want.at("message").get<std::string>());
  }
}

const json& golden_result(const std::string& name) {
  const json& want = golden_datasets().at(name);
  EXPECT_TRUE(want.at("ok").get<bool>()) << name;
  return want.at("result");
}

// A Python list of ints [start, start + n) as a map-style dataset.
std::shared_ptr<Dataset> ints(int64_t n, int64_t start = 0) { return std::make_shared<RangeDataset>(n, start); }

std::vector<int64_t> all_samples(Dataset& ds) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < ds.size(); ++i) out.push_back(ds.get(i).to_int());
  return out;
}

std::vector<int64_t> drain(IterableDataset& ds) {
  std::vector<int64_t> out;
  auto cursor = ds.iter();
  while (auto v = cursor->next()) out.push_back(v->to_int());
  return out;
}

Tensor float_tensor(const Dims& shape) {
  return Tensor::arange(numel_of(shape), DType::Float32).view(shape);
}

// ------------------------------------------------------------------ TensorDataset

TEST(TensorDataset, LenIsTheFirstDimension) {  // D1
  TensorDataset ds({float_tensor({15, 10, 2, 3, 4, 5}), Tensor::arange(15)});
  EXPECT_EQ(ds.size(), 15);
}

TEST(TensorDataset, GetItemIndexesEveryTensorWithViews) {  // D2
  Tensor t = float_tensor({15, 10, 2, 3, 4, 5});
  Tensor l = float_tensor({15});
  TensorDataset ds({t, l});
  for (int64_t i = 0; i < 15; ++i) {
    Value s = ds.get(i);
    ASSERT_TRUE(s.is_tuple());
    ASSERT_EQ(s.size(), 2u);
    EXPECT_TRUE(s[0].to_tensor().equal(t[i]));
    EXPECT_TRUE(s[1].to_tensor().equal(l[i]));
    EXPECT_EQ(s[0].to_tensor().storage(), t.storage());  // no copy
  }
  EXPECT_TRUE(ds.get(-1)[0].to_tensor().equal(t[14]));
  EXPECT_THROW(ds.get(15), IndexError);
}

TEST(TensorDataset, OneDimensionalTensorsGiveZeroDimItems) {  // D3
  Tensor t = float_tensor({15});
  Tensor l = Tensor::arange(15);
  TensorDataset ds({t, l});
  for (int64_t i = 0; i < 15; ++i) {
    Value s = ds.get(i);
    EXPECT_EQ(s[0].to_tensor().dim(), 0);
    EXPECT_EQ(s[0].to_tensor().item<float>(), static_cast<float>(i));
    EXPECT_EQ(s[1].to_tensor().item<int64_t>(), i);
  }
}

TEST(TensorDataset, SingleTensorGivesOneTuple) {  // D4
  Tensor t = float_tensor({15, 10});
  TensorDataset ds({t});
  for (int64_t i = 0; i < 15; ++i) {
    Value s = ds.get(i);
    ASSERT_TRUE(s.is_tuple());
    ASSERT_EQ(s.size(), 1u);
    EXPECT_TRUE(s[0].to_tensor().equal(t[i]));
  }
}

TEST(TensorDataset, ManyTensorsOfDifferentTrailingShapesIndexTogether) {  // D5
  std::vector<Tensor> ts{float_tensor({15, 10}), float_tensor({15, 2, 3}), Tensor::arange(15),
                         float_tensor({15, 1, 1, 4})};
  TensorDataset ds(ts);
  for (int64_t i = 0; i < 15; ++i) {
    Value s = ds.get(i);
    ASSERT_EQ(s.size(), ts.size());
    for (size_t k = 0; k < ts.size(); ++k) EXPECT_TRUE(s[k].to_tensor().equal(ts[k][i]));
  }
}

TEST(TensorDataset, SizeMismatchRaisesPyTorchsAssertion) {  // D6
  expect_golden_error("tensordataset_size_mismatch", [] {
    TensorDataset ds({Tensor::zeros({3}, DType::Float32), Tensor::zeros({4}, DType::Float32)});
  });
  EXPECT_THROW(TensorDataset({}), ValueError);
  EXPECT_THROW(TensorDataset({Tensor::scalar(int64_t{1})}), IndexError);
}

TEST(TensorDataset, GetIntoWritesTheSameRowsAsDefaultCollate) {
  Tensor features = float_tensor({6, 4});
  Tensor transposed = Tensor::arange(12).view({2, 6}).transpose(0, 1);  // non-contiguous [6, 2]
  auto ds = std::make_shared<TensorDataset>(std::vector<Tensor>{features, transposed});
  auto spec = ds->sample_spec();
  ASSERT_TRUE(spec.has_value());
  ASSERT_TRUE(spec->is_tuple());
  EXPECT_EQ((*spec)[0].to_tensor().sizes(), (Dims{4}));
  EXPECT_EQ((*spec)[1].to_tensor().sizes(), (Dims{2}));
  // Rows of a subset's batch, written by get_into, equal default_collate of get().
  Subset sub(ds, {5, 0, 3});
  IndexBatch idx{2, 0, -1};
  Tensor a = Tensor::empty({3, 4}, DType::Float32);
  Tensor b = Tensor::empty({3, 2}, DType::Int64);
  for (size_t r = 0; r < idx.size(); ++r) {
    void* leaves[2] = {a[static_cast<int64_t>(r)].data_ptr(), b[static_cast<int64_t>(r)].data_ptr()};
    sub.get_into(idx[r], leaves);
  }
  std::vector<Value> samples = sub.get_batch(idx);
  Value batch = default_collate(samples);
  EXPECT_TRUE(batch[0].to_tensor().equal(a));
  EXPECT_TRUE(batch[1].to_tensor().equal(b));
  void* leaves[2] = {a.data_ptr(), b.data_ptr()};
  EXPECT_THROW(ds->get_into(6, leaves), IndexError);
}

namespace {
/// A batch of `n` rows shaped like `spec`'s tensors, and where get_batch_into writes it.
struct RowsOf {
  std::vector<Tensor> tensors;
  BatchRows rows;
  RowsOf(const Value& spec, int64_t n) {
    spec.for_each_tensor([&](const Tensor& leaf) {
      Dims shape = leaf.sizes();
      shape.push_front(n);
      tensors.push_back(Tensor::zeros(shape, leaf.dtype()));
      rows.base.push_back(static_cast<uint8_t*>(tensors.back().data_ptr()));
      rows.row_bytes.push_back(leaf.nbytes());
    });
  }
};
}  // namespace

TEST(TensorDataset, GetBatchIntoGathersWhatGetIntoWritesRowByRow) {
  Tensor features = float_tensor({40, 4});
  Tensor transposed = Tensor::arange(80).view({2, 40}).transpose(0, 1);  // non-contiguous [40, 2]
  auto ds = std::make_shared<TensorDataset>(std::vector<Tensor>{features, transposed});
  const auto spec = ds->sample_spec();
  ASSERT_TRUE(spec.has_value());
  IndexBatch idx;  // more than the prefetch distance, negative indices, repeats
  for (int64_t i = 0; i < 30; ++i) idx.push_back((i * 17) % 40 - (i % 3 == 0 ? 40 : 0));
  idx.push_back(-1);
  idx.push_back(-1);
  RowsOf batched(*spec, static_cast<int64_t>(idx.size()));
  ds->get_batch_into(idx, batched.rows);
  RowsOf one_by_one(*spec, static_cast<int64_t>(idx.size()));
  for (size_t r = 0; r < idx.size(); ++r) {
    void* leaves[2] = {one_by_one.rows.row(0, r), one_by_one.rows.row(1, r)};
    ds->get_into(idx[r], leaves);
  }
  EXPECT_TRUE(batched.tensors[0].equal(one_by_one.tensors[0]));
  EXPECT_TRUE(batched.tensors[1].equal(one_by_one.tensors[1]));
  std::vector<Value> samples = ds->get_batch(idx);
  Value collated = default_collate(samples);
  EXPECT_TRUE(collated[0].to_tensor().equal(batched.tensors[0]));
  EXPECT_TRUE(collated[1].to_tensor().equal(batched.tensors[1]));

  // A bad index anywhere fails the batch before any row is written.
  RowsOf untouched(*spec, 3);
  EXPECT_THROW(ds->get_batch_into({0, 1, 40}, untouched.rows), IndexError);
  EXPECT_THROW(ds->get_batch_into({-41, 1, 2}, untouched.rows), IndexError);
  EXPECT_TRUE(untouched.tensors[0].equal(Tensor::zeros({3, 4}, DType::Float32)));

  // A subset maps its indices and hands the whole batch to the inner dataset.
  Subset sub(ds, {39, 0, 7, 12});
  RowsOf via_subset(*spec, 3);
  sub.get_batch_into({3, -4, 2}, via_subset.rows);
  RowsOf direct(*spec, 3);
  ds->get_batch_into({12, 39, 7}, direct.rows);
  EXPECT_TRUE(via_subset.tensors[0].equal(direct.tensors[0]));
  EXPECT_TRUE(via_subset.tensors[1].equal(direct.tensors[1]));
  EXPECT_THROW(sub.get_batch_into({4}, via_subset.rows), IndexError);
}

TEST(Dataset, DefaultGetBatchIntoCallsGetIntoForEachIndex) {
  class Rows final : public Dataset {
   public:
    Value get(int64_t i) override { return Value::tuple({Tensor::from_vector(std::vector<double>(3, double(i)))}); }
    int64_t size() const override { return 10; }
    std::optional<Value> sample_spec() const override { return Value::tuple({Tensor::empty({3}, DType::Float64)}); }
    void get_into(int64_t i, void* const* leaves) override {
      ++calls;
      auto* row = static_cast<double*>(leaves[0]);
      for (int k = 0; k < 3; ++k) row[k] = double(i);
    }
    int calls = 0;
  };
  Rows ds;
  RowsOf out(*ds.sample_spec(), 4);
  ds.get_batch_into({9, 2, 2, 0}, out.rows);
  EXPECT_EQ(ds.calls, 4);
  const double* v = out.tensors[0].data<double>();
  EXPECT_EQ(std::vector<double>(v, v + 12), (std::vector<double>{9, 9, 9, 2, 2, 2, 2, 2, 2, 0, 0, 0}));
}

// ------------------------------------------------------------------ ConcatDataset

TEST(ConcatDataset, TwoSingletons) {  // D7
  ConcatDataset ds({ints(1, 0), ints(1, 1)});
  EXPECT_EQ(ds.size(), 2);
  EXPECT_EQ(ds.get(0).to_int(), 0);
  EXPECT_EQ(ds.get(1).to_int(), 1);
}

TEST(ConcatDataset, TwoNonSingletons) {  // D8
  ConcatDataset ds({ints(5, 0), ints(5, 5)});
  EXPECT_EQ(ds.size(), 10);
  EXPECT_EQ(ds.get(0).to_int(), 0);
  EXPECT_EQ(ds.get(5).to_int(), 5);
  EXPECT_EQ(all_samples(ds), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(ConcatDataset, EmptyMembersAreSkipped) {  // D9
  ConcatDataset with_empty({ints(5, 0), ints(0), ints(5, 5)});
  EXPECT_EQ(with_empty.size(), 10);
  EXPECT_EQ(with_empty.cumulative_sizes(), (std::vector<int64_t>{5, 5, 10}));
  EXPECT_EQ(with_empty.get(5).to_int(), golden_result("concat_with_empty_member_index_5").get<int64_t>());
  EXPECT_EQ(all_samples(with_empty), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  ConcatDataset sizes({ints(2, 0), ints(0), ints(3, 2)});
  EXPECT_EQ(sizes.cumulative_sizes(), golden_result("concat_cumulative_sizes").get<std::vector<int64_t>>());
}

TEST(ConcatDataset, IndexErrorsAndNegativeIndicesMatchPyTorch) {  // D10
  ConcatDataset ds({ints(5, 0), ints(5, 5)});
  expect_golden_error("concat_index_11_of_10", [&] { ds.get(11); });
  EXPECT_THROW(ds.get(10), IndexError);
  EXPECT_EQ(ds.get(-1).to_int(), golden_result("concat_index_-1").get<int64_t>());
  EXPECT_EQ(ds.get(-10).to_int(), 0);
  expect_golden_error("concat_index_-11", [&] { ds.get(-11); });
  // A trailing empty member: index == size() still finds no member.
  ConcatDataset trailing({ints(5), ints(0)});
  EXPECT_THROW(trailing.get(5), IndexError);
}

TEST(ConcatDataset, AddingDatasetsConcatenatesThem) {  // D11
  auto d1 = std::make_shared<TensorDataset>(std::vector<Tensor>{float_tensor({7, 3, 2}), float_tensor({7})});
  auto d2 = std::make_shared<TensorDataset>(std::vector<Tensor>{float_tensor({7, 3, 2}), float_tensor({7})});
  auto d3 = std::make_shared<TensorDataset>(std::vector<Tensor>{float_tensor({7, 3, 2}), float_tensor({7})});
  std::shared_ptr<ConcatDataset> result = d1 + d2 + d3;
  EXPECT_EQ(result->size(), 21);
  EXPECT_EQ(result->datasets().size(), 2u);  // (d1 + d2) + d3, nested as in PyTorch
  EXPECT_TRUE(result->get(0)[0].to_tensor().equal(d1->get(0)[0].to_tensor()));
  EXPECT_TRUE(result->get(7)[0].to_tensor().equal(d2->get(0)[0].to_tensor()));
  EXPECT_TRUE(result->get(14)[0].to_tensor().equal(d3->get(0)[0].to_tensor()));
  EXPECT_EQ(result->get(7)[0].to_tensor().storage(), d2->tensors()[0].storage());
}

TEST(ConcatDataset, RejectsIterableMembersAndEmptyLists) {  // D12
  std::shared_ptr<DatasetBase> map_style = ints(3);
  std::shared_ptr<DatasetBase> iterable = std::make_shared<CountingDataset>(3);
  expect_golden_error("concat_with_iterable", [&] {
    ConcatDataset ds(std::vector<std::shared_ptr<DatasetBase>>{map_style, iterable});
  });
  expect_golden_error("concat_empty", [] { ConcatDataset ds(std::vector<std::shared_ptr<Dataset>>{}); });
  expect_golden_error("concat_empty", [] { ConcatDataset ds(std::vector<std::shared_ptr<DatasetBase>>{}); });
  ConcatDataset from_base(std::vector<std::shared_ptr<DatasetBase>>{map_style, map_style});
  EXPECT_EQ(from_base.size(), 6);
}

class RecordingDataset : public Dataset {
 public:
  Value get(int64_t index) override { return Value(index * 10); }
  int64_t size() const override { return 100; }
  std::vector<Value> get_batch(const IndexBatch& indices) override {
    calls.push_back(indices);
    return Dataset::get_batch(indices);
  }
  std::vector<IndexBatch> calls;
};

TEST(ConcatDataset, GetBatchForwardsRunsToEachMember) {  // D16
  auto a = std::make_shared<RecordingDataset>();
  auto b = std::make_shared<RecordingDataset>();
  ConcatDataset ds({a, b});
  std::vector<Value> got = ds.get_batch({1, 2, 101, 3, -1});
  std::vector<int64_t> values;
  for (const auto& v : got) values.push_back(v.to_int());
  EXPECT_EQ(values, (std::vector<int64_t>{10, 20, 10, 30, 990}));
  EXPECT_EQ(a->calls, (std::vector<IndexBatch>{{1, 2}, {3}}));
  EXPECT_EQ(b->calls, (std::vector<IndexBatch>{{1}, {99}}));
}

// ------------------------------------------------------------------ ChainDataset

TEST(ChainDataset, YieldsTheMembersOneAfterAnother) {  // D13
  auto it1 = std::make_shared<CountingDataset>(20);
  auto it2 = std::make_shared<CountingDataset>(15);
  std::vector<int64_t> expected(20);
  for (int64_t i = 0; i < 20; ++i) expected[static_cast<size_t>(i)] = i;
  for (int64_t i = 0; i < 15; ++i) expected.push_back(i);
  WorkerInfo one_worker;
  one_worker.id = 0;
  one_worker.num_workers = 1;
  for (const WorkerInfo* info : {static_cast<const WorkerInfo*>(nullptr), static_cast<const WorkerInfo*>(&one_worker)}) {
    WorkerInfoScope scope(info);
    std::shared_ptr<ChainDataset> added = it1 + it2;
    ChainDataset listed({it1, it2});
    EXPECT_EQ(drain(*added), expected);
    EXPECT_EQ(drain(listed), expected);
    EXPECT_EQ(drain(listed), expected) << "a second pass starts over";
    EXPECT_EQ(listed.size(), std::optional<int64_t>(35));
  }
  ChainDataset unsized({it1, std::make_shared<RangeIterableDataset>(0, 3)});
  EXPECT_EQ(unsized.size(), std::nullopt);
  EXPECT_EQ(drain(unsized).size(), 23u);
  ChainDataset empty(std::vector<std::shared_ptr<IterableDataset>>{});
  EXPECT_TRUE(drain(empty).empty());
}

TEST(ChainDataset, RejectsMapStyleMembers) {  // D13
  std::shared_ptr<DatasetBase> iterable = std::make_shared<CountingDataset>(3);
  std::shared_ptr<DatasetBase> map_style = ints(3);
  expect_golden_error("chain_with_map_dataset", [&] {
    ChainDataset ds(std::vector<std::shared_ptr<DatasetBase>>{iterable, map_style});
  });
}

// ------------------------------------------------------------------ Subset, random_split

TEST(Subset, IndexesThroughTheIndexList) {
  Subset sub(ints(4, 10), {3, 1});
  EXPECT_EQ(sub.size(), 2);
  EXPECT_EQ(sub.get(1).to_int(), golden_result("subset_list_index").get<int64_t>());
  EXPECT_EQ(sub.get(0).to_int(), 13);
  EXPECT_EQ(sub.get(-2).to_int(), 13);
  EXPECT_THROW(sub.get(2), IndexError);
  EXPECT_THROW(sub.get(-3), IndexError);
}

TEST(Subset, SubsetOfSubsetMapsThroughBoth) {  // D15 (list indices, as torch 1.13)
  auto inner = std::make_shared<Subset>(ints(10, 100), std::vector<int64_t>{9, 7, 5, 3, 1});
  Subset outer(inner, {4, 0, 2});
  EXPECT_EQ(all_samples(outer), (std::vector<int64_t>{101, 109, 105}));
}

TEST(Subset, GetBatchForwardsMappedIndicesInOneCall) {  // D16
  auto rec = std::make_shared<RecordingDataset>();
  auto inner = std::make_shared<Subset>(rec, std::vector<int64_t>{5, 6, 7, 8});
  Subset outer(inner, {3, 0, 1});
  std::vector<Value> got = outer.get_batch({0, 1, 2, -1});
  std::vector<int64_t> values;
  for (const auto& v : got) values.push_back(v.to_int());
  EXPECT_EQ(values, (std::vector<int64_t>{80, 50, 60, 60}));
  EXPECT_EQ(rec->calls, (std::vector<IndexBatch>{{8, 5, 6, 6}}));
}

TEST(SliceIndices, FollowPythonsSliceRules) {
  const json golden = load_json("slices.json");
  int checked = 0;
  for (const auto& c : golden.at("cases")) {
    auto bound = [](const json& v) { return v.is_null() ? std::nullopt : std::optional<int64_t>(v.get<int64_t>()); };
    const auto got = slice_indices(c[0].get<int64_t>(), bound(c[1]), bound(c[2]), c[3].get<int64_t>());
    ASSERT_EQ(got, c[4].get<std::vector<int64_t>>()) << c.dump();
    ++checked;
  }
  EXPECT_EQ(checked, 1458);
  try {
    slice_indices(5, std::nullopt, std::nullopt, 0);
    ADD_FAILURE() << "a zero step was accepted";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()), golden.at("zero_step").at("message").get<std::string>());
  }
  // Extreme bounds and steps neither overflow nor loop.
  EXPECT_EQ(slice_indices(3, INT64_MIN, INT64_MAX, INT64_MAX), (std::vector<int64_t>{0}));
  EXPECT_EQ(slice_indices(3, INT64_MAX, INT64_MIN, INT64_MIN), (std::vector<int64_t>{2}));
  EXPECT_EQ(slice_indices(3, std::nullopt, std::nullopt, -1), (std::vector<int64_t>{2, 1, 0}));
}

// D15: TestDatasetRandomSplit.test_slicing_of_subset_of_dataset / _of_subset (PyTorch 2.x),
// with TensorDataset's rows compared through get_batch (the C++ form of dataset[list]).
TEST(Subset, SlicesLikePyTorchsSubsetOfADatasetAndOfASubset) {
  Tensor t = Tensor::empty({5}, DType::Int64);
  for (int64_t i = 0; i < 5; ++i) t.data<int64_t>()[i] = i + 1;
  auto dataset = std::make_shared<TensorDataset>(std::vector<Tensor>{t});
  auto values = [](const std::vector<Value>& samples) {
    std::vector<int64_t> out;
    for (const auto& v : samples) out.push_back(v[0].to_tensor().data<int64_t>()[0]);
    return out;
  };
  auto rows = [&](const std::vector<int64_t>& idx) { return values(dataset->get_batch(idx)); };
  auto subset_of_dataset = std::make_shared<Subset>(dataset, std::vector<int64_t>{0, 1, 2, 3, 4});
  EXPECT_EQ(values(subset_of_dataset->get_slice(std::nullopt, std::nullopt)), rows({0, 1, 2, 3, 4}));  // [:]
  EXPECT_EQ(values(subset_of_dataset->get_slice(1, 2)), rows({1}));                                    // [1:2]
  EXPECT_EQ(values(subset_of_dataset->get_slice(0, -1, 2)), rows({0, 2}));                            // [0:-1:2]

  auto g = std::make_shared<Generator>(0);
  auto splits = random_split(std::shared_ptr<Dataset>(dataset), SplitLengths(std::vector<int64_t>{3, 2}), g);
  ASSERT_EQ(splits.size(), 2u);
  for (const auto& sub : splits) {
    const std::vector<int64_t>& idx = sub->indices();
    EXPECT_EQ(values(sub->get_slice(std::nullopt, std::nullopt)), rows(idx));  // subset1[:] == dataset[subset1.indices[:]]
    EXPECT_EQ(values(sub->get_slice(0, 1)), rows({idx[0]}));                    // subset1[0:1]
    EXPECT_EQ(values(sub->get_slice(std::nullopt, std::nullopt, -1)), rows({idx.rbegin(), idx.rend()}));
  }

  // Subset of a subset: test_slicing_of_subset_of_subset.
  auto subset_of_subset = std::make_shared<Subset>(subset_of_dataset, std::vector<int64_t>{0, 1, 2, 3, 4});
  EXPECT_EQ(values(subset_of_subset->get_slice(std::nullopt, std::nullopt)), rows({0, 1, 2, 3, 4}));
  EXPECT_EQ(values(subset_of_subset->get_slice(0, 2)), rows({0, 1}));
  EXPECT_EQ(values(subset_of_subset->get_slice(0, -1, 2)), rows({0, 2}));
  Subset picked(subset_of_dataset, {4, 2});
  EXPECT_EQ(values(picked.get_slice(-1, std::nullopt)), rows({2}));
  EXPECT_TRUE(picked.get_slice(5, 9).empty());
  EXPECT_THROW(picked.get_slice(std::nullopt, std::nullopt, 0), ValueError);
}

TEST(Subset, MakeSubsetsAndRandomSplitMatchPyTorch) {
  auto ds = ints(10);
  auto parts = make_subsets(ds, {{2, 4}, {}, {9}});
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(all_samples(*parts[0]), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(parts[1]->size(), 0);
  EXPECT_EQ(all_samples(*parts[2]), (std::vector<int64_t>{9}));

  const json cases = load_json("random_split.json").at("cases");
  int ran = 0;
  for (const auto& c : cases) {
    if (!c.at("ok").get<bool>()) continue;
    SCOPED_TRACE(c.dump());
    bool integers = std::all_of(c.at("lengths").begin(), c.at("lengths").end(),
                                [](const json& x) { return x.is_number_integer(); });
    auto n = c.at("n").get<int64_t>();
    auto g = std::make_shared<Generator>(c.at("seed").get<uint64_t>());
    std::vector<std::shared_ptr<Subset>> subsets =
        integers ? random_split(ints(n), SplitLengths(c.at("lengths").get<std::vector<int64_t>>()), g)
                 : random_split(ints(n), SplitLengths(c.at("lengths").get<std::vector<double>>()), g);
    const auto& want = c.at("splits");
    ASSERT_EQ(subsets.size(), want.size());
    for (size_t k = 0; k < subsets.size(); ++k)
      EXPECT_EQ(all_samples(*subsets[k]), want[k].get<std::vector<int64_t>>());
    ++ran;
  }
  EXPECT_GT(ran, 0);
}

// ------------------------------------------------------------------ StackDataset
// PyTorch's TestStackDataset (D14).  test_mixed (positional and keyword datasets in one
// call) has no C++ form: the two constructors take one form each.

std::string value_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

std::shared_ptr<TensorDataset> tensors_of(std::vector<Tensor> t) { return std::make_shared<TensorDataset>(std::move(t)); }

TEST(StackDataset, EmptyAndSizeMismatchRaisePyTorchsValueErrors) {  // test_empty, test_size_mismatch
  EXPECT_EQ(value_error_of([] { StackDataset(std::vector<std::shared_ptr<Dataset>>{}); }),
            "At least one dataset should be passed");
  EXPECT_EQ(value_error_of([] {
              StackDataset(std::vector<std::pair<std::string, std::shared_ptr<Dataset>>>{});
            }),
            "At least one dataset should be passed");
  auto fifteen = tensors_of({float_tensor({15, 10})});
  auto five = tensors_of({float_tensor({5})});
  EXPECT_EQ(value_error_of([&] { StackDataset({fifteen, five}); }), "Size mismatch between datasets");
  EXPECT_EQ(value_error_of([&] { StackDataset({{"a", fifteen}, {"b", five}}); }), "Size mismatch between datasets");
  EXPECT_NE(value_error_of([&] { StackDataset({{"a", fifteen}, {"a", fifteen}}); }).find("'a' is given twice"),
            std::string::npos);
}

TEST(StackDataset, LenIsTheMembersLength) {  // test_len, test_single
  auto x = tensors_of({float_tensor({15, 10})});
  auto y = tensors_of({float_tensor({15})});
  EXPECT_EQ(StackDataset({x, y}).size(), 15);
  EXPECT_EQ(StackDataset({{"a", x}, {"b", y}}).size(), 15);
  StackDataset single({x});
  EXPECT_EQ(single.size(), 15);
  const Value item = single.get(3);
  ASSERT_TRUE(item.is_tuple());
  ASSERT_EQ(item.items().size(), 1u);
  EXPECT_TRUE(item[0][0].to_tensor().equal(x->get(3)[0].to_tensor()));
}

TEST(StackDataset, GetItemIsATupleOrADictOfTheMembersItems) {  // test_getitem
  auto x = tensors_of({float_tensor({15, 10})});
  auto y = ints(15, 100);
  StackDataset tuple_form({x, y});
  StackDataset dict_form({{"a", x}, {"b", y}});
  EXPECT_FALSE(tuple_form.is_dict());
  EXPECT_EQ(dict_form.keys(), (std::vector<std::string>{"a", "b"}));
  for (int64_t i = -15; i < 15; ++i) {
    const Value t = tuple_form.get(i);
    ASSERT_TRUE(t.is_tuple());
    EXPECT_TRUE(t[0][0].to_tensor().equal(x->get(i)[0].to_tensor())) << i;
    EXPECT_EQ(t[1].to_int(), y->get(i).to_int()) << i;
    const Value d = dict_form.get(i);
    ASSERT_TRUE(d.is_dict());
    EXPECT_TRUE(d.at("a")[0].to_tensor().equal(x->get(i)[0].to_tensor())) << i;
    EXPECT_EQ(d.at("b").to_int(), y->get(i).to_int()) << i;
  }
  EXPECT_THROW(tuple_form.get(15), IndexError);
}

TEST(StackDataset, GetItemsAsksEachMemberForTheWholeBatchOnce) {  // test_getitems
  auto a = std::make_shared<RecordingDataset>();
  auto b = ints(100, 1000);
  StackDataset ds({{"rec", a}, {"int", b}});
  const std::vector<Value> got = ds.get_batch({0, 5, -1});
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(a->calls, (std::vector<IndexBatch>{{0, 5, -1}}));
  EXPECT_EQ(got[1].at("rec").to_int(), 50);
  EXPECT_EQ(got[1].at("int").to_int(), 1005);
  EXPECT_EQ(got[2].at("rec").to_int(), -10);
  EXPECT_EQ(got[2].at("int").to_int(), 1099);
}

TEST(StackDataset, GetItemsRaisesTheMembersIndexErrorAndCountMismatches) {  // test_getitems_raises_index_error, _value_error
  auto x = tensors_of({float_tensor({15, 10})});
  StackDataset ds({x, x});
  EXPECT_THROW(ds.get_batch({0, 15}), IndexError);
  class Short : public Dataset {
   public:
    Value get(int64_t i) override { return Value(i); }
    int64_t size() const override { return 15; }
    std::vector<Value> get_batch(const IndexBatch& indices) override {
      return {Value(indices[0]), Value(indices[1])};
    }
  };
  StackDataset short_member({x, std::make_shared<Short>()});
  EXPECT_EQ(value_error_of([&] { short_member.get_batch({0, 1, 2, 3}); }),
            "Nested dataset's output size mismatch. Expected 4, got 2");
}

TEST(StackDataset, RowsWrittenStraightIntoTheBatchEqualDefaultCollate) {
  Tensor features = float_tensor({12, 4});
  Tensor labels = Tensor::arange(12);
  auto a = tensors_of({features});
  auto b = tensors_of({labels, Tensor::arange(24).view({12, 2})});
  for (bool dict_form : {false, true}) {
    SCOPED_TRACE(dict_form ? "dict" : "tuple");
    auto ds = dict_form ? std::make_shared<StackDataset>(std::vector<std::pair<std::string, std::shared_ptr<Dataset>>>{
                              {"x", a}, {"y", b}})
                        : std::make_shared<StackDataset>(std::vector<std::shared_ptr<Dataset>>{a, b});
    const auto spec = ds->sample_spec();
    ASSERT_TRUE(spec.has_value());
    EXPECT_EQ(spec->is_dict(), dict_form);
    const IndexBatch idx{11, 0, -2, 5};
    RowsOf batched(*spec, 4);
    ds->get_batch_into(idx, batched.rows);
    RowsOf one_by_one(*spec, 4);
    for (size_t r = 0; r < idx.size(); ++r) {
      void* leaves[3] = {one_by_one.rows.row(0, r), one_by_one.rows.row(1, r), one_by_one.rows.row(2, r)};
      ds->get_into(idx[r], leaves);
    }
    std::vector<Value> samples = ds->get_batch(idx);
    Value collated = default_collate(samples);
    std::vector<Tensor> want;
    collated.for_each_tensor([&](const Tensor& t) { want.push_back(t); });
    ASSERT_EQ(want.size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_TRUE(batched.tensors[k].equal(want[k])) << "leaf " << k;
      EXPECT_TRUE(one_by_one.tensors[k].equal(want[k])) << "leaf " << k;
    }
  }
  // A member without a spec: none for the stack.
  EXPECT_FALSE(StackDataset({a, ints(12)}).sample_spec().has_value());
}

// ------------------------------------------------------------------ registered built-ins

DatasetHandle handle(const std::string& type, std::initializer_list<std::pair<std::string, Value>> params) {
  return {type, Value::dict(params)};
}

TEST(BuiltinDatasets, RegistrationIsIdempotentAndComplete) {
  register_builtin_datasets();
  register_builtin_datasets();
  auto types = registered_dataset_types();
  for (const char* name : {"range", "subset", "concat", "stack"}) {
    EXPECT_TRUE(is_registered_dataset(name)) << name;
    EXPECT_NE(std::find(types.begin(), types.end(), name), types.end()) << name;
  }
  for (const char* name : {"range_iterable", "counting", "chain"})
    EXPECT_TRUE(is_registered_iterable_dataset(name)) << name;
}

TEST(BuiltinDatasets, RangeDatasetFromItsHandle) {
  register_builtin_datasets();
  auto ds = make_dataset(handle("range", {{"n", 5}, {"start", 3}}));
  EXPECT_EQ(all_samples(*ds), (std::vector<int64_t>{3, 4, 5, 6, 7}));
  EXPECT_EQ(ds->get(-1).to_int(), 7);
  EXPECT_THROW(ds->get(5), IndexError);
  ASSERT_TRUE(ds->handle().has_value());
  EXPECT_EQ(ds->handle()->type, "range");
  EXPECT_EQ(all_samples(*make_dataset(handle("range", {{"n", 2}}))), (std::vector<int64_t>{0, 1}));
  EXPECT_THROW(make_dataset(handle("range", {{"n", -1}})), ValueError);
  EXPECT_THROW(make_dataset(handle("range", {{"start", 1}})), KeyError);
  EXPECT_THROW(make_dataset(handle("range_iterable", {{"end", 3}})), ValueError);
}

// The order DataLoader yields an iterable dataset's batches in: worker k's batches, taken
// round-robin over the workers that still have data (iterable_dataset.json's description).
std::vector<Value> simulate_loader(const DatasetHandle& h, int num_workers, int64_t batch_size) {
  std::vector<std::vector<Value>> per_worker;
  for (int w = 0; w < std::max(num_workers, 1); ++w) {
    WorkerInfo info;
    info.id = w;
    info.num_workers = num_workers;
    WorkerInfoScope scope(num_workers > 0 ? &info : nullptr);
    auto ds = make_iterable_dataset(h);
    auto cursor = ds->iter();
    std::vector<Value> batches, pending;
    auto flush = [&] {
      if (!pending.empty()) batches.push_back(default_collate(pending));
      pending.clear();
    };
    while (auto v = cursor->next()) {
      if (batch_size == 0) {
        batches.push_back(*v);
        continue;
      }
      pending.push_back(*v);
      if (static_cast<int64_t>(pending.size()) == batch_size) flush();
    }
    flush();
    per_worker.push_back(std::move(batches));
  }
  std::vector<Value> out;
  for (size_t round = 0;; ++round) {
    bool any = false;
    for (const auto& b : per_worker)
      if (round < b.size()) {
        out.push_back(b[round]);
        any = true;
      }
    if (!any) return out;
  }
}

void expect_batches(const json& want, const std::vector<Value>& got) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (want[i].is_number()) {
      EXPECT_EQ(got[i].to_int(), want[i].get<int64_t>());
    } else {
      const Tensor& t = got[i].to_tensor();
      EXPECT_EQ(std::string("torch.") + dtype_name(t.dtype()), want[i].at("dtype").get<std::string>());
      EXPECT_EQ(t.sizes().vec(), want[i].at("shape").get<std::vector<int64_t>>());
      EXPECT_EQ(t.to_int64_vector(), want[i].at("tensor").get<std::vector<int64_t>>());
    }
  }
}

TEST(BuiltinDatasets, RangeIterableSplitsAcrossWorkersLikeTheDocstringExample) {
  register_builtin_datasets();
  const json golden = load_json("iterable_dataset.json").at("example1_split_in_iter");
  const DatasetHandle h = handle("range_iterable", {{"start", 3}, {"end", 7}});
  int ran = 0;
  for (const auto& [workers, by_batch] : golden.items()) {
    for (const auto& [key, want] : by_batch.items()) {
      SCOPED_TRACE("num_workers " + workers + ", " + key);
      int64_t bs = key == "batch_size_None" ? 0 : std::stoll(key.substr(std::string("batch_size_").size()));
      expect_batches(want, simulate_loader(h, std::stoi(workers), bs));
      ++ran;
    }
  }
  EXPECT_GT(ran, 0);
  auto ds = make_iterable_dataset(h);
  EXPECT_EQ(ds->size(), std::nullopt);  // like the docstring's dataset, no __len__
  EXPECT_THROW(make_iterable_dataset(handle("range_iterable", {{"start", 5}, {"end", 4}})), ValueError);
}

TEST(BuiltinDatasets, CountingDuplicatesInEveryWorker) {
  register_builtin_datasets();
  const json golden = load_json("iterable_dataset.json").at("counting5_duplicates_per_worker");
  int ran = 0;
  for (const auto& [workers, want] : golden.items()) {
    SCOPED_TRACE("num_workers " + workers);
    expect_batches(want, simulate_loader(handle("counting", {{"n", 5}}), std::stoi(workers), 0));
    ++ran;
  }
  EXPECT_GT(ran, 0);
  EXPECT_EQ(make_iterable_dataset(handle("counting", {{"n", 5}}))->size(), std::optional<int64_t>(5));
}

TEST(BuiltinDatasets, CompositesOfHandleDatasetsCanBeRebuiltFromTheirHandles) {
  register_builtin_datasets();
  auto a = make_dataset(handle("range", {{"n", 4}}));
  auto b = make_dataset(handle("range", {{"n", 3}, {"start", 10}}));

  auto both = a + b;
  ASSERT_TRUE(both->handle().has_value());
  EXPECT_EQ(both->handle()->type, "concat");
  auto sub = std::make_shared<Subset>(both, std::vector<int64_t>{6, 0, 4});
  ASSERT_TRUE(sub->handle().has_value());
  EXPECT_EQ(sub->handle()->type, "subset");
  auto rebuilt = make_dataset(*sub->handle());
  EXPECT_EQ(all_samples(*rebuilt), (std::vector<int64_t>{12, 0, 10}));
  EXPECT_EQ(all_samples(*rebuilt), all_samples(*sub));

  auto chain = make_iterable_dataset(handle("counting", {{"n", 2}})) +
               make_iterable_dataset(handle("range_iterable", {{"start", 5}, {"end", 7}}));
  ASSERT_TRUE(chain->handle().has_value());
  EXPECT_EQ(drain(*make_iterable_dataset(*chain->handle())), (std::vector<int64_t>{0, 1, 5, 6}));

  auto c = make_dataset(handle("range", {{"n", 3}}));
  auto stacked = std::make_shared<StackDataset>(
      std::vector<std::pair<std::string, std::shared_ptr<Dataset>>>{{"x", b}, {"y", c}});
  ASSERT_TRUE(stacked->handle().has_value());
  EXPECT_EQ(stacked->handle()->type, "stack");
  auto stack_rebuilt = make_dataset(*stacked->handle());
  EXPECT_EQ(stack_rebuilt->size(), 3);
  EXPECT_EQ(stack_rebuilt->get(2).repr(), stacked->get(2).repr());
  EXPECT_EQ(stack_rebuilt->get(2).at("x").to_int(), 12);
  auto tuple_stack = std::make_shared<StackDataset>(std::vector<std::shared_ptr<Dataset>>{b, b});
  EXPECT_EQ(make_dataset(*tuple_stack->handle())->get(0).repr(), tuple_stack->get(0).repr());

  // Without a handle on a member there is nothing a worker could rebuild.
  auto tensors = std::make_shared<TensorDataset>(std::vector<Tensor>{Tensor::arange(3)});
  EXPECT_FALSE(Subset(tensors, {0}).handle().has_value());
  EXPECT_FALSE((a + tensors)->handle().has_value());
}

TEST(BuiltinDatasets, UnknownTypesStillFailWithTheRegistryMessage) {
  try {
    make_dataset(handle("no_such_dataset_type", {}));
    ADD_FAILURE() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_dataset_type"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loader
