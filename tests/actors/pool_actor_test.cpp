// The worker actors and the pool actor on CAF's deterministic scheduler: each message
// is handled when the test says so, timeouts fire when the test triggers them, no
// threads.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "deterministic_system.h"
#include "loader/runtime/parent/pipeline.h"
#include "loader/runtime/parent/pool_actor.h"
#include "loader/runtime/parent/slot_actor.h"

namespace loader::runtime {
namespace {

/// Records what the actors ask for.
class FakeControl : public WorkerControl {
 public:
  void restart(int worker, uint32_t gen) override {
    calls.push_back("restart " + std::to_string(worker) + " " + std::to_string(gen));
    if (throw_on_restart) throw std::runtime_error("cannot spawn");
    if (throw_int_on_restart) throw 7;
  }
  void flush(int worker) override { calls.push_back("flush " + std::to_string(worker)); }
  void watch(int worker, std::chrono::milliseconds tick) override {
    calls.push_back("watch " + std::to_string(worker) + " " + std::to_string(tick.count()));
  }
  void fail_all(const std::string& type, const std::string& message) override {
    calls.push_back("fail " + type + ": " + message);
  }
  std::vector<std::string> calls;
  bool throw_on_restart = false;
  bool throw_int_on_restart = false;
};

class ControlActors : public ::testing::Test {
 protected:
  ControlActors()
      : sys_(deterministic_config()), sched_(dynamic_cast<caf::scheduler::test_coordinator&>(sys_.scheduler())) {}
  caf::actor_system sys_;
  caf::scheduler::test_coordinator& sched_;
  std::shared_ptr<FakeControl> fake_ = std::make_shared<FakeControl>();
};

TEST_F(ControlActors, ADownRestartsThatIncarnationOnlyWhenItsWorkersActorHandlesIt) {
  auto w1 = spawn_slot_actor(sys_, fake_, 1);
  auto w0 = spawn_slot_actor(sys_, fake_, 0);
  sched_.run();
  caf::anon_send(w1, down_atom::value, uint32_t{3});
  caf::anon_send(w0, flush_atom::value);
  EXPECT_TRUE(fake_->calls.empty()) << "nothing runs before the scheduler does";
  EXPECT_TRUE(sched_.try_run_once());
  EXPECT_EQ(fake_->calls, (std::vector<std::string>{"restart 1 3"}));
  EXPECT_TRUE(sched_.try_run_once());
  EXPECT_EQ(fake_->calls, (std::vector<std::string>{"restart 1 3", "flush 0"}));
  caf::anon_send_exit(w0, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(w1, caf::exit_reason::user_shutdown);
  sched_.run();
}

TEST_F(ControlActors, EachWorkerHasItsOwnMailboxSoARestartDoesNotHoldUpAnotherWorkersFrames) {
  PoolActors actors(sys_, fake_, 2, std::chrono::milliseconds(0));
  sched_.run();
  auto hooks = actors.hooks();
  hooks.restart_later(0, 5);
  hooks.flush_later(1);
  hooks.flush_later(7);  // no such worker: nothing is sent
  // Worker 1's actor runs its flush first: it does not queue behind worker 0's restart.
  ASSERT_TRUE(sched_.prioritize(actors.workers()[1]));
  ASSERT_TRUE(sched_.try_run_once());
  EXPECT_EQ(fake_->calls, (std::vector<std::string>{"flush 1"}));
  ASSERT_TRUE(sched_.prioritize(actors.workers()[0]));
  ASSERT_TRUE(sched_.try_run_once());
  EXPECT_EQ(fake_->calls, (std::vector<std::string>{"flush 1", "restart 0 5"}));
  EXPECT_FALSE(sched_.try_run_once());
  actors.send_exits();
  sched_.run();
}

TEST_F(ControlActors, EveryTickTheWatchdogLooksAtEveryWorkerAndTheNextTickIsScheduled) {
  PoolActors actors(sys_, fake_, 3, std::chrono::milliseconds(250));
  sched_.run();
  EXPECT_TRUE(fake_->calls.empty());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(sched_.trigger_timeouts()) << "tick " << i << " was not scheduled";
    sched_.run();
  }
  std::vector<std::string> once{"watch 0 250", "watch 1 250", "watch 2 250"};
  std::vector<std::string> twice = once;
  twice.insert(twice.end(), once.begin(), once.end());
  EXPECT_EQ(fake_->calls, twice);
  actors.send_exits();
  sched_.run();
  EXPECT_FALSE(sched_.trigger_timeouts() && (sched_.run(), fake_->calls.size() > twice.size()))
      << "no watchdog after the pool's shutdown";
}

TEST_F(ControlActors, AnExceptionBecomesTheLoadersFatalErrorNamingTheWorkerAndTheActorGoesOn) {
  fake_->throw_on_restart = true;
  auto w = spawn_slot_actor(sys_, fake_, 2);
  sched_.run();
  caf::anon_send(w, down_atom::value, uint32_t{1});
  caf::anon_send(w, flush_atom::value);
  sched_.run();
  ASSERT_EQ(fake_->calls.size(), 3u);
  EXPECT_EQ(fake_->calls[0], "restart 2 1");
  EXPECT_EQ(fake_->calls[1], "fail RuntimeError: DataLoader runtime: the actor of DataLoader worker 2 failed while "
                             "handling a worker restart: cannot spawn");
  EXPECT_EQ(fake_->calls[2], "flush 2") << "the actor survived the exception";
  // Not a std::exception either.
  fake_->throw_on_restart = false;
  fake_->throw_int_on_restart = true;
  caf::anon_send(w, down_atom::value, uint32_t{2});
  sched_.run();
  ASSERT_EQ(fake_->calls.size(), 5u);
  EXPECT_EQ(fake_->calls[4], "fail RuntimeError: DataLoader runtime: the actor of DataLoader worker 2 failed while "
                             "handling a worker restart: an unknown exception");
  caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
  sched_.run();
}

TEST_F(ControlActors, AWorkerActorThatStopsWhileItsPoolLivesFailsTheLoaderSayingWhich) {
  PoolActors actors(sys_, fake_, 2, std::chrono::milliseconds(0));
  sched_.run();
  caf::anon_send_exit(actors.workers()[1], caf::exit_reason::kill);
  sched_.run();
  ASSERT_EQ(fake_->calls.size(), 1u);
  EXPECT_NE(fake_->calls[0].find("fail RuntimeError: DataLoader runtime: the actor of DataLoader worker 1 stopped ("),
            std::string::npos)
      << fake_->calls[0];
  EXPECT_NE(fake_->calls[0].find("can no longer be restarted"), std::string::npos) << fake_->calls[0];
  // The pool's own shutdown stops the pool actor first: its workers' exits are no failure.
  actors.send_exits();
  sched_.run();
  EXPECT_EQ(fake_->calls.size(), 1u);
}

TEST_F(ControlActors, AControlThatIsGoneIsNotTouched) {
  PoolActors actors(sys_, fake_, 1, std::chrono::milliseconds(0));
  sched_.run();
  std::weak_ptr<FakeControl> weak = fake_;
  fake_.reset();
  actors.hooks().restart_later(0, 1);
  caf::anon_send(actors.workers()[0], watch_atom::value, int64_t{250});
  sched_.run();
  EXPECT_TRUE(weak.expired());
  actors.send_exits();
  sched_.run();
}

}  // namespace
}  // namespace loader::runtime
