// EpochStats without a loader: the histogram, the diagnosis thresholds, totals and JSON.
#include "loader/epoch_stats.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

using loader::DurationHistogram;
using loader::EpochStats;
using loader::LoaderStats;

namespace {

constexpr uint64_t kMs = 1'000'000;

/// An epoch of `wall` seconds, 100 batches, with `workers` workers each busy `busy` of it,
/// training inside next() `waited` of it.
EpochStats epoch(double wall, int workers, double busy, double waited) {
  EpochStats s;
  s.batches = 100;
  s.samples = 6400;
  s.wall_s = wall;
  s.first_batch_s = 0;
  s.next_s = waited * wall;
  for (int k = 0; k < workers; ++k) {
    EpochStats::Worker w;
    w.busy_s = busy * wall;
    s.workers.push_back(w);
  }
  return s;
}

}  // namespace

TEST(DurationHistogram, QuantilesWithinABucketOfTheTruth) {
  DurationHistogram h;
  EXPECT_EQ(h.quantile_s(0.5), 0.0) << "empty";
  for (uint64_t i = 1; i <= 1000; ++i) h.add(i * 10'000);  // 10 us .. 10 ms
  EXPECT_EQ(h.count(), 1000);
  EXPECT_NEAR(h.quantile_s(0.5), 5e-3, 5e-3 * 0.065);
  EXPECT_NEAR(h.quantile_s(0.9), 9e-3, 9e-3 * 0.065);
  EXPECT_NEAR(h.quantile_s(0.99), 9.9e-3, 9.9e-3 * 0.065);
  EXPECT_DOUBLE_EQ(h.max_s(), 10e-3);
  EXPECT_LE(h.quantile_s(1.0), h.max_s()) << "never above the exact max";
  EXPECT_NEAR(h.sum_s(), 1000 * 1001 / 2 * 1e-5, 1e-9);
}

TEST(DurationHistogram, BucketsAreMonotoneAndCoverEveryDuration) {
  int last = 0;
  for (uint64_t ns = 1; ns < (uint64_t{1} << 40); ns = ns * 9 / 8 + 1) {
    const int b = DurationHistogram::bucket(ns);
    EXPECT_GE(b, last) << ns;
    EXPECT_LT(b, DurationHistogram::kBuckets);
    if (b > 0 && b + 1 < DurationHistogram::kBuckets) {
      EXPECT_LE(DurationHistogram::lower_ns(b), static_cast<double>(ns)) << ns;
      EXPECT_GT(DurationHistogram::lower_ns(b + 1), static_cast<double>(ns)) << ns;
    }
    last = b;
  }
  EXPECT_EQ(DurationHistogram::bucket(0), 0);
  EXPECT_EQ(DurationHistogram::bucket(~uint64_t{0}), DurationHistogram::kBuckets - 1);
}

TEST(DurationHistogram, MergeAddsCounts) {
  DurationHistogram a, b;
  a.add(kMs);
  b.add(3 * kMs);
  b.add(5 * kMs);
  a.merge(b);
  EXPECT_EQ(a.count(), 3);
  EXPECT_DOUBLE_EQ(a.max_s(), 5e-3);
  EXPECT_NEAR(a.quantile_s(0.5), 3e-3, 3e-3 * 0.065);
}

TEST(EpochStatsDiagnosis, InputBoundWithBusyWorkersAsksForMoreWorkers) {
  EpochStats s = epoch(10, 2, 0.95, 0.61);
  const std::string d = s.diagnosis();
  EXPECT_EQ(d, "input-bound: workers 95% busy, training waited 61% of the epoch: more workers (2 -> 3) or cheaper samples");
}

TEST(EpochStatsDiagnosis, InputBoundWithIdleWorkersAsksForPrefetch) {
  EpochStats s = epoch(10, 2, 0.4, 0.5);
  const std::string d = s.diagnosis();
  EXPECT_EQ(d.rfind("input-bound:", 0), 0u) << d;
  EXPECT_NE(d.find("prefetch_factor"), std::string::npos) << d;
}

TEST(EpochStatsDiagnosis, InputBoundWithoutWorkers) {
  const std::string d = epoch(10, 0, 0, 0.9).diagnosis();
  EXPECT_EQ(d.rfind("input-bound:", 0), 0u) << d;
  EXPECT_NE(d.find("0 -> 2"), std::string::npos) << d;
}

TEST(EpochStatsDiagnosis, ThresholdsAreWhereTheHeaderSays) {
  // Training waited just under / at kWaitShare.
  EXPECT_EQ(epoch(10, 2, 0.95, EpochStats::kWaitShare - 0.01).diagnosis().rfind("balanced", 0), 0u);
  EXPECT_EQ(epoch(10, 2, 0.95, EpochStats::kWaitShare).diagnosis().rfind("input-bound", 0), 0u);
  // Workers just under kBusyShare while training rarely waits: consumer-bound.
  EXPECT_EQ(epoch(10, 2, EpochStats::kBusyShare - 0.01, 0.05).diagnosis().rfind("consumer-bound", 0), 0u);
  EXPECT_EQ(epoch(10, 2, EpochStats::kBusyShare, 0.05).diagnosis().rfind("balanced", 0), 0u);
  // Results piling up make it consumer-bound even with busy workers.
  EpochStats piled = epoch(10, 2, 0.9, 0.05);
  piled.ready_mean = EpochStats::kReadyPileUp;
  EXPECT_EQ(piled.diagnosis().rfind("consumer-bound", 0), 0u);
}

TEST(EpochStatsDiagnosis, ConsumerBoundSaysFewerWorkers) {
  EpochStats s = epoch(10, 2, 0.1, 0.01);
  s.ready_mean = 3.5;
  s.ready_max = 4;
  const std::string d = s.diagnosis();
  EXPECT_EQ(d.rfind("consumer-bound:", 0), 0u) << d;
  EXPECT_NE(d.find("fewer workers (2 -> 1)"), std::string::npos) << d;
  EXPECT_NE(d.find("3.5 results ready"), std::string::npos) << d;
}

TEST(EpochStatsDiagnosis, StartUpAndSamplerComeFirst) {
  EpochStats s = epoch(1, 2, 0.95, 0.61);
  s.first_batch_s = EpochStats::kStartupShare * s.wall_s;
  EXPECT_EQ(s.diagnosis().rfind("start-up-bound:", 0), 0u) << s.diagnosis();
  EXPECT_NE(s.diagnosis().find("; after it input-bound: workers"), std::string::npos) << s.diagnosis();
  s.first_batch_s = 0.9 * EpochStats::kStartupShare * s.wall_s;
  EXPECT_EQ(s.diagnosis().rfind("input-bound:", 0), 0u) << s.diagnosis();
  s.sampler_s = EpochStats::kSamplerShare * s.wall_s;
  EXPECT_EQ(s.diagnosis().rfind("sampler-bound:", 0), 0u) << s.diagnosis();
}

TEST(EpochStatsDiagnosis, WarmingUpWhenFaultsFall) {
  // W2 on a fresh 2-core machine: 73k then 21k minor faults in the workers.
  EpochStats s = epoch(10, 2, 0.95, 0.61);
  s.workers[0].minor_faults = 11'000;
  s.workers[1].minor_faults = 10'000;
  s.previous_minor_faults = 73'000;
  std::string d = s.diagnosis();
  EXPECT_EQ(d.rfind("input-bound:", 0), 0u) << d;
  EXPECT_NE(d.find("; warming up: workers' minor page faults fell 73000 -> 21000"), std::string::npos) << d;
  // Settled (fell less than to kWarmingFall of the previous), or too few to matter.
  s.previous_minor_faults = 25'000;
  EXPECT_EQ(s.diagnosis().find("warming up"), std::string::npos);
  s.previous_minor_faults = 73'000;
  s.workers[0].minor_faults = 400;
  s.workers[1].minor_faults = 500;
  EXPECT_EQ(s.diagnosis().find("warming up"), std::string::npos);
  s.previous_minor_faults = -1;  // a first epoch
  s.workers[0].minor_faults = 11'000;
  EXPECT_EQ(s.diagnosis().find("warming up"), std::string::npos);
}

TEST(EpochStatsDiagnosis, BusyShareLeavesTheStartUpOut) {
  // W3, 1 fresh worker, epoch 1: 107 ms of 430 before the first batch, busy 267 ms.
  EpochStats s = epoch(0.430, 1, 0.62, 0.86);
  s.first_batch_s = 0.107;
  EXPECT_NEAR(s.busy_share(), 0.62 * 0.430 / (0.430 - 0.107), 1e-9);
  EXPECT_EQ(s.diagnosis().rfind("input-bound: workers 83% busy", 0), 0u) << s.diagnosis();
  s.first_batch_s = 0.3;  // at most half the epoch left out
  EXPECT_NEAR(s.busy_share(), 0.62 * 0.430 / (0.5 * 0.430), 1e-9);
}

TEST(EpochStatsDiagnosis, NoBatchesYet) { EXPECT_EQ(EpochStats{}.diagnosis(), "no batches yet"); }

TEST(EpochStats, AddMakesTotals) {
  EpochStats a = epoch(2, 2, 0.5, 0.5), b = epoch(6, 2, 0.5, 0.5);
  a.in_flight_mean = 4;
  b.in_flight_mean = 2;
  a.in_flight_max = 4;
  b.in_flight_max = 3;
  a.slab_bytes_peak = 100;
  b.slab_bytes_peak = 50;
  a.workers[0].tasks = 3;
  b.workers[0].tasks = 4;
  a.wait.add(kMs);
  b.wait.add(2 * kMs);
  EpochStats t;
  t.add(a);
  t.add(b);
  EXPECT_EQ(t.batches, 200);
  EXPECT_EQ(t.samples, 12800);
  EXPECT_DOUBLE_EQ(t.wall_s, 8);
  EXPECT_DOUBLE_EQ(t.in_flight_mean, (4 * 2 + 2 * 6) / 8.0) << "weighted by wall time";
  EXPECT_EQ(t.in_flight_max, 4);
  EXPECT_EQ(t.slab_bytes_peak, 100);
  EXPECT_EQ(t.workers.at(0).tasks, 7);
  EXPECT_EQ(t.wait.count(), 2);
}

TEST(EpochStats, ToJsonHasEveryKeyTheBenchPrints) {
  EpochStats s = epoch(10, 2, 0.95, 0.61);
  s.wait.add(2 * kMs);
  s.workers[0].fetch_s = 1.5;
  s.workers[0].collate_s = 0.25;
  s.workers[0].state = "running \"quoted\"";
  const auto j = nlohmann::json::parse(s.to_json());
  for (const char* k : {"samples", "first_batch_s", "wait_p50_s", "wait_p90_s", "wait_p99_s", "wait_max_s",
                        "in_flight_mean", "in_flight_max", "ready_mean", "ready_max", "slab_bytes_mapped",
                        "slab_bytes_in_use", "slab_bytes_peak", "slab_grown", "inline_batches", "restarts",
                        "diagnosis", "workers"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_EQ(j["samples"], 6400);
  EXPECT_NEAR(j["wait_p50_s"].get<double>(), 2e-3, 1e-4);
  ASSERT_EQ(j["workers"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["workers"][0]["fetch_s"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["workers"][0]["collate_s"].get<double>(), 0.25);
  EXPECT_EQ(j["workers"][0]["state"], "running \"quoted\"");
  EXPECT_EQ(j["diagnosis"].get<std::string>().rfind("input-bound", 0), 0u);

  LoaderStats all;
  all.epochs = {s, s};
  all.total.add(s);
  all.total.add(s);
  const auto k = nlohmann::json::parse(all.to_json());
  EXPECT_EQ(k["epochs"].size(), 2u);
  EXPECT_EQ(k["total"]["samples"], 12800);
}
