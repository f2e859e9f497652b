// The main process's stage actors, each alone, driven by its messages on CAF's
// deterministic scheduler (each message is handled when the test says so, no threads):
// the sampler stops at its credits and resumes on each one returned, the link takes
// the worker's results on to the reorder stage, the reorder actor releases results in
// task order, the pin actor hands over what it receives.  The actors a stage sends to
// are recording actors of the same typed interface.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deterministic_system.h"
#include "loader/runtime/parent/handoff.h"
#include "loader/runtime/parent/link_actor.h"
#include "loader/runtime/parent/pin_actor.h"
#include "loader/runtime/parent/reorder_actor.h"
#include "loader/runtime/parent/sampler_actor.h"
#include "loader/runtime/parent/stage_actors.h"
#include "loader/error.h"
#include "loader/samplers.h"

namespace loader::runtime {
namespace {

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i);
  return v;
}

result_msg result(uint64_t task, int worker, const std::string& payload = "") {
  result_msg r;
  r.task_idx = task;
  r.worker = worker;
  r.batch.kind = WorkerReply::Kind::Result;
  r.batch.task = task;
  r.batch.payload = payload.empty() ? "batch " + std::to_string(task) : payload;
  return r;
}

/// What the stages under test sent, in order.
struct Recorded {
  std::vector<task_msg> tasks[2];       ///< per task sink
  std::vector<result_msg> results;      ///< to the reorder or the pin stage
  std::vector<std::string> events;      ///< "dry 1 4", "skip 4", "credit 0 3", ...
};

// Spawned with an argument each (CAF 0.17 binds a reference to a null tuple for a
// function actor without one).
task_sink::behavior_type recording_sink(task_sink::pointer, std::vector<task_msg>* out) {
  return {[out](task_msg& t) { out->push_back(std::move(t)); }};
}
pin_actor::behavior_type recording_pin(pin_actor::pointer, Recorded* out) {
  return {
      [out](result_msg& r) { out->results.push_back(std::move(r)); },
      [out](begin_atom, uint64_t t) { out->events.push_back("begin " + std::to_string(t)); },
      [out](drop_atom) { out->events.push_back("drop"); },
      [out](take_atom, PinTake) { out->events.push_back("take"); },
  };
}
reorder_actor::behavior_type recording_reorder(reorder_actor::pointer, Recorded* out) {
  return {
      [out](result_msg& r) { out->results.push_back(std::move(r)); },
      [out](skip_atom, uint64_t task) { out->events.push_back("skip " + std::to_string(task)); },
      [out](begin_atom, uint64_t t, bool) { out->events.push_back("begin " + std::to_string(t)); },
      [out](drop_atom) { out->events.push_back("drop"); },
  };
}
sampler_actor::behavior_type recording_sampler(sampler_actor::pointer, Recorded* out) {
  return {
      [out](begin_atom, sampler_begin&) { out->events.push_back("begin"); },
      [out](halt_atom) { out->events.push_back("halt"); },
      [out](credit_atom, int32_t w, uint64_t t) {
        out->events.push_back("credit " + std::to_string(w) + " " + std::to_string(t));
      },
      [out](dry_atom, int32_t w, uint64_t t) {
        out->events.push_back("dry " + std::to_string(w) + " " + std::to_string(t));
      },
      [out](retire_atom, int32_t w) { out->events.push_back("retire " + std::to_string(w)); },
      [out](dispatch_atom, int32_t m) { out->events.push_back("dispatch " + std::to_string(m)); },
      [out](tune_atom, int32_t w, bool on, uint64_t max) {
        out->events.push_back("tune " + std::to_string(w) + (on ? " on " : " off ") + std::to_string(max));
      },
  };
}

/// The worker stage as a link actor sees it: records the tasks it is given, answers
/// results as `outcome` says.
class FakeWorkerStage final : public WorkerStage, public StageFailures {
 public:
  void take_task(int worker, task_msg& t) override {
    taken.push_back("worker " + std::to_string(worker) + " task " + std::to_string(t.task_idx));
  }
  Outcome take_result(int worker, result_msg& r) override {
    r.worker = worker;
    r.batch.slab = 5;  // the slab the pipeline held for the task
    return outcome;
  }
  bool current(int, uint32_t gen) const override { return gen == generation; }
  void hello(int worker, uint32_t gen) override { taken.push_back("worker " + std::to_string(worker) + " hello " + std::to_string(gen)); }
  void ready(int worker, uint32_t gen) override { taken.push_back("worker " + std::to_string(worker) + " ready " + std::to_string(gen)); }
  bool failed(int worker, uint32_t gen, const std::string& type, const std::string&) override {
    taken.push_back("worker " + std::to_string(worker) + " failed " + std::to_string(gen) + " " + type);
    return gen == generation;
  }
  bool down(int worker, uint32_t gen, const WorkerExit&) override {
    taken.push_back("worker " + std::to_string(worker) + " down " + std::to_string(gen));
    return gen == generation && !restartable;
  }
  void stream_started(int worker, uint32_t gen, uint64_t task, StreamStart start) override {
    taken.push_back("worker " + std::to_string(worker) + " stream " + std::to_string(gen) + " task " +
                    std::to_string(task) + " " + start.state.value_or("(no state)"));
  }
  void stage_failed(const std::string& message) override { failures.push_back(message); }
  Outcome outcome = Outcome::Deliver;
  uint32_t generation = 1;  ///< the current incarnation
  bool restartable = false;
  std::vector<std::string> taken;
  std::vector<std::string> failures;
};

class StageActorTest : public ::testing::Test {
 protected:
  StageActorTest()
      : sys_(deterministic_config()), sched_(dynamic_cast<caf::scheduler::test_coordinator&>(sys_.scheduler())) {}
  ~StageActorTest() override {
    for (const auto& a : spawned_) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    sched_.run();
  }
  template <class Handle>
  Handle keep(Handle h) {
    spawned_.push_back(caf::actor_cast<caf::actor>(h));
    return h;
  }

  caf::actor_system sys_;
  caf::scheduler::test_coordinator& sched_;
  std::vector<caf::actor> spawned_;
  Recorded rec_;
  FakeWorkerStage stage_;
};

TEST_F(StageActorTest, TheReorderActorGivenResults312EmitsThemAs123) {
  ReorderBuffer<result_msg> buffer(/*first_task=*/1, /*in_order=*/true);
  auto pin = keep(sys_.spawn(recording_pin, &rec_));
  auto reorder = keep(spawn_reorder_actor(sys_, &buffer, pin, nullptr, &stage_));
  caf::anon_send(reorder, result(3, 1));
  sched_.run();
  EXPECT_TRUE(rec_.results.empty()) << "task 3 waits for 1 and 2";
  caf::anon_send(reorder, result(1, 1));
  sched_.run();
  ASSERT_EQ(rec_.results.size(), 1u);
  caf::anon_send(reorder, result(2, 0));
  sched_.run();
  ASSERT_EQ(rec_.results.size(), 3u);
  EXPECT_EQ(rec_.results[0].task_idx, 1u);
  EXPECT_EQ(rec_.results[1].task_idx, 2u);
  EXPECT_EQ(rec_.results[2].task_idx, 3u);
  EXPECT_EQ(rec_.results[1].worker, 0);
  EXPECT_EQ(rec_.results[2].batch.payload, "batch 3");
  EXPECT_EQ(buffer.buffered(), 0u);
}

TEST_F(StageActorTest, TheReorderActorMovesPastASkippedTaskAndOutOfOrderReleasesAtOnce) {
  ReorderBuffer<result_msg> buffer(0, true);
  auto pin = keep(sys_.spawn(recording_pin, &rec_));
  auto reorder = keep(spawn_reorder_actor(sys_, &buffer, pin, nullptr, &stage_));
  caf::anon_send(reorder, result(1, 1));
  caf::anon_send(reorder, skip_atom::value, uint64_t{0});
  sched_.run();
  ASSERT_EQ(rec_.results.size(), 1u);
  EXPECT_EQ(rec_.results[0].task_idx, 1u);

  Recorded unordered;
  ReorderBuffer<result_msg> completion(0, /*in_order=*/false);
  auto pin2 = keep(sys_.spawn(recording_pin, &unordered));
  auto reorder2 = keep(spawn_reorder_actor(sys_, &completion, pin2, nullptr, &stage_));
  caf::anon_send(reorder2, result(2, 0));
  caf::anon_send(reorder2, result(0, 0));
  sched_.run();
  ASSERT_EQ(unordered.results.size(), 2u);
  EXPECT_EQ(unordered.results[0].task_idx, 2u) << "in_order=false: as they complete";
}

class SamplerActorTest : public StageActorTest {
 protected:
  /// 10 tasks of 3 indices over 2 workers, prefetch_factor 2: 4 credits.
  SamplerActorTest() {
    stage_sampler_.begin(TaskSource(std::make_shared<BatchSampler>(iota(30), 3, false), nullptr), false,
                         TaskDispatcher(2, 2, /*first_task=*/0));
    for (auto& out : rec_.tasks) sinks_.push_back(keep(sys_.spawn(recording_sink, &out)));
    sampler_ = keep(spawn_sampler_actor(sys_, &stage_sampler_, &sinks_, &stage_));
  }
  size_t sent() const { return rec_.tasks[0].size() + rec_.tasks[1].size(); }

  SamplerStage stage_sampler_;
  std::vector<task_sink> sinks_;
  sampler_actor sampler_;
};

TEST_F(SamplerActorTest, StopsAtItsCreditsAndResumesOnEachReturnedOne) {
  caf::anon_send(sampler_, dispatch_atom::value, int32_t{-1});
  sched_.run();
  ASSERT_EQ(sent(), 4u) << "prefetch_factor * num_workers tasks, no more";
  // Round robin: task i to worker i mod 2, its indices the batch sampler's i-th batch.
  ASSERT_EQ(rec_.tasks[0].size(), 2u);
  EXPECT_EQ(rec_.tasks[0][0].task_idx, 0u);
  EXPECT_EQ(rec_.tasks[0][1].task_idx, 2u);
  EXPECT_EQ(rec_.tasks[1][0].task_idx, 1u);
  EXPECT_EQ(rec_.tasks[0][1].indices, (std::vector<int64_t>{6, 7, 8}));
  EXPECT_EQ(stage_sampler_.dispatcher().worker_of(0), 0) << "task 0 is not done before its result is taken";
  for (size_t credits = 1; credits <= 6; ++credits) {
    caf::anon_send(sampler_, credit_atom::value, int32_t{0}, uint64_t{credits - 1});
    sched_.run();
    EXPECT_EQ(sent(), 4u + credits) << "one task per credit";
  }
  ASSERT_EQ(sent(), 10u);
  EXPECT_EQ(stage_sampler_.dispatcher().worker_of(0), -1) << "taken: done";
  EXPECT_FALSE(stage_sampler_.total().has_value()) << "the sampler was not asked past its end yet";
  caf::anon_send(sampler_, credit_atom::value, int32_t{1}, uint64_t{6});
  sched_.run();
  EXPECT_EQ(sent(), 10u);
  ASSERT_TRUE(stage_sampler_.total().has_value());
  EXPECT_EQ(*stage_sampler_.total(), 10u);
  EXPECT_TRUE(stage_sampler_.exhausted());
}

TEST_F(SamplerActorTest, DispatchWithAMaximumSendsThatManyAndARetiredWorkerGetsNone) {
  caf::anon_send(sampler_, dispatch_atom::value, int32_t{1});
  sched_.run();
  EXPECT_EQ(sent(), 1u);
  caf::anon_send(sampler_, retire_atom::value, int32_t{1});
  caf::anon_send(sampler_, dispatch_atom::value, int32_t{-1});
  sched_.run();
  EXPECT_EQ(rec_.tasks[1].size(), 0u);
  EXPECT_EQ(rec_.tasks[0].size(), 4u) << "every credit to the worker left";
}

TEST_F(SamplerActorTest, ASamplerThatThrowsHaltsAndSaysWhy) {
  class Failing final : public BatchSamplerBase {
   public:
    std::unique_ptr<Cursor<IndexBatch>> iter() override {
      return make_cursor<IndexBatch>([]() -> std::optional<IndexBatch> { throw ValueError("no more indices today"); });
    }
    std::optional<int64_t> size() const override { return 3; }
  };
  stage_sampler_.begin(TaskSource(std::make_shared<Failing>(), nullptr), false, TaskDispatcher(2, 2, 0));
  caf::anon_send(sampler_, dispatch_atom::value, int32_t{-1});
  sched_.run();
  EXPECT_EQ(sent(), 0u);
  ASSERT_TRUE(stage_sampler_.failure().has_value());
  EXPECT_EQ(stage_sampler_.failure()->first, "ValueError");
  EXPECT_NE(stage_sampler_.failure()->second.find("the sampler failed: no more indices today"), std::string::npos);
}

TEST_F(StageActorTest, ALinkTakesTasksToItsWorkerAtOnceAndResultsOnToTheReorderStage) {
  auto sampler = keep(sys_.spawn(recording_sampler, &rec_));
  auto reorder = keep(sys_.spawn(recording_reorder, &rec_));
  task_sink link = make_link_actor(sys_, 1, &stage_, &stage_, sampler, reorder);
  caf::anon_send(link, task_msg{7, {1, 2}, 0});
  EXPECT_EQ(stage_.taken, (std::vector<std::string>{"worker 1 task 7"}))
      << "a proxy: the task went to the transport on the sender's thread, no activation";
  link_proxy(link)->deliver(result(7, -1), nullptr);
  sched_.run();
  ASSERT_EQ(rec_.results.size(), 1u);
  EXPECT_EQ(rec_.results[0].worker, 1) << "the link names its worker slot";
  EXPECT_EQ(rec_.results[0].batch.slab, 5u);
  EXPECT_TRUE(rec_.events.empty()) << "the sampler hears of task 7 when it is taken";
  stage_.outcome = WorkerStage::Outcome::Dry;
  link_proxy(link)->deliver(result(9, -1), nullptr);
  sched_.run();
  EXPECT_EQ(rec_.events, (std::vector<std::string>{"skip 9", "dry 1 9"}));
  stage_.outcome = WorkerStage::Outcome::None;  // a Need answered with a larger slab
  link_proxy(link)->deliver(result(11, -1), nullptr);
  sched_.run();
  EXPECT_EQ(rec_.results.size(), 1u);
  EXPECT_EQ(rec_.events.size(), 2u);
  EXPECT_TRUE(stage_.failures.empty());
  caf::anon_send(caf::actor_cast<caf::actor>(link), std::string("not a task"));
  ASSERT_EQ(stage_.failures.size(), 1u);
  EXPECT_NE(stage_.failures[0].find("the link actor of DataLoader worker 1 was sent a message it does not take"),
            std::string::npos)
      << stage_.failures[0];
  link_proxy(link)->kill_proxy(nullptr, caf::exit_reason::user_shutdown);
}

TEST_F(StageActorTest, ALinkTakesItsWorkersEventsDropsAnOlderIncarnationsAndRetiresADeadWorker) {
  auto sampler = keep(sys_.spawn(recording_sampler, &rec_));
  auto reorder = keep(sys_.spawn(recording_reorder, &rec_));
  link_actor link = caf::actor_cast<link_actor>(make_link_actor(sys_, 0, &stage_, &stage_, sampler, reorder));
  stage_.generation = 2;
  caf::anon_send(link, hello_atom::value, uint32_t{2});
  caf::anon_send(link, ready_atom::value, uint32_t{2});
  caf::anon_send(link, stream_atom::value, uint32_t{2}, uint64_t{8}, std::string("rng"), true, std::string("at 40"));
  EXPECT_EQ(stage_.taken, (std::vector<std::string>{"worker 0 hello 2", "worker 0 ready 2", "worker 0 stream 2 task 8 at 40"}))
      << "the worker stage hears of them on the sender's thread";
  caf::anon_send(link, uint32_t{1}, result(4, -1));
  caf::anon_send(link, uint32_t{2}, result(5, -1));
  sched_.run();
  ASSERT_EQ(rec_.results.size(), 1u) << "the result of incarnation 1 is dropped";
  EXPECT_EQ(rec_.results[0].task_idx, 5u);
  stage_.restartable = true;
  caf::anon_send(link, down_atom::value, uint32_t{2}, WorkerExit{WorkerExit::Kind::Signal, 9, "", -1});
  sched_.run();
  EXPECT_TRUE(rec_.events.empty()) << "a worker that is restarted is not retired";
  caf::anon_send(link, fatal_atom::value, uint32_t{1}, std::string("ValueError"), std::string("old"));
  sched_.run();
  EXPECT_TRUE(rec_.events.empty()) << "an older incarnation's failure retires nothing";
  caf::anon_send(link, fatal_atom::value, uint32_t{2}, std::string("ValueError"), std::string("bad dataset"));
  sched_.run();
  EXPECT_EQ(rec_.events, (std::vector<std::string>{"retire 0"}));
  stage_.restartable = false;
  stage_.generation = 3;
  caf::anon_send(link, down_atom::value, uint32_t{3}, WorkerExit{WorkerExit::Kind::Signal, 9, "", -1});
  sched_.run();
  EXPECT_EQ(rec_.events, (std::vector<std::string>{"retire 0", "retire 0"})) << "dead after its end";
  EXPECT_TRUE(stage_.failures.empty());
  link_proxy(caf::actor_cast<task_sink>(link))->kill_proxy(nullptr, caf::exit_reason::user_shutdown);
}

TEST_F(StageActorTest, ThePinActorHandsOverWhatItReceivesInOrder) {
  Handoff handoff;
  auto pin = keep(spawn_pin_actor(sys_, &handoff, nullptr, sampler_actor{}, &stage_));
  result_msg error = result(4, 0);
  error.batch.kind = WorkerReply::Kind::Error;
  error.batch.error_type = "ValueError";
  caf::anon_send(pin, result(3, 1, "three"));
  caf::anon_send(pin, error);
  EXPECT_TRUE(handoff.empty()) << "nothing runs before the scheduler does";
  sched_.run();
  ASSERT_EQ(handoff.size(), 2u);
  EXPECT_EQ(handoff.front_task(), 3u);
  auto first = handoff.take();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->result.batch.payload, "three");
  EXPECT_FALSE(first->pinned) << "no slab store: nothing is page-locked";
  auto second = handoff.take();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->result.batch.error_type, "ValueError");
  EXPECT_EQ(handoff.taken(), 2u);
}

TEST_F(StageActorTest, ThePinActorAnswersATakeWithTheOldestResultAndSendsItsCreditToTheSampler) {
  Handoff handoff;
  auto sampler = keep(sys_.spawn(recording_sampler, &rec_));
  auto pin = keep(spawn_pin_actor(sys_, &handoff, nullptr, sampler, &stage_));
  caf::anon_send(pin, begin_atom::value, uint64_t{3});
  caf::anon_send(pin, result(3, 1, "three"));
  caf::anon_send(pin, result(4, 0, "four"));
  std::optional<HandedOver> taken;
  caf::anon_send(pin, take_atom::value, PinTake{&taken});
  sched_.run();
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->result.batch.payload, "three");
  EXPECT_EQ(rec_.events, (std::vector<std::string>{"credit 1 3"}));
  EXPECT_EQ(handoff.lowest_not_taken(), 4u);
  // The epoch ends: what was not taken goes; a take then gets nothing, and no credit.
  caf::anon_send(pin, drop_atom::value);
  caf::anon_send(pin, take_atom::value, PinTake{&taken});
  sched_.run();
  EXPECT_FALSE(taken);
  EXPECT_TRUE(handoff.empty());
  EXPECT_EQ(handoff.taken(), 1u) << "what was taken stays counted until the next begin";
  EXPECT_EQ(rec_.events.size(), 1u);
  caf::anon_send(pin, begin_atom::value, uint64_t{10});
  sched_.run();
  EXPECT_EQ(handoff.taken(), 0u);
  EXPECT_EQ(handoff.lowest_not_taken(), 10u);
}

TEST_F(StageActorTest, TheReorderActorBeginsAnEpochAndDropsWhatItHolds) {
  ReorderBuffer<result_msg> buffer(0, true);
  auto pin = keep(sys_.spawn(recording_pin, &rec_));
  auto reorder = keep(spawn_reorder_actor(sys_, &buffer, pin, nullptr, &stage_));
  caf::anon_send(reorder, begin_atom::value, uint64_t{5}, true);
  caf::anon_send(reorder, result(6, 0));
  sched_.run();
  EXPECT_EQ(buffer.buffered(), 1u) << "task 6 waits for 5";
  caf::anon_send(reorder, drop_atom::value);
  sched_.run();
  EXPECT_EQ(buffer.buffered(), 0u);
  EXPECT_EQ(buffer.next_expected(), 5u) << "a drop keeps the order where it was";
  EXPECT_TRUE(rec_.results.empty());
}

// ---------------------------------------------------------------- the whole graph on its strand

/// StageActors: the sampler, two links, the reorder and the pin actor of one pool, run
/// by the strand (no scheduler step: everything runs in run(), on this thread).
class StageActorsTest : public ::testing::Test {
 protected:
  StageActorsTest() : sys_(deterministic_config()), stages_(sys_, 2, stage_, stage_, nullptr) {}
  ~StageActorsTest() override {
    const auto lock = stages_.enter();
    stages_.stop();
  }
  /// An epoch of `n` batches of 1, prefetch 1 per worker, begun as the pool begins one.
  void begin(int64_t n) {
    const auto lock = stages_.enter();
    std::vector<int64_t> idx = iota(n);
    stages_.send(stages_.sampler(), begin_atom::value,
                 std::make_shared<SamplerBegin>(SamplerBegin{
                     TaskSource(std::make_shared<BatchSampler>(idx, 1, false), nullptr), false,
                     TaskDispatcher(2, 1, 0, true, 0)}));
    stages_.send(stages_.reorder(), begin_atom::value, uint64_t{0}, true);
    stages_.send(stages_.pin(), begin_atom::value, uint64_t{0});
    stages_.send(stages_.sampler(), dispatch_atom::value, int32_t{100});
    stages_.run();
  }
  caf::actor_system sys_;
  FakeWorkerStage stage_;
  StageActors stages_;
};

TEST_F(StageActorsTest, TasksReachTheLinksOnTheStrandAndResultsReachTheHandoffInTaskOrder) {
  begin(6);
  EXPECT_EQ(stage_.taken, (std::vector<std::string>{"worker 0 task 0", "worker 1 task 1"}));
  {
    const auto lock = stages_.enter();
    stages_.deliver(1, result(1, 1));  // a result of worker 1, from its transport
    stages_.run();
    EXPECT_TRUE(stages_.handoff().empty()) << "task 0 comes first";
    stages_.deliver(0, result(0, 0));
    stages_.run();
    ASSERT_EQ(stages_.handoff().size(), 2u);
    EXPECT_EQ(stages_.handoff().front_task(), 0u);
    // The application takes task 0 (the pin stage's answer): its credit goes back from
    // the pin stage, worker 0's next task goes out in the same run.
    auto taken = stages_.take();
    ASSERT_TRUE(taken);
  }
  EXPECT_EQ(stage_.taken.back(), "worker 0 task 2");
  EXPECT_EQ(stages_.sampling().dispatcher().in_flight(), 2u) << "tasks 1 (ready) and 2";
  EXPECT_TRUE(stage_.failures.empty());
}

TEST_F(StageActorsTest, AWorkerThatDiesIsRetiredFromTheSamplerOnTheStrand) {
  begin(6);
  stage_.taken.clear();
  {
    const auto lock = stages_.enter();
    stages_.send(stages_.link(0), down_atom::value, uint32_t{1}, WorkerExit{});
    stages_.run();
  }
  EXPECT_EQ(stage_.taken, (std::vector<std::string>{"worker 0 down 1"}));
  EXPECT_FALSE(stages_.sampling().dispatcher().is_active(0));
  EXPECT_TRUE(stages_.sampling().dispatcher().is_active(1));
}

TEST_F(StageActorsTest, AHaltedSamplerSendsNoTaskForACreditAndADropEmptiesTheReorderAndPinStages) {
  begin(6);
  stage_.taken.clear();
  const auto lock = stages_.enter();
  stages_.deliver(1, result(1, 1));  // held by the reorder stage (task 0 first)
  stages_.deliver(0, result(0, 0));
  stages_.run();
  ASSERT_EQ(stages_.handoff().size(), 2u);
  stages_.send_urgent(stages_.sampler(), halt_atom::value);
  stages_.run();
  auto taken = stages_.take();  // its credit reaches a halted sampler: nothing goes out
  ASSERT_TRUE(taken);
  EXPECT_TRUE(stage_.taken.empty());
  stages_.deliver(1, result(3, 1));  // task 2 is missing: task 3 waits in the reorder stage
  stages_.run();
  EXPECT_EQ(stages_.reordering().buffered(), 1u);
  stages_.send(stages_.reorder(), drop_atom::value);
  stages_.send(stages_.pin(), drop_atom::value);
  stages_.run();
  EXPECT_EQ(stages_.reordering().buffered(), 0u);
  EXPECT_TRUE(stages_.handoff().empty());
  EXPECT_FALSE(stages_.take());
}

TEST_F(StageActorsTest, AfterStopNoLinkIsReachableAndADeliveryGoesNowhere) {
  begin(2);
  const auto lock = stages_.enter();
  stages_.stop();
  EXPECT_FALSE(stages_.link(0));
  stages_.deliver(0, result(0, 0));  // dropped, no crash
  stages_.run();
  EXPECT_TRUE(stages_.handoff().empty());
}

}  // namespace
}  // namespace loader::runtime
