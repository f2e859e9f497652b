// A lost host, without a network: the watchdog's rule (RemoteTransport::loss_reason), the
// lifecycle's decision for a lost host, and the worker stage moving a slot to another
// transport (WorkerSlots::set_transport, resend_held): the unanswered tasks go out again
// to the new transport, in order, after the generator state the first one began with.
// The same paths end to end, over real connections, are remote_test.cpp's.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "loader/generator.h"
#include "loader/runtime/frames.h"
#include "loader/runtime/parent/remote_transport.h"
#include "loader/runtime/parent/slab_store.h"
#include "loader/runtime/parent/worker_lifecycle.h"
#include "loader/runtime/parent/worker_slots.h"

namespace loader::runtime {
namespace {

using namespace std::chrono_literals;

TEST(RemoteWatchdog, SilenceOrAnUnansweredTaskLongerThanTheTimeoutLosesTheHost) {
  const auto now = std::chrono::steady_clock::now();
  std::map<uint64_t, std::chrono::steady_clock::time_point> in_flight;
  EXPECT_FALSE(RemoteTransport::loss_reason("h:1", 1000ms, 400ms, in_flight, now));
  EXPECT_FALSE(RemoteTransport::loss_reason("h:1", 1000ms, 1000ms, in_flight, now)) << "at the timeout, not yet";
  auto silent = RemoteTransport::loss_reason("h:1", 1000ms, 1001ms, in_flight, now);
  ASSERT_TRUE(silent);
  EXPECT_NE(silent->find("h:1: it sent nothing for 1001 ms"), std::string::npos) << *silent;
  // Heard from (pongs) but a task waits too long: lost, naming the oldest task.
  in_flight[9] = now - 300ms;
  in_flight[4] = now - 1500ms;
  in_flight[6] = now - 900ms;
  auto task = RemoteTransport::loss_reason("h:1", 1000ms, 10ms, in_flight, now);
  ASSERT_TRUE(task);
  EXPECT_NE(task->find("h:1: task 4 got no answer within 1000 ms"), std::string::npos) << *task;
  in_flight.erase(4);
  EXPECT_FALSE(RemoteTransport::loss_reason("h:1", 1000ms, 10ms, in_flight, now));
}

TEST(RemoteLifecycle, ALostHostRestartsItsWorkerElsewhereWithoutCountingARestart) {
  WorkerLifecycle life(1, /*max_restarts=*/0, /*restartable=*/true);
  const uint32_t gen = life.start();
  life.ready(gen);
  life.hold(3, HeldTask{1, {7, 8}, 0});
  life.hold(5, HeldTask{1, {9}, 0});
  const auto d = life.down(gen, WorkerExit{WorkerExit::Kind::HostLost, 0, "h:7000: its connection closed"});
  EXPECT_EQ(d.kind, WorkerLifecycle::Decision::Kind::Restart);
  EXPECT_EQ(d.reissue, (std::vector<uint64_t>{3, 5}));
  EXPECT_EQ(life.restarts(), 0) << "a lost host is not the worker's crash";
  EXPECT_NE(d.message.find("DataLoader worker on h:7000: its connection closed."), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("not counted as a restart"), std::string::npos) << d.message;
  // An iterable dataset's worker cannot move: its stream position went with the host.
  WorkerLifecycle stream(0, 3, /*restartable=*/false);
  const uint32_t g = stream.start();
  EXPECT_EQ(stream.down(g, WorkerExit{WorkerExit::Kind::HostLost, 0, "h:7000: x"}).kind,
            WorkerLifecycle::Decision::Kind::Fail);
}

/// A transport that records what the worker stage asks of it, with a state page as a
/// map: task -> state before it, and the last After.
class FakeTransport final : public WorkerTransport {
 public:
  explicit FakeTransport(bool shared) : shared_(shared) {}
  struct Sent {
    FrameType type;
    std::string body;
  };
  std::vector<Sent> sent;
  std::vector<std::pair<uint64_t, uint64_t>> tasks;  ///< (task, slab)
  std::map<uint64_t, std::string> before;
  std::optional<std::pair<uint64_t, std::string>> after;
  uint32_t reset_to = 0;

  bool shares_memory() const override { return shared_; }
  void start(uint32_t) override {}
  void stop() override {}
  void say_shutdown() override {}
  void flush() override {}
  void watch(const Liveness&, std::chrono::milliseconds, std::chrono::milliseconds) override {}
  int pid() const override { return -1; }
  void reset(uint32_t gen) override { reset_to = gen; }
  void prepare(std::string init) override { sent.push_back({FrameType::Init, std::move(init)}); }
  // What the worker is told, recorded as the frames a local worker would get.
  void init(std::string config) override { sent.push_back({FrameType::Init, std::move(config)}); }
  void set_rng(uint64_t task, std::string state) override {
    sent.push_back({FrameType::SetRng, SetRngFrame{task, std::move(state)}.encode()});
  }
  void task_seeds(const TaskSeeds& s) override {
    sent.push_back({FrameType::TaskSeeds, TaskSeedsFrame{s.base_seed, s.task_base}.encode()});
  }
  void restart_stream() override { sent.push_back({FrameType::Epoch, {}}); }
  void resume_stream(const StreamResume& r) override {
    sent.push_back({FrameType::ResumeStream, encode_stream_resume(r)});
  }
  void send_task(uint64_t task, uint64_t slab, const IndexBatch&) override {
    tasks.emplace_back(task, slab);
    sent.push_back({FrameType::Task, std::to_string(task)});
  }
  void use_slab(uint64_t, uint64_t) override {}
  bool dirty() const override { return false; }
  size_t take_results(const std::function<void(WorkerReply&&)>&) override { return 0; }
  std::optional<std::string> state_before(uint64_t task, uint64_t floor) const override {
    if (auto it = before.find(task); it != before.end()) return it->second;
    if (after && after->first < task && after->first >= floor) return after->second;
    return std::nullopt;
  }
  std::optional<uint64_t> last_started() const override {
    if (before.empty()) return std::nullopt;
    return before.rbegin()->first;
  }
  std::optional<std::pair<uint64_t, std::string>> last_state() const override { return after; }
  void carry_state(uint64_t task, const std::string& state) override { after.emplace(task, state); }

 private:
  bool shared_;
};

struct Events final : public WorkerStageEvents {
  std::vector<std::string> failed, restarting;
  void epoch_failed(const std::string&, const std::string& message, int) override { failed.push_back(message); }
  void worker_restarting(int, uint32_t, const std::string& warning) override { restarting.push_back(warning); }
};

TEST(RemoteReissue, AMovedSlotSendsItsUnansweredTasksToTheNewTransportAfterTheirStartingState) {
  SlabPolicy policy;
  policy.num_workers = 1;
  policy.slabs_per_worker = 4;
  SlabStore slabs(1, policy, false, nullptr);
  FakeTransport host(/*shared=*/false), standin(/*shared=*/true);
  Events events;
  WorkerSlots slots({&host}, /*max_restarts=*/0, /*restartable=*/true, slabs, 8, events, "");
  slots.set_epoch(1);
  uint32_t gen = slots.begin_incarnation(0);
  slots.attach(0, gen, -1, "init-config");
  slots.ready(0, gen);
  for (uint64_t t : {10u, 12u, 14u}) {
    task_msg m{t, {static_cast<int64_t>(t)}, 0};
    slots.take_task(0, m);
  }
  // A remote transport shares no memory: every task goes for a batch inline.
  ASSERT_EQ(host.tasks.size(), 3u);
  for (const auto& [task, slab] : host.tasks) EXPECT_EQ(slab, kInlineSlab) << "task " << task;
  // Task 10 is answered; the host recorded the states around it.
  const std::string s10 = Generator(1).state(), s12 = Generator(2).state();
  host.before[10] = s10;
  host.after.emplace(10, s12);
  result_msg r{10, WorkerReply{}, 0};
  r.batch.task = 10;
  EXPECT_EQ(slots.take_result(0, r), WorkerStage::Outcome::Deliver);
  // The host is lost: a restart elsewhere, not a failure.
  EXPECT_FALSE(slots.down(0, gen, WorkerExit{WorkerExit::Kind::HostLost, 0, "h:1: its connection closed"}));
  ASSERT_EQ(events.restarting.size(), 1u);
  EXPECT_TRUE(events.failed.empty());
  ASSERT_TRUE(slots.host_lost(0).has_value());
  // The pool moves the slot to a stand-in and attaches the next incarnation there.
  gen = slots.begin_incarnation(0);
  slots.set_transport(0, &standin);
  EXPECT_EQ(standin.reset_to, gen);
  ASSERT_TRUE(standin.after.has_value()) << "the random stream was not carried over";
  EXPECT_EQ(standin.after->first, 10u);
  EXPECT_EQ(standin.after->second, s12);
  slots.attach(0, gen, 4321, "init-config");
  EXPECT_FALSE(slots.host_lost(0).has_value());
  slots.resend_held(0, /*moved=*/true);
  // Init, then SetRng(12, the state after 10), then 12 and 14; nothing of 10 again.
  ASSERT_GE(standin.sent.size(), 4u);
  EXPECT_EQ(standin.sent[0].type, FrameType::Init);
  ASSERT_EQ(standin.sent[1].type, FrameType::SetRng);
  const SetRngFrame set = SetRngFrame::decode(standin.sent[1].body);
  EXPECT_EQ(set.task, 12u);
  EXPECT_EQ(set.state, s12);
  ASSERT_EQ(standin.tasks.size(), 2u);
  EXPECT_EQ(standin.tasks[0].first, 12u);
  EXPECT_EQ(standin.tasks[1].first, 14u);
  EXPECT_EQ(slots.held(0), 2u);
  // A checkpoint still finds the state of the task the lost host ran.
  EXPECT_EQ(slots.state_before(0, 10), std::optional<std::string>(s10));
  slots.close();
  slots.release_all(0);
}

}  // namespace
}  // namespace loader::runtime
