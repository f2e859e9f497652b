// PyTorch's test_dataloader.py cases that need worker processes (TORCH_TESTS.md rows
// named in each test), including the TestDataLoaderPersistentWorkers rerun (D104) of
// the cases the other suites run only without persistent workers.  Every test ends
// with no shared-memory segment of this process and no child process left.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "loader/dataloader.h"
#include "loader/datasets.h"
#include "loader/error.h"
#include "loader/generator.h"
#include "loader/warnings.h"
#include "loader/worker_info.h"
#include "process_leaks.h"
#include "sanitizers.h"
#include "torch_parity_util.h"

namespace loader {
namespace {

using nlohmann::json;
using testing::counting;
using testing::load_golden;
using testing::range_ds;
using testing::run_epoch;

// ------------------------------------------------------------------ datasets of this suite

/// make_golden.py's RaiseDS: every __getitem__ raises ValueError("boom at i").
class RaiseValueError : public Dataset {
 public:
  Value get(int64_t i) override { throw ValueError("boom at " + std::to_string(i)); }
  int64_t size() const override { return 10; }
};
LOADER_REGISTER_DATASET("parity_raise_value_error", [](const Value&) { return std::make_shared<RaiseValueError>(); });

/// Sample i: [i, the worker's WorkerInfo repr, whether worker_info.dataset is this very copy].
class WorkerInfoProbe : public Dataset {
 public:
  Value get(int64_t i) override {
    const WorkerInfo* w = get_worker_info();
    if (!w) return Value::list({Value(i), Value(""), Value(false)});
    return Value::list({Value(i), Value(w->repr()), Value(w->dataset.get() == this)});
  }
  int64_t size() const override { return 8; }
};
LOADER_REGISTER_DATASET("parity_worker_info_probe", [](const Value&) { return std::make_shared<WorkerInfoProbe>(); });

/// Sample i is how many samples this copy of the dataset served so far (D105: a
/// persistent worker keeps its copy, and its state, from one epoch to the next).
class CopyCounter : public Dataset {
 public:
  Value get(int64_t) override { return Value(++served_); }
  int64_t size() const override { return 4; }

 private:
  int64_t served_ = 0;
};
LOADER_REGISTER_DATASET("parity_copy_counter", [](const Value&) { return std::make_shared<CopyCounter>(); });

/// TestDictDataLoader's DictDataset: {"a_tensor": empty(4, 2).fill_(i), "another_dict": {"a_number": i}}.
class DictDataset : public Dataset {
 public:
  Value get(int64_t i) override {
    std::vector<float> v(8, static_cast<float>(i));
    return Value::dict({{"a_tensor", Value(Tensor::from_vector<float>(v, {4, 2}))},
                        {"another_dict", Value::dict({{"a_number", Value(i)}})}});
  }
  int64_t size() const override { return 16; }
};
LOADER_REGISTER_DATASET("parity_dict", [](const Value&) { return std::make_shared<DictDataset>(); });

/// TestNamedTupleDataLoader's NamedTupleDataset: Batch(data=Data(positive=i, negative=-i),
/// label=str(i), random_tensor=randn(3)).
class NamedTupleDataset : public Dataset {
 public:
  Value get(int64_t i) override {
    Value data = Value::namedtuple("Data", {"positive", "negative"}, {Value(i), Value(-i)});
    return Value::namedtuple("Batch", {"data", "label", "random_tensor"},
                             {data, Value(std::to_string(i)), Value(Tensor::from_vector<float>({0.5f, 1.5f, 2.5f}))});
  }
  int64_t size() const override { return 10; }
};
LOADER_REGISTER_DATASET("parity_namedtuple", [](const Value&) { return std::make_shared<NamedTupleDataset>(); });

/// TestStringDataLoader's StringDataset: (s[i], i) for s = "12345".
class StringDataset : public Dataset {
 public:
  Value get(int64_t i) override { return Value::tuple({Value(std::string(1, "12345"[i])), Value(i)}); }
  int64_t size() const override { return 5; }
};
LOADER_REGISTER_DATASET("parity_strings", [](const Value&) { return std::make_shared<StringDataset>(); });

/// PyTorch's SleepDataset (D102): every __getitem__ sleeps `ms` milliseconds.
class SleepDataset : public Dataset {
 public:
  explicit SleepDataset(int64_t ms) : ms_(ms) {}
  Value get(int64_t i) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
    return Value(i);
  }
  int64_t size() const override { return 10; }

 private:
  int64_t ms_;
};
LOADER_REGISTER_DATASET("parity_sleep", [](const Value& p) { return std::make_shared<SleepDataset>(p.at("ms").to_int()); });

// ------------------------------------------------------------------ helpers

/// Warnings about an IterableDataset's length seen while `f` runs.
template <class F>
int length_warnings(F&& f) {
  WarningCapture capture;
  f();
  int n = 0;
  for (const auto& m : capture.messages())
    if (std::regex_search(m, std::regex(R"(but [0-9]+ samples have been fetched\. For multiprocessing data-loading, this)")))
      ++n;
  return n;
}

class TorchParityWorkers : public ::testing::Test {
 protected:
  void SetUp() override {
    register_builtin_datasets();
    leaks_.emplace();
  }
  void TearDown() override {
    EXPECT_EQ(leaks_->new_segments(), "") << "shared-memory segments left in " << runtime::shm_dir();
    EXPECT_EQ(leaks_->new_children(), "") << "child processes left behind";
  }
  std::optional<testing::LeakCheck> leaks_;
};
using TorchParity = TorchParityWorkers;

// ------------------------------------------------------------------ tests

TEST_F(TorchParity, D74_LengthWarningOnlyAfterLenAndThenOnEveryExtraBatch) {
  // test_iterable_style_dataset: Counting(20) in each of 3 workers.  40 batches of a
  // fresh iterator: no warning (len never asked); len(dl) == 20; a new iterator: 20
  // batches without, then every further batch with a warning.  Also rerun with
  // persistent workers (D104).
  for (bool persistent : {false, true}) {
    for (int prefetch : {2, 3, 4}) {
      SCOPED_TRACE(std::string(persistent ? "persistent, " : "") + "prefetch_factor " + std::to_string(prefetch));
      DataLoaderOptions o;
      o.num_workers = 3;
      o.prefetch_factor = prefetch;
      o.persistent_workers = persistent;
      DataLoader dl(counting(20), o);
      auto it = dl.iter();
      EXPECT_EQ(length_warnings([&] {
                  for (int k = 0; k < 40; ++k) ASSERT_TRUE(it.next().has_value());
                }),
                0)
          << "Should not warn before accessing len(dataloader)";
      EXPECT_EQ(dl.size(), 20);
      it = dl.iter();
      EXPECT_EQ(length_warnings([&] {
                  for (int k = 0; k < 20; ++k) ASSERT_TRUE(it.next().has_value());
                }),
                0)
          << "Should not warn before exceeding length";
      for (int k = 0; k < 3; ++k)
        EXPECT_EQ(length_warnings([&] { ASSERT_TRUE(it.next().has_value()); }), 1)
            << "Should always warn after exceeding length (extra batch " << k << ")";
    }
  }
}

// PyTorch's iterator copies loader._IterableDataset_len_called when it is made (in
// __init__ and, for persistent workers, _reset): asking len(dataloader) after iter()
// warns only from the next iterator on.
TEST_F(TorchParity, D74_AnIteratorKeepsTheLengthReportedBeforeItWasMade) {
  for (bool persistent : {false, true}) {
    SCOPED_TRACE(persistent ? "persistent" : "fresh workers");
    DataLoaderOptions o;
    o.num_workers = 3;
    o.persistent_workers = persistent;
    DataLoader dl(counting(20), o);
    // Counting(20) in each of the 3 workers: 60 batches an epoch.
    int64_t batches = 0;
    auto it = dl.iter();
    EXPECT_EQ(dl.size(), 20);  // after iter(): this iterator never heard of it
    EXPECT_EQ(length_warnings([&] {
                while (it.next()) ++batches;
              }),
              0);
    EXPECT_EQ(batches, 60);
    it = dl.iter();  // made after len(): warns for every batch past the 20th
    EXPECT_EQ(length_warnings([&] {
                while (it.next()) ++batches;
              }),
              40);
    EXPECT_EQ(batches, 120);
  }
}

TEST_F(TorchParity, D50_BuiltinCollectionConversionWithOneWorker) {
  for (bool persistent : {false, true}) {
    for (bool iterable : {false, true}) {
      const std::string where = std::string(iterable ? "iterable" : "map") + (persistent ? ", persistent" : "");
      DataLoaderOptions o;
      o.num_workers = 1;
      o.persistent_workers = persistent;
      o.batch_size = std::nullopt;
      {
        std::optional<DataLoader> dl;
        if (iterable) dl.emplace(counting(20), o);
        else dl.emplace(range_ds(20), o);
        auto got = run_epoch(*dl);
        ASSERT_EQ(got.size(), 20u) << where;
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_TRUE(got[i].is_int()) << where << ": non-batched ints stay ints, got " << got[i].repr();
          EXPECT_EQ(got[i].to_int(), static_cast<int64_t>(i)) << where;
        }
      }
      o.batch_size = 2;
      {
        std::optional<DataLoader> dl;
        if (iterable) dl.emplace(counting(20), o);
        else dl.emplace(range_ds(20), o);
        auto got = run_epoch(*dl);
        ASSERT_EQ(got.size(), 10u) << where;
        for (size_t j = 0; j < got.size(); ++j) {
          ASSERT_TRUE(got[j].is_tensor()) << where;
          const auto i = static_cast<int64_t>(2 * j);
          EXPECT_EQ(got[j].to_tensor().to_int64_vector(), (std::vector<int64_t>{i, i + 1})) << where;
        }
      }
    }
  }
}

TEST_F(TorchParity, D13_ChainedIterablesWithOneWorker) {
  DataLoaderOptions o;
  o.num_workers = 1;
  DataLoader dl(counting(20) + counting(15), o);
  auto got = run_epoch(dl);
  ASSERT_EQ(got.size(), 35u);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].is_tensor());
    EXPECT_EQ(got[i].to_tensor().to_int64_vector(), std::vector<int64_t>{static_cast<int64_t>(i < 20 ? i : i - 20)});
  }
}

TEST_F(TorchParity, D73_MultiKeepAndMultiDropWithTwoWorkersAndATimeout) {
  for (bool drop_last : {false, true}) {
    DataLoaderOptions o;
    o.batch_size = 3;
    o.drop_last = drop_last;
    o.num_workers = 2;
    o.timeout = 60;  // JOIN_TIMEOUT-like: generous, never reached
    DataLoader dl(range_ds(5), o);
    EXPECT_EQ(dl.size(), drop_last ? 1 : 2);
    EXPECT_EQ(run_epoch(dl).size(), drop_last ? 1u : 2u);
  }
}

TEST_F(TorchParity, D91_WorkerExceptionKeepsItsTypeAndPyTorchsText) {
  const json want = load_golden("errors.json").at("runtime").at("worker_exception");
  DataLoaderOptions o;
  o.batch_size = 2;
  o.num_workers = 2;
  DataLoader dl(make_dataset({"parity_raise_value_error", Value::dict({})}), o);
  auto it = dl.iter();
  try {
    it.next();
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.substr(0, msg.find('\n')), want.at("first_line").get<std::string>()) << msg;
    EXPECT_EQ(msg.find("Original Traceback") != std::string::npos, want.at("contains_original_traceback").get<bool>())
        << msg;
    std::string trimmed = msg;
    while (!trimmed.empty() && (trimmed.back() == '\n' || trimmed.back() == ' ')) trimmed.pop_back();
    EXPECT_EQ(trimmed.substr(trimmed.rfind('\n') + 1), want.at("last_line").get<std::string>()) << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a ValueError: " << e.what();
  }
}

TEST_F(TorchParity, D90_D104_ErrorsInEveryBatchWithPersistentWorkers) {
  DataLoaderOptions o;
  o.num_workers = 4;
  o.batch_size = 2;
  o.shuffle = true;
  o.persistent_workers = true;
  // PyTorch's ErrorDataset, registered by worker_golden_test.cpp of this binary.
  DataLoader dl(make_dataset({"golden_no_getitem", Value::dict({{"n", 41}})}), o);
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto it = dl.iter();
    int64_t errors = 0;
    bool ended = false;
    for (int guard = 0; guard < 1000 && !ended; ++guard) {
      try {
        if (!it.next()) ended = true;
      } catch (const NotImplementedError&) {
        ++errors;
      }
    }
    ASSERT_TRUE(ended) << "epoch " << epoch;
    EXPECT_EQ(errors, 21) << "epoch " << epoch << ": ceil(41 / 2) errors";
  }
}

TEST_F(TorchParity, D87_WorkerInfoReprAndTheWorkersOwnCopy) {
  DataLoaderOptions o;
  o.num_workers = 2;
  o.batch_size = std::nullopt;
  DataLoader dl(make_dataset({"parity_worker_info_probe", Value::dict({})}), o);
  int n = 0;
  for (const Value& s : run_epoch(dl)) {
    const std::string repr = s[1].to_string();
    for (const char* field : {"id=", "num_workers=", "seed=", "dataset="})
      EXPECT_NE(repr.find(field), std::string::npos) << field << " missing in " << repr;
    EXPECT_TRUE(s[2].to_bool()) << "worker_info.dataset is the copy the worker loads from";
    ++n;
  }
  EXPECT_EQ(n, 8);
}

TEST_F(TorchParity, D105_PersistentWorkersKeepTheirDatasetCopyAcrossEpochs) {
  for (bool persistent : {false, true}) {
    DataLoaderOptions o;
    o.num_workers = 1;
    o.batch_size = std::nullopt;
    o.persistent_workers = persistent;
    DataLoader dl(make_dataset({"parity_copy_counter", Value::dict({})}), o);
    std::vector<int64_t> first, second;
    for (const Value& v : run_epoch(dl)) first.push_back(v.to_int());
    for (const Value& v : run_epoch(dl)) second.push_back(v.to_int());
    EXPECT_EQ(first, (std::vector<int64_t>{1, 2, 3, 4}));
    const std::vector<int64_t> want = persistent ? std::vector<int64_t>{5, 6, 7, 8} : std::vector<int64_t>{1, 2, 3, 4};
    EXPECT_EQ(second, want) << (persistent ? "a persistent worker keeps its dataset copy" : "a fresh worker gets a fresh copy");
  }
}

TEST_F(TorchParity, D64_D104_NestedDictBatchesWithPersistentWorkers) {
  for (int workers : {0, 1, 2}) {
    DataLoaderOptions o;
    o.batch_size = 2;
    o.num_workers = workers;
    o.persistent_workers = workers > 0;
    DataLoader dl(make_dataset({"parity_dict", Value::dict({})}), o);
    for (int epoch = 0; epoch < 2; ++epoch) {
      int64_t i = 0;
      for (const Value& b : run_epoch(dl)) {
        SCOPED_TRACE(std::to_string(workers) + " workers, batch " + std::to_string(i));
        ASSERT_TRUE(b.is_dict());
        ASSERT_EQ(b.size(), 2u);
        EXPECT_EQ(b.dict_items()[0].first.to_string(), "a_tensor");
        EXPECT_EQ(b.dict_items()[1].first.to_string(), "another_dict");
        const Tensor& t = b.at("a_tensor").to_tensor();
        EXPECT_EQ(t.sizes().vec(), (std::vector<int64_t>{2, 4, 2}));
        std::vector<double> want(16, static_cast<double>(2 * i));
        std::fill(want.begin() + 8, want.end(), static_cast<double>(2 * i + 1));
        EXPECT_EQ(t.to_double_vector(), want);
        const Value& inner = b.at("another_dict");
        ASSERT_TRUE(inner.is_dict());
        ASSERT_TRUE(inner.at("a_number").is_tensor());
        EXPECT_EQ(inner.at("a_number").to_tensor().to_int64_vector(), (std::vector<int64_t>{2 * i, 2 * i + 1}));
        ++i;
      }
      EXPECT_EQ(i, 8);
    }
  }
}

TEST_F(TorchParity, D65_NamedTupleKeepsItsTypeWithAndWithoutAutoCollation) {
  for (int workers : {0, 1}) {
    SCOPED_TRACE(std::to_string(workers) + " workers");
    {
      DataLoaderOptions o;
      o.batch_size = 2;
      o.num_workers = workers;
      DataLoader dl(make_dataset({"parity_namedtuple", Value::dict({})}), o);
      int n = 0;
      for (const Value& b : run_epoch(dl)) {
        EXPECT_EQ(b.type_name(), "Batch");
        EXPECT_EQ(b.field_names(), (std::vector<std::string>{"data", "label", "random_tensor"}));
        EXPECT_TRUE(b[2].is_tensor());
        EXPECT_EQ(b[0].type_name(), "Data");
        EXPECT_TRUE(b[0][0].is_tensor());
        ASSERT_TRUE(b[1].is_list()) << b[1].repr();  // strings collate to a list of str
        ++n;
      }
      EXPECT_EQ(n, 5);
    }
    {
      DataLoaderOptions o;
      o.batch_size = std::nullopt;
      o.num_workers = workers;
      DataLoader dl(make_dataset({"parity_namedtuple", Value::dict({})}), o);
      int64_t i = 0;
      for (const Value& s : run_epoch(dl)) {
        EXPECT_EQ(s.type_name(), "Batch");
        EXPECT_TRUE(s[2].is_tensor());
        EXPECT_EQ(s[0].type_name(), "Data");
        ASSERT_TRUE(s[0][0].is_int()) << "without auto-collation ints are not converted: " << s[0][0].repr();
        EXPECT_EQ(s[0][0].to_int(), i);
        EXPECT_EQ(s[1].to_string(), std::to_string(i));
        ++i;
      }
      EXPECT_EQ(i, 10);
    }
  }
}

TEST_F(TorchParity, D66_StringsCollateToListsOfStrWithFourShufflingWorkers) {
  DataLoaderOptions o;
  o.batch_size = 2;
  o.shuffle = true;
  o.num_workers = 4;
  DataLoader dl(make_dataset({"parity_strings", Value::dict({})}), o);
  std::vector<int64_t> seen;
  for (const Value& b : run_epoch(dl)) {
    ASSERT_TRUE(b[0].is_list()) << b.repr();
    const Tensor& n = b[1].to_tensor();
    ASSERT_EQ(b[0].size(), static_cast<size_t>(n.numel()));
    for (int64_t k = 0; k < n.numel(); ++k) {
      ASSERT_TRUE(b[0][static_cast<size_t>(k)].is_string());
      const int64_t idx = n.item_int64_at(k);
      EXPECT_EQ(b[0][static_cast<size_t>(k)].to_string(), std::string(1, "12345"[idx]));
      seen.push_back(idx);
    }
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

TEST_F(TorchParity, D94_AnIteratorOutlivingItsLoaderEndsItsWorkersWhenDestroyed) {
  // test_partial_workers: loader = iter(DataLoader(...)) (the DataLoader itself is gone),
  // break at batch 10 of 50, `del loader`: every worker has terminated.
  DataLoaderOptions o;
  o.batch_size = 2;
  o.num_workers = 4;
  {
    auto it = DataLoader(range_ds(100), o).iter();
    int i = -1;
    while (auto b = it.next()) {
      ++i;
      EXPECT_EQ(b->to_tensor().to_int64_vector(), (std::vector<int64_t>{2 * i, 2 * i + 1}));
      if (i == 10) break;
    }
    EXPECT_EQ(i, 10);
  }
  // TearDown checks that no worker process is left.
}

TEST_F(TorchParity, D78_D80_D104_SequentialAndShuffledBatchesWithPersistentWorkers) {
  for (bool shuffle : {false, true}) {
    DataLoaderOptions o;
    o.batch_size = 2;
    o.num_workers = 4;
    o.persistent_workers = true;
    o.shuffle = shuffle;
    o.generator = std::make_shared<Generator>(7);
    DataLoader dl(range_ds(100), o);
    DataLoaderOptions single = o;
    single.num_workers = 0;
    single.persistent_workers = false;
    single.generator = std::make_shared<Generator>(7);
    DataLoader dl0(range_ds(100), single);
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<std::vector<int64_t>> got, want;
      for (const Value& b : run_epoch(dl)) got.push_back(b.to_tensor().to_int64_vector());
      for (const Value& b : run_epoch(dl0)) want.push_back(b.to_tensor().to_int64_vector());
      ASSERT_EQ(got.size(), 50u);
      if (!shuffle || epoch == 0) {  // persistent workers draw base_seed once (D107): epoch 1 shuffles differently
        EXPECT_EQ(got, want) << "epoch " << epoch << (shuffle ? ", shuffle" : "");
      }
      std::vector<int64_t> all;
      for (const auto& b : got) all.insert(all.end(), b.begin(), b.end());
      std::sort(all.begin(), all.end());
      for (int64_t k = 0; k < 100; ++k) EXPECT_EQ(all[static_cast<size_t>(k)], k);
    }
  }
}

TEST_F(TorchParity, D102_D104_TimeoutWithPersistentWorkers) {
  // _test_timeout(persistent_workers): SleepDataset (3 s per item), timeout=1, 2 workers:
  // RuntimeError matching r'DataLoader timed out after \d+ seconds'.
  const json want = load_golden("errors.json").at("runtime").at("timeout_1s");
  for (bool persistent : {false, true}) {
    DataLoaderOptions o;
    o.num_workers = 2;
    o.timeout = testing::kSlowdown;
    o.persistent_workers = persistent;
    DataLoader dl(make_dataset({"parity_sleep", Value::dict({{"ms", 3000 * testing::kSlowdown}})}), o);
    auto it = dl.iter();
    try {
      it.next();
      ADD_FAILURE() << "no timeout" << (persistent ? ", persistent" : "");
    } catch (const RuntimeError& e) {
      EXPECT_TRUE(std::regex_search(e.what(), std::regex(R"(DataLoader timed out after \d+ seconds)"))) << e.what();
      if (testing::kSlowdown == 1) {
        EXPECT_EQ(std::string(e.what()).rfind(want.at("message").get<std::string>(), 0), 0u) << e.what();
      }
    }
  }
}

}  // namespace
}  // namespace loader
