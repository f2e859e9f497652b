// InlineExecutor alone: a message sent through it is handled on the thread that calls
// run(), not before; what the actors it runs send each other is handled in the same
// run(); an actor with more messages than one activation takes lets another run in
// between; an actor that another thread messages while idle goes to CAF's scheduler.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <string>
#include <thread>
#include <vector>

#include "deterministic_system.h"
#include "loader/runtime/inline_executor.h"

namespace loader::runtime {
namespace {

using hop_actor = caf::typed_actor<caf::reacts_to<int32_t>>;

struct Seen {
  std::vector<std::string> lines;          ///< "a 3", "b 2", ...
  std::vector<std::thread::id> threads;    ///< the thread of each
};

/// Records each number it gets and, above 0, sends `next` the number less one.
hop_actor::behavior_type hop(hop_actor::pointer self, std::string name, Seen* seen, hop_actor next) {
  return {[=](int32_t x) {
    seen->lines.push_back(name + " " + std::to_string(x));
    seen->threads.push_back(std::this_thread::get_id());
    if (next && x > 0) self->send(next, x - 1);
  }};
}

class InlineExecutorTest : public ::testing::Test {
 protected:
  InlineExecutorTest()
      : sys_(deterministic_config()), sched_(dynamic_cast<caf::scheduler::test_coordinator&>(sys_.scheduler())) {}
  ~InlineExecutorTest() override {
    for (auto& a : actors_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    sched_.run();
  }
  hop_actor spawn(const std::string& name, hop_actor next = hop_actor{}) {
    auto a = sys_.spawn<caf::lazy_init>(hop, name, &seen_, next);
    actors_.push_back(caf::actor_cast<caf::actor>(a));
    return a;
  }
  caf::actor_system sys_;
  caf::scheduler::test_coordinator& sched_;
  std::vector<caf::actor> actors_;
  Seen seen_;
};

TEST_F(InlineExecutorTest, AMessageRunsOnTheCallingThreadAtRunAndTheActorsRepliesInTheSameRun) {
  hop_actor b = spawn("b");
  hop_actor a = spawn("a", b);
  // b sends back to a: a cycle of hops, all in one run().
  hop_actor c = spawn("c", a);
  InlineExecutor exec(sys_);
  exec.send(c, int32_t{3});
  EXPECT_TRUE(seen_.lines.empty()) << "nothing runs before run()";
  const size_t activations = exec.run();
  EXPECT_EQ(seen_.lines, (std::vector<std::string>{"c 3", "a 2", "b 1"}));
  EXPECT_GE(activations, 3u);
  for (const auto& t : seen_.threads) EXPECT_EQ(t, std::this_thread::get_id());
  EXPECT_FALSE(sched_.has_job()) << "nothing went to CAF's scheduler";
  EXPECT_EQ(exec.run(), 0u) << "nothing left";
}

TEST_F(InlineExecutorTest, AnActorWithMoreMessagesThanOneActivationLetsTheOtherRunBetween) {
  hop_actor a = spawn("a");
  hop_actor b = spawn("b");
  InlineExecutor exec(sys_);
  for (int i = 0; i < 100; ++i) exec.send(a, int32_t{0});
  exec.send(b, int32_t{0});
  exec.run();
  ASSERT_EQ(seen_.lines.size(), 101u);
  // b's one message is handled before a's last: a yields after its activation's share.
  size_t b_at = 0;
  for (size_t i = 0; i < seen_.lines.size(); ++i)
    if (seen_.lines[i] == "b 0") b_at = i;
  EXPECT_LT(b_at, 100u);
  EXPECT_GT(b_at, 0u);
}

TEST_F(InlineExecutorTest, AnIdleActorMessagedFromElsewhereRunsOnCafsScheduler) {
  hop_actor a = spawn("a");
  caf::anon_send(a, int32_t{0});
  InlineExecutor exec(sys_);
  EXPECT_EQ(exec.run(), 0u);
  EXPECT_TRUE(seen_.lines.empty());
  sched_.run();
  EXPECT_EQ(seen_.lines, (std::vector<std::string>{"a 0"}));
}

}  // namespace
}  // namespace loader::runtime
