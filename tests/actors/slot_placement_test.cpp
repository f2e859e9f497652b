// SlotPlacement alone, over fake transports that record what they are asked and fail
// when told to: a local slot starts where it is; a remote slot whose host was lost tries
// its home, then the other hosts, then a local stand-in, in that order, and says all it
// tried when none could take it; go_home takes a moved slot back or leaves it where it
// was with a warning; the worker stage hears of every move, on the strand.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "loader/error.h"
#include "loader/runtime/parent/slot_placement.h"
#include "null_transport.h"
#include "loader/warnings.h"

namespace loader::runtime {
namespace {

/// What every fake transport of one test did, in order ("local0 start 1", ...).
struct Journal {
  std::vector<std::string> calls;
  std::set<std::string> refuse;  ///< names (or host texts) whose start() throws
  bool strand_held = false;      ///< the fake strand is entered
  std::vector<std::string> moves;  ///< the worker stage's set_transport calls ("1 -> remote1@b:2")
};

/// Journals start, stop and say_shutdown as "<where> <call>"; start() throws when the
/// journal refuses refusal_key().
template <class Base>
class Recording : public NullTransport<Base> {
 public:
  Recording(std::string name, Journal& j) : name_(std::move(name)), j_(j) {}
  virtual std::string where() const { return name_; }
  void start(uint32_t gen) override {
    j_.calls.push_back(where() + " start " + std::to_string(gen));
    if (j_.refuse.count(refusal_key())) throw RuntimeError(refusal());
  }
  void stop() override { j_.calls.push_back(where() + " stop"); }
  void say_shutdown() override { j_.calls.push_back(where() + " say_shutdown"); }

 protected:
  virtual std::string refusal_key() const { return name_; }
  virtual std::string refusal() const { return where() + " refused"; }
  std::string name_;
  Journal& j_;
};

class FakeTransport final : public Recording<WorkerTransport> {
 public:
  using Recording::Recording;
  bool shares_memory() const override { return true; }
};

class FakeHosted final : public Recording<HostedTransport> {
 public:
  FakeHosted(std::string name, HostPort home, Journal& j)
      : Recording(std::move(name), j), home_(std::move(home)), target_(home_) {}
  std::string where() const override { return name_ + "@" + target_.text(); }
  void retarget(const HostPort& a) override { target_ = a; }
  const HostPort& target() const override { return target_; }
  const HostPort& home() const override { return home_; }

 private:
  std::string refusal_key() const override { return target_.text(); }
  std::string refusal() const override { return target_.text() + " cannot be reached"; }
  HostPort home_, target_;
};

/// Names the transport a slot is on, as the journal writes it.
std::string name_of(WorkerTransport& t) {
  if (auto* h = dynamic_cast<FakeHosted*>(&t)) return h->where();
  return dynamic_cast<FakeTransport&>(t).where();
}

class SlotPlacementTest : public ::testing::Test {
 protected:
  /// `local` local slots, then one remote slot per host.
  std::unique_ptr<SlotPlacement> make(int local, std::vector<HostPort> hosts) {
    SlotPlacement::Hooks hooks;
    hooks.enter = [this] {
      std::unique_lock<std::mutex> l(strand_);
      return l;
    };
    hooks.use = [this](int w, WorkerTransport* t) {
      // The stage is told on the strand: the lock is held by this thread.
      EXPECT_FALSE(strand_.try_lock()) << "set_transport off the strand";
      j_.moves.push_back(std::to_string(w) + " -> " + name_of(*t));
    };
    hooks.make_local = [this](int w) {
      ++locals_made_[w];
      return std::make_unique<FakeTransport>((w >= local_ ? "standin" : "local") + std::to_string(w), j_);
    };
    hooks.make_remote = [this, hosts](int w, size_t i) -> std::unique_ptr<HostedTransport> {
      return std::make_unique<FakeHosted>("remote" + std::to_string(w), hosts.at(i), j_);
    };
    local_ = local;
    return std::make_unique<SlotPlacement>(local + static_cast<int>(hosts.size()), hosts, std::move(hooks));
  }
  static WorkerExit lost(const std::string& detail) {
    WorkerExit e;
    e.kind = WorkerExit::Kind::HostLost;
    e.detail = detail;
    return e;
  }

  Journal j_;
  std::mutex strand_;
  std::map<int, int> locals_made_;
  int local_ = 0;
};

const HostPort kA{"a", 1}, kB{"b", 2}, kC{"c", 3};

TEST_F(SlotPlacementTest, EachSlotStartsOnItsHomeTransportLocalOnesFirst) {
  auto p = make(2, {kA, kB});
  ASSERT_EQ(p->size(), 4);
  EXPECT_EQ(p->local_count(), 2);
  EXPECT_FALSE(p->remote(1));
  EXPECT_TRUE(p->remote(2));
  std::vector<std::string> homes;
  for (WorkerTransport* t : p->homes()) homes.push_back(name_of(*t));
  EXPECT_EQ(homes, (std::vector<std::string>{"local0", "local1", "remote2@a:1", "remote3@b:2"}));
  for (int w = 0; w < 4; ++w) EXPECT_TRUE(p->at_home(w)) << w;
  EXPECT_EQ(name_of(p->start(3, 1, std::nullopt)), "remote3@b:2");
  EXPECT_EQ(j_.calls, (std::vector<std::string>{"remote3@b:2 start 1"}));
  EXPECT_TRUE(j_.moves.empty());  // nothing moved
}

TEST_F(SlotPlacementTest, ALocalSlotStartsWhereItIsEvenAfterALoss) {
  auto p = make(1, {kA});
  j_.refuse.insert("local0");
  EXPECT_THROW(p->start(0, 2, lost("x")), RuntimeError);  // its own error, no failover
  EXPECT_EQ(j_.calls, (std::vector<std::string>{"local0 start 2"}));
}

TEST_F(SlotPlacementTest, ASlotWhoseHostWasLostTriesTheOtherHostsInOrderThenAStandIn) {
  auto p = make(1, {kA, kB, kC});
  // Slot 1's host a is lost; b refuses, c takes it.
  j_.refuse.insert("b:2");
  WorkerTransport& t = p->start(1, 5, lost("a:1: connection closed"));
  EXPECT_EQ(name_of(t), "remote1@c:3");
  EXPECT_EQ(j_.calls, (std::vector<std::string>{"remote1@b:2 start 5", "remote1@c:3 start 5"}));
  EXPECT_EQ(j_.moves, (std::vector<std::string>{"1 -> remote1@b:2", "1 -> remote1@c:3"}));
  EXPECT_FALSE(p->at_home(1));
  EXPECT_EQ(&p->current(1), &t);

  // c is lost too, and every other host refuses: a stand-in process here, made once.
  j_.calls.clear();
  j_.refuse.insert("a:1");
  WorkerTransport& s = p->start(1, 6, lost("c:3: silent for 10 s"));
  EXPECT_EQ(name_of(s), "standin1");
  // Its home first (it was away), then the others in their order; never the lost one.
  EXPECT_EQ(j_.calls, (std::vector<std::string>{"remote1@a:1 start 6", "remote1@b:2 start 6", "standin1 start 6"}));
  EXPECT_EQ(locals_made_[1], 1);
  EXPECT_EQ(&p->current(1), &s);
  // The remote transport points at its home again, ready for go_home.
  EXPECT_EQ(name_of(*p->homes()[1]), "remote1@a:1");
}

TEST_F(SlotPlacementTest, WhenNoHostAndNoStandInCanTakeItTheErrorSaysWhatWasTried) {
  {
    auto p = make(0, {kA});  // one host, no local workers
    try {
      p->start(0, 2, lost("a:1: connection closed"));
      FAIL() << "no error";
    } catch (const RuntimeError& e) {
      EXPECT_EQ(std::string(e.what()),
                "its host a:1 was lost (a:1: connection closed) and no other worker could take its tasks: no other "
                "worker host is given (remote_workers) and this loader has no local workers (num_workers = 0) to run "
                "a stand-in");
    }
  }
  j_.calls.clear();
  auto p = make(1, {kA, kB});
  j_.refuse = {"a:1", "standin2"};
  try {
    p->start(2, 3, lost("b:2: killed"));
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_EQ(std::string(e.what()),
              "its host b:2 was lost (b:2: killed) and no other worker could take its tasks: a:1 cannot be reached; a "
              "stand-in process here: standin2 refused");
  }
}

TEST_F(SlotPlacementTest, GoHomeTakesAMovedSlotBackOrLeavesItWhereItWasWithAWarning) {
  auto p = make(1, {kA, kB});
  j_.refuse.insert("a:1");
  p->start(1, 1, lost("a:1: closed"));  // to b
  ASSERT_EQ(name_of(p->current(1)), "remote1@b:2");
  ASSERT_FALSE(p->at_home(1));

  // a still refuses: back to b, with a warning that names both.
  j_.calls.clear();
  j_.moves.clear();
  std::vector<std::string> warnings;
  {
    WarningCapture capture;
    EXPECT_EQ(name_of(p->go_home(1, 2)), "remote1@b:2");
    warnings = capture.messages();
  }
  EXPECT_EQ(j_.calls, (std::vector<std::string>{"remote1@b:2 stop", "remote1@a:1 start 2", "remote1@b:2 start 2"}));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0],
            "DataLoader worker 1: its host a:1 still cannot take it (a:1 cannot be reached); it stays with the worker "
            "host b:2 for this epoch");
  EXPECT_FALSE(p->at_home(1));

  // a is back: home.
  j_.refuse.clear();
  j_.calls.clear();
  EXPECT_EQ(name_of(p->go_home(1, 3)), "remote1@a:1");
  EXPECT_EQ(j_.calls, (std::vector<std::string>{"remote1@b:2 stop", "remote1@a:1 start 3"}));
  EXPECT_TRUE(p->at_home(1));
}

TEST_F(SlotPlacementTest, GoHomeFromAStandInThatCannotStartAgainThrowsForTheCaller) {
  auto p = make(1, {kA});
  j_.refuse.insert("a:1");
  ASSERT_EQ(name_of(p->start(1, 1, lost("a:1: closed"))), "standin1");
  j_.refuse.insert("standin1");
  WarningCapture capture;
  EXPECT_THROW(p->go_home(1, 2), RuntimeError);
  const std::vector<std::string> warnings = capture.messages();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("it stays with its stand-in process here"), std::string::npos) << warnings[0];
}

TEST_F(SlotPlacementTest, ShutdownTellsEveryCurrentTransportFirstThenStopsEveryTransport) {
  auto p = make(1, {kA});
  j_.refuse.insert("a:1");
  p->start(1, 1, lost("a:1: closed"));  // slot 1 on its stand-in
  j_.calls.clear();
  p->say_shutdown_all();
  p->stop_all();
  EXPECT_EQ(j_.calls, (std::vector<std::string>{"local0 say_shutdown", "standin1 say_shutdown", "local0 stop",
                                                "remote1@a:1 stop", "standin1 stop"}));
}

}  // namespace
}  // namespace loader::runtime
