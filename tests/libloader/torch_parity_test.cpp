// PyTorch's test_dataloader.py cases that run without worker processes
// (TORCH_TESTS.md rows named in each test), with PyTorch's exact values: from
// tests/golden (dataloader_len.json, errors.json) where recorded, else from the
// assertions of the Python test the row names.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "loader/dataloader.h"
#include "loader/datasets.h"
#include "loader/error.h"
#include "loader/generator.h"
#include "loader/samplers.h"
#include "loader/warnings.h"
#include "torch_parity_util.h"

namespace loader {
namespace {

using nlohmann::json;
using testing::counting;
using testing::load_golden;
using testing::range_ds;
using testing::run_epoch;

/// PyTorch's TestDataLoader fixture: data = randn(100, 2, 3, 5), labels = randperm(50).repeat(2),
/// dataset = TensorDataset(data, labels).  Distinct values stand in for randn (the
/// tests compare samples, never the random values themselves).
struct TorchFixtureData {
  Tensor data = Tensor::arange(100 * 2 * 3 * 5, DType::Float32).view({100, 2, 3, 5});
  Tensor labels;
  std::shared_ptr<TensorDataset> dataset;
  TorchFixtureData() {
    std::vector<int64_t> l;
    for (int rep = 0; rep < 2; ++rep)
      for (int64_t i = 0; i < 50; ++i) l.push_back((i * 37) % 50);  // a permutation of range(50), twice
    labels = Tensor::from_vector<int64_t>(l);
    dataset = std::make_shared<TensorDataset>(std::vector<Tensor>{data, labels});
  }
};

/// The error a callable throws: "<python type>: <message>", or "" when none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.python_type() + ": " + e.what();
  } catch (const std::exception& e) {
    return std::string("std::exception: ") + e.what();
  }
  return "";
}

class TorchParity : public ::testing::Test {
 protected:
  void SetUp() override { register_builtin_datasets(); }
};

// ------------------------------------------------------------------ E. len() semantics

TEST_F(TorchParity, D69_D70_LenMatchesPyTorchAndTheIterationCount) {
  // dataloader_len.json `cases`: map-style Sized(n) and an iterable with __len__ (Counting(10)).
  const json golden = load_golden("dataloader_len.json");
  int ran = 0;
  for (const auto& c : golden.at("cases")) {
    DataLoaderOptions o;
    o.batch_size = c.at("batch_size").is_null() ? std::nullopt
                                                : std::optional<int64_t>(c.at("batch_size").get<int64_t>());
    o.drop_last = c.at("drop_last").get<bool>();
    const int64_t n = c.at("n").get<int64_t>();
    const std::string where = c.dump();
    std::optional<DataLoader> dl;
    if (c.at("kind") == "map") dl.emplace(range_ds(n), o);
    else dl.emplace(counting(n), o);
    EXPECT_EQ(dl->size(), c.at("len").get<int64_t>()) << where;
    EXPECT_EQ(static_cast<int64_t>(run_epoch(*dl).size()), c.at("num_batches_iterated").get<int64_t>()) << where;
    ++ran;
  }
  EXPECT_EQ(static_cast<size_t>(ran), golden.at("cases").size());
  EXPECT_GT(ran, 0);
}

TEST_F(TorchParity, D69_LenOf100ItemsWithBatchSizes2And3) {
  // test_len: len(dataset) = 100; bs 2 gives 50, bs 3 gives 34; iterations == len.
  TorchFixtureData f;
  for (auto [bs, want] : std::vector<std::pair<int64_t, int64_t>>{{2, 50}, {3, 34}}) {
    DataLoaderOptions o;
    o.batch_size = bs;
    DataLoader dl(f.dataset, o);
    EXPECT_EQ(dl.size(), want);
    EXPECT_EQ(static_cast<int64_t>(run_epoch(dl).size()), want);
  }
}

TEST_F(TorchParity, D31_D32_D39_D40_D43_LenWithOtherSamplers) {
  const json other = load_golden("dataloader_len.json").at("other");
  {  // sampler=range(2, 12), batch_size=2: len 5 and input == data[2i+2 : 2i+4] (_test_sampler)
    DataLoaderOptions o;
    o.batch_size = 2;
    o.sampler = ListSampler::range(2, 12);
    TorchFixtureData f;
    DataLoader dl(f.dataset, o);
    EXPECT_EQ(dl.size(), other.at("sampler_range_2_12_bs2").get<int64_t>());
    auto batches = run_epoch(dl);
    ASSERT_EQ(static_cast<int64_t>(batches.size()), dl.size());
    for (int64_t i = 0; i < static_cast<int64_t>(batches.size()); ++i)
      EXPECT_TRUE(batches[static_cast<size_t>(i)][0].to_tensor().equal(f.data.slice(0, 2 * i + 2, 2 * i + 4))) << i;
  }
  {  // batch_sampler=[(0, 1), (2, 3, 4)] * 4: len 8 (_test_batch_sampler)
    DataLoaderOptions o;
    std::vector<IndexBatch> b;
    for (int k = 0; k < 4; ++k) {
      b.push_back({0, 1});
      b.push_back({2, 3, 4});
    }
    o.batch_sampler = std::make_shared<ListBatchSampler>(b);
    DataLoader dl(range_ds(100), o);
    EXPECT_EQ(dl.size(), other.at("batch_sampler_8_batches").get<int64_t>());
    auto batches = run_epoch(dl);
    ASSERT_EQ(batches.size(), 8u);
    for (size_t i = 0; i < batches.size(); ++i)
      EXPECT_EQ(batches[i].to_tensor().to_int64_vector(),
                (i % 2 == 0 ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{2, 3, 4}));
  }
  for (bool replacement : {true, false}) {  // RandomSampler(num_samples=105), batch_size=6: ceil(105/6)
    DataLoaderOptions o;
    o.batch_size = 6;
    o.sampler = std::make_shared<RandomSampler>(range_ds(100), replacement, 105, std::make_shared<Generator>(0));
    DataLoader dl(range_ds(100), o);
    const std::string key = std::string("random_sampler_num_samples_105_bs6_") + (replacement ? "replacement" : "no_replacement");
    EXPECT_EQ(dl.size(), other.at(key).get<int64_t>()) << key;
    EXPECT_EQ(static_cast<int64_t>(run_epoch(dl).size()), dl.size()) << key;
  }
  {  // DistributedSampler(Sized(9), 4, 0), batch_size=2, drop_last=True
    DataLoaderOptions o;
    o.batch_size = 2;
    o.drop_last = true;
    o.sampler = std::make_shared<DistributedSampler>(range_ds(9), 4, 0);
    DataLoader dl(range_ds(9), o);
    EXPECT_EQ(dl.size(), other.at("distributed_9_over_4_drop_last_bs2").get<int64_t>());
    EXPECT_EQ(static_cast<int64_t>(run_epoch(dl).size()), dl.size());
  }
}

/// A map-style dataset that can grow (PyTorch's test uses a Python list and append()).
class GrowingDataset : public Dataset {
 public:
  explicit GrowingDataset(int64_t n) : n_(n) {}
  Value get(int64_t) override { return Value(Tensor::from_vector<float>({1, 1, 1, 1})); }
  int64_t size() const override { return n_; }
  void append() { ++n_; }

 private:
  int64_t n_;
};

TEST_F(TorchParity, D71_GrowingDatasetLenIsComputedLazily) {
  const auto want = load_golden("dataloader_len.json").at("other").at("growing_dataset_len_after_append");
  auto ds = std::make_shared<GrowingDataset>(4);
  DataLoaderOptions seq;
  seq.shuffle = false;
  DataLoaderOptions shuf;
  shuf.shuffle = true;
  DataLoader dl_seq(ds, seq);
  DataLoader dl_shuffle(ds, shuf);
  ds->append();
  EXPECT_EQ(dl_seq.size(), want.at(0).get<int64_t>());
  EXPECT_EQ(dl_shuffle.size(), want.at(1).get<int64_t>());
  EXPECT_EQ(run_epoch(dl_seq).size(), 5u);
  EXPECT_EQ(run_epoch(dl_shuffle).size(), 5u);
}

TEST_F(TorchParity, D72_SingleKeepAndSingleDrop) {
  // TestDataLoaderUtils: 5 items, batch_size 3: 2 batches, or 1 with drop_last.
  for (bool drop_last : {false, true}) {
    DataLoaderOptions o;
    o.batch_size = 3;
    o.drop_last = drop_last;
    DataLoader dl(range_ds(5), o);
    EXPECT_EQ(run_epoch(dl).size(), drop_last ? 1u : 2u);
  }
}

// ------------------------------------------------------------------ D. sequential / shuffle / conversion

TEST_F(TorchParity, D46_SequentialNonBatchYieldsRawSamples) {
  TorchFixtureData f;
  DataLoaderOptions o;
  o.batch_size = std::nullopt;
  DataLoader dl(f.dataset, o);
  int64_t idx = -1;
  for (const Value& s : run_epoch(dl)) {
    ++idx;
    ASSERT_TRUE(s.is_sequence()) << s.repr();
    EXPECT_TRUE(s[0].to_tensor().equal(f.data[idx])) << idx;
    EXPECT_TRUE(s[1].to_tensor().equal(f.labels[idx])) << idx;
    EXPECT_EQ(s[1].to_tensor().dim(), 0) << "a 0-dim label, not a batch of one";
  }
  EXPECT_EQ(idx, 99);
}

TEST_F(TorchParity, D47_SequentialBatchGivesContiguousSlices) {
  TorchFixtureData f;
  for (int64_t bs : {1, 2}) {
    DataLoaderOptions o;
    o.batch_size = bs;
    DataLoader dl(f.dataset, o);
    int64_t i = -1;
    for (const Value& b : run_epoch(dl)) {
      ++i;
      const int64_t idx = i * bs;
      EXPECT_TRUE(b[0].to_tensor().equal(f.data.slice(0, idx, idx + bs))) << "bs " << bs << ", batch " << i;
      EXPECT_TRUE(b[1].to_tensor().equal(f.labels.slice(0, idx, idx + bs))) << "bs " << bs << ", batch " << i;
    }
    EXPECT_EQ(i, (100 - 1) / bs) << "bs " << bs;
  }
}

TEST_F(TorchParity, D48_ShuffleSeesEverySampleOnceWithItsLabel) {
  TorchFixtureData f;
  for (std::optional<int64_t> bs : {std::optional<int64_t>(), std::optional<int64_t>(1), std::optional<int64_t>(2)}) {
    DataLoaderOptions o;
    o.batch_size = bs;
    o.shuffle = true;
    DataLoader dl(f.dataset, o);
    std::vector<int> found(100, 0);
    int64_t seen = 0;
    for (const Value& b : run_epoch(dl)) {
      Tensor samples = b[0].to_tensor();
      Tensor targets = b[1].to_tensor();
      if (!bs) {  // no batch dimension
        samples = samples.unsqueeze(0);
        targets = targets.unsqueeze(0);
      }
      for (int64_t k = 0; k < samples.size(0); ++k) {
        // data[i] is the only sample starting with the value i * 30.
        const auto first = static_cast<int64_t>(samples[k].to_double_vector().front());
        ASSERT_EQ(first % 30, 0);
        const int64_t idx = first / 30;
        EXPECT_TRUE(samples[k].equal(f.data[idx]));
        EXPECT_EQ(found[static_cast<size_t>(idx)]++, 0) << "sample " << idx << " twice";
        EXPECT_TRUE(targets[k].equal(f.labels[idx])) << "the label stays with its sample";
        ++seen;
      }
    }
    EXPECT_EQ(seen, 100);
  }
}

TEST_F(TorchParity, D49_ShuffleReproducibilityWithASeededGenerator) {
  TorchFixtureData f;
  auto run = [&] {
    DataLoaderOptions o;
    o.shuffle = true;
    o.generator = std::make_shared<Generator>(42);
    DataLoader dl(f.dataset, o);
    std::vector<int64_t> order;
    for (const Value& b : run_epoch(dl)) order.push_back(static_cast<int64_t>(b[0].to_tensor().to_double_vector()[0]) / 30);
    return order;
  };
  auto a = run();
  EXPECT_EQ(a, run());
  EXPECT_EQ(a.size(), 100u);
}

TEST_F(TorchParity, D50_BuiltinCollectionConversionSingleProcess) {
  // map-style: batch_size=None keeps ints; batch_size=2 gives tensor([i, i + 1]).
  // iterable-style likewise.
  for (bool iterable : {false, true}) {
    const std::string kind = iterable ? "iterable" : "map";
    {
      DataLoaderOptions o;
      o.batch_size = std::nullopt;
      std::optional<DataLoader> dl;
      if (iterable) dl.emplace(counting(20), o);
      else dl.emplace(range_ds(20), o);
      auto got = run_epoch(*dl);
      ASSERT_EQ(got.size(), 20u) << kind;
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_TRUE(got[i].is_int()) << kind << ": non-batched ints stay ints, got " << got[i].repr();
        EXPECT_EQ(got[i].to_int(), static_cast<int64_t>(i)) << kind;
      }
    }
    {
      DataLoaderOptions o;
      o.batch_size = 2;
      std::optional<DataLoader> dl;
      if (iterable) dl.emplace(counting(20), o);
      else dl.emplace(range_ds(20), o);
      auto got = run_epoch(*dl);
      ASSERT_EQ(got.size(), 10u) << kind;
      for (size_t j = 0; j < got.size(); ++j) {
        ASSERT_TRUE(got[j].is_tensor()) << kind;
        EXPECT_EQ(got[j].to_tensor().dtype(), DType::Int64) << kind;
        const auto i = static_cast<int64_t>(2 * j);
        EXPECT_EQ(got[j].to_tensor().to_int64_vector(), (std::vector<int64_t>{i, i + 1})) << kind;
      }
    }
  }
}

TEST_F(TorchParity, D75_D76_IterableAutoBatchingSingleProcess) {
  {
    DataLoaderOptions o;
    o.batch_size = std::nullopt;
    DataLoader dl(counting(20), o);
    EXPECT_EQ(dl.size(), 20) << "len(dataloader) == len(dataset)";
  }
  for (bool drop_last : {false, true}) {
    DataLoaderOptions o;
    o.batch_size = 7;
    o.drop_last = drop_last;
    DataLoader dl(counting(20), o);
    auto got = run_epoch(dl);
    ASSERT_EQ(got.size(), drop_last ? 2u : 3u);
    std::vector<int64_t> r0, r1, r2;
    for (int64_t i = 0; i < 7; ++i) r0.push_back(i), r1.push_back(7 + i);
    for (int64_t i = 0; i < 6; ++i) r2.push_back(14 + i);
    EXPECT_EQ(got[0].to_tensor().to_int64_vector(), r0);
    EXPECT_EQ(got[1].to_tensor().to_int64_vector(), r1);
    if (!drop_last) {
      EXPECT_EQ(got[2].to_tensor().to_int64_vector(), r2);
    }
  }
}

/// Counts get() and get_batch() calls and what get_batch received (__getitems__, fetch.py).
class BatchFetchProbe : public Dataset {
 public:
  Value get(int64_t i) override {
    ++gets;
    return Value(i);
  }
  int64_t size() const override { return 10; }
  std::vector<Value> get_batch(const IndexBatch& indices) override {
    batches.emplace_back(indices.begin(), indices.end());
    std::vector<Value> out;
    for (int64_t i : indices) out.emplace_back(i);
    return out;
  }
  int gets = 0;
  std::vector<std::vector<int64_t>> batches;
};

TEST_F(TorchParity, D16_AutoCollationHandsTheWholeIndexListToGetBatch) {
  auto ds = std::make_shared<BatchFetchProbe>();
  DataLoaderOptions o;
  o.batch_size = 4;
  DataLoader dl(ds, o);
  auto got = run_epoch(dl);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(ds->batches, (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  EXPECT_EQ(ds->gets, 0);
  EXPECT_EQ(got[2].to_tensor().to_int64_vector(), (std::vector<int64_t>{8, 9}));
}

TEST_F(TorchParity, D13_ChainedIterablesThroughTheLoaderAndMapStyleMembersRejected) {
  auto chained = counting(20) + counting(15);
  DataLoader dl(chained, DataLoaderOptions{});
  auto got = run_epoch(dl);
  ASSERT_EQ(got.size(), 35u);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].is_tensor());
    EXPECT_EQ(got[i].to_tensor().to_int64_vector(), std::vector<int64_t>{static_cast<int64_t>(i < 20 ? i : i - 20)});
  }
  const json golden = load_golden("errors.json").at("datasets").at("chain_with_map_dataset");
  const std::string want = golden.at("type").get<std::string>() + ": " + golden.at("message").get<std::string>();
  EXPECT_EQ(error_of([&] { ChainDataset c(std::vector<std::shared_ptr<DatasetBase>>{counting(3), range_ds(3)}); }), want);
}

// ------------------------------------------------------------------ H. validation

/// errors.json `dataloader_ctor` keys as DataLoaderOptions.  iterable: use CountingIterableDataset(20).
struct CtorCase {
  std::string key;
  bool iterable;
  std::function<void(DataLoaderOptions&)> set;
  bool prefix_only = false;  ///< PyTorch's message ends with a Python repr (<OBJ>, [[0]])
};

TEST_F(TorchParity, D109_D103_D108_InvalidCtorArgsRaisePyTorchsExactMessages) {
  const json golden = load_golden("errors.json").at("dataloader_ctor");
  auto seq = [] { return std::make_shared<SequentialSampler>(SampleSource(20)); };
  auto batches = [] { return std::make_shared<ListBatchSampler>(std::vector<IndexBatch>{{0}}); };
  const std::vector<CtorCase> cases = {
      {"num_workers=-1", false, [](auto& o) { o.num_workers = -1; }},
      {"timeout=-1", false, [](auto& o) { o.timeout = -1; }},
      {"batch_size=None,drop_last=True", false, [](auto& o) { o.batch_size = std::nullopt, o.drop_last = true; }},
      {"prefetch_factor=3,num_workers=0", false, [](auto& o) { o.prefetch_factor = 3; }},
      {"persistent_workers,num_workers=0", false, [](auto& o) { o.persistent_workers = true; }},
      {"mp_context_with_0_workers", false, [](auto& o) { o.multiprocessing_context = "fork"; }},
      {"mp_context_bad_string", false, [](auto& o) { o.num_workers = 1, o.multiprocessing_context = "bad"; }},
      {"sampler+shuffle", false, [&](auto& o) { o.sampler = seq(), o.shuffle = true; }},
      {"batch_sampler+batch_size", false, [&](auto& o) { o.batch_sampler = batches(), o.batch_size = 11; }},
      {"batch_sampler+shuffle", false, [&](auto& o) { o.batch_sampler = batches(), o.shuffle = true; }},
      {"batch_sampler+drop_last", false, [&](auto& o) { o.batch_sampler = batches(), o.drop_last = true; }},
      {"batch_sampler+sampler", false, [&](auto& o) { o.batch_sampler = batches(), o.sampler = seq(); }},
      {"iterable+shuffle=True", true, [](auto& o) { o.shuffle = true; }},
      {"iterable+sampler", true, [&](auto& o) { o.sampler = seq(); }, true},
      {"iterable+batch_sampler", true, [&](auto& o) { o.batch_sampler = batches(); }, true},
      {"iterable+shuffle=False_ok", true, [](auto& o) { o.shuffle = false; }},
      {"batch_size=0", false, [](auto& o) { o.batch_size = 0; }},
      {"shuffle_with_empty_map_dataset", false, [](auto& o) { o.shuffle = true; }},
  };
  size_t ran = 0;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.key);
    ASSERT_TRUE(golden.contains(c.key));
    const json& g = golden.at(c.key);
    DataLoaderOptions o;
    c.set(o);
    const int64_t n = c.key == "shuffle_with_empty_map_dataset" ? 0 : 20;
    std::string got = error_of([&] {
      if (c.iterable) {
        DataLoader dl(counting(n), o);
      } else {
        DataLoader dl(range_ds(n), o);
      }
    });
    ++ran;
    if (g.at("ok").get<bool>()) {
      EXPECT_EQ(got, "");
      continue;
    }
    std::string want = g.at("type").get<std::string>() + ": " + g.at("message").get<std::string>();
    if (c.prefix_only) {
      want = want.substr(0, want.find('=') + 1);  // "...expected unspecified sampler option, but got sampler="
      EXPECT_EQ(got.substr(0, want.size()), want) << got;
    } else {
      EXPECT_EQ(got, want);
    }
  }
  EXPECT_EQ(ran, cases.size());
}

TEST_F(TorchParity, D109_CheckOrderFollowsPyTorch) {
  // test_invalid_ctor_args_combinations: sampler+shuffle wins over the batch_sampler checks;
  // batch_size=11 with sampler and shuffle is still the sampler message.
  auto seq = std::make_shared<SequentialSampler>(SampleSource(20));
  auto bs = std::make_shared<BatchSampler>(seq, 3, false);
  {
    DataLoaderOptions o;
    o.batch_size = 11;
    o.sampler = seq;
    o.shuffle = true;
    EXPECT_EQ(error_of([&] { DataLoader dl(range_ds(20), o); }), "ValueError: sampler option is mutually exclusive with shuffle");
  }
  {
    DataLoaderOptions o;
    o.batch_sampler = bs;
    o.sampler = seq;
    o.shuffle = true;
    EXPECT_EQ(error_of([&] { DataLoader dl(range_ds(20), o); }), "ValueError: sampler option is mutually exclusive with shuffle");
  }
  {  // num_workers is checked before everything else, timeout second
    DataLoaderOptions o;
    o.num_workers = -1;
    o.timeout = -1;
    o.batch_size = 0;
    EXPECT_EQ(error_of([&] { DataLoader dl(range_ds(20), o); }).rfind("ValueError: num_workers option should be non-negative", 0), 0u);
    o.num_workers = 0;
    EXPECT_EQ(error_of([&] { DataLoader dl(range_ds(20), o); }), "ValueError: timeout option should be non-negative");
  }
}

TEST_F(TorchParity, D30_ShuffleOverAnEmptyDatasetFailsInTheConstructor) {
  DataLoaderOptions o;
  o.shuffle = true;
  EXPECT_EQ(error_of([&] { DataLoader dl(range_ds(0), o); }),
            "ValueError: num_samples should be a positive integer value, but got num_samples=0");
}

TEST_F(TorchParity, D110_OptionsCannotBeAssignedAfterInit) {
  // PyTorch raises "<attr> attribute should not be set after DataLoader is initialized";
  // the port offers no setter: options(), sampler() and batch_sampler() are read-only.
  static_assert(std::is_const_v<std::remove_reference_t<decltype(std::declval<DataLoader&>().options())>>);
  static_assert(!std::is_reference_v<decltype(std::declval<DataLoader&>().sampler())>);
  static_assert(!std::is_reference_v<decltype(std::declval<DataLoader&>().batch_sampler())>);
  DataLoaderOptions o;
  o.batch_size = 3;
  DataLoader dl(range_ds(10), o);
  EXPECT_EQ(dl.options().batch_size, std::optional<int64_t>(3));
}

TEST_F(TorchParity, D100_ExcessiveWorkerCountWarnsAtConstruction) {
  // test_excessive_thread_creation_warning: DataLoader(ds, batch_size=2, num_workers=1000)
  // warns in __init__ (check_worker_number_rationality), before any iteration.
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  WarningCapture capture;
  {
    DataLoaderOptions o;
    o.batch_size = 2;
    o.num_workers = CPU_COUNT(&set) + 1;
    DataLoader dl(range_ds(10), o);  // never iterated: no worker is started
  }
  int n = 0;
  for (const auto& m : capture.messages())
    if (m.find("excessive worker creation might get DataLoader running slow or even freeze") != std::string::npos) ++n;
  EXPECT_EQ(n, 1);
}

TEST_F(TorchParity, D74_NoLengthWarningWithoutLenAndNoneWithinLength) {
  // Single process: Counting(20) yields exactly len() samples, so no warning either way.
  WarningCapture capture;
  DataLoaderOptions o;
  DataLoader dl(counting(20), o);
  EXPECT_EQ(run_epoch(dl).size(), 20u);
  EXPECT_EQ(dl.size(), 20);
  EXPECT_EQ(run_epoch(dl).size(), 20u);
  for (const auto& m : capture.messages()) EXPECT_EQ(m.find("samples have been fetched"), std::string::npos) << m;
}

}  // namespace
}  // namespace loader
