// PoolTuning: num_workers = auto's actuation (which slots run, the prefetch depth, the
// decisions) on scripted slot states and steps, without a pipeline.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "loader/runtime/parent/pool_tuning.h"

namespace loader::runtime {
namespace {

using Slot = PoolTuning::Slot;
using Told = std::vector<std::pair<int, bool>>;

WorkerTuner::Limits limits(int max_workers) {
  WorkerTuner::Limits l;
  l.max_workers = max_workers;
  return l;
}

Slot running(bool holds = false) { return Slot{true, false, holds}; }
Slot parked() { return Slot{false, false, false}; }
Slot dead() { return Slot{false, true, false}; }

TEST(PoolTuning, StartsWithTheFirstWorkersNowAndItsDepth) {
  PoolTuning t(4, limits(4), 2, 3, 8);
  EXPECT_TRUE(t.wanted(0));
  EXPECT_TRUE(t.wanted(1));
  EXPECT_FALSE(t.wanted(2));
  EXPECT_FALSE(t.wanted(3));
  EXPECT_EQ(t.wanted_count(), 2);
  EXPECT_EQ(t.prefetch(), 3);
  EXPECT_EQ(t.max_in_flight(), 6u);
  // Out of range settings are clamped: at least one worker, at most the slots.
  PoolTuning none(3, limits(3), 0, 0, 8);
  EXPECT_EQ(none.wanted_count(), 1);
  EXPECT_EQ(none.prefetch(), 1);
  PoolTuning all(3, limits(3), 9, 2, 8);
  EXPECT_EQ(all.wanted_count(), 3);
}

TEST(PoolTuning, AGrowingStepStartsTheLowestFreeSlotsAndSkipsDeadOnes) {
  PoolTuning t(4, limits(4), 1, 2, 8);
  // Slot 1 is dead, slot 2 retired but still running, slot 3 parked.
  const std::vector<Slot> slots = {running(), dead(), running(), parked()};
  const PoolTuning::Applied a = t.apply(TuneStep{3, 4, "input-bound"}, slots, 1.5);
  EXPECT_EQ(a.told, (Told{{2, true}}));  // running: gets tasks at once
  EXPECT_EQ(a.acts, (Told{{3, true}}));  // parked: its slot actor starts it
  EXPECT_FALSE(t.wanted(1));
  EXPECT_EQ(t.wanted_count(), 3);
  EXPECT_EQ(t.prefetch(), 4);
  EXPECT_EQ(t.max_in_flight(), 12u);
  ASSERT_EQ(t.decisions().size(), 1u);
  const auto& d = t.decisions()[0];
  EXPECT_DOUBLE_EQ(d.t_s, 1.5);
  EXPECT_EQ(d.from_workers, 1);
  EXPECT_EQ(d.to_workers, 3);
  EXPECT_EQ(d.from_prefetch, 2);
  EXPECT_EQ(d.to_prefetch, 4);
  EXPECT_EQ(d.reason, "input-bound");
}

TEST(PoolTuning, AShrinkingStepRetiresTheHighestSlotsAndParksOnlyIdleOnes) {
  PoolTuning t(4, limits(4), 4, 2, 8);
  const std::vector<Slot> slots = {running(), running(), running(true), running()};
  const PoolTuning::Applied a = t.apply(TuneStep{2, 2, "busy"}, slots, 0.5);
  EXPECT_EQ(a.told, (Told{{3, false}, {2, false}}));
  EXPECT_EQ(a.acts, (Told{{3, false}}));  // slot 2 still holds a task: parked later
  EXPECT_EQ(t.wanted_count(), 2);
  // Once slot 2 has answered its task, it is a finished retirement.
  EXPECT_EQ(t.finished_retirements({running(), running(), running(), parked()}), (std::vector<int>{2}));
  EXPECT_TRUE(t.finished_retirements({running(), running(), running(true), parked()}).empty());
}

TEST(PoolTuning, ADepthOnlyStepTellsTheSamplerAndClampsToTheDeepest) {
  PoolTuning t(2, limits(2), 2, 2, 5);
  const PoolTuning::Applied a = t.apply(TuneStep{2, 9, "deeper"}, {running(), running()}, 0.1);
  EXPECT_EQ(a.told, (Told{{-1, false}}));
  EXPECT_TRUE(a.acts.empty());
  EXPECT_EQ(t.prefetch(), 5);
  const PoolTuning::Applied b = t.apply(TuneStep{0, 0, "shallower"}, {running(), running()}, 0.2);
  EXPECT_EQ(t.prefetch(), 1);
  EXPECT_EQ(t.wanted_count(), 1);  // at least one worker
  EXPECT_EQ(b.told, (Told{{1, false}}));
  EXPECT_EQ(t.decisions().size(), 2u);
  t.begin_epoch();
  EXPECT_TRUE(t.decisions().empty());
}

}  // namespace
}  // namespace loader::runtime
