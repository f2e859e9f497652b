// WorkerLifecycle without threads or processes: states, generations, held tasks.
#include <gtest/gtest.h>

#include "loader/runtime/parent/worker_lifecycle.h"

namespace loader::runtime {
namespace {

using State = WorkerLifecycle::State;
using Kind = WorkerLifecycle::Decision::Kind;

WorkerExit killed() { return WorkerExit{WorkerExit::Kind::Signal, 9, ""}; }

TEST(WorkerLifecycle, AParkedSlotIgnoresItsIncarnationsExitAndStartsAgainWithANewGeneration) {
  WorkerLifecycle life(0, /*max_restarts=*/0, /*restartable=*/true);
  EXPECT_TRUE(life.park(0)) << "a slot never started parks at once";
  EXPECT_EQ(life.state(), WorkerLifecycle::State::Parked);
  const uint32_t g = life.start();
  EXPECT_TRUE(life.ready(g));
  life.hold(7, HeldTask{});
  EXPECT_FALSE(life.park(g)) << "a worker holding a task is not parked";
  ASSERT_TRUE(life.release(7));
  EXPECT_FALSE(life.park(g + 1)) << "another generation's park is stale";
  EXPECT_TRUE(life.park(g));
  EXPECT_EQ(life.down(g, killed()).kind, WorkerLifecycle::Decision::Kind::Ignore) << "its exit was asked for";
  EXPECT_FALSE(life.fail(g, "RuntimeError", "late")) << "a late error of the retired process kills nothing";
  EXPECT_FALSE(life.dead());
  const uint32_t again = life.start();
  EXPECT_EQ(again, g + 1);
  EXPECT_EQ(life.state(), WorkerLifecycle::State::Starting);
  EXPECT_STREQ(to_string(WorkerLifecycle::State::Parked), "parked");
}

TEST(WorkerLifecycle, StartsThenRunsOnItsOwnReadyOnly) {
  WorkerLifecycle l(0, 0, true);
  EXPECT_EQ(l.state(), State::Idle);
  uint32_t g = l.start();
  EXPECT_EQ(l.state(), State::Starting);
  EXPECT_FALSE(l.ready(g + 1)) << "a ready of another generation";
  EXPECT_TRUE(l.ready(g));
  EXPECT_EQ(l.state(), State::Running);
}

TEST(WorkerLifecycle, DeathWithoutRestartsIsFatalInPyTorchsWordsAndStaysDead) {
  WorkerLifecycle l(1, 0, true);
  uint32_t g = l.start();
  l.set_pid(g, 4242);
  l.ready(g);
  l.hold(5, HeldTask{1, {20, 21, 22, 23}, 7});
  auto d = l.down(g, killed());
  ASSERT_EQ(d.kind, Kind::Fail);
  EXPECT_EQ(d.message.rfind("DataLoader worker (pid 4242) is killed by signal: Killed.", 0), 0u) << d.message;
  EXPECT_NE(d.message.find("DataLoader worker 1 (killed by signal: Killed (SIGKILL, 9))"), std::string::npos);
  EXPECT_NE(d.message.find("task 5: [20, 21, 22, 23]"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("max_worker_restarts"), std::string::npos) << d.message;
  EXPECT_TRUE(l.dead());
  EXPECT_EQ(l.fatal_message(), d.message);
  // Dead stays dead: no new incarnation, no other event changes it.
  EXPECT_EQ(l.start(), g);
  EXPECT_TRUE(l.dead());
  EXPECT_EQ(l.down(g, killed()).kind, Kind::Ignore);
  EXPECT_FALSE(l.ready(g));
}

TEST(WorkerLifecycle, ExitCodeUsesPyTorchsExitedUnexpectedlySentence) {
  WorkerExit e{WorkerExit::Kind::ExitCode, 3, ""};
  EXPECT_EQ(e.pytorch_sentence(12), "DataLoader worker (pid 12) exited unexpectedly with exit code 3.");
  EXPECT_EQ(e.describe(), "exited with status 3");
}

TEST(WorkerLifecycle, RestartReissuesHeldTasksInOrderUntilTheBudgetIsSpent) {
  WorkerLifecycle l(0, 2, true);
  uint32_t g1 = l.start();
  l.ready(g1);
  l.hold(9, HeldTask{1, {9}, 0});
  l.hold(3, HeldTask{1, {3}, 0});
  auto d = l.down(g1, killed());
  ASSERT_EQ(d.kind, Kind::Restart);
  EXPECT_EQ(d.reissue, (std::vector<uint64_t>{3, 9}));
  EXPECT_NE(d.message.find("restart 1 of 2"), std::string::npos) << d.message;
  EXPECT_EQ(l.state(), State::Restarting);
  // A second report of the same incarnation (watchdog and reader both saw it) is ignored.
  EXPECT_EQ(l.down(g1, killed()).kind, Kind::Ignore);
  uint32_t g2 = l.start();
  EXPECT_GT(g2, g1);
  EXPECT_EQ(l.down(g2, killed()).kind, Kind::Restart);
  uint32_t g3 = l.start();
  auto last = l.down(g3, killed());
  EXPECT_EQ(last.kind, Kind::Fail);
  EXPECT_NE(last.message.find("restarted 2 time(s) already"), std::string::npos) << last.message;
}

TEST(WorkerLifecycle, AStaleDownOfAnOlderIncarnationNeverReachesItsSuccessor) {
  // The SIGSTOP case: the old link's reader reports late, after the restart.
  WorkerLifecycle l(0, 3, true);
  uint32_t g1 = l.start();
  l.ready(g1);
  ASSERT_EQ(l.down(g1, WorkerExit{WorkerExit::Kind::Frozen, 0, "1000 ms"}).kind, Kind::Restart);
  uint32_t g2 = l.start();
  l.ready(g2);
  EXPECT_EQ(l.down(g1, killed()).kind, Kind::Ignore);
  EXPECT_EQ(l.state(), State::Running);
  EXPECT_EQ(l.restarts(), 1);
}

TEST(WorkerLifecycle, IterableWorkersAreNotRestartedAndSaySo) {
  WorkerLifecycle l(0, 3, /*restartable=*/false);
  uint32_t g = l.start();
  auto d = l.down(g, killed());
  EXPECT_EQ(d.kind, Kind::Fail);
  EXPECT_NE(d.message.find("iterable datasets are not restarted"), std::string::npos) << d.message;
}

TEST(WorkerLifecycle, ADeathBetweenEpochsIsReplacedWithoutCountingEvenWithoutRestarts) {
  // An iterable worker (not restartable) with max_restarts = 0: a death between epochs
  // still gets a fresh worker, as PyTorch's next epoch would have started one.
  WorkerLifecycle l(0, 0, false);
  uint32_t g = l.start();
  l.set_pid(g, 77);
  l.ready(g);
  l.hold(9, HeldTask{2, {}, 3});
  auto d = l.down(g, killed(), /*between_epochs=*/true);
  ASSERT_EQ(d.kind, Kind::Restart);
  EXPECT_EQ(d.reissue, (std::vector<uint64_t>{9}));
  EXPECT_EQ(d.message.rfind("DataLoader worker (pid 77) is killed by signal: Killed.", 0), 0u) << d.message;
  EXPECT_NE(d.message.find("between epochs"), std::string::npos) << d.message;
  EXPECT_EQ(l.restarts(), 0);
  EXPECT_EQ(l.state(), State::Restarting);
  // The next incarnation's death is an ordinary one: fatal here.
  uint32_t g2 = l.start();
  EXPECT_EQ(g2, g + 1);
  l.ready(g2);
  EXPECT_EQ(l.down(g2, killed()).kind, Kind::Fail);
}

TEST(WorkerLifecycle, FailIsForTheCurrentIncarnationOnly) {
  WorkerLifecycle l(0, 0, true);
  uint32_t g = l.start();
  EXPECT_FALSE(l.fail(g + 1, "ValueError", "stale"));
  EXPECT_TRUE(l.fail(g, "ValueError", "init failed"));
  EXPECT_EQ(l.fatal_type(), "ValueError");
  EXPECT_FALSE(l.fail(g, "RuntimeError", "again")) << "the first error is the one kept";
}

TEST(WorkerLifecycle, TasksOfOlderEpochsAreDroppedWithTheirSlabs) {
  WorkerLifecycle l(0, 0, true);
  l.hold(1, HeldTask{1, {1}, 11});
  l.hold(2, HeldTask{2, {2}, 12});
  l.hold(3, HeldTask{1, {3}, 0});
  EXPECT_EQ(l.drop_other_epochs(2), (std::vector<uint64_t>{11}));
  ASSERT_EQ(l.held().size(), 1u);
  EXPECT_EQ(l.held().begin()->first, 2u);
  auto t = l.release(2);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->slab, 12u);
  EXPECT_FALSE(l.release(2).has_value());
}

TEST(WorkerLifecycle, DescribesLongTasksBriefly) {
  WorkerLifecycle l(0, 0, true);
  IndexBatch many(40);
  for (int i = 0; i < 40; ++i) many[static_cast<size_t>(i)] = i;
  l.hold(7, HeldTask{1, many, 0});
  EXPECT_NE(l.describe_held().find("... (40 indices)"), std::string::npos) << l.describe_held();
}

}  // namespace
}  // namespace loader::runtime
