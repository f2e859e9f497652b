// EpochPlanner (runtime/epoch_planner.h) alone, driven with hand-made ResumePlans and
// settings: the base_seed decision of fresh, finished and resumed epochs (0 workers,
// persistent workers, WorkerSeeding::PerTask), the streams loaded and when, and the
// position each kind of resume plans (map-style, in_order=false, an IterableDataset
// with and without state hooks, persistent workers before any pool ran).  Nothing is
// drawn, loaded or started: DataLoader::iter_from applies these plans, and the
// checkpoint tests check what it does with them end to end.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "loader/error.h"
#include "loader/runtime/epoch_planner.h"

namespace loader {
namespace {

using Rng = std::vector<std::optional<std::string>>;

EpochSettings workers(int n, bool persistent = false, std::optional<uint64_t> persistent_seed = std::nullopt) {
  EpochSettings e;
  e.pool_workers = n;
  e.persistent_workers = persistent;
  e.persistent_seed = persistent_seed;
  return e;
}

EpochSettings iterable(EpochSettings e) {
  e.iterable = true;
  return e;
}

/// A plan checkpointed mid-epoch, with distinct streams at the start and now.
ResumePlan mid_epoch_plan() {
  ResumePlan p;
  p.finished = false;
  p.streams_at_start = {"start-default", "start-sampler"};
  p.streams_now = {"now-default", "now-sampler"};
  p.base_seed_drawn = true;
  p.base_seed = 42;
  return p;
}

/// A plan checkpointed after its epoch ended.
ResumePlan finished_plan() {
  ResumePlan p = mid_epoch_plan();
  p.finished = true;
  return p;
}

void expect_no_position(const EpochPlan& p) {
  EXPECT_FALSE(p.mid_epoch);
  EXPECT_FALSE(p.fast_forward);
  EXPECT_FALSE(p.load_at_checkpoint);
  EXPECT_FALSE(p.hashes_restart_at);
  EXPECT_FALSE(p.main_stream);
  EXPECT_TRUE(p.resume.streams.empty());
  EXPECT_EQ(p.resume.consumed, 0u);
  EXPECT_EQ(p.resume.first_worker, -1);
  EXPECT_EQ(p.replay, 0u);
  EXPECT_EQ(p.passed, 0u);
  EXPECT_EQ(p.start.consumed, 0u);
  EXPECT_EQ(p.start.pending, 0u);
  EXPECT_FALSE(p.start.remapped);
  EXPECT_FALSE(p.start.exhausted);
  EXPECT_TRUE(p.start.pending_original.empty());
  EXPECT_TRUE(p.start.stream_taken_before.empty());
}

TEST(EpochPlanner, FreshEpochWithoutWorkersDrawsBaseSeed) {
  const EpochPlanner planner(nullptr, workers(0));
  EXPECT_FALSE(planner.start_streams());
  const SeedPlan seed = planner.seed();
  EXPECT_TRUE(seed.draw);
  EXPECT_FALSE(seed.expect);
  EXPECT_NO_THROW(planner.check_drawn(12345));
  const EpochPlan p = planner.plan();
  expect_no_position(p);
  EXPECT_TRUE(p.resume.worker_rng.empty());
  EXPECT_FALSE(p.start.iterable_rng);
}

TEST(EpochPlanner, ZeroWorkersIgnoreAPersistentSeed) {
  // With 0 workers there is no pool whose seed could serve: drawn, as PyTorch does.
  const EpochPlanner planner(nullptr, workers(0, true, 77));
  EXPECT_TRUE(planner.seed().draw);
}

TEST(EpochPlanner, FreshEpochOfRunningPersistentWorkersTakesTheirSeed) {
  const EpochPlanner running(nullptr, workers(2, true, 77));
  const SeedPlan seed = running.seed();
  EXPECT_FALSE(seed.draw);
  EXPECT_EQ(seed.value, 77u);
  expect_no_position(running.plan());
  // Their first epoch (no pool yet) draws it.
  const EpochPlanner first(nullptr, workers(2, true));
  EXPECT_TRUE(first.seed().draw);
}

TEST(EpochPlanner, PerTaskSeedingDrawsAtEveryEpochOfPersistentWorkers) {
  EpochSettings e = workers(2, true, 77);
  e.worker_seeding = WorkerSeeding::PerTask;
  const EpochPlanner planner(nullptr, e);
  EXPECT_TRUE(planner.seed().draw);
  EXPECT_FALSE(planner.seed().expect);
}

TEST(EpochPlanner, FreshIterableEpochRecordsWorkersFromInit) {
  // New workers start as their Init leaves them (one empty state each); persistent
  // workers that already ran an epoch: not known.
  const EpochPlan fresh = EpochPlanner(nullptr, iterable(workers(3))).plan();
  ASSERT_TRUE(fresh.start.iterable_rng);
  EXPECT_EQ(*fresh.start.iterable_rng, Rng(3));
  EXPECT_FALSE(EpochPlanner(nullptr, iterable(workers(3, true, 5))).plan().start.iterable_rng);
  EXPECT_FALSE(EpochPlanner(nullptr, iterable(workers(0))).plan().start.iterable_rng);
}

TEST(EpochPlanner, FinishedPlanWithPoolAliveTakesItsSeedAndWorkerStreams) {
  ResumePlan plan = finished_plan();
  plan.base_seed = 1234;
  plan.pool_alive = true;
  plan.same_workers = true;
  plan.worker_rng = {std::string("w0"), std::string("w1")};
  const EpochPlanner planner(&plan, workers(2, true, 99));
  const std::optional<StreamLoad> load = planner.start_streams();
  ASSERT_TRUE(load);
  EXPECT_EQ(load->states, &plan.streams_now);
  EXPECT_STREQ(load->what, "the checkpoint");
  EXPECT_FALSE(load->settings_too);  // the program's set_epoch for the next epoch stands
  const SeedPlan seed = planner.seed();
  EXPECT_FALSE(seed.draw);
  EXPECT_EQ(seed.value, 1234u);  // the checkpointed pool's, not this loader's pool's 99
  const EpochPlan p = planner.plan();
  EXPECT_EQ(p.resume.worker_rng, Rng({std::string("w0"), std::string("w1")}));
  EXPECT_FALSE(p.resume.fresh_workers());
  EXPECT_FALSE(p.mid_epoch);
  EXPECT_FALSE(p.fast_forward);
  EXPECT_EQ(p.start.consumed, 0u);
}

TEST(EpochPlanner, FinishedPlanSeedFollowsWhatThatLoaderWouldHaveDone) {
  ResumePlan plan = finished_plan();
  plan.base_seed = 1234;
  plan.pool_alive = false;  // no persistent pool would have served the next epoch
  EXPECT_TRUE(EpochPlanner(&plan, workers(2, true, 99)).seed().draw);
  EpochSettings per_task = workers(2, true, 99);
  per_task.worker_seeding = WorkerSeeding::PerTask;
  plan.pool_alive = true;
  EXPECT_TRUE(EpochPlanner(&plan, per_task).seed().draw);
  // strict=false with other workers: this loader's own rule, its pool's seed.
  plan.same_workers = false;
  const SeedPlan other = EpochPlanner(&plan, workers(2, true, 99)).seed();
  EXPECT_FALSE(other.draw);
  EXPECT_EQ(other.value, 99u);
}

TEST(EpochPlanner, UnfinishedMapStylePlanFastForwardsAndLoadsTheCheckpointsStreams) {
  ResumePlan plan = mid_epoch_plan();
  plan.consumed = 3;
  plan.sampled = 5;
  plan.exhausted = true;
  plan.worker_rng = {std::string("r0"), std::nullopt};
  const EpochPlanner planner(&plan, workers(2));
  const std::optional<StreamLoad> load = planner.start_streams();
  ASSERT_TRUE(load);
  EXPECT_EQ(load->states, &plan.streams_at_start);
  EXPECT_STREQ(load->what, "the epoch's start");
  EXPECT_TRUE(load->settings_too);
  const SeedPlan seed = planner.seed();
  EXPECT_TRUE(seed.draw);
  EXPECT_EQ(seed.expect, std::optional<uint64_t>(42));
  const EpochPlan p = planner.plan();
  EXPECT_TRUE(p.mid_epoch);
  ASSERT_TRUE(p.fast_forward);
  EXPECT_EQ(p.fast_forward->consumed, 3u);
  EXPECT_EQ(p.fast_forward->sampled, 5u);
  EXPECT_TRUE(p.fast_forward->exhausted);
  EXPECT_EQ(p.fast_forward->delivered, nullptr);
  ASSERT_TRUE(p.load_at_checkpoint);
  EXPECT_EQ(p.load_at_checkpoint->states, &plan.streams_now);
  EXPECT_STREQ(p.load_at_checkpoint->what, "the checkpoint");
  EXPECT_TRUE(p.load_at_checkpoint->settings_too);
  EXPECT_EQ(p.start.consumed, 3u);
  EXPECT_EQ(p.start.pending, 2u);
  EXPECT_TRUE(p.start.exhausted);
  EXPECT_FALSE(p.start.remapped);
  EXPECT_EQ(p.resume.consumed, 3u);
  EXPECT_EQ(p.resume.worker_rng, Rng({std::string("r0"), std::nullopt}));
  EXPECT_TRUE(p.resume.fresh_workers());  // worker 1 starts as its Init leaves it
  EXPECT_EQ(p.replay, 0u);
  EXPECT_EQ(p.passed, 0u);
  EXPECT_FALSE(p.start.iterable_rng);
}

TEST(EpochPlanner, ReplayedDrawMustMatchTheCheckpointedBaseSeed) {
  const ResumePlan plan = mid_epoch_plan();  // drew 42
  const EpochPlanner planner(&plan, workers(2));
  EXPECT_NO_THROW(planner.check_drawn(42));
  try {
    planner.check_drawn(43);
    FAIL() << "a base_seed that differs was taken";
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "DataLoader.load_state_dict: replaying the checkpointed epoch drew base_seed 43 where the epoch had "
              "drawn 42: this loader draws from other generators than the one checkpointed (build it with the same "
              "generator and sampler options)");
  }
  // Other workers (strict=false), or none, are not seeded from it: not checked.
  ResumePlan other = plan;
  other.same_workers = false;
  EXPECT_TRUE(EpochPlanner(&other, workers(2)).seed().draw);
  EXPECT_NO_THROW(EpochPlanner(&other, workers(2)).check_drawn(43));
  EXPECT_NO_THROW(EpochPlanner(&plan, workers(0)).check_drawn(43));
}

TEST(EpochPlanner, UnfinishedPlanOfPersistentWorkersTakesItsSeed) {
  ResumePlan plan = mid_epoch_plan();
  plan.base_seed_drawn = false;  // the persistent pool's seed served that epoch
  plan.base_seed = 555;
  const SeedPlan seed = EpochPlanner(&plan, workers(2, true, 99)).seed();
  EXPECT_FALSE(seed.draw);
  EXPECT_EQ(seed.value, 555u);
}

TEST(EpochPlanner, OutOfOrderDeliveredAboveGivesThePendingOriginals) {
  ResumePlan plan = mid_epoch_plan();
  plan.consumed = 2;
  plan.sampled = 7;
  plan.delivered_above = {3, 5};
  const EpochPlan p = EpochPlanner(&plan, workers(2)).plan();
  ASSERT_TRUE(p.fast_forward);
  EXPECT_EQ(p.fast_forward->delivered, &plan.delivered_above);
  EXPECT_EQ(p.start.consumed, 2u);
  EXPECT_EQ(p.start.pending, 3u);  // 7 - 2 - 2 delivered
  EXPECT_TRUE(p.start.remapped);
  EXPECT_EQ(p.start.delivered_above, (std::vector<uint64_t>{3, 5}));
  EXPECT_EQ(p.start.sampled, 7u);
  EXPECT_EQ(p.start.pending_original, (std::vector<uint64_t>{2, 4, 6}));
}

TEST(EpochPlanner, IterableWithStateHooksResumesEachWorkersStream) {
  ResumePlan plan = mid_epoch_plan();
  plan.consumed = plan.sampled = 7;
  plan.stream_states = {"s0", "s1"};
  plan.stream_taken = {4, 3};
  plan.stream_next = 1;
  plan.worker_rng = {std::string("g0"), std::string("g1")};
  const EpochPlan p = EpochPlanner(&plan, iterable(workers(2))).plan();
  EXPECT_TRUE(p.mid_epoch);
  ASSERT_EQ(p.resume.streams.size(), 2u);
  EXPECT_EQ(p.resume.streams[0].rng, "g0");
  EXPECT_EQ(p.resume.streams[0].state, "s0");
  EXPECT_EQ(p.resume.streams[0].skip, 4u);
  EXPECT_EQ(p.resume.streams[1].rng, "g1");
  EXPECT_EQ(p.resume.streams[1].state, "s1");
  EXPECT_EQ(p.resume.streams[1].skip, 3u);
  EXPECT_EQ(p.resume.first_worker, 1);
  EXPECT_TRUE(p.resume.worker_rng.empty());
  EXPECT_FALSE(p.main_stream);
  EXPECT_EQ(p.start.stream_taken_before, (std::vector<uint64_t>{4, 3}));
  EXPECT_EQ(p.hashes_restart_at, std::optional<uint64_t>(7));
  EXPECT_EQ(p.passed, 7u);  // the streams pass them: nothing is replayed here
  EXPECT_EQ(p.replay, 0u);
  EXPECT_FALSE(p.fast_forward);
  EXPECT_FALSE(p.load_at_checkpoint);
  ASSERT_TRUE(p.start.iterable_rng);
  EXPECT_EQ(*p.start.iterable_rng, Rng(2));
}

TEST(EpochPlanner, IterableWithStateHooksAndNoWorkersResumesTheLoadersStream) {
  ResumePlan plan = mid_epoch_plan();
  plan.consumed = plan.sampled = 5;
  plan.stream_states = {"s"};
  plan.stream_taken = {5};
  const EpochPlan p = EpochPlanner(&plan, iterable(workers(0))).plan();
  ASSERT_TRUE(p.main_stream);
  EXPECT_EQ(p.main_stream->rng, "");
  EXPECT_EQ(p.main_stream->state, "s");
  EXPECT_EQ(p.main_stream->skip, 5u);
  EXPECT_TRUE(p.resume.streams.empty());
  EXPECT_EQ(p.resume.first_worker, 0);
  EXPECT_EQ(p.passed, 5u);
  EXPECT_EQ(p.replay, 0u);
  EXPECT_FALSE(p.start.iterable_rng);
}

TEST(EpochPlanner, IterableWithoutStateHooksReplaysWhatWasConsumed) {
  ResumePlan plan = mid_epoch_plan();
  plan.consumed = plan.sampled = 6;
  plan.worker_rng = {std::string("g0"), std::nullopt};
  const EpochPlan p = EpochPlanner(&plan, iterable(workers(3))).plan();
  EXPECT_TRUE(p.mid_epoch);
  EXPECT_EQ(p.replay, 6u);
  EXPECT_EQ(p.passed, 0u);
  EXPECT_EQ(p.resume.worker_rng, Rng({std::string("g0"), std::nullopt}));
  EXPECT_EQ(p.resume.consumed, 0u);  // the round robin from worker 0, as the epoch began
  EXPECT_TRUE(p.resume.streams.empty());
  EXPECT_FALSE(p.fast_forward);
  EXPECT_FALSE(p.load_at_checkpoint);
  EXPECT_EQ(p.start.consumed, 0u);
  ASSERT_TRUE(p.start.iterable_rng);  // a worker more than the checkpoint's: its Init's state
  EXPECT_EQ(*p.start.iterable_rng, Rng({std::string("g0"), std::nullopt, std::nullopt}));
}

TEST(EpochPlanner, PersistentWorkersWithNoPoolStartFromTheirInit) {
  // A checkpoint taken before the loader's first epoch: no pool ran, each worker starts
  // as its Init leaves it (a pool running now is replaced).
  ResumePlan plan = finished_plan();
  plan.pool_alive = false;
  const EpochPlan p = EpochPlanner(&plan, workers(3, true, 99)).plan();
  EXPECT_EQ(p.resume.worker_rng, Rng(3));
  EXPECT_TRUE(p.resume.fresh_workers());
  EXPECT_FALSE(p.mid_epoch);
  // Not persistent: nothing to say of the workers.
  EXPECT_TRUE(EpochPlanner(&plan, workers(3)).plan().resume.worker_rng.empty());
  // An IterableDataset's workers then begin from their Init's state too.
  const EpochPlan it = EpochPlanner(&plan, iterable(workers(3, true))).plan();
  ASSERT_TRUE(it.start.iterable_rng);
  EXPECT_EQ(*it.start.iterable_rng, Rng(3));
}

}  // namespace
}  // namespace loader
