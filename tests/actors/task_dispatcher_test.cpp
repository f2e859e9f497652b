// TaskDispatcher without any actor: the backpressure bound (prefetch_factor *
// num_workers tasks in flight) and the worker cycle of PyTorch's _try_put_index.
#include <gtest/gtest.h>

#include <optional>
#include <utility>
#include <vector>

#include "loader/generator.h"
#include "loader/runtime/parent/task_dispatcher.h"

namespace loader::runtime {
namespace {

using Assignment = std::pair<uint64_t, int>;

/// Sends while credits are left; returns what was assigned.
std::vector<Assignment> fill(TaskDispatcher& d) {
  std::vector<Assignment> out;
  while (d.can_send()) {
    auto a = d.assign();
    if (!a) break;
    out.push_back(*a);
  }
  return out;
}

/// PyTorch 1.13's _MultiProcessingDataLoaderIter bookkeeping, transcribed:
///   _worker_queue_idx_cycle = itertools.cycle(range(num_workers))
///   _try_put_index: for _ in range(num_workers): w = next(cycle); if status[w]: break
///                   else: return;  put (send_idx, index) to w; outstanding += 1; send_idx += 1
class PyTorchWorkerCycle {
 public:
  PyTorchWorkerCycle(int num_workers, int prefetch_factor, uint64_t first_task)
      : num_workers_(num_workers),
        max_outstanding_(static_cast<uint64_t>(num_workers) * static_cast<uint64_t>(prefetch_factor)),
        send_idx_(first_task),
        status_(static_cast<size_t>(num_workers), true) {}

  /// What PyTorch sends while _tasks_outstanding < prefetch_factor * num_workers.
  std::vector<Assignment> fill() {
    std::vector<Assignment> out;
    while (outstanding_ < max_outstanding_) {
      auto a = try_put_index();
      if (!a) break;
      out.push_back(*a);
    }
    return out;
  }
  void deliver() { --outstanding_; }
  void deactivate(int w) { status_[static_cast<size_t>(w)] = false; }
  uint64_t outstanding() const { return outstanding_; }
  bool any_active() const {
    for (bool s : status_)
      if (s) return true;
    return false;
  }

 private:
  std::optional<Assignment> try_put_index() {
    for (int k = 0; k < num_workers_; ++k) {
      int w = cycle_;
      cycle_ = (cycle_ + 1) % num_workers_;
      if (status_[static_cast<size_t>(w)]) {
        ++outstanding_;
        return Assignment{send_idx_++, w};
      }
    }
    return std::nullopt;
  }

  int num_workers_;
  uint64_t max_outstanding_;
  uint64_t send_idx_;
  std::vector<bool> status_;
  int cycle_ = 0;
  uint64_t outstanding_ = 0;
};

TEST(TaskDispatcher, SendsAtMostPrefetchFactorTimesWorkersTasks) {
  for (int workers : {1, 2, 3, 4}) {
    for (int prefetch : {1, 2, 3}) {
      TaskDispatcher d(workers, prefetch, 0);
      auto sent = fill(d);
      EXPECT_EQ(sent.size(), static_cast<size_t>(workers * prefetch)) << workers << " workers, prefetch " << prefetch;
      EXPECT_FALSE(d.can_send());
      EXPECT_FALSE(d.assign().has_value()) << "no task may go out without a credit";
      EXPECT_EQ(d.in_flight(), static_cast<uint64_t>(workers * prefetch));
      EXPECT_EQ(d.max_in_flight(), static_cast<uint64_t>(workers * prefetch));
    }
  }
}

TEST(TaskDispatcher, EachCreditLetsExactlyOneMoreTaskOut) {
  TaskDispatcher d(2, 2, 0);
  ASSERT_EQ(fill(d).size(), 4u);
  d.on_delivered();
  auto more = fill(d);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0], (Assignment{4, 0}));
  d.on_delivered();
  d.on_delivered();
  more = fill(d);
  EXPECT_EQ(more, (std::vector<Assignment>{{5, 1}, {6, 0}}));
  EXPECT_EQ(d.in_flight(), 4u);
}

TEST(TaskDispatcher, ExtraCreditsDoNotRaiseTheBound) {
  TaskDispatcher d(2, 1, 0);
  ASSERT_EQ(fill(d).size(), 2u);
  for (int i = 0; i < 5; ++i) d.on_delivered();  // more credits than tasks sent
  EXPECT_EQ(d.in_flight(), 0u);
  EXPECT_EQ(fill(d).size(), 2u) << "the bound stays prefetch_factor * num_workers";
  EXPECT_EQ(d.in_flight(), 2u);
}

TEST(TaskDispatcher, TaskIGoesToWorkerIModWWhileAllAreActive) {
  for (int workers : {1, 2, 3, 5}) {
    TaskDispatcher d(workers, 2, 0);
    std::vector<Assignment> all = fill(d);
    while (all.size() < 100) {
      d.on_delivered();
      auto more = fill(d);
      all.insert(all.end(), more.begin(), more.end());
    }
    for (size_t i = 0; i < all.size(); ++i) {
      EXPECT_EQ(all[i].first, i);
      EXPECT_EQ(all[i].second, static_cast<int>(i % static_cast<size_t>(workers))) << "task " << i;
    }
  }
}

TEST(TaskDispatcher, EveryEpochStartsTheCycleAtWorkerZero) {
  // PyTorch makes a new worker cycle per iterator; task numbers continue (persistent workers).
  TaskDispatcher d(3, 1, 7);
  EXPECT_EQ(fill(d), (std::vector<Assignment>{{7, 0}, {8, 1}, {9, 2}}));
  EXPECT_EQ(d.next_task(), 10u);
}

TEST(TaskDispatcher, CycleContinuesPastADeactivatedWorker) {
  TaskDispatcher d(3, 1, 0);
  ASSERT_EQ(fill(d), (std::vector<Assignment>{{0, 0}, {1, 1}, {2, 2}}));
  d.deactivate(1);
  EXPECT_FALSE(d.is_active(1));
  EXPECT_EQ(d.active_workers(), 2);
  d.on_delivered();
  EXPECT_EQ(fill(d), (std::vector<Assignment>{{3, 0}}));
  d.on_delivered();
  EXPECT_EQ(fill(d), (std::vector<Assignment>{{4, 2}})) << "worker 1 is skipped";
  d.on_delivered();
  EXPECT_EQ(fill(d), (std::vector<Assignment>{{5, 0}}));
}

TEST(TaskDispatcher, DeactivatingTheWorkerAtTheCursorMovesToTheNextOne) {
  TaskDispatcher d(3, 1, 0);
  ASSERT_EQ(fill(d).size(), 3u);  // the cycle is back at worker 0
  d.deactivate(0);
  d.on_delivered();
  EXPECT_EQ(fill(d), (std::vector<Assignment>{{3, 1}}));
  d.on_delivered();
  EXPECT_EQ(fill(d), (std::vector<Assignment>{{4, 2}}));
  d.on_delivered();
  EXPECT_EQ(fill(d), (std::vector<Assignment>{{5, 1}}));
}

TEST(TaskDispatcher, NothingIsSentOnceEveryWorkerIsInactive) {
  TaskDispatcher d(2, 2, 0);
  ASSERT_EQ(fill(d).size(), 4u);
  d.deactivate(0);
  d.deactivate(1);
  d.on_delivered();
  EXPECT_FALSE(d.can_send());
  EXPECT_FALSE(d.assign().has_value());
  EXPECT_EQ(d.active_workers(), 0);
  EXPECT_EQ(d.next_task(), 4u);
}

TEST(TaskDispatcher, MatchesPyTorchTryPutIndexUnderRandomDeactivationsAndCredits) {
  // A fixed pseudo-random schedule of credits and deactivations, replayed against
  // the transcription of PyTorch's bookkeeping above.
  int schedules = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    Generator g(seed);
    const int workers = 1 + static_cast<int>(g.randint(6));
    const int prefetch = 1 + static_cast<int>(g.randint(3));
    const uint64_t first = static_cast<uint64_t>(g.randint(20));
    TaskDispatcher d(workers, prefetch, first);
    PyTorchWorkerCycle ref(workers, prefetch, first);
    ASSERT_EQ(fill(d), ref.fill()) << "seed " << seed;
    for (int step = 0; step < 200 && ref.any_active(); ++step) {
      if (g.randint(8) == 0) {
        int w = static_cast<int>(g.randint(workers));
        d.deactivate(w);
        ref.deactivate(w);
      } else if (ref.outstanding() > 0) {
        d.on_delivered();
        ref.deliver();
      }
      ASSERT_EQ(fill(d), ref.fill()) << "seed " << seed << ", step " << step;
      ASSERT_EQ(d.in_flight(), ref.outstanding()) << "seed " << seed << ", step " << step;
      ASSERT_LE(d.in_flight(), static_cast<uint64_t>(workers * prefetch));
    }
    ++schedules;
  }
  EXPECT_EQ(schedules, 40);
}

TEST(TaskDispatcher, KnowsWhichWorkerHoldsWhichUnfinishedTask) {
  TaskDispatcher d(2, 2, 0);
  ASSERT_EQ(fill(d).size(), 4u);
  EXPECT_EQ(d.unfinished_tasks_of(0), (std::vector<uint64_t>{0, 2}));
  EXPECT_EQ(d.unfinished_tasks_of(1), (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(d.worker_of(3), 1);
  d.on_finished(2);
  EXPECT_EQ(d.unfinished_tasks_of(0), (std::vector<uint64_t>{0}));
  EXPECT_EQ(d.worker_of(2), -1);
  EXPECT_EQ(d.worker_of(99), -1);
}

}  // namespace
}  // namespace loader::runtime

namespace loader::runtime {
namespace {

TEST(TaskDispatcherOutOfOrder, AStalledWorkerGetsNoMoreThanItsShareOfTasks) {
  // PyTorch 2.6+ (in_order=False): a task goes only to a worker with fewer than
  // max_tasks / active_workers tasks not yet delivered.
  TaskDispatcher d(2, 2, 0, /*in_order=*/false);
  auto first = fill(d);
  ASSERT_EQ(first.size(), 4u);  // 0->w0, 1->w1, 2->w0, 3->w1
  // Worker 1 delivers both; worker 0 is stuck on task 0.
  d.on_finished(1);
  d.on_delivered(1);
  d.on_finished(3);
  d.on_delivered(1);
  auto next = fill(d);
  ASSERT_EQ(next.size(), 2u);
  for (const auto& a : next) EXPECT_EQ(a.second, 1) << "task " << a.first << " went to the stalled worker";
}

TEST(TaskDispatcherOutOfOrder, InOrderKeepsThePlainRoundRobin) {
  TaskDispatcher d(2, 2, 0, /*in_order=*/true);
  fill(d);
  d.on_delivered(1);
  d.on_delivered(1);
  auto next = fill(d);
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(next[0].second, 0);
  EXPECT_EQ(next[1].second, 1);
}

TEST(TaskDispatcher, AResumedEpochContinuesTheCycleAtTheWorkerOfItsFirstTask) {
  // A checkpoint after 5 of an epoch's tasks, 3 workers: task 5 of the epoch went to
  // worker 5 mod 3 = 2, and so on, as in the run that was checkpointed.
  TaskDispatcher d(3, 2, 100, true, /*first_worker=*/5 % 3);
  auto sent = fill(d);
  ASSERT_EQ(sent.size(), 6u);
  for (size_t i = 0; i < sent.size(); ++i) EXPECT_EQ(sent[i].second, static_cast<int>((5 + i) % 3)) << "task " << i;
}

TEST(TaskDispatcherOutOfOrder, CancelTakesBackTheLastAssignment) {
  TaskDispatcher d(2, 1, 10);
  auto a = d.assign();
  ASSERT_TRUE(a.has_value());
  d.cancel(a->first);
  EXPECT_EQ(d.next_task(), 10u);
  EXPECT_EQ(d.in_flight(), 0u);
  EXPECT_EQ(d.worker_of(10), -1);
}

TEST(TaskDispatcher, TheAutotunersSettingRetiresAndAddsWorkersAndBoundsTheTasksOut) {
  TaskDispatcher d(3, 2, 0);
  d.deactivate(2);  // parked
  d.set_max_in_flight(4);  // 2 workers x prefetch 2
  std::vector<int> to;
  while (auto a = d.assign()) to.push_back(a->second);
  EXPECT_EQ(to, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_FALSE(d.can_send());
  d.activate(2);
  d.set_max_in_flight(6);
  to.clear();
  while (auto a = d.assign()) to.push_back(a->second);
  EXPECT_EQ(to, (std::vector<int>{2, 0})) << "the cycle goes on where it stood, worker 2 included";
  d.set_max_in_flight(2);  // lowered below what is out: nothing goes out until below
  d.on_delivered(0);
  EXPECT_FALSE(d.can_send());
  d.activate(7);  // no such worker: ignored
  EXPECT_EQ(d.active_workers(), 3);
  d.set_max_in_flight(0);
  EXPECT_EQ(d.max_in_flight(), 1u) << "never 0: a loader that cannot send would hang";
}

}  // namespace
}  // namespace loader::runtime
