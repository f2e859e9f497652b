// WorkerCore without any actor or process: what one worker does with its
// configuration, its slabs and its tasks.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loader/datasets.h"
#include "loader/error.h"
#include "loader/generator.h"
#include "loader/runtime/batch_codec.h"
#include "loader/runtime/os/shm.h"
#include "loader/runtime/wire.h"
#include "loader/runtime/child/worker_core.h"
#include "loader/runtime/frames.h"
#include "loader/worker_info.h"

namespace loader::runtime {
namespace {

/// Sample i: [i, worker id, num_workers, worker seed, initial seed of the default generator].
class CoreProbe : public Dataset {
 public:
  CoreProbe(int64_t n, int64_t fail_at) : n_(n), fail_at_(fail_at) {}
  Value get(int64_t i) override {
    if (i < 0 || i >= n_) throw IndexError("CoreProbe index " + std::to_string(i) + " out of range");
    if (i == fail_at_) throw ValueError("probe failure at index " + std::to_string(i));
    const WorkerInfo* w = get_worker_info();
    return Value::list({Value(i), Value(int64_t{w ? w->id : -1}), Value(int64_t{w ? w->num_workers : 0}),
                        Value(static_cast<int64_t>(w ? w->seed : 0)),
                        Value(static_cast<int64_t>(default_generator().initial_seed()))});
  }
  int64_t size() const override { return n_; }

 private:
  int64_t n_, fail_at_;
};
LOADER_REGISTER_DATASET("worker_core_test_probe", [](const Value& p) {
  return std::make_shared<CoreProbe>(p.at("n").to_int(), p.get("fail_at", Value(-1)).to_int());
});

/// Sample i: i, after `ms` milliseconds.
class SlowSamples : public Dataset {
 public:
  explicit SlowSamples(int64_t ms) : ms_(ms) {}
  Value get(int64_t i) override {
    if (i < 0 || i >= 100) throw IndexError("SlowSamples index " + std::to_string(i) + " out of range");
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
    return Value(i);
  }
  int64_t size() const override { return 100; }

 private:
  int64_t ms_;
};
LOADER_REGISTER_DATASET("worker_core_test_slow", [](const Value& p) {
  return std::make_shared<SlowSamples>(p.at("ms").to_int());
});

int g_init_fn_saw_worker = -1;
const WorkerInfo* g_init_fn_saw_info = nullptr;
LOADER_REGISTER_WORKER_INIT_FN("worker_core_test_record", [](int worker_id) {
  g_init_fn_saw_worker = worker_id;
  g_init_fn_saw_info = get_worker_info();
});
LOADER_REGISTER_WORKER_INIT_FN("worker_core_test_seed_12345", [](int) { manual_seed(12345); });
LOADER_REGISTER_WORKER_INIT_FN("worker_core_test_throw", [](int) {
  throw ValueError("worker_init_fn failed on purpose");
});

WorkerConfig probe_config(int64_t n = 10, int64_t fail_at = -1) {
  WorkerConfig c;
  c.worker_id = 2;
  c.num_workers = 3;
  c.seed = 1000 + 2;
  c.dataset = DatasetHandle{"worker_core_test_probe", Value::dict({{"n", n}, {"fail_at", fail_at}})};
  c.batch_size = 3;
  return c;
}

WorkerConfig counting_config(int64_t n, int64_t batch_size, bool drop_last) {
  register_builtin_datasets();
  WorkerConfig c;
  c.worker_id = 0;
  c.num_workers = 1;
  c.seed = 5;
  c.dataset = DatasetHandle{"counting", Value::dict({{"n", n}})};
  c.iterable = true;
  c.batch_size = batch_size;
  c.drop_last = drop_last;
  return c;
}

/// The main process's view of a Result reply in `seg`.
Value decode(const WorkerReply& r, const std::shared_ptr<ShmSegment>& seg) {
  auto lease = std::make_shared<BatchLease>(seg, [] {}, false);
  return decode_batch(r.payload, r.slab, lease);
}

bool inside(const Tensor& t, const ShmSegment& seg) {
  auto* p = static_cast<const uint8_t*>(t.data_ptr());
  auto* b = static_cast<const uint8_t*>(seg.data());
  return p >= b && p + t.nbytes() <= b + seg.size();
}

std::vector<int64_t> column(const Value& batch, size_t k) { return batch[k].to_tensor().to_int64_vector(); }

TEST(WorkerCore, BuildsTheRegisteredDatasetAndDescribesTheWorker) {
  WorkerCore core(probe_config(10));
  EXPECT_EQ(core.info().id, 2);
  EXPECT_EQ(core.info().num_workers, 3);
  EXPECT_EQ(core.info().seed, 1002u);
  ASSERT_NE(core.info().dataset, nullptr);
  EXPECT_EQ(core.info().dataset->size(), 10);
  ASSERT_TRUE(core.info().dataset->handle().has_value());
  EXPECT_EQ(core.info().dataset->handle()->type, "worker_core_test_probe");
  EXPECT_EQ(core.info().iterable_dataset, nullptr);
  EXPECT_EQ(get_worker_info(), nullptr) << "the worker info is installed only while the worker runs";
}

TEST(WorkerCore, FirstTaskWithoutSlabAsksForBytesThenFillsTheSlabItIsGiven) {
  WorkerCore core(probe_config(10));
  WorkerReply need = core.run_task(1, {4, 0, 7}, 0);
  ASSERT_EQ(need.kind, WorkerReply::Kind::Need) << need.error_message;
  EXPECT_EQ(need.task, 1u);
  EXPECT_GT(need.bytes, 0u);

  auto seg = ShmSegment::create(need.bytes);
  core.add_slab(11, seg->data(), seg->size());
  WorkerReply r = core.use_slab(1, 11);
  ASSERT_EQ(r.kind, WorkerReply::Kind::Result) << r.error_message;
  EXPECT_EQ(r.task, 1u);
  EXPECT_EQ(r.slab, 11u);
  EXPECT_LE(r.bytes, seg->size());
  Value batch = decode(r, seg);
  ASSERT_EQ(batch.size(), 5u);
  EXPECT_EQ(column(batch, 0), (std::vector<int64_t>{4, 0, 7}));
  for (size_t k = 0; k < 5; ++k) EXPECT_TRUE(inside(batch[k].to_tensor(), *seg)) << "column " << k;
}

TEST(WorkerCore, SeedsTheDefaultGeneratorInsideTheDatasetWithBaseSeedPlusId) {
  const uint64_t main_seed = default_generator().initial_seed();
  WorkerCore core(probe_config(10));
  auto seg = ShmSegment::create(1 << 16);
  core.add_slab(3, seg->data(), seg->size());
  WorkerReply r = core.run_task(0, {0, 1, 2}, 3);
  ASSERT_EQ(r.kind, WorkerReply::Kind::Result) << r.error_message;
  Value batch = decode(r, seg);
  EXPECT_EQ(column(batch, 1), (std::vector<int64_t>{2, 2, 2})) << "worker id";
  EXPECT_EQ(column(batch, 2), (std::vector<int64_t>{3, 3, 3})) << "num_workers";
  EXPECT_EQ(column(batch, 3), (std::vector<int64_t>{1002, 1002, 1002})) << "worker_info.seed";
  EXPECT_EQ(column(batch, 4), (std::vector<int64_t>{1002, 1002, 1002})) << "initial_seed() inside the dataset";
  EXPECT_EQ(default_generator().initial_seed(), main_seed) << "the caller's default generator is untouched";
  EXPECT_EQ(get_worker_info(), nullptr);
}

TEST(WorkerCore, RunsWorkerInitFnByNameAfterSeedingWithTheWorkerInfoInstalled) {
  g_init_fn_saw_worker = -1;
  g_init_fn_saw_info = nullptr;
  WorkerConfig c = probe_config(10);
  c.worker_init_fn_name = "worker_core_test_record";
  WorkerCore core(c);
  EXPECT_EQ(g_init_fn_saw_worker, 2);
  EXPECT_EQ(g_init_fn_saw_info, &core.info()) << "get_worker_info() inside worker_init_fn is the worker's";
}

TEST(WorkerCore, WorkerInitFnCallingManualSeedReseedsTheWorkersGenerator) {
  WorkerConfig c = probe_config(10);
  c.worker_init_fn_name = "worker_core_test_seed_12345";
  const uint64_t main_seed = default_generator().initial_seed();
  WorkerCore core(c);
  EXPECT_EQ(default_generator().initial_seed(), main_seed) << "manual_seed in a worker must not reseed the caller";
  auto seg = ShmSegment::create(1 << 16);
  core.add_slab(1, seg->data(), seg->size());
  WorkerReply r = core.run_task(0, {5, 6}, 1);
  ASSERT_EQ(r.kind, WorkerReply::Kind::Result) << r.error_message;
  Value batch = decode(r, seg);
  EXPECT_EQ(column(batch, 4), (std::vector<int64_t>{12345, 12345}));
  EXPECT_EQ(column(batch, 3), (std::vector<int64_t>{1002, 1002})) << "worker_info.seed keeps base_seed + id";
}

TEST(WorkerCore, SlabTooSmallGivesNeedAndALargerOneGivesTheResult) {
  WorkerCore core(probe_config(10));
  auto tiny = ShmSegment::create(64);
  core.add_slab(1, tiny->data(), tiny->size());
  WorkerReply need = core.run_task(9, {1, 2, 3}, 1);
  ASSERT_EQ(need.kind, WorkerReply::Kind::Need) << need.error_message;
  EXPECT_GT(need.bytes, tiny->size());
  auto big = ShmSegment::create(need.bytes);
  core.add_slab(2, big->data(), big->size());
  core.drop_slab(1);
  WorkerReply r = core.use_slab(9, 2);
  ASSERT_EQ(r.kind, WorkerReply::Kind::Result) << r.error_message;
  EXPECT_EQ(r.slab, 2u);
  Value batch = decode(r, big);
  EXPECT_EQ(column(batch, 0), (std::vector<int64_t>{1, 2, 3}));
  for (size_t k = 0; k < 5; ++k) EXPECT_TRUE(inside(batch[k].to_tensor(), *big));
  for (size_t k = 0; k < 5; ++k) EXPECT_TRUE(batch[k].to_tensor().is_shared()) << "D63: collated in a worker";
}

TEST(WorkerCore, EachReplySaysHowLongTheWorkerSpentOnItsTaskIncludingATryThatNeededMore) {
  WorkerConfig c = probe_config();
  c.dataset = DatasetHandle{"worker_core_test_slow", Value::dict({{"ms", 5}})};
  WorkerCore core(c);
  constexpr uint64_t kThreeSamples = 15'000'000;  // ns
  WorkerReply inline_batch = core.run_task(1, {0, 1, 2}, kInlineSlab);
  ASSERT_EQ(inline_batch.kind, WorkerReply::Kind::Result) << inline_batch.error_message;
  EXPECT_GE(inline_batch.busy_ns, kThreeSamples);
  EXPECT_LT(inline_batch.busy_ns, 60 * kThreeSamples) << "the time of one task, not of the process";

  auto tiny = ShmSegment::create(8);
  core.add_slab(1, tiny->data(), tiny->size());
  WorkerReply need = core.run_task(2, {3, 4, 5}, 1);
  ASSERT_EQ(need.kind, WorkerReply::Kind::Need) << need.error_message;
  auto big = ShmSegment::create(need.bytes);
  core.add_slab(2, big->data(), big->size());
  WorkerReply placed = core.use_slab(2, 2);
  ASSERT_EQ(placed.kind, WorkerReply::Kind::Result) << placed.error_message;
  EXPECT_GE(placed.busy_ns, kThreeSamples) << "the samples were loaded in the try that answered Need";

  WorkerReply error = core.run_task(3, {6, 7, 100}, kInlineSlab);
  ASSERT_EQ(error.kind, WorkerReply::Kind::Error);
  EXPECT_GE(error.busy_ns, 10'000'000u) << "two samples loaded before the bad index";
}

TEST(WorkerCore, UseSlabForATaskThatIsNotWaitingIsAnError) {
  WorkerCore core(probe_config(10));
  WorkerReply r = core.use_slab(77, 1);
  EXPECT_EQ(r.kind, WorkerReply::Kind::Error);
  EXPECT_EQ(r.task, 77u);
  EXPECT_NE(r.error_message.find("77"), std::string::npos) << r.error_message;
}


TEST(WorkerCore, ATaskSentForAnInlineBatchCarriesItsBytesInTheReplyAndTouchesNoSlab) {
  WorkerCore core(probe_config(10));
  auto seg = ShmSegment::create(1 << 16);
  std::memset(seg->data(), 0xAB, seg->size());
  core.add_slab(11, seg->data(), seg->size());
  WorkerReply r = core.run_task(3, {4, 0, 7}, kInlineSlab);
  ASSERT_EQ(r.kind, WorkerReply::Kind::Result) << r.error_message;
  EXPECT_EQ(r.task, 3u);
  EXPECT_EQ(r.slab, 0u);  // the main process decodes it without a slab
  ASSERT_TRUE(r.value) << "the batch is kept as it is: what sends it encodes it";
  EXPECT_TRUE(r.payload.empty());
  Value batch = *r.value;
  ASSERT_EQ(batch.size(), 5u);
  EXPECT_EQ(column(batch, 0), (std::vector<int64_t>{4, 0, 7}));
  for (size_t k = 0; k < 5; ++k) EXPECT_FALSE(inside(batch[k].to_tensor(), *seg)) << "column " << k;
  const auto* bytes = static_cast<const unsigned char*>(seg->data());
  EXPECT_TRUE(std::all_of(bytes, bytes + seg->size(), [](unsigned char c) { return c == 0xAB; }));
  // The reply crosses as a Result frame like any other, the batch encoded in it; so
  // does the message CAF serializes for a remote worker without a bulk stream.
  auto [type, body] = encode_reply(r);
  WorkerReply back = decode_reply(type, body);
  EXPECT_EQ(back.kind, WorkerReply::Kind::Result);
  EXPECT_EQ(back.slab, 0u);
  EXPECT_FALSE(back.value);
  EXPECT_EQ(decode_value(back.payload), batch);
  encode_inline_batch(r);
  EXPECT_FALSE(r.value);
  EXPECT_EQ(r.payload, back.payload);
}
TEST(WorkerCore, DatasetErrorBecomesAnErrorReplyNamingTheWorkerAndTheOriginalMessage) {
  WorkerCore core(probe_config(10, 4));
  auto seg = ShmSegment::create(1 << 16);
  core.add_slab(1, seg->data(), seg->size());
  WorkerReply r = core.run_task(6, {3, 4, 5}, 1);
  ASSERT_EQ(r.kind, WorkerReply::Kind::Error);
  EXPECT_EQ(r.task, 6u);
  EXPECT_EQ(r.error_type, "ValueError");
  EXPECT_EQ(r.error_message.rfind("Caught ValueError in DataLoader worker process 2.", 0), 0u) << r.error_message;
  EXPECT_NE(r.error_message.find("Original Traceback"), std::string::npos) << r.error_message;
  EXPECT_NE(r.error_message.find("probe failure at index 4"), std::string::npos) << r.error_message;
  // The worker keeps serving tasks.
  WorkerReply ok = core.run_task(7, {6, 7}, 1);
  ASSERT_EQ(ok.kind, WorkerReply::Kind::Result) << ok.error_message;
  EXPECT_EQ(column(decode(ok, seg), 0), (std::vector<int64_t>{6, 7}));
}

TEST(WorkerCore, IndexErrorKeepsItsType) {
  WorkerCore core(probe_config(3));
  WorkerReply r = core.run_task(0, {2, 3}, 0);
  ASSERT_EQ(r.kind, WorkerReply::Kind::Error);
  EXPECT_EQ(r.error_type, "IndexError");
  EXPECT_NE(r.error_message.find("Caught IndexError in DataLoader worker process 2."), std::string::npos);
}

TEST(WorkerCore, WithoutAutoCollationASampleIsConvertedNotCollated) {
  WorkerConfig c = probe_config(10);
  c.auto_collation = false;
  WorkerCore core(c);
  WorkerReply r = core.run_task(0, {8}, 0);
  ASSERT_EQ(r.kind, WorkerReply::Kind::Result) << "no tensors: no slab needed";
  Value sample = decode_value(r.payload);
  ASSERT_TRUE(sample.is_list());
  EXPECT_EQ(sample[0].to_int(), 8);
  EXPECT_EQ(sample[4].to_int(), 1002);
}

TEST(WorkerCore, IterableDatasetYieldsBatchesThenIterEnd) {
  WorkerCore core(counting_config(5, 2, false));
  ASSERT_NE(core.info().iterable_dataset, nullptr);
  auto seg = ShmSegment::create(1 << 16);
  core.add_slab(1, seg->data(), seg->size());
  std::vector<std::vector<int64_t>> got;
  WorkerReply r;
  for (uint64_t t = 0; t < 10; ++t) {
    r = core.run_task(t, {}, 1);
    if (r.kind != WorkerReply::Kind::Result) break;
    got.push_back(decode(r, seg).to_tensor().to_int64_vector());
  }
  EXPECT_EQ(r.kind, WorkerReply::Kind::IterEnd);
  EXPECT_EQ(r.task, 3u);
  EXPECT_EQ(got, (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}, {4}}));
  EXPECT_EQ(core.run_task(4, {}, 1).kind, WorkerReply::Kind::IterEnd) << "the stream stays exhausted";
}

TEST(WorkerCore, IterableDropLastDropsTheShortBatch) {
  WorkerCore core(counting_config(5, 2, true));
  auto seg = ShmSegment::create(1 << 16);
  core.add_slab(1, seg->data(), seg->size());
  EXPECT_EQ(core.run_task(0, {}, 1).kind, WorkerReply::Kind::Result);
  EXPECT_EQ(core.run_task(1, {}, 1).kind, WorkerReply::Kind::Result);
  EXPECT_EQ(core.run_task(2, {}, 1).kind, WorkerReply::Kind::IterEnd);
}

TEST(WorkerCore, ResetEpochStartsTheIterableStreamAgain) {
  WorkerCore core(counting_config(3, 2, false));
  auto seg = ShmSegment::create(1 << 16);
  core.add_slab(1, seg->data(), seg->size());
  ASSERT_EQ(core.run_task(0, {}, 1).kind, WorkerReply::Kind::Result);
  ASSERT_EQ(core.run_task(1, {}, 1).kind, WorkerReply::Kind::Result);
  ASSERT_EQ(core.run_task(2, {}, 1).kind, WorkerReply::Kind::IterEnd);
  core.reset_epoch();
  WorkerReply r = core.run_task(3, {}, 1);
  ASSERT_EQ(r.kind, WorkerReply::Kind::Result);
  EXPECT_EQ(decode(r, seg).to_tensor().to_int64_vector(), (std::vector<int64_t>{0, 1}));
}

TEST(WorkerCore, EachIterableStreamReportsHowItBeganOnceBeforeItsFirstReply) {
  WorkerCore core(counting_config(3, 2, false));
  const std::string at_start = core.generator().state();
  std::optional<StreamStart> start = core.take_stream_start();
  ASSERT_TRUE(start.has_value()) << "the stream Init began";
  EXPECT_EQ(start->rng, at_start) << "the generator just before iter() (counting's iter() draws nothing)";
  EXPECT_FALSE(start->state.has_value()) << "counting has no state hooks";
  EXPECT_FALSE(core.take_stream_start().has_value()) << "reported once";
  core.reset_epoch();
  EXPECT_TRUE(core.take_stream_start().has_value()) << "a persistent worker's next epoch";
  WorkerCore map_style(probe_config());
  EXPECT_FALSE(map_style.take_stream_start().has_value());
}

TEST(WorkerCore, ResumingTheStreamOfADatasetWithoutStateHooksNamesTheDataset) {
  WorkerCore core(counting_config(3, 2, false));
  try {
    core.resume_stream(StreamResume{core.generator().state(), "x", 1});
    FAIL() << "load_state() of a dataset without hooks";
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("the IterableDataset counting refused the state (1 bytes)"), std::string::npos)
        << e.what();
  }
}

TEST(WorkerCore, UnknownDatasetTypeIsAClearInitError) {
  WorkerConfig c = probe_config();
  c.dataset = DatasetHandle{"no_such_dataset_type", Value::dict({})};
  try {
    WorkerCore core(c);
    FAIL() << "expected an init error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("no_such_dataset_type"), std::string::npos) << m;
    EXPECT_NE(m.find("worker_core_test_probe"), std::string::npos) << "names the registered types: " << m;
  }
}

TEST(WorkerCore, UnknownWorkerInitFnIsAClearInitError) {
  WorkerConfig c = probe_config();
  c.worker_init_fn_name = "no_such_init_fn";
  try {
    WorkerCore core(c);
    FAIL() << "expected an init error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_init_fn"), std::string::npos) << e.what();
  }
}

TEST(WorkerCore, WorkerInitFnErrorIsAnInitErrorWithItsMessage) {
  WorkerConfig c = probe_config();
  c.worker_init_fn_name = "worker_core_test_throw";
  try {
    WorkerCore core(c);
    FAIL() << "expected an init error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("worker_init_fn failed on purpose"), std::string::npos) << e.what();
  }
}

TEST(WorkerConfig, RoundTripsThroughAValue) {
  WorkerConfig c = probe_config(42, 7);
  c.seed = (1ULL << 63) + 5;  // base_seed < 2^63, base_seed + id may pass it
  c.iterable = true;
  c.auto_collation = false;
  c.drop_last = true;
  c.collate_fn_name = "some_collate";
  c.worker_init_fn_name = "some_init";
  c.per_task_seeding = true;
  c.base_seed = (1ULL << 63) + 9;
  c.task_base = ~0ULL - 2;  // a resumed epoch's: the first task id less the batches consumed, mod 2^64
  std::string bytes;
  encode_value(c.to_value(), bytes);
  WorkerConfig d = WorkerConfig::from_value(decode_value(bytes));
  EXPECT_EQ(d.worker_id, c.worker_id);
  EXPECT_EQ(d.num_workers, c.num_workers);
  EXPECT_EQ(d.seed, c.seed);
  EXPECT_EQ(d.dataset.type, c.dataset.type);
  EXPECT_EQ(d.dataset.params, c.dataset.params);
  EXPECT_EQ(d.iterable, c.iterable);
  EXPECT_EQ(d.auto_collation, c.auto_collation);
  EXPECT_EQ(d.batch_size, c.batch_size);
  EXPECT_EQ(d.drop_last, c.drop_last);
  EXPECT_EQ(d.collate_fn_name, c.collate_fn_name);
  EXPECT_EQ(d.worker_init_fn_name, c.worker_init_fn_name);
  EXPECT_EQ(d.per_task_seeding, c.per_task_seeding);
  EXPECT_EQ(d.base_seed, c.base_seed);
  EXPECT_EQ(d.task_base, c.task_base);
}

}  // namespace
}  // namespace loader::runtime
