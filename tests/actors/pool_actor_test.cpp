// The supervisor actor on CAF's deterministic scheduler: each message is handled
// when the test says so, timeouts fire when the test triggers them, no threads.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "deterministic_system.h"
#include "loader/runtime/supervisor_actor.h"

namespace loader::runtime {
namespace {

/// Records what the supervisor asks for.
class FakePipeline : public Supervised {
 public:
  void restart(int worker, uint32_t gen) override {
    calls.push_back("restart " + std::to_string(worker) + " " + std::to_string(gen));
    if (throw_on_restart) throw std::runtime_error("cannot spawn");
  }
  void flush(int worker) override { calls.push_back("flush " + std::to_string(worker)); }
  void watchdog(std::chrono::milliseconds tick) override { calls.push_back("watchdog " + std::to_string(tick.count())); }
  void fail_all(const std::string& type, const std::string& message) override {
    calls.push_back("fail " + type + ": " + message);
  }
  std::vector<std::string> calls;
  bool throw_on_restart = false;
};

class SupervisorActor : public ::testing::Test {
 protected:
  SupervisorActor()
      : cfg_(deterministic_config()),
        sys_(cfg_),
        sched_(dynamic_cast<caf::scheduler::test_coordinator&>(sys_.scheduler())) {}
  caf::actor_system_config& cfg_;
  caf::actor_system sys_;
  caf::scheduler::test_coordinator& sched_;
  std::shared_ptr<FakePipeline> fake_ = std::make_shared<FakePipeline>();
};

TEST_F(SupervisorActor, ADownRestartsThatIncarnationOnlyWhenItsMessageIsHandled) {
  auto sup = spawn_supervisor(sys_, fake_, std::chrono::milliseconds(0));
  sched_.run();
  caf::anon_send(sup, down_atom::value, int32_t{1}, uint32_t{3});
  caf::anon_send(sup, flush_atom::value, int32_t{0});
  EXPECT_TRUE(fake_->calls.empty()) << "nothing runs before the scheduler does";
  EXPECT_TRUE(sched_.try_run_once());
  EXPECT_EQ(fake_->calls, (std::vector<std::string>{"restart 1 3"}));
  EXPECT_TRUE(sched_.try_run_once());
  EXPECT_EQ(fake_->calls, (std::vector<std::string>{"restart 1 3", "flush 0"}));
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
  sched_.run();
}

TEST_F(SupervisorActor, TheWatchdogRunsOnEveryTickAndSchedulesTheNext) {
  auto sup = spawn_supervisor(sys_, fake_, std::chrono::milliseconds(250));
  sched_.run();
  EXPECT_TRUE(fake_->calls.empty());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(sched_.trigger_timeouts()) << "tick " << i << " was not scheduled";
    sched_.run();
  }
  EXPECT_EQ(fake_->calls, (std::vector<std::string>{"watchdog 250", "watchdog 250", "watchdog 250"}));
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
  sched_.run();
}

TEST_F(SupervisorActor, AnExceptionBecomesTheLoadersFatalErrorAndTheSupervisorGoesOn) {
  fake_->throw_on_restart = true;
  auto sup = spawn_supervisor(sys_, fake_, std::chrono::milliseconds(0));
  sched_.run();
  caf::anon_send(sup, down_atom::value, int32_t{0}, uint32_t{1});
  caf::anon_send(sup, flush_atom::value, int32_t{0});
  sched_.run();
  ASSERT_EQ(fake_->calls.size(), 3u);
  EXPECT_EQ(fake_->calls[0], "restart 0 1");
  EXPECT_EQ(fake_->calls[1], "fail RuntimeError: DataLoader runtime: the supervisor failed while handling a worker "
                             "restart: cannot spawn");
  EXPECT_EQ(fake_->calls[2], "flush 0") << "the supervisor survived the exception";
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
  sched_.run();
}

TEST_F(SupervisorActor, APipelineThatIsGoneIsNotTouched) {
  auto sup = spawn_supervisor(sys_, fake_, std::chrono::milliseconds(0));
  sched_.run();
  std::weak_ptr<FakePipeline> weak = fake_;
  fake_.reset();
  caf::anon_send(sup, down_atom::value, int32_t{0}, uint32_t{1});
  sched_.run();
  EXPECT_TRUE(weak.expired());
  caf::anon_send_exit(sup, caf::exit_reason::user_shutdown);
  sched_.run();
}

}  // namespace
}  // namespace loader::runtime
