// PyTorch's recorded worker semantics, through real worker processes: index order,
// worker assignment and seeds (golden/worker_seeds.json), IterableDataset splitting
// and duplication (golden/iterable_dataset.json), and the worker cases of PyTorch's
// test_dataloader.py (TORCH_TESTS.md D78-D93).  Every test ends with no shared-memory
// segment of this process and no child process left.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "loader/dataloader.h"
#include "loader/datasets.h"
#include "loader/error.h"
#include "loader/generator.h"
#include "loader/warnings.h"
#include "loader/worker_info.h"
#include "process_leaks.h"
#include "sanitizers.h"
#include "test_util.h"

namespace loader {
namespace {

using nlohmann::json;

// ------------------------------------------------------------------ datasets of this suite

/// PyTorch's WorkerProbe (make_golden.py): sample i is
/// [i, worker id, num_workers, worker_info.seed, initial_seed()]; in the main process
/// [i, -1, 0, None, initial_seed()].  Counts its own get() calls (D87: each worker has
/// its own copy).
class GoldenProbe : public Dataset {
 public:
  explicit GoldenProbe(int64_t n) : n_(n) {}
  Value get(int64_t i) override {
    if (i < 0 || i >= n_) throw IndexError("GoldenProbe index " + std::to_string(i) + " out of range");
    ++calls_;
    const WorkerInfo* w = get_worker_info();
    const auto initial = static_cast<int64_t>(default_generator().initial_seed());
    if (!w) return Value::list({Value(i), Value(-1), Value(0), Value(), Value(initial)});
    return Value::list({Value(i), Value(int64_t{w->id}), Value(int64_t{w->num_workers}),
                        Value(static_cast<int64_t>(w->seed)), Value(initial)});
  }
  int64_t size() const override { return n_; }
  int64_t calls() const { return calls_; }

 private:
  int64_t n_;
  int64_t calls_ = 0;
};
LOADER_REGISTER_DATASET("golden_probe", [](const Value& p) { return std::make_shared<GoldenProbe>(p.at("n").to_int()); });

/// The IterableDataset docstring's example 2: range(start, end) in every copy, unless
/// worker_init_fn narrows the copy's start/end.
class DocExample2 : public IterableDataset {
 public:
  DocExample2(int64_t start, int64_t end) : start(start), end(end) {}
  std::unique_ptr<Cursor<Value>> iter() override {
    return make_cursor<Value>([i = start, e = end]() mutable -> std::optional<Value> {
      if (i >= e) return std::nullopt;
      return Value(i++);
    });
  }
  int64_t start;
  int64_t end;
};
LOADER_REGISTER_ITERABLE_DATASET("golden_doc_example2", [](const Value& p) {
  return std::make_shared<DocExample2>(p.at("start").to_int(), p.at("end").to_int());
});

/// make_golden.py's doc2_init_fn: splits the worker's own copy of DocExample2.
LOADER_REGISTER_WORKER_INIT_FN("golden_doc2_split", [](int) {
  const WorkerInfo* info = get_worker_info();
  if (!info) throw RuntimeError("golden_doc2_split: no worker info inside worker_init_fn");
  auto ds = std::dynamic_pointer_cast<DocExample2>(info->iterable_dataset);
  if (!ds) throw TypeError("golden_doc2_split: the worker's dataset copy is not a golden_doc_example2");
  const int64_t lo = ds->start, hi = ds->end, workers = info->num_workers;
  const int64_t per = (hi - lo + workers - 1) / workers;  // int(math.ceil((hi - lo) / float(workers)))
  ds->start = lo + info->id * per;
  ds->end = std::min(ds->start + per, hi);
});

/// make_golden.py's WorkerSpecific: worker k yields range(sizes[k]); len is sum(sizes).
class WorkerSpecific : public IterableDataset {
 public:
  explicit WorkerSpecific(std::vector<int64_t> sizes) : sizes_(std::move(sizes)) {}
  std::unique_ptr<Cursor<Value>> iter() override {
    const WorkerInfo* info = get_worker_info();
    if (!info) throw AssertionError("WorkerSpecific needs worker processes");
    int64_t n = sizes_.at(static_cast<size_t>(info->id));
    return make_cursor<Value>([i = int64_t{0}, n]() mutable -> std::optional<Value> {
      if (i >= n) return std::nullopt;
      return Value(i++);
    });
  }
  std::optional<int64_t> size() const override {
    int64_t s = 0;
    for (int64_t x : sizes_) s += x;
    return s;
  }

 private:
  std::vector<int64_t> sizes_;
};
LOADER_REGISTER_ITERABLE_DATASET("golden_worker_specific", [](const Value& p) {
  std::vector<int64_t> sizes;
  for (const Value& v : p.at("sizes").items()) sizes.push_back(v.to_int());
  return std::make_shared<WorkerSpecific>(std::move(sizes));
});

/// PyTorch's TestMultiEpochDataset (D82): each worker yields its id length / num_workers times.
class WorkerIdStream : public IterableDataset {
 public:
  explicit WorkerIdStream(int64_t length) : length_(length) {}
  std::unique_ptr<Cursor<Value>> iter() override {
    const WorkerInfo* info = get_worker_info();
    if (!info) throw AssertionError("WorkerIdStream needs worker processes");
    return make_cursor<Value>([k = int64_t{0}, n = length_ / info->num_workers,
                               id = int64_t{info->id}]() mutable -> std::optional<Value> {
      if (k++ >= n) return std::nullopt;
      return Value(id);
    });
  }
  std::optional<int64_t> size() const override { return length_; }

 private:
  int64_t length_;
};
LOADER_REGISTER_ITERABLE_DATASET("golden_worker_id_stream", [](const Value& p) {
  return std::make_shared<WorkerIdStream>(p.at("length").to_int());
});

/// PyTorch's ErrorIterableDataset (D89): __iter__ raises.
class ErrorInIter : public IterableDataset {
 public:
  std::unique_ptr<Cursor<Value>> iter() override { throw RuntimeError("Error in __iter__"); }
};
LOADER_REGISTER_ITERABLE_DATASET("golden_error_in_iter", [](const Value&) { return std::make_shared<ErrorInIter>(); });

/// A stream of 4 values per worker whose iter() raises ValueError from its second call
/// on (in each copy): a persistent worker's second epoch.
class ErrorInSecondIter : public IterableDataset {
 public:
  std::unique_ptr<Cursor<Value>> iter() override {
    if (++calls_ >= 2) throw ValueError("Error in __iter__, call " + std::to_string(calls_));
    return make_cursor<Value>([k = int64_t{0}]() mutable -> std::optional<Value> {
      if (k >= 4) return std::nullopt;
      return Value(k++);
    });
  }

 private:
  int calls_ = 0;
};
LOADER_REGISTER_ITERABLE_DATASET("golden_error_in_second_iter",
                                 [](const Value&) { return std::make_shared<ErrorInSecondIter>(); });

/// PyTorch's ErrorDataset (D90): a length but no __getitem__.
class NoGetItem : public Dataset {
 public:
  explicit NoGetItem(int64_t n) : n_(n) {}
  Value get(int64_t) override { throw NotImplementedError("Subclasses of Dataset should implement __getitem__."); }
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};
LOADER_REGISTER_DATASET("golden_no_getitem", [](const Value& p) { return std::make_shared<NoGetItem>(p.at("n").to_int()); });

LOADER_REGISTER_WORKER_INIT_FN("golden_manual_seed_12345", [](int) { manual_seed(12345); });
LOADER_REGISTER_WORKER_INIT_FN("golden_init_raises", [](int) { throw RuntimeError("Error in worker_init_fn"); });

std::shared_ptr<GoldenProbe> probe(int64_t n) {
  auto ds = std::dynamic_pointer_cast<GoldenProbe>(make_dataset({"golden_probe", Value::dict({{"n", n}})}));
  if (!ds) throw std::runtime_error("golden_probe did not make a GoldenProbe");
  return ds;
}

// ------------------------------------------------------------------ helpers

json load_golden(const std::string& name) {
  std::ifstream in(loader::testing::golden_path(name));
  if (!in) throw std::runtime_error("cannot read golden file " + loader::testing::golden_path(name));
  return json::parse(in);
}

std::vector<Value> run_epoch(DataLoader& dl) {
  std::vector<Value> out;
  auto it = dl.iter();
  while (auto b = it.next()) out.push_back(std::move(*b));
  return out;
}

/// One probe sample as the golden file records it.
struct Row {
  int64_t index = 0;
  int64_t worker = 0;
  int64_t num_workers = 0;
  std::optional<uint64_t> seed;
  uint64_t initial_seed = 0;
};

Row row_of(const Value& sample) {
  Row r;
  r.index = sample[0].to_int();
  r.worker = sample[1].to_int();
  r.num_workers = sample[2].to_int();
  if (!sample[3].is_none()) r.seed = static_cast<uint64_t>(sample[3].to_int());
  r.initial_seed = static_cast<uint64_t>(sample[4].to_int());
  return r;
}

std::vector<int64_t> column(const std::vector<Row>& rows, int64_t Row::*field) {
  std::vector<int64_t> out;
  for (const auto& r : rows) out.push_back(r.*field);
  return out;
}

std::vector<uint64_t> u64s(const Tensor& t) {
  std::vector<uint64_t> out;
  for (int64_t v : t.to_int64_vector()) out.push_back(static_cast<uint64_t>(v));
  return out;
}

/// A batch against its golden form: an int, or {"tensor": [...], "dtype": "torch.int64", "shape": [...]}.
::testing::AssertionResult matches(const Value& got, const json& want) {
  if (want.is_number_integer()) {
    if (!got.is_int()) return ::testing::AssertionFailure() << "expected the int " << want << ", got " << got.repr();
    if (got.to_int() != want.get<int64_t>())
      return ::testing::AssertionFailure() << "expected " << want << ", got " << got.to_int();
    return ::testing::AssertionSuccess();
  }
  if (want.is_object() && want.contains("tensor")) {
    if (!got.is_tensor()) return ::testing::AssertionFailure() << "expected a tensor " << want << ", got " << got.repr();
    const Tensor& t = got.to_tensor();
    if (want.at("dtype") != "torch.int64" || t.dtype() != DType::Int64)
      return ::testing::AssertionFailure() << "dtype: expected " << want.at("dtype") << ", got " << dtype_name(t.dtype());
    if (t.sizes().vec() != want.at("shape").get<std::vector<int64_t>>())
      return ::testing::AssertionFailure() << "shape: expected " << want.at("shape") << ", got " << t.sizes().str();
    if (t.to_int64_vector() != want.at("tensor").get<std::vector<int64_t>>())
      return ::testing::AssertionFailure() << "values: expected " << want.at("tensor") << ", got " << t.repr();
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "golden value of an unknown form: " << want;
}

void expect_batches(const std::vector<Value>& got, const json& want, const std::string& where) {
  ASSERT_EQ(got.size(), want.size()) << where;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(matches(got[i], want[i])) << where << ", batch " << i;
}

void report(const char* what, int ran, int skipped = 0) {
  std::cout << "[ golden   ] " << what << ": " << ran << " case(s) run, " << skipped << " skipped\n";
}

/// Every test here ends with no segment and no child process of its own left.
class GoldenWorkers : public ::testing::Test {
 protected:
  void SetUp() override {
    register_builtin_datasets();
    leaks_.emplace();
  }
  void TearDown() override {
    EXPECT_EQ(leaks_->new_segments(), "") << "shared-memory segments left in " << runtime::shm_dir();
    EXPECT_EQ(leaks_->new_children(), "") << "child processes left behind";
  }
  std::optional<loader::testing::LeakCheck> leaks_;
};

using WorkerSeedsGolden = GoldenWorkers;
using IterableGolden = GoldenWorkers;
using TorchWorkerCases = GoldenWorkers;

// ------------------------------------------------------------------ worker_seeds.json

TEST_F(WorkerSeedsGolden, EveryCaseGivesPyTorchsOrderAssignmentAndSeeds) {
  const json golden = load_golden("worker_seeds.json");
  int ran = 0;
  for (const auto& c : golden.at("cases")) {
    const uint64_t gseed = c.at("generator_seed").get<uint64_t>();
    const int workers = c.at("num_workers").get<int>();
    const bool shuffle = c.at("shuffle").get<bool>();
    ASSERT_TRUE(c.at("batch_size").is_null());
    DataLoaderOptions o;
    o.batch_size = std::nullopt;
    o.num_workers = workers;
    o.shuffle = shuffle;
    o.generator = std::make_shared<Generator>(gseed);
    DataLoader dl(probe(c.at("n").get<int64_t>()), o);
    int e = 0;
    for (const auto& epoch : c.at("epochs")) {
      const std::string where = "generator seed " + std::to_string(gseed) + ", " + std::to_string(workers) +
                                " workers, shuffle " + (shuffle ? "on" : "off") + ", epoch " + std::to_string(e++);
      std::vector<Row> rows;
      for (const Value& b : run_epoch(dl)) rows.push_back(row_of(b));
      EXPECT_EQ(column(rows, &Row::index), epoch.at("order").get<std::vector<int64_t>>()) << where;
      EXPECT_EQ(column(rows, &Row::worker), epoch.at("worker_of_index").get<std::vector<int64_t>>()) << where;
      const uint64_t base = epoch.at("expected_base_seed").get<uint64_t>();
      for (const Row& r : rows) {
        const std::string w = std::to_string(r.worker);
        EXPECT_EQ(r.num_workers, workers) << where;
        ASSERT_TRUE(r.seed.has_value()) << where << ": no worker info inside a worker";
        ASSERT_TRUE(epoch.at("worker_seed").contains(w)) << where << ": worker " << w;
        EXPECT_EQ(*r.seed, epoch.at("worker_seed").at(w).get<uint64_t>()) << where << ", worker " << w;
        EXPECT_EQ(r.initial_seed, epoch.at("initial_seed_in_worker").at(w).get<uint64_t>()) << where << ", worker " << w;
        EXPECT_EQ(*r.seed - static_cast<uint64_t>(r.worker), base) << where << ": seed == base_seed + id";
      }
    }
    ++ran;
  }
  report("worker_seeds.json cases", ran);
  EXPECT_GT(ran, 0) << "no golden case ran";
}

TEST_F(WorkerSeedsGolden, PersistentWorkersDrawBaseSeedOnlyOnce) {
  const json golden = load_golden("worker_seeds.json");
  int ran = 0;
  for (const auto& c : golden.at("persistent_vs_not")) {
    const uint64_t gseed = c.at("generator_seed").get<uint64_t>();
    const bool persistent = c.at("persistent_workers").get<bool>();
    DataLoaderOptions o;
    o.batch_size = c.at("batch_size").get<int64_t>();
    o.num_workers = c.at("num_workers").get<int>();
    o.shuffle = true;
    o.persistent_workers = persistent;
    o.generator = std::make_shared<Generator>(gseed);
    DataLoader dl(probe(c.at("n").get<int64_t>()), o);
    int e = 0;
    for (const auto& epoch : c.at("epochs")) {
      const std::string where = "generator seed " + std::to_string(gseed) + (persistent ? ", persistent" : "") +
                                ", epoch " + std::to_string(e++);
      std::vector<std::vector<int64_t>> indices, worker_ids;
      std::vector<std::vector<uint64_t>> seeds;
      for (const Value& b : run_epoch(dl)) {
        indices.push_back(b[0].to_tensor().to_int64_vector());
        worker_ids.push_back(b[1].to_tensor().to_int64_vector());
        seeds.push_back(u64s(b[3].to_tensor()));
      }
      EXPECT_EQ(indices, epoch.at("index_batches").get<std::vector<std::vector<int64_t>>>()) << where;
      EXPECT_EQ(worker_ids, epoch.at("worker_ids").get<std::vector<std::vector<int64_t>>>()) << where;
      EXPECT_EQ(seeds, epoch.at("worker_seeds").get<std::vector<std::vector<uint64_t>>>()) << where;
    }
    ++ran;
  }
  report("worker_seeds.json persistent_vs_not", ran);
  EXPECT_GT(ran, 0) << "no golden case ran";
}

TEST_F(WorkerSeedsGolden, DefaultGeneratorAfterManualSeed) {
  const json golden = load_golden("worker_seeds.json");
  int ran = 0;
  for (const auto& c : golden.at("default_generator")) {
    const uint64_t seed = c.at("global_seed").get<uint64_t>();
    manual_seed(seed);
    DataLoaderOptions o;
    o.batch_size = std::nullopt;
    o.num_workers = 2;
    o.shuffle = true;
    DataLoader dl(probe(4), o);
    std::vector<Row> rows;
    for (const Value& b : run_epoch(dl)) rows.push_back(row_of(b));
    const std::string where = "manual_seed(" + std::to_string(seed) + ")";
    EXPECT_EQ(column(rows, &Row::index), c.at("order").get<std::vector<int64_t>>()) << where;
    EXPECT_EQ(column(rows, &Row::worker), c.at("worker_of_index").get<std::vector<int64_t>>()) << where;
    for (const Row& r : rows) {
      ASSERT_TRUE(r.seed.has_value());
      EXPECT_EQ(*r.seed, c.at("worker_seeds").at(std::to_string(r.worker)).get<uint64_t>()) << where;
    }
    ++ran;
  }
  report("worker_seeds.json default_generator", ran);
  EXPECT_GT(ran, 0) << "no golden case ran";
}

TEST_F(WorkerSeedsGolden, SingleProcessDrawsBaseSeedToo) {
  const json golden = load_golden("worker_seeds.json");
  int ran = 0;
  for (const auto& c : golden.at("single_process")) {
    const uint64_t gseed = c.at("generator_seed").get<uint64_t>();
    const std::string where = "generator seed " + std::to_string(gseed);
    Generator replay(gseed);
    ASSERT_EQ(static_cast<uint64_t>(replay.random_int64()), c.at("base_seed_drawn_even_with_0_workers").get<uint64_t>())
        << where;
    DataLoaderOptions o;
    o.batch_size = std::nullopt;
    o.shuffle = true;
    auto g = std::make_shared<Generator>(gseed);
    o.generator = g;
    DataLoader dl(probe(5), o);
    std::vector<Row> rows;
    for (const Value& b : run_epoch(dl)) rows.push_back(row_of(b));
    EXPECT_EQ(column(rows, &Row::index), c.at("order").get<std::vector<int64_t>>()) << where;
    for (const Row& r : rows) {
      EXPECT_EQ(r.worker, -1) << where << ": no worker info in the main process";
      EXPECT_FALSE(r.seed.has_value());
    }
    // The loader's generator went through base_seed, randperm(5) and the trailing randperm(5)[:0].
    (void)randperm(5, replay);
    (void)randperm(5, replay);
    EXPECT_EQ(g->random(), replay.random()) << where << ": the generator was not consumed as PyTorch consumes it";
    ++ran;
  }
  report("worker_seeds.json single_process", ran);
  EXPECT_GT(ran, 0) << "no golden case ran";
}

TEST(WorkerSeedsGoldenSkips, GenerateStateIsNotApplicable) {
  const json golden = load_golden("worker_seeds.json");
  const size_t n = golden.at("generate_state").size();
  report("worker_seeds.json generate_state", 0, static_cast<int>(n));
  GTEST_SKIP() << n << " generate_state cases skipped: _generate_state seeds numpy's RandomState in each "
               << "worker; a C++ worker has no numpy (loader seeds only its own generator)";
}

// ------------------------------------------------------------------ iterable_dataset.json

std::optional<int64_t> batch_size_of_key(const std::string& key) {
  // "batch_size_1", "batch_size_None", "batch_size_2"
  std::string v = key.substr(std::string("batch_size_").size());
  if (v == "None") return std::nullopt;
  return std::stoll(v);
}

TEST_F(IterableGolden, DocstringExample1SplitsTheRangeInIter) {
  const json golden = load_golden("iterable_dataset.json");
  int ran = 0;
  for (const auto& [workers, by_bs] : golden.at("example1_split_in_iter").items()) {
    for (const auto& [bs_key, want] : by_bs.items()) {
      DataLoaderOptions o;
      o.num_workers = std::stoi(workers);
      o.batch_size = batch_size_of_key(bs_key);
      DataLoader dl(make_iterable_dataset({"range_iterable", Value::dict({{"start", 3}, {"end", 7}})}), o);
      expect_batches(run_epoch(dl), want, "example 1, " + workers + " workers, " + bs_key);
      ++ran;
    }
  }
  report("iterable_dataset.json example1_split_in_iter", ran);
  EXPECT_GT(ran, 0) << "no golden case ran";
}

TEST_F(IterableGolden, DocstringExample2DuplicatesWithoutSplitting) {
  const json golden = load_golden("iterable_dataset.json");
  int ran = 0;
  for (const auto& [workers, want] : golden.at("example2_no_init_fn").items()) {
    DataLoaderOptions o;
    o.num_workers = std::stoi(workers);
    o.batch_size = std::nullopt;
    DataLoader dl(make_iterable_dataset({"golden_doc_example2", Value::dict({{"start", 3}, {"end", 7}})}), o);
    expect_batches(run_epoch(dl), want, "example 2 without worker_init_fn, " + workers + " workers");
    ++ran;
  }
  report("iterable_dataset.json example2_no_init_fn", ran);
  EXPECT_GT(ran, 0) << "no golden case ran";
}

TEST_F(IterableGolden, DocstringExample2SplitsInWorkerInitFn) {
  const json golden = load_golden("iterable_dataset.json");
  int ran = 0;
  for (const auto& [workers, want] : golden.at("example2_split_in_worker_init_fn").items()) {
    DataLoaderOptions o;
    o.num_workers = std::stoi(workers);
    o.batch_size = std::nullopt;
    o.worker_init_fn_name = "golden_doc2_split";
    DataLoader dl(make_iterable_dataset({"golden_doc_example2", Value::dict({{"start", 3}, {"end", 7}})}), o);
    expect_batches(run_epoch(dl), want, "example 2 with worker_init_fn, " + workers + " workers");
    ++ran;
  }
  report("iterable_dataset.json example2_split_in_worker_init_fn", ran);
  EXPECT_GT(ran, 0) << "no golden case ran";
}

TEST_F(IterableGolden, WorkerSpecificSizesWithThreeWorkers) {
  const json golden = load_golden("iterable_dataset.json");
  int ran = 0;
  for (const auto& [key, want] : golden.at("worker_specific_sizes_0_4_20_num_workers_3").items()) {
    // "bs=7,drop_last=True,prefetch_factor=3"
    auto field = [&](const std::string& name) {
      auto at = key.find(name + "=");
      auto from = at + name.size() + 1;
      return key.substr(from, key.find(',', from) - from);
    };
    DataLoaderOptions o;
    o.num_workers = 3;
    o.batch_size = field("bs") == "None" ? std::nullopt : std::optional<int64_t>(std::stoll(field("bs")));
    o.drop_last = field("drop_last") == "True";
    o.prefetch_factor = std::stoi(field("prefetch_factor"));
    DataLoader dl(
        make_iterable_dataset({"golden_worker_specific", Value::dict({{"sizes", Value::list({0, 4, 20})}})}), o);
    expect_batches(run_epoch(dl), want, key);
    ++ran;
  }
  report("iterable_dataset.json worker_specific_sizes_0_4_20_num_workers_3", ran);
  EXPECT_GT(ran, 0) << "no golden case ran";
}

TEST_F(IterableGolden, CountingDuplicatesPerWorker) {
  const json golden = load_golden("iterable_dataset.json");
  int ran = 0;
  for (const auto& [workers, want] : golden.at("counting5_duplicates_per_worker").items()) {
    DataLoaderOptions o;
    o.num_workers = std::stoi(workers);
    o.batch_size = std::nullopt;
    DataLoader dl(make_iterable_dataset({"counting", Value::dict({{"n", 5}})}), o);
    expect_batches(run_epoch(dl), want, "counting(5), " + workers + " workers");
    ++ran;
  }
  report("iterable_dataset.json counting5_duplicates_per_worker", ran);
  EXPECT_GT(ran, 0) << "no golden case ran";
}

TEST_F(IterableGolden, LengthWarningOnceMoreSamplesThanLenWereFetched) {
  const json want = load_golden("iterable_dataset.json").at("len_warning");
  std::vector<std::string> warnings;
  auto previous = set_warning_handler([&](const Warning& w) {
    if (w.message.find("samples have been fetched") != std::string::npos) warnings.push_back(w.message);
  });
  size_t fetched = 0;
  int64_t len = 0;
  {
    DataLoaderOptions o;
    o.num_workers = 3;
    DataLoader dl(make_iterable_dataset({"counting", Value::dict({{"n", 20}})}), o);
    len = dl.size();
    fetched = run_epoch(dl).size();
  }
  set_warning_handler(previous);
  EXPECT_EQ(len, want.at("len_dataloader").get<int64_t>());
  EXPECT_EQ(fetched, want.at("num_fetched").get<size_t>());
  ASSERT_EQ(warnings.size(), want.at("num_warnings").get<size_t>());
  std::string first = want.at("first_warning").get<std::string>();
  first.replace(first.find("<DATASET>"), 9, "counting");
  EXPECT_EQ(warnings.front(), first);
  report("iterable_dataset.json len_warning", 1);
}

// ------------------------------------------------------------------ PyTorch's worker test cases

TEST_F(TorchWorkerCases, D82_IterableYieldingItsWorkerIdAlternatesForEveryEpoch) {
  for (bool persistent : {false, true}) {
    DataLoaderOptions o;
    o.num_workers = 2;
    o.batch_size = 10;
    o.persistent_workers = persistent;
    DataLoader dl(make_iterable_dataset({"golden_worker_id_stream", Value::dict({{"length", 20}})}), o);
    for (int epoch = 0; epoch < 3; ++epoch) {
      auto batches = run_epoch(dl);
      ASSERT_EQ(batches.size(), 2u) << "epoch " << epoch << (persistent ? ", persistent" : "");
      for (size_t j = 0; j < batches.size(); ++j)
        EXPECT_EQ(batches[j].to_tensor().to_int64_vector(), std::vector<int64_t>(10, static_cast<int64_t>(j % 2)))
            << "batch " << j << ", epoch " << epoch << (persistent ? ", persistent" : "");
    }
  }
}

TEST_F(TorchWorkerCases, D87_WorkerInfoExistsOnlyInsideWorkers) {
  ASSERT_EQ(get_worker_info(), nullptr) << "before loading";
  auto ds = probe(20);
  DataLoaderOptions o;
  o.num_workers = 3;
  o.batch_size = std::nullopt;
  DataLoader dl(ds, o);
  auto it = dl.iter();
  int n = 0;
  while (auto b = it.next()) {
    EXPECT_EQ(get_worker_info(), nullptr) << "in the main process while loading";
    Row r = row_of(*b);
    EXPECT_GE(r.worker, 0);
    EXPECT_LT(r.worker, r.num_workers);
    EXPECT_EQ(r.num_workers, 3);
    ASSERT_TRUE(r.seed.has_value());
    EXPECT_EQ(*r.seed, r.initial_seed) << "worker_info.seed == torch.initial_seed() in the worker";
    ++n;
  }
  EXPECT_EQ(n, 20);
  EXPECT_EQ(get_worker_info(), nullptr) << "after loading";
  EXPECT_EQ(ds->calls(), 0) << "workers load from their own copies, never from the main process's dataset";
}

TEST_F(TorchWorkerCases, D88_WorkerInitFnManualSeedSetsEverySamplesInitialSeed) {
  DataLoaderOptions o;
  o.num_workers = 2;
  o.batch_size = 2;
  o.worker_init_fn_name = "golden_manual_seed_12345";
  DataLoader dl(probe(10), o);
  int batches = 0;
  for (const Value& b : run_epoch(dl)) {
    EXPECT_EQ(b[4].to_tensor().to_int64_vector(), (std::vector<int64_t>{12345, 12345}));
    ++batches;
  }
  EXPECT_EQ(batches, 5);
}

TEST_F(TorchWorkerCases, D89_ErrorInIterIsRaisedInTheMainThread) {
  for (int workers : {0, 2}) {
    DataLoaderOptions o;
    o.num_workers = workers;
    DataLoader dl(make_iterable_dataset({"golden_error_in_iter", Value::dict({})}), o);
    try {
      (void)run_epoch(dl);
      ADD_FAILURE() << "no error with " << workers << " workers";
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find("Error in __iter__"), std::string::npos) << e.what();
    }
  }
}

TEST_F(TorchWorkerCases, D89_ErrorInIterOfAPersistentWorkersLaterEpochIsItsOwnError) {
  DataLoaderOptions o;
  o.num_workers = 2;
  o.persistent_workers = true;
  o.timeout = 60;
  DataLoader dl(make_iterable_dataset({"golden_error_in_second_iter", Value::dict({})}), o);
  EXPECT_EQ(run_epoch(dl).size(), 8u);
  try {
    (void)run_epoch(dl);
    ADD_FAILURE() << "no error in the second epoch";
  } catch (const ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("failed as its epoch began (the IterableDataset's iter()): ValueError: Error in __iter__, call 2"),
              std::string::npos)
        << m;
    EXPECT_EQ(m.find("protocol"), std::string::npos) << m;
    EXPECT_EQ(m.find("failed to start"), std::string::npos) << m;
  }
}

TEST_F(TorchWorkerCases, D89_ErrorInWorkerInitFnIsRaisedInTheMainThread) {
  DataLoaderOptions o;
  o.num_workers = 2;
  o.worker_init_fn_name = "golden_init_raises";
  DataLoader dl(probe(10), o);
  try {
    (void)run_epoch(dl);
    ADD_FAILURE() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("Error in worker_init_fn"), std::string::npos) << e.what();
  }
}

TEST_F(TorchWorkerCases, D90_EveryBatchRaisesAndIterationContinuesToTheEnd) {
  struct Case {
    int workers;
    int64_t n;
  };
  for (Case c : {Case{0, 100}, Case{4, 41}}) {
    DataLoaderOptions o;
    o.num_workers = c.workers;
    o.batch_size = 2;
    o.shuffle = true;
    DataLoader dl(make_dataset({"golden_no_getitem", Value::dict({{"n", c.n}})}), o);
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
    ASSERT_TRUE(ended) << c.workers << " workers: the epoch never ended";
    EXPECT_EQ(errors, (c.n + 1) / 2) << c.workers << " workers: ceil(len / batch_size) errors";
  }
}

TEST_F(TorchWorkerCases, D92_IteratorsOfTwoLoadersInterleaved) {
  DataLoaderOptions o1;
  o1.num_workers = 1;
  o1.batch_size = 3;
  DataLoaderOptions o2 = o1;
  o2.num_workers = 2;
  DataLoader dl1(probe(12), o1);
  DataLoader dl2(probe(12), o2);
  std::vector<std::vector<int64_t>> got1, got2;
  {
    auto it1 = dl1.iter();
    auto it2 = dl2.iter();
    auto take = [](DataLoader::Iterator& it, std::vector<std::vector<int64_t>>& out) {
      auto b = it.next();
      ASSERT_TRUE(b.has_value());
      out.push_back((*b)[0].to_tensor().to_int64_vector());
    };
    take(it1, got1);
    take(it1, got1);
    take(it2, got2);
    take(it2, got2);
    take(it1, got1);
    take(it2, got2);
    // both iterators are dropped here, before their epochs ended
  }
  const std::vector<std::vector<int64_t>> want = {{0, 1, 2}, {3, 4, 5}, {6, 7, 8}};
  EXPECT_EQ(got1, want);
  EXPECT_EQ(got2, want);
}

TEST_F(TorchWorkerCases, D93_D78_ThreeWorkersGiveTheSingleProcessBatches) {
  const std::vector<std::vector<int64_t>> want = {{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9, 10}};
  for (int workers : {0, 3, 4}) {
    DataLoaderOptions o;
    o.num_workers = workers;
    o.batch_size = 3;
    DataLoader dl(make_dataset({"range", Value::dict({{"n", 11}})}), o);
    std::vector<std::vector<int64_t>> got;
    for (const Value& b : run_epoch(dl)) got.push_back(b.to_tensor().to_int64_vector());
    EXPECT_EQ(got, want) << workers << " workers";
  }
}

TEST_F(TorchWorkerCases, D79_PrefetchFactorDoesNotChangeOrderOrContent) {
  auto batches_with = [](int workers, std::optional<int> prefetch) {
    DataLoaderOptions o;
    o.num_workers = workers;
    o.batch_size = 4;
    o.shuffle = true;
    o.generator = std::make_shared<Generator>(2024);
    o.prefetch_factor = prefetch;
    DataLoader dl(make_dataset({"range", Value::dict({{"n", 50}})}), o);
    std::vector<std::vector<int64_t>> out;
    for (int epoch = 0; epoch < 2; ++epoch)
      for (const Value& b : run_epoch(dl)) out.push_back(b.to_tensor().to_int64_vector());
    return out;
  };
  auto single = batches_with(0, std::nullopt);
  ASSERT_EQ(single.size(), 26u);
  EXPECT_EQ(batches_with(2, 2), single);
  EXPECT_EQ(batches_with(2, 3), single);
  EXPECT_EQ(batches_with(4, 3), single);
}

TEST_F(TorchWorkerCases, D80_InOrderFalseStillDeliversEverySampleExactlyOnce) {
  DataLoaderOptions o;
  o.num_workers = 4;
  o.batch_size = 3;
  o.shuffle = true;
  o.in_order = false;
  DataLoader dl(make_dataset({"range", Value::dict({{"n", 50}})}), o);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> seen;
    for (const Value& b : run_epoch(dl))
      for (int64_t v : b.to_tensor().to_int64_vector()) seen.push_back(v);
    std::sort(seen.begin(), seen.end());
    std::vector<int64_t> all(50);
    for (int64_t i = 0; i < 50; ++i) all[static_cast<size_t>(i)] = i;
    EXPECT_EQ(seen, all) << "epoch " << epoch;
  }
}

TEST_F(TorchWorkerCases, D96_LargeSamplerIndicesAndAnErrorInTheMainLoopExitCleanly) {
  // test_large_sampler_indices: index batches of 40,960 (each task is 320 KiB, larger
  // than a socket's buffer) and an error raised in the main loop: the error comes out
  // and the loader ends without a deadlock on the full index channel.
  for (int workers : {1, 2}) {
    for (bool persistent : {false, true}) {
      DataLoaderOptions o;
      o.num_workers = workers;
      o.batch_size = 40960;
      o.persistent_workers = persistent;
      o.timeout = 60;  // a deadlock fails instead of blocking the suite
      std::string error;
      try {
        DataLoader dl(make_dataset({"range", Value::dict({{"n", 40960 * 20}})}), o);
        for (const Value& b : dl) {
          EXPECT_EQ(b.to_tensor().numel(), 40960);
          throw std::runtime_error("My Error");
        }
      } catch (const std::exception& e) {
        error = e.what();
      }
      EXPECT_EQ(error, "My Error") << workers << " workers, persistent " << persistent;
    }
  }
}

TEST_F(TorchWorkerCases, D106_PersistentWorkersAfterAnEarlyExitStartTheNextEpochCleanly) {
  DataLoaderOptions o;
  o.num_workers = 2;
  o.batch_size = 2;
  o.persistent_workers = true;
  DataLoader dl(make_dataset({"range", Value::dict({{"n", 20}})}), o);
  {
    auto it = dl.iter();
    ASSERT_TRUE(it.next().has_value());  // break after the first batch: tasks are still in flight
  }
  for (int epoch = 1; epoch < 3; ++epoch) {
    std::vector<std::vector<int64_t>> got;
    for (const Value& b : run_epoch(dl)) got.push_back(b.to_tensor().to_int64_vector());
    ASSERT_EQ(got.size(), 10u) << "epoch " << epoch;
    for (size_t j = 0; j < got.size(); ++j)
      EXPECT_EQ(got[j], (std::vector<int64_t>{int64_t(2 * j), int64_t(2 * j + 1)})) << "epoch " << epoch;
  }
}

TEST_F(TorchWorkerCases, D106_PersistentIterableWorkersRestartTheirStreamsAfterAnEarlyExit) {
  const std::vector<int64_t> want = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4};  // counting(5), 2 workers
  DataLoaderOptions o;
  o.num_workers = 2;
  o.batch_size = std::nullopt;
  o.persistent_workers = true;
  DataLoader dl(make_iterable_dataset({"counting", Value::dict({{"n", 5}})}), o);
  {
    auto it = dl.iter();
    ASSERT_TRUE(it.next().has_value());
  }
  for (int epoch = 1; epoch < 3; ++epoch) {
    std::vector<int64_t> got;
    for (const Value& b : run_epoch(dl)) got.push_back(b.to_int());
    EXPECT_EQ(got, want) << "epoch " << epoch << ": every worker's stream starts again";
  }
}

TEST_F(TorchWorkerCases, PersistentLoaderStartingANewEpochEndsTheLiveOne) {
  // DataLoader::iter(): "Only one epoch of a loader runs at a time: starting a new one
  // ends the previous one."  (PyTorch resets its one persistent iterator and discards
  // the old epoch's results before the new epoch's first task.)
  DataLoaderOptions o;
  o.num_workers = 2;
  o.batch_size = 2;
  o.persistent_workers = true;
  o.timeout = 3 * testing::kSlowdown;  // a lost batch fails in 3 s (9 under TSan) instead of hanging the suite
  DataLoader dl(make_dataset({"range", Value::dict({{"n", 20}})}), o);
  auto it1 = dl.iter();
  ASSERT_TRUE(it1.next().has_value());
  auto it2 = dl.iter();
  std::vector<std::vector<int64_t>> got;
  try {
    while (auto b = it2.next()) got.push_back(b->to_tensor().to_int64_vector());
  } catch (const RuntimeError& e) {
    ADD_FAILURE() << "the new epoch failed after " << got.size() << " batches: " << e.what();
  }
  std::vector<std::vector<int64_t>> want;
  for (int64_t j = 0; j < 10; ++j) want.push_back({2 * j, 2 * j + 1});
  EXPECT_EQ(got, want) << "the new epoch must give every batch, in order";
  try {
    auto stale = it1.next();
    EXPECT_FALSE(stale.has_value()) << "the previous epoch was ended by iter()";
  } catch (const RuntimeError& e) {
    ADD_FAILURE() << "the previous iterator must simply be over, got: " << e.what();
  }
}

}  // namespace
}  // namespace loader
