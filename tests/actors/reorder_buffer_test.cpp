// ReorderBuffer without any actor: results arrive in any order and leave in task
// order (in_order = true) or in completion order (in_order = false).
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loader/runtime/parent/reorder_buffer.h"

namespace loader::runtime {
namespace {

/// Everything releasable right now, as (task, item) pairs.
std::vector<std::pair<uint64_t, std::string>> drain(ReorderBuffer<std::string>& rb) {
  std::vector<std::pair<uint64_t, std::string>> out;
  while (auto r = rb.pop()) out.push_back(std::move(*r));
  return out;
}

using Released = std::vector<std::pair<uint64_t, std::string>>;

TEST(ReorderBuffer, ReleasesInTaskOrderWhateverTheArrivalOrder) {
  ReorderBuffer<std::string> rb(0, true);
  rb.push(2, "c");
  EXPECT_TRUE(drain(rb).empty()) << "task 0 is missing, nothing may leave";
  rb.push(1, "b");
  EXPECT_TRUE(drain(rb).empty());
  EXPECT_EQ(rb.buffered(), 2u);
  rb.push(0, "a");
  EXPECT_EQ(drain(rb), (Released{{0, "a"}, {1, "b"}, {2, "c"}}));
  EXPECT_EQ(rb.next_expected(), 3u);
  EXPECT_EQ(rb.buffered(), 0u);
}

TEST(ReorderBuffer, ReleasesEachResultAsSoonAsItsPredecessorsLeft) {
  ReorderBuffer<std::string> rb(0, true);
  rb.push(0, "a");
  EXPECT_EQ(drain(rb), (Released{{0, "a"}}));
  rb.push(3, "d");
  rb.push(1, "b");
  EXPECT_EQ(drain(rb), (Released{{1, "b"}})) << "task 2 is still missing";
  rb.push(2, "c");
  EXPECT_EQ(drain(rb), (Released{{2, "c"}, {3, "d"}}));
}

TEST(ReorderBuffer, CountsFromTheFirstTaskOfTheEpoch) {
  // Persistent workers continue the task numbering across epochs.
  ReorderBuffer<std::string> rb(10, true);
  rb.push(11, "b");
  EXPECT_TRUE(drain(rb).empty());
  rb.push(10, "a");
  EXPECT_EQ(drain(rb), (Released{{10, "a"}, {11, "b"}}));
  EXPECT_TRUE(rb.done(10, 2));
  EXPECT_FALSE(rb.done(10, 3));
}

TEST(ReorderBuffer, SkipMovesPastATaskWithoutResult) {
  ReorderBuffer<std::string> rb(0, true);
  rb.push(2, "c");
  rb.skip(1);
  EXPECT_TRUE(drain(rb).empty());
  rb.push(0, "a");
  EXPECT_EQ(drain(rb), (Released{{0, "a"}, {2, "c"}}));
  EXPECT_EQ(rb.next_expected(), 3u);
  EXPECT_TRUE(rb.done(0, 3));
}

TEST(ReorderBuffer, SkipOfTheAwaitedTaskReleasesTheFollowingOnes) {
  ReorderBuffer<std::string> rb(0, true);
  rb.push(1, "b");
  rb.push(2, "c");
  rb.skip(0);
  EXPECT_EQ(drain(rb), (Released{{1, "b"}, {2, "c"}}));
  rb.skip(3);
  rb.skip(4);
  EXPECT_TRUE(drain(rb).empty());
  EXPECT_EQ(rb.next_expected(), 5u);
  EXPECT_TRUE(rb.done(0, 5));
}

TEST(ReorderBuffer, IgnoresResultsOfTasksAlreadyReleased) {
  ReorderBuffer<std::string> rb(0, true);
  rb.push(0, "a");
  EXPECT_EQ(drain(rb), (Released{{0, "a"}}));
  rb.push(0, "again");
  EXPECT_TRUE(drain(rb).empty());
  EXPECT_EQ(rb.buffered(), 0u);
  rb.push(1, "b");
  EXPECT_EQ(drain(rb), (Released{{1, "b"}}));
}

TEST(ReorderBuffer, DoneOnlyWhenEveryTaskWasReleasedOrSkipped) {
  ReorderBuffer<std::string> rb(0, true);
  EXPECT_TRUE(rb.done(0, 0)) << "an epoch of no tasks is done at once";
  EXPECT_FALSE(rb.done(0, 2));
  rb.push(1, "b");
  EXPECT_FALSE(rb.done(0, 2));
  rb.push(0, "a");
  EXPECT_FALSE(rb.done(0, 2)) << "results are buffered, not released yet";
  (void)rb.pop();
  EXPECT_FALSE(rb.done(0, 2));
  (void)rb.pop();
  EXPECT_TRUE(rb.done(0, 2));
}

TEST(ReorderBuffer, CompletionOrderWhenInOrderIsFalse) {
  ReorderBuffer<std::string> rb(0, false);
  rb.push(2, "c");
  EXPECT_EQ(drain(rb), (Released{{2, "c"}})) << "in_order=false releases at once";
  rb.push(0, "a");
  rb.push(3, "d");
  EXPECT_EQ(drain(rb), (Released{{0, "a"}, {3, "d"}}));
  EXPECT_FALSE(rb.done(0, 5));
  rb.skip(4);
  EXPECT_FALSE(rb.done(0, 5)) << "task 1 is still missing";
  rb.push(1, "b");
  EXPECT_FALSE(rb.done(0, 5)) << "task 1 is buffered, not released";
  EXPECT_EQ(drain(rb), (Released{{1, "b"}}));
  EXPECT_TRUE(rb.done(0, 5));
}

TEST(ReorderBuffer, CompletionOrderCountsFromAnyFirstTask) {
  ReorderBuffer<std::string> rb(7, false);
  rb.push(9, "c");
  rb.push(7, "a");
  rb.push(8, "b");
  EXPECT_EQ(drain(rb), (Released{{9, "c"}, {7, "a"}, {8, "b"}}));
  EXPECT_TRUE(rb.done(7, 3));
}

TEST(ReorderBuffer, HoldsMoveOnlyItems) {
  ReorderBuffer<std::unique_ptr<int>> rb(0, true);
  rb.push(1, std::make_unique<int>(1));
  rb.push(0, std::make_unique<int>(0));
  auto a = rb.pop();
  auto b = rb.pop();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a->second, 0);
  EXPECT_EQ(*b->second, 1);
}

TEST(ReorderBuffer, ListsTheResultsItHoldsNotYetReleased) {
  // A checkpoint's "first task not yet delivered" of a worker: a finished task whose
  // result waits here counts as well as one still computing.
  ReorderBuffer<std::string> rb(0, true);
  rb.push(2, "c");
  rb.push(0, "a");
  rb.skip(3);
  std::vector<uint64_t> held;
  rb.for_each_buffered([&](uint64_t task, const std::string&) { held.push_back(task); });
  EXPECT_EQ(held, (std::vector<uint64_t>{0, 2}));
  rb.pop();
  held.clear();
  rb.for_each_buffered([&](uint64_t task, const std::string&) { held.push_back(task); });
  EXPECT_EQ(held, (std::vector<uint64_t>{2}));
  ReorderBuffer<std::string> any(0, false);
  any.push(1, "b");
  held.clear();
  any.for_each_buffered([&](uint64_t task, const std::string&) { held.push_back(task); });
  EXPECT_EQ(held, (std::vector<uint64_t>{1}));
}

}  // namespace
}  // namespace loader::runtime
