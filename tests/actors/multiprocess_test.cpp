// End-to-end tests of num_workers > 0 with real worker processes (and the same
// protocol with in-process workers).
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "loader/dataloader.h"
#include "loader/datasets.h"
#include "loader/error.h"
#include "loader/generator.h"
#include "loader/runtime/os/proc_stat.h"
#include "loader/runtime/os/shm.h"
#include "loader/worker_info.h"
#include "process_leaks.h"
#include "test_util.h"

namespace loader {
namespace {

/// Sample i: (float32[3] = {i, i+0.5, worker id}, i, worker_id, num_workers, worker seed, initial seed).
class ProbeDataset : public Dataset {
 public:
  ProbeDataset(int64_t n, int64_t fail_at, int64_t delay_ms = 0) : n_(n), fail_at_(fail_at), delay_ms_(delay_ms) {}
  Value get(int64_t i) override {
    if (i < 0 || i >= n_) throw IndexError("index " + std::to_string(i) + " out of range for ProbeDataset of size " + std::to_string(n_));
    if (delay_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    if (i == fail_at_) throw ValueError("boom at " + std::to_string(i));
    const WorkerInfo* w = get_worker_info();
    int64_t wid = w ? w->id : -1;
    auto t = Tensor::from_vector<float>({static_cast<float>(i), static_cast<float>(i) + 0.5f, static_cast<float>(wid)});
    return Value::tuple({Value(t), Value(i), Value(wid), Value(int64_t{w ? w->num_workers : 0}),
                         Value(static_cast<int64_t>(w ? w->seed : 0)),
                         Value(static_cast<int64_t>(default_generator().initial_seed()))});
  }
  int64_t size() const override { return n_; }

 private:
  int64_t n_, fail_at_, delay_ms_;
};
LOADER_REGISTER_DATASET("test_probe", [](const Value& p) {
  return std::make_shared<ProbeDataset>(p.at("n").to_int(), p.get("fail_at", Value(int64_t{-1})).to_int(),
                                        p.get("delay_ms", Value(int64_t{0})).to_int());
});

/// Sample i after `delay_ms` milliseconds (each worker sleeps its own).
std::shared_ptr<Dataset> probe(int64_t n, int64_t fail_at = -1, int64_t delay_ms = 0) {
  return make_dataset({"test_probe", Value::dict({{"n", n}, {"fail_at", fail_at}, {"delay_ms", delay_ms}})});
}

using loader::testing::child_processes;
using loader::testing::shm_segments_of_this_process;

std::vector<Value> run_epoch(DataLoader& dl) {
  std::vector<Value> out;
  for (Value& b : dl) out.push_back(b);
  return out;
}

struct Mode {
  WorkerMode mode;
  const char* name;
};

class Workers : public ::testing::TestWithParam<WorkerMode> {};

TEST_P(Workers, GiveTheSameBatchesInTheSameOrderAsOneProcess) {
  auto ds = probe(103);
  DataLoaderOptions base;
  base.batch_size = 8;
  base.shuffle = true;
  base.generator = std::make_shared<Generator>(7);
  DataLoader single(ds, base);
  auto expected0 = run_epoch(single);
  auto expected1 = run_epoch(single);
  ASSERT_EQ(expected0.size(), 13u);
  for (int workers : {1, 2, 4}) {
    DataLoaderOptions o = base;
    o.generator = std::make_shared<Generator>(7);
    o.num_workers = workers;
    o.worker_mode = GetParam();
    DataLoader dl(ds, o);
    for (const auto* expected : {&expected0, &expected1}) {
      auto got = run_epoch(dl);
      ASSERT_EQ(got.size(), expected->size()) << workers << " workers";
      for (size_t b = 0; b < got.size(); ++b) {
        // Same features and indices; the worker-id column differs by design.
        auto g = got[b][0].to_tensor().select(1, 0).contiguous();
        auto e = (*expected)[b][0].to_tensor().select(1, 0).contiguous();
        EXPECT_TRUE(g.equal(e)) << "batch " << b << " with " << workers << " workers";
        EXPECT_TRUE(got[b][1].to_tensor().equal((*expected)[b][1].to_tensor()));
        // Task b goes to worker b mod W.
        auto wid = got[b][2].to_tensor().to_int64_vector();
        for (int64_t w : wid) EXPECT_EQ(w, static_cast<int64_t>(b % static_cast<size_t>(workers)));
      }
    }
  }
}

TEST_P(Workers, DatasetErrorRaisesForItsBatchAndLaterBatchesArrive) {
  DataLoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  o.worker_mode = GetParam();
  DataLoader dl(probe(20, 9), o);
  auto it = dl.iter();
  int ok = 0, errors = 0;
  std::string message;
  while (true) {
    try {
      auto b = it.next();
      if (!b) break;
      ++ok;
    } catch (const ValueError& e) {
      ++errors;
      message = e.what();
    }
  }
  EXPECT_EQ(ok, 4);
  EXPECT_EQ(errors, 1);
  EXPECT_NE(message.find("Caught ValueError in DataLoader worker process 0."), std::string::npos) << message;
  EXPECT_NE(message.find("ValueError: boom at 9"), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(ProcessAndInProcess, Workers,
                         ::testing::Values(WorkerMode::Process, WorkerMode::InProcess),
                         [](const auto& p) { return p.param == WorkerMode::Process ? "Process" : "InProcess"; });

TEST_P(Workers, StatsCountEachStageAndStayAfterTheEnd) {
  for (bool persistent : {false, true}) {
    SCOPED_TRACE(persistent ? "persistent workers" : "fresh workers");
    DataLoaderOptions o;
    o.batch_size = 4;
    o.num_workers = 2;
    o.prefetch_factor = 2;
    o.persistent_workers = persistent;
    o.worker_mode = GetParam();
    DataLoader dl(probe(40), o);  // 10 batches
    auto it = dl.iter();
    ASSERT_TRUE(it.next().has_value());
    EpochStats s = it.stats();
    EXPECT_EQ(s.batches, 1);
    EXPECT_GT(s.next_s, 0.0);
    ASSERT_EQ(s.workers.size(), 2u);
    // The credit bound in the figures: 4 tasks (prefetch_factor * num_workers) at iter(),
    // one more for the credit the first batch gave back.
    EXPECT_EQ(s.in_flight, 4);
    EXPECT_EQ(s.tasks_sent, 5);
    EXPECT_LE(s.ready, s.in_flight);
    for (const auto& w : s.workers) {
      EXPECT_EQ(w.restarts, 0);
      EXPECT_TRUE(w.state == "running" || w.state == "starting") << w.state;
    }
    if (GetParam() == WorkerMode::Process) {
      auto pids = it.worker_pids();
      EXPECT_EQ(s.workers[0].pid, pids[0]);
      EXPECT_EQ(s.workers[1].pid, pids[1]);
    }
    int n = 1;
    while (it.next()) ++n;
    ASSERT_EQ(n, 10);
    s = it.stats();
    EXPECT_EQ(s.batches, 10);
    EXPECT_EQ(s.tasks_sent, 10);
    EXPECT_EQ(s.in_flight, 0);
    EXPECT_EQ(s.ready, 0);
    ASSERT_EQ(s.workers.size(), 2u);
    EXPECT_EQ(s.workers[0].delivered, 5);  // round robin: tasks 0, 2, 4, ... to worker 0
    EXPECT_EQ(s.workers[1].delivered, 5);
    EXPECT_LE(s.waits, 10) << "a next() call counts once however long it waits";
    // The application thread's figures, and the occupancy over the epoch.
    EXPECT_EQ(s.samples, 40);
    EXPECT_GT(s.first_batch_s, 0.0);
    EXPECT_LE(s.first_batch_s, s.wall_s);
    EXPECT_EQ(s.wait.count(), 10) << "one per batch";
    EXPECT_LE(s.wait.quantile_s(0.5), s.wait.quantile_s(0.99));
    EXPECT_LE(s.wait.quantile_s(0.99), s.wait.max_s());
    // The histogram holds the calls that gave a batch; next_s also the last call, which
    // found the end (its length depends on the machine: 1.6 ms under ThreadSanitizer).
    EXPECT_GT(s.wait.sum_s(), 0.0);
    EXPECT_LE(s.wait.sum_s(), s.next_s + 1e-6);
    EXPECT_GE(s.in_flight_max, 1);
    EXPECT_LE(s.in_flight_max, 4) << "the credit bound";
    EXPECT_GT(s.in_flight_mean, 0.0);
    EXPECT_LE(s.in_flight_mean, 4.0);
    EXPECT_LE(s.ready_max, 4);
    EXPECT_GT(s.slab_bytes_peak, 0);
    EXPECT_GE(s.slab_bytes_mapped, s.slab_bytes_in_use);
    for (const auto& w : s.workers) {
      EXPECT_EQ(w.tasks, 5);
      EXPECT_NEAR(w.fetch_s + w.collate_s, w.busy_s, 1e-9);
      EXPECT_GE(w.cpu_user_s + w.cpu_system_s, 0.0);
    }
    EXPECT_EQ(s.restarts, 0);
    EXPECT_EQ(s.diagnosis().find("no batches"), std::string::npos) << s.diagnosis();

    // A second epoch counts afresh.
    auto it2 = dl.iter();
    ASSERT_TRUE(it2.next().has_value());
    EXPECT_EQ(it2.stats().batches, 1);
    EXPECT_EQ(it2.stats().tasks_sent, 5);
    EXPECT_EQ(it.stats().batches, 10) << "the ended epoch keeps its figures";
    EXPECT_EQ(it.stats().workers.size(), 2u);
    EXPECT_EQ(it.stats().samples, 40);
    // The loader keeps every ended epoch; the running one is its iterator's.
    LoaderStats all = dl.stats();
    ASSERT_EQ(all.epochs.size(), 1u);
    EXPECT_EQ(all.epochs[0].batches, 10);
    EXPECT_EQ(all.total.samples, 40);
    while (it2.next()) {
    }
    all = dl.stats();
    ASSERT_EQ(all.epochs.size(), 2u);
    EXPECT_EQ(all.total.batches, 20);
    EXPECT_EQ(all.total.wait.count(), 20);
    EXPECT_EQ(all.epochs[1].previous_minor_faults, all.epochs[0].minor_faults());
  }

  // Each worker's time on its delivered tasks: 4 samples of 3 ms per batch, 5 batches each.
  {
    DataLoaderOptions o;
    o.batch_size = 4;
    o.num_workers = 2;
    o.worker_mode = GetParam();
    DataLoader dl(probe(40, -1, 3), o);
    const auto start = std::chrono::steady_clock::now();
    auto it = dl.iter();
    while (it.next()) {
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EpochStats s = it.stats();
    ASSERT_EQ(s.workers.size(), 2u);
    for (const auto& w : s.workers) {
      EXPECT_GE(w.busy_s, 5 * 4 * 0.003) << "5 batches of 4 samples of 3 ms";
      EXPECT_LE(w.busy_s, wall) << "no more than the epoch lasted";
      EXPECT_GE(w.fetch_s, 5 * 4 * 0.003) << "the samples' time is fetch time";
      EXPECT_LT(w.collate_s, w.fetch_s);
      if (GetParam() == WorkerMode::Process) {
        EXPECT_GT(w.minor_faults, 0) << "a fresh process maps its memory in";
      }
    }
    EXPECT_LE(s.wall_s, wall + 1e-3);
    EXPECT_GT(s.sampler_s, 0.0);
    EXPECT_LT(s.sampler_s, wall);
  }

  // Without workers: batches fetched in the calling thread, nothing in flight.
  DataLoaderOptions single;
  single.batch_size = 4;
  DataLoader dl0(probe(40), single);
  auto it0 = dl0.iter();
  while (it0.next()) {
  }
  EpochStats s0 = it0.stats();
  EXPECT_EQ(s0.batches, 10);
  EXPECT_EQ(s0.tasks_sent, 10);
  EXPECT_EQ(s0.in_flight, 0);
  EXPECT_TRUE(s0.workers.empty());
  EXPECT_GT(s0.sampler_s, 0.0);
  EXPECT_EQ(s0.samples, 40);
  EXPECT_EQ(s0.wait.count(), 10);
  EXPECT_EQ(dl0.stats().epochs.size(), 1u);
}

TEST(ProcStat, ParsesTheFieldsAfterTheCommand) {
  // A command name with spaces and parentheses; minflt is field 10, utime 14, stime 15.
  const std::string text =
      "1234 (a (b) c) S 1 1234 1234 0 -1 4194560 777 0 0 0 250 30 0 0 20 0 1 0 100 1000 200\n";
  auto st = runtime::parse_proc_stat(text);
  ASSERT_TRUE(st.has_value());
  EXPECT_EQ(st->minor_faults, 777);
  const double tick = 1.0 / static_cast<double>(::sysconf(_SC_CLK_TCK));
  EXPECT_NEAR(st->user_s, 250 * tick, 1e-9);
  EXPECT_NEAR(st->system_s, 30 * tick, 1e-9);
  EXPECT_FALSE(runtime::parse_proc_stat("garbage").has_value());
  EXPECT_FALSE(runtime::parse_proc_stat("1 (x) S 1 2").has_value());
  auto self = runtime::read_proc_stat(::getpid());
  ASSERT_TRUE(self.has_value());
  EXPECT_GT(self->minor_faults, 0);
  EXPECT_FALSE(runtime::read_proc_stat(-1).has_value());
}

TEST(WorkerProcesses, LeaveNoSegmentAndNoChildBehind) {
  ASSERT_TRUE(shm_segments_of_this_process().empty());
  {
    DataLoaderOptions o;
    o.batch_size = 16;
    o.num_workers = 2;
    DataLoader dl(probe(200), o);
    auto it = dl.iter();
    ASSERT_TRUE(it.next().has_value());
    auto pids = it.worker_pids();
    ASSERT_EQ(pids.size(), 2u);
    for (int p : pids) EXPECT_GT(p, 0);
    for (const auto& seg : shm_segments_of_this_process())
      EXPECT_EQ(seg.rfind("name ", 0), std::string::npos) << "slabs never have a name: " << seg;
    // break out of the epoch early: the iterator goes out of scope here
  }
  EXPECT_TRUE(child_processes().empty());
  EXPECT_TRUE(shm_segments_of_this_process().empty());
}

TEST(WorkerProcesses, PersistentWorkersKeepTheirPids) {
  DataLoaderOptions o;
  o.batch_size = 10;
  o.num_workers = 2;
  o.persistent_workers = true;
  DataLoader dl(probe(50), o);
  std::vector<int> first;
  {
    auto it = dl.iter();
    while (it.next()) {
      if (first.empty()) first = it.worker_pids();
    }
  }
  auto it = dl.iter();
  ASSERT_TRUE(it.next().has_value());
  EXPECT_EQ(it.worker_pids(), first);
  EXPECT_EQ(child_processes().size(), 2u);
  while (it.next()) {
  }
  dl.shutdown();
  EXPECT_TRUE(child_processes().empty());
}

TEST(WorkerProcesses, WorkersStartedFromAThreadThatEndsOutliveThatThread) {
  // Workers die with the main process (PR_SET_PDEATHSIG), which Linux ties to the
  // thread that started them: an epoch run in a thread that then exits must not take
  // its workers along (a persistent pool's next epoch failed with "killed by signal").
  for (bool persistent : {true, false}) {
    SCOPED_TRACE(persistent ? "persistent" : "fresh workers each epoch");
    DataLoaderOptions o;
    o.batch_size = 10;
    o.num_workers = 2;
    o.persistent_workers = persistent;
    DataLoader dl(probe(50), o);
    std::vector<int> first;
    size_t first_batches = 0;
    std::thread epoch_thread([&] {
      auto it = dl.iter();
      while (it.next()) {
        if (first.empty()) first = it.worker_pids();
        ++first_batches;
      }
    });
    epoch_thread.join();
    EXPECT_EQ(first_batches, 5u);
    // Time for a death signal to arrive and be noticed, were one sent.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (int pid : first) EXPECT_EQ(kill(pid, 0), 0) << "worker " << pid << " died with the thread";
    auto it = dl.iter();
    size_t batches = 0;
    std::vector<int> second;
    while (it.next()) {
      if (second.empty()) second = it.worker_pids();
      ++batches;
    }
    EXPECT_EQ(batches, 5u);
    EXPECT_EQ(second, first) << "the same processes serve the next epoch";
  }
  EXPECT_TRUE(child_processes().empty());
}

TEST(WorkerProcesses, LoadersIteratedOnFourThreadsAtOnceEachGiveTheirOwnBatches) {
  // Four application threads, each with its own loader (fresh or persistent workers, 1
  // to 3 of them, its own shuffle generator), three epochs each, all at the same time,
  // sharing the process's actor system and spawner thread, two of them leaving their
  // second epoch after 2 batches: each gives the batches of indices it gives when it
  // runs alone (a persistent loader draws base_seed once, so its later epochs differ
  // from a single-process loader's).
  struct Case {
    int workers;
    bool persistent;
    uint64_t seed;
    bool break_early;
  };
  const std::vector<Case> cases = {{2, false, 11, false}, {3, true, 12, true}, {1, false, 13, true}, {2, true, 14, false}};
  auto options = [](const Case& c, int workers) {
    DataLoaderOptions o;
    o.batch_size = 7;
    o.shuffle = true;
    o.generator = std::make_shared<Generator>(c.seed);
    o.num_workers = workers;
    o.persistent_workers = workers > 0 && c.persistent;
    o.timeout = 60;
    return o;
  };
  auto indices = [](DataLoader& dl, bool break_early) {
    std::vector<std::vector<int64_t>> out;
    auto it = dl.iter();
    while (auto b = it.next()) {
      out.push_back((*b)[1].to_tensor().to_int64_vector());
      if (break_early && out.size() == 2) break;
    }
    return out;
  };
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    std::vector<std::vector<std::vector<std::vector<int64_t>>>> got(cases.size()), want(cases.size());
    for (size_t k = 0; k < cases.size(); ++k) {
      DataLoader alone(probe(61), options(cases[k], cases[k].workers));
      for (int epoch = 0; epoch < 3; ++epoch) want[k].push_back(indices(alone, cases[k].break_early && epoch == 1));
    }
    std::vector<std::thread> threads;
    std::vector<std::string> errors(cases.size());
    for (size_t k = 0; k < cases.size(); ++k) {
      threads.emplace_back([&, k] {
        try {
          DataLoader dl(probe(61), options(cases[k], cases[k].workers));
          for (int epoch = 0; epoch < 3; ++epoch) got[k].push_back(indices(dl, cases[k].break_early && epoch == 1));
        } catch (const std::exception& e) {
          errors[k] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (size_t k = 0; k < cases.size(); ++k) {
      EXPECT_EQ(errors[k], "") << "loader " << k;
      EXPECT_EQ(got[k], want[k]) << "loader " << k;
    }
  }
  EXPECT_TRUE(child_processes().empty());
  EXPECT_TRUE(shm_segments_of_this_process().empty());
}

TEST(WorkerProcesses, AStackDatasetIsRebuiltInEachWorkerFromItsHandle) {
  // StackDataset of registered datasets gets a "stack" handle: worker processes rebuild
  // it and give the single-process dict batches.
  auto x = make_dataset({"range", Value::dict({{"n", 30}})});
  auto y = make_dataset({"range", Value::dict({{"n", 30}, {"start", 100}})});
  auto ds = std::make_shared<StackDataset>(std::vector<std::pair<std::string, std::shared_ptr<Dataset>>>{{"x", x}, {"y", y}});
  ASSERT_TRUE(ds->handle().has_value());
  DataLoaderOptions o;
  o.batch_size = 4;
  o.shuffle = true;
  o.generator = std::make_shared<Generator>(3);
  DataLoader single(ds, o);
  const auto want = run_epoch(single);
  o.num_workers = 2;
  o.generator = std::make_shared<Generator>(3);
  DataLoader workers(ds, o);
  const auto got = run_epoch(workers);
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_TRUE(got[k].is_dict());
    EXPECT_TRUE(got[k].at("x").to_tensor().equal(want[k].at("x").to_tensor())) << k;
    const auto xs = got[k].at("x").to_tensor().to_int64_vector();
    const auto ys = got[k].at("y").to_tensor().to_int64_vector();
    ASSERT_EQ(xs.size(), ys.size());
    for (size_t r = 0; r < xs.size(); ++r) EXPECT_EQ(ys[r], xs[r] + 100);
  }
}

TEST(WorkerProcesses, BatchesAreZeroCopyViewsOfSharedMemory) {
  DataLoaderOptions o;
  o.batch_size = 8;
  o.num_workers = 1;
  DataLoader dl(probe(16), o);
  for (Value& b : dl) {
    const Tensor& t = b[0].to_tensor();
    EXPECT_EQ(t.storage()->kind(), MemoryKind::SharedMemory);
    EXPECT_TRUE(t.is_shared());  // D63: collated in a worker, in shared memory
    EXPECT_EQ(t.sizes(), (Dims{8, 3}));
  }
}

}  // namespace
}  // namespace loader
