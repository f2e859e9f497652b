// The autotuner (num_workers = auto) fed scripted figures: a model of a pool whose batch
// rate follows from its workers, cores, prefetch and the consumer's step, sampled every
// 100 ms as the pool actor would.  Then the same controller driven through the pool
// actor's clock on CAF's deterministic scheduler.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "deterministic_system.h"
#include "loader/runtime/parent/autotuner.h"
#include "loader/runtime/parent/pipeline.h"
#include "loader/runtime/parent/pool_actor.h"

namespace loader::runtime {
namespace {

/// A pool in the abstract: each batch costs a worker `cost_s` of CPU, the machine has
/// `cores` for the workers, the consumer spends `step_s` per batch, and with fewer than
/// `latency_prefetch` tasks in flight per worker the transport's latency idles them.
struct Plant {
  double cost_s = 0.04;
  double step_s = 0;
  int cores = 4;
  int latency_prefetch = 0;  ///< 0: prefetch does not matter
  int workers = 1;
  int prefetch = 2;
  uint64_t batch_bytes = 0;
  uint64_t worker_rss = 0;
  // cumulative
  double t = 0, batches = 0, wait = 0, busy = 0;

  double rate() const {
    double supply = std::min(workers, cores) / cost_s;
    if (latency_prefetch > 0 && prefetch < latency_prefetch) supply *= static_cast<double>(prefetch) / latency_prefetch;
    const double demand = step_s > 0 ? 1.0 / step_s : 1e9;
    return std::min(supply, demand);
  }
  TuneSample advance(double dt) {
    const double r = rate();
    t += dt;
    batches += r * dt;
    wait += step_s > 0 ? std::max(0.0, 1.0 - r * step_s) * dt : dt;
    busy += std::min(r * cost_s, static_cast<double>(workers)) * dt;
    TuneSample s;
    s.t_s = t;
    s.batches = static_cast<uint64_t>(batches);
    s.wait_s = wait;
    s.busy_s = busy;
    s.active = workers;
    s.prefetch = prefetch;
    s.ready = step_s > 0 && r * step_s >= 0.99 ? static_cast<uint64_t>(prefetch * workers) : 0;
    s.batch_bytes = batch_bytes;
    s.worker_rss = worker_rss;
    return s;
  }
};

struct TuneRun {
  std::vector<TuneStep> steps;
  std::vector<std::pair<int, int>> settings;  ///< after each tick
};

/// `ticks` samples 100 ms apart; each step is applied at once.
TuneRun drive(WorkerTuner& tuner, Plant& p, int ticks) {
  TuneRun out;
  for (int i = 0; i < ticks; ++i) {
    if (auto step = tuner.observe(p.advance(0.1))) {
      out.steps.push_back(*step);
      p.workers = step->workers;
      p.prefetch = step->prefetch;
    }
    out.settings.emplace_back(p.workers, p.prefetch);
  }
  return out;
}

/// How often the worker count changed direction (up then down, or down then up).
int reversals(const TuneRun& r) {
  int n = 0, last = 0;
  for (size_t i = 1; i < r.settings.size(); ++i) {
    const int d = r.settings[i].first - r.settings[i - 1].first;
    if (d == 0) continue;
    const int dir = d > 0 ? 1 : -1;
    if (last != 0 && dir != last) ++n;
    last = dir;
  }
  return n;
}

std::string describe(const TuneRun& r) {
  std::string out;
  for (const auto& s : r.steps)
    out += "-> " + std::to_string(s.workers) + "w/" + std::to_string(s.prefetch) + "p: " + s.reason + "\n";
  return out;
}

WorkerTuner::Limits limits(int max_workers, int min_workers = 1) {
  WorkerTuner::Limits l;
  l.min_workers = min_workers;
  l.max_workers = max_workers;
  l.max_prefetch = 8;
  return l;
}

TEST(WorkerTuner, InputBoundWithCoresToSpareGrowsToMaxWorkersWithinBoundedTicksAndStays) {
  WorkerTuner tuner(limits(4));
  Plant p;  // 25 batches/s per worker, 4 cores, no consumer step
  const TuneRun r = drive(tuner, p, 200);
  EXPECT_EQ(p.workers, 4) << describe(r);
  // Each added worker is one window to decide and one to judge (~3 windows of >= 250 ms).
  int reached = -1;
  for (size_t i = 0; i < r.settings.size(); ++i)
    if (r.settings[i].first == 4) {
      reached = static_cast<int>(i);
      break;
    }
  EXPECT_GE(reached, 0);
  EXPECT_LE(reached, 60) << describe(r);
  EXPECT_EQ(reversals(r), 0) << describe(r);
  for (const auto& s : r.settings) EXPECT_LE(s.first, 4);
}

TEST(WorkerTuner, MoreWorkersThanCoresIsTriedOnceUndoneAndNotRetriedForAWhile) {
  WorkerTuner tuner(limits(4));
  Plant p;
  p.cores = 2;  // a third worker adds nothing
  const TuneRun r = drive(tuner, p, 300);
  EXPECT_EQ(p.workers, 2) << describe(r);
  int undone = 0;
  for (const auto& s : r.steps) undone += s.reason.rfind("undone: the added worker", 0) == 0 ? 1 : 0;
  EXPECT_GE(undone, 1) << describe(r);
  // The third worker is tried again only after kBlockWindows windows: a few times in 30 s
  // (windows of at least 250 ms), not every tick.
  EXPECT_LE(undone, 300 / (WorkerTuner::kBlockWindows * 25 / 10) + 1) << describe(r);
  for (const auto& s : r.settings) EXPECT_LE(s.first, 3);
}

TEST(WorkerTuner, ConsumerBoundRetiresIdleWorkersDownToWhatTheConsumerNeedsAndNeverBelowMin) {
  WorkerTuner tuner(limits(4, 2));
  Plant p;
  p.workers = 4;
  p.cost_s = 0.01;   // 100 batches/s per worker
  p.step_s = 0.05;   // the consumer takes 20 per second
  const TuneRun r = drive(tuner, p, 200);
  EXPECT_EQ(p.workers, 2) << describe(r);  // min_workers
  for (const auto& s : r.settings) EXPECT_GE(s.first, 2);
  EXPECT_EQ(reversals(r), 0) << describe(r);
  ASSERT_FALSE(r.steps.empty());
  EXPECT_NE(r.steps.front().reason.find("consumer-bound"), std::string::npos);
}

TEST(WorkerTuner, ARetiredWorkerThatLeftTheApplicationWaitingIsStartedAgain) {
  WorkerTuner tuner(limits(2));
  Plant p;
  p.workers = 2;
  p.cost_s = 0.04;   // 25 batches/s per worker
  p.step_s = 0.021;  // ~48/s: one worker is not enough, the pair keeps up
  const TuneRun r = drive(tuner, p, 300);
  EXPECT_EQ(p.workers, 2) << describe(r);
  EXPECT_LE(reversals(r), 1) << describe(r);
}

TEST(WorkerTuner, NeverAboveTheMemoryBudget) {
  WorkerTuner::Limits l = limits(8);
  l.memory_budget = 1000u << 20;  // 1000 MiB
  WorkerTuner tuner(l);
  Plant p;
  p.cores = 8;
  p.batch_bytes = 100u << 20;  // (prefetch + 2) x 100 MiB per worker
  p.worker_rss = 50u << 20;
  const TuneRun r = drive(tuner, p, 300);
  for (const auto& [w, pf] : r.settings)
    EXPECT_LE(WorkerTuner::memory_of(w, pf, p.batch_bytes, p.worker_rss), l.memory_budget) << w << " workers, " << pf;
  EXPECT_EQ(p.workers, 2) << describe(r);  // 2 x (4 x 100 + 50) = 900 MiB; 3 would be 1350
}

TEST(WorkerTuner, OverTheBudgetLowersThePrefetchFirstThenWorkers) {
  WorkerTuner::Limits l = limits(4);
  l.memory_budget = 500u << 20;
  WorkerTuner tuner(l);
  Plant p;
  p.workers = 2;
  p.prefetch = 4;
  p.batch_bytes = 100u << 20;  // 2 x 6 x 100 = 1200 MiB now
  const TuneRun r = drive(tuner, p, 60);
  ASSERT_GE(r.steps.size(), 2u) << describe(r);
  EXPECT_EQ(r.steps[0].prefetch, 3);
  EXPECT_NE(r.steps[0].reason.find("memory budget"), std::string::npos);
  EXPECT_LE(WorkerTuner::memory_of(p.workers, p.prefetch, p.batch_bytes, 0), l.memory_budget) << describe(r);
}

TEST(WorkerTuner, IdleWorkersBehindATransportsLatencyGetADeeperPrefetchThatStopsWhereItStopsHelping) {
  WorkerTuner tuner(limits(2));
  Plant p;
  p.workers = 2;
  p.cores = 2;
  p.cost_s = 0.004;
  p.latency_prefetch = 4;  // below 4 in flight per worker the workers idle
  WorkerTuner::Limits l = limits(2);
  const TuneRun r = drive(tuner, p, 300);
  EXPECT_EQ(p.workers, 2) << describe(r);
  EXPECT_GE(p.prefetch, 4) << describe(r);
  EXPECT_LE(p.prefetch, 5) << describe(r);  // one more is tried, undone
  for (const auto& s : r.settings) EXPECT_LE(s.second, l.max_prefetch);
}

TEST(WorkerTuner, AnIterablesWorkersAreNeverRetiredOrAdded) {
  WorkerTuner::Limits l = limits(4);
  l.fixed_workers = true;
  WorkerTuner tuner(l);
  Plant p;
  p.workers = 3;
  p.step_s = 1;  // very consumer-bound
  drive(tuner, p, 100);
  EXPECT_EQ(p.workers, 3);
  Plant q;
  q.workers = 3;  // very input-bound
  WorkerTuner again(l);
  drive(again, q, 100);
  EXPECT_EQ(q.workers, 3);
}

TEST(WorkerTuner, NothingIsDecidedWhileAWorkerStartsOrBeforeAWindowIsFull) {
  WorkerTuner tuner(limits(4));
  TuneSample s;
  s.active = 1;
  s.prefetch = 2;
  s.starting = 1;
  for (int i = 0; i < 20; ++i) {
    s.t_s = 0.1 * i;
    s.batches = static_cast<uint64_t>(i * 10);
    s.wait_s = s.t_s;  // all waiting
    s.busy_s = s.t_s;  // busy
    EXPECT_FALSE(tuner.observe(s)) << "tick " << i;
  }
}

TEST(EpochMode, ACheapDatasetMovesToThisThreadAndStaysWhileItIsCheaper) {
  EpochMode m(true);
  std::string why;
  EXPECT_FALSE(m.next_inline(&why)) << "nothing measured: the pool";
  // Pool: 1000 batches in 20 ms after the first; workers busy 5 ms, the app 1 ms, sampler 2 ms.
  m.ended(false, 1000, 0.020, 0.005, 0.001, 0.002);
  EXPECT_TRUE(m.next_inline(&why)) << why;
  EXPECT_NE(why.find("estimated"), std::string::npos);
  m.ended(true, 1000, 0.009, 0, 0.001, 0.002);  // measured: 9 us a batch
  EXPECT_TRUE(m.next_inline(&why)) << why;
  m.ended(true, 1000, 0.030, 0, 0.001, 0.002);  // the samples got dearer: 30 us vs the pool's 20
  EXPECT_FALSE(m.next_inline(&why)) << why;
}

TEST(EpochMode, ACostlyDatasetStaysWithThePoolAndAnIterableNeverLeavesIt) {
  EpochMode m(true);
  m.ended(false, 100, 1.0, 1.9, 0.01, 0.001);  // two workers busy nearly all the time
  EXPECT_FALSE(m.next_inline(nullptr));
  EpochMode iterable(false);
  iterable.ended(false, 1000, 0.020, 0.001, 0.0, 0.0);
  EXPECT_FALSE(iterable.next_inline(nullptr));
}

TEST(EpochMode, NoSwitchOnADifferenceWithinTheHysteresis) {
  EpochMode m(true);
  m.ended(false, 1000, 0.010, 0.009, 0.0, 0.0);  // inline estimated 9 us vs 10 us: within 15 %
  EXPECT_FALSE(m.next_inline(nullptr));
}

// ---------------------------------------------------------------- on the pool actor's clock

/// A pool the model runs: tune() samples it as Pipeline::tune does and applies the
/// tuner's step; the slots to start or retire go to the slot actors, which record them.
class ModelControl : public WorkerControl {
 public:
  explicit ModelControl(WorkerTuner::Limits l) : tuner(l) {}
  void restart(int, uint32_t) override {}
  void flush(int) override {}
  void watch(int, std::chrono::milliseconds) override {}
  void fail_all(const std::string& type, const std::string& message) override { failures.push_back(type + ": " + message); }
  void park(int worker) override { calls.push_back("park " + std::to_string(worker)); }
  void unpark(int worker) override { calls.push_back("unpark " + std::to_string(worker)); }
  std::vector<std::pair<int, bool>> tune() override {
    ++ticks;
    std::vector<std::pair<int, bool>> acts;
    if (auto step = tuner.observe(plant.advance(0.1))) {
      for (int w = plant.workers; w < step->workers; ++w) acts.emplace_back(w, true);
      for (int w = plant.workers - 1; w >= step->workers; --w) acts.emplace_back(w, false);
      plant.workers = step->workers;
      plant.prefetch = step->prefetch;
    }
    return acts;
  }
  WorkerTuner tuner;
  Plant plant;
  int ticks = 0;
  std::vector<std::string> calls, failures;
};

TEST(AutotuneActors, ThePoolActorsClockTunesAndItsSlotActorsStartAndRetireTheWorkers) {
  caf::actor_system sys(deterministic_config());
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  auto model = std::make_shared<ModelControl>(limits(3));
  model->plant.cores = 8;
  {
    PoolActors actors(sys, model, 3, std::chrono::milliseconds(0), std::chrono::milliseconds(100));
    sched.run();
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(sched.trigger_timeouts()) << "autotune tick " << i << " was not scheduled";
      sched.run();
    }
    EXPECT_EQ(model->ticks, 100);
    EXPECT_EQ(model->plant.workers, 3);
    EXPECT_EQ(model->calls, (std::vector<std::string>{"unpark 1", "unpark 2"}));
    // Now the consumer slows down: workers are retired, by their own actors.
    model->plant.step_s = 0.2;
    model->plant.cost_s = 0.01;
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(sched.trigger_timeouts());
      sched.run();
    }
    EXPECT_EQ(model->plant.workers, 1);
    EXPECT_EQ(model->calls, (std::vector<std::string>{"unpark 1", "unpark 2", "park 2", "park 1"}));
    EXPECT_TRUE(model->failures.empty());
    actors.send_exits();
    sched.run();
  }
  EXPECT_FALSE(sched.trigger_timeouts() && (sched.run(), model->ticks > 200)) << "no tuning after the pool's shutdown";
}

}  // namespace
}  // namespace loader::runtime
