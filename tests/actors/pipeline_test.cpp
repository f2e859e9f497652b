// The Pipeline driven one event at a time: scripted links instead of worker processes
// and reader threads, the test playing every worker (it reads the task rings and
// socket frames the way the worker loop does and writes the result rings), and the
// pool and worker actors on CAF's deterministic scheduler.  No thread but the test's, no
// sleep, no timing: the dispatch order, the credits, the reorder rule, the order of
// socket and ring frames, and the restart protocol are checked exactly.
#include <gtest/gtest.h>


#include <unistd.h>

#include <chrono>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "deterministic_system.h"
#include "loader/runtime/frames.h"
#include "loader/runtime/parent/pipeline.h"
#include "loader/runtime/rng_state_page.h"
#include "loader/runtime/parent/pool_actor.h"
#include "loader/samplers.h"

namespace loader::runtime {
namespace {

/// What one incarnation of a worker was sent, and the test's view of its rings.
struct Incarnation {
  int worker = 0;
  uint32_t gen = 0;
  std::vector<Frame> socket;  ///< every frame written to its link, in order (fds not kept)
  size_t socket_read = 0;     ///< frames the test's worker has read
  std::set<uint64_t> mapped;  ///< slabs announced (AddSlab) to the test's worker so far
  ShmMapping rings_mapping;
  ShmMapping state_mapping;   ///< its RNG state page (the worker records each task it starts)
  std::unique_ptr<WorkerRingEnd> ring;
  bool stopped = false;
};

class ScriptedLink final : public Link {
 public:
  explicit ScriptedLink(std::shared_ptr<Incarnation> inc) : inc_(std::move(inc)) {}
  bool send(FrameType type, const std::string& body, int fd) override {
    if (inc_->stopped) return false;
    if (type == FrameType::Rings) {  // map the rings as the worker loop does
      const RingsFrame r = RingsFrame::decode(body);
      RingLayout layout;
      layout.capacity = r.capacity;
      layout.workers = static_cast<int>(r.workers);
      inc_->rings_mapping = ShmMapping(UniqueFd(dup(fd)), layout.bytes());
      inc_->ring = std::make_unique<WorkerRingEnd>(inc_->rings_mapping.data(), layout, static_cast<int>(r.index),
                                                   static_cast<uint32_t>(r.generation));
    }
    if (type == FrameType::StatePage)
      inc_->state_mapping = ShmMapping(UniqueFd(dup(fd)), StatePageFrame::decode(body).size);
    inc_->socket.push_back(Frame{type, body, UniqueFd()});
    return true;
  }
  void stop() override { inc_->stopped = true; }
  void kill_with_reason(const WorkerExit&) override {}
  char process_state() const override { return 'S'; }
  std::optional<WorkerExit> exited_with_socket_open() const override { return std::nullopt; }
  int pid() const override { return 1000 + inc_->worker; }
  uint32_t generation() const override { return inc_->gen; }

 private:
  std::shared_ptr<Incarnation> inc_;
};

/// A task as the test's worker received it.
struct Got {
  uint64_t task = 0;
  uint64_t slab = 0;
  IndexBatch indices;
  bool from_ring = false;
};

Got parse_task(const Frame& f, bool from_ring) {
  TaskFrame t = TaskFrame::decode(f.body);
  return Got{t.task, t.slab, std::move(t.indices), from_ring};
}

class PipelineScripted : public ::testing::Test {
 protected:
  PipelineScripted()
      : sys_(deterministic_config()), sched_(dynamic_cast<caf::scheduler::test_coordinator&>(sys_.scheduler())) {}
  ~PipelineScripted() override {
    if (pipeline_) {
      actors_->send_exits();
      sched_.run();
      pipeline_->shutdown();
    }
  }

  /// One configuration per worker, seeded `seed + id`.
  static std::vector<WorkerConfig> configs(int workers, uint64_t seed) {
    std::vector<WorkerConfig> out;
    for (int w = 0; w < workers; ++w) {
      WorkerConfig c;
      c.worker_id = w;
      c.num_workers = workers;
      c.seed = seed + static_cast<uint64_t>(w);
      c.dataset = DatasetHandle{"scripted", Value()};
      out.push_back(c);
    }
    return out;
  }

  void make(int workers, int prefetch, int max_restarts = 0) {
    PipelineConfig cfg;
    cfg.system = &sys_;
    cfg.workers = configs(workers, 100);
    cfg.prefetch_factor = prefetch;
    cfg.max_restarts = max_restarts;
    cfg.batch_bytes = 4096;  // slabs sized before the first task: every task has one
    cfg.make_link = [this](const Link::Spec& spec, LinkFrames*) {
      auto inc = std::make_shared<Incarnation>();
      inc->worker = spec.worker_id;
      inc->gen = spec.generation;
      incarnations_[spec.worker_id].push_back(inc);
      return std::make_unique<ScriptedLink>(inc);
    };
    SlabPolicy policy;
    policy.num_workers = workers;
    policy.slabs_per_worker = prefetch + 2;
    auto slabs = std::make_shared<SlabStore>(workers, policy, false, nullptr);
    pipeline_ = std::make_shared<Pipeline>(std::move(cfg), std::move(slabs));
    // The pool's actors as the runtime makes them (no watchdog clock: no processes).
    actors_ = std::make_unique<PoolActors>(sys_, pipeline_, workers, std::chrono::milliseconds(0));
    pipeline_->set_hooks(actors_->hooks());
    sched_.run();
    pipeline_->start_workers();
    for (int w = 0; w < workers; ++w) say_ready(w);
  }

  Incarnation& current(int w) { return *incarnations_.at(w).back(); }

  /// The worker's hello and Ready, as its transport reports them.
  void say_ready(int w) {
    Incarnation& inc = current(w);
    pipeline_->on_hello(w, inc.gen);
    pipeline_->on_ready(w, inc.gen);
  }

  /// Every task worker `w` can take now, in the order its worker loop would run them:
  /// the published socket-frame count first, then the ring; a task from the ring only
  /// after the socket frames queued before it.  `before` gets the socket frame types
  /// read on the way (AddSlab, SetRng, ...).
  std::vector<Got> take_tasks(int w, std::vector<FrameType>* before = nullptr) {
    Incarnation& inc = current(w);
    std::vector<Got> out;
    auto run = [&](Got g) {  // a worker can only write into a slab it has mapped
      EXPECT_TRUE(inc.mapped.count(g.slab)) << "task " << g.task << " came before the AddSlab of its slab " << g.slab;
      out.push_back(std::move(g));
    };
    auto read_socket = [&] {
      const Frame& f = inc.socket.at(inc.socket_read++);
      if (f.type == FrameType::AddSlab) inc.mapped.insert(AddSlabFrame::decode(f.body).id);
      if (f.type == FrameType::Task) run(parse_task(f, false));
      else if (before) before->push_back(f.type);
    };
    while (inc.ring) {
      const uint64_t written = inc.ring->socket_frames();
      Frame f;
      uint64_t socket_before = 0;
      if (inc.ring->take_task(f, socket_before)) {
        EXPECT_LE(socket_before, inc.socket.size()) << "a task after a frame that was never written";
        while (inc.socket_read < socket_before) read_socket();
        run(parse_task(f, true));
      } else if (inc.socket_read < written) {
        read_socket();
      } else {
        break;
      }
    }
    return out;
  }

  /// Worker `w` answers `task` with a batch in `slab`, through its result ring.
  void answer(int w, const Got& g, const std::string& tag = "") {
    WorkerReply r;
    r.kind = WorkerReply::Kind::Result;
    r.task = g.task;
    r.slab = g.slab;
    r.bytes = 8;
    r.payload = "batch " + std::to_string(g.task) + tag;
    auto [type, body] = encode_reply(r);
    ASSERT_TRUE(current(w).ring->write_result(static_cast<FrameType>(type), body, [] { return false; }));
  }

  /// next() without waiting: Timeout when no result is ready.
  Delivery next_now(uint64_t epoch) { return pipeline_->next(epoch, std::chrono::steady_clock::now()); }

  caf::actor_system sys_;
  caf::scheduler::test_coordinator& sched_;
  std::shared_ptr<Pipeline> pipeline_;
  std::unique_ptr<PoolActors> actors_;
  std::map<int, std::vector<std::shared_ptr<Incarnation>>> incarnations_;
};

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i);
  return v;
}

TaskSource batches_of(int64_t n, int64_t batch) {
  return TaskSource(std::make_shared<BatchSampler>(iota(n), batch, false), nullptr);
}

TEST_F(PipelineScripted, TasksGoRoundRobinAgainstCreditsAndLeaveInTaskOrder) {
  make(2, 2);
  // First frames of every incarnation, in this order.
  for (int w = 0; w < 2; ++w) {
    ASSERT_GE(current(w).socket.size(), 3u);
    EXPECT_EQ(current(w).socket[0].type, FrameType::StatePage);
    EXPECT_EQ(current(w).socket[1].type, FrameType::Rings);
    EXPECT_EQ(current(w).socket[2].type, FrameType::Init);
  }
  const uint64_t epoch = pipeline_->begin_epoch(batches_of(30, 3), false);
  // prefetch_factor * num_workers = 4 tasks, round robin, each after its slab's AddSlab.
  std::vector<FrameType> before0;
  auto w0 = take_tasks(0, &before0);
  auto w1 = take_tasks(1);
  ASSERT_EQ(w0.size(), 2u);
  ASSERT_EQ(w1.size(), 2u);
  EXPECT_EQ(w0[0].task, 0u);
  EXPECT_EQ(w1[0].task, 1u);
  EXPECT_EQ(w0[1].task, 2u);
  EXPECT_EQ(w1[1].task, 3u);
  EXPECT_EQ(w0[0].indices, (IndexBatch{0, 1, 2}));
  EXPECT_EQ(w1[1].indices, (IndexBatch{9, 10, 11}));
  EXPECT_TRUE(w0[0].from_ring);
  EXPECT_NE(w0[0].slab, 0u);
  EXPECT_NE(w0[0].slab, w0[1].slab);
  EXPECT_EQ(before0, (std::vector<FrameType>{FrameType::StatePage, FrameType::Rings, FrameType::Init,
                                             FrameType::AddSlab, FrameType::AddSlab}));
  // Worker 1 is faster: its results wait for task 0 (in_order).
  answer(1, w1[0]);
  answer(1, w1[1]);
  EXPECT_EQ(next_now(epoch).kind, Delivery::Kind::Timeout);
  EXPECT_TRUE(take_tasks(0).empty()) << "no credit came back, so no task went out";
  EXPECT_TRUE(take_tasks(1).empty());
  std::map<int, std::vector<Got>> held{{0, {w0[1]}}, {1, {}}};
  answer(0, w0[0]);
  // From here on: each delivery returns one credit and sends exactly one task, to the
  // next worker in the cycle; the batches leave in task order.
  int expect_worker = 0;
  for (uint64_t t = 0; t < 10; ++t) {
    Delivery d = next_now(epoch);
    ASSERT_EQ(d.kind, Delivery::Kind::Batch) << t;
    EXPECT_EQ(d.task, t);
    EXPECT_EQ(d.payload, "batch " + std::to_string(t));
    pipeline_->release_slab(d.worker, d.slab);
    std::vector<Got> sent[2] = {take_tasks(0), take_tasks(1)};
    if (t + 4 < 10) {
      ASSERT_EQ(sent[expect_worker].size(), 1u) << "after delivery " << t;
      EXPECT_TRUE(sent[1 - expect_worker].empty()) << "after delivery " << t;
      EXPECT_EQ(sent[expect_worker][0].task, t + 4);
      held[expect_worker].push_back(sent[expect_worker][0]);
      expect_worker = 1 - expect_worker;
    } else {
      EXPECT_TRUE(sent[0].empty() && sent[1].empty()) << "the sampler is exhausted";
    }
    // The workers answer whatever they hold, oldest first.
    for (int w = 0; w < 2; ++w) {
      for (const Got& g : held[w]) answer(w, g);
      held[w].clear();
    }
  }
  EXPECT_EQ(next_now(epoch).kind, Delivery::Kind::End);
}

TEST_F(PipelineScripted, ATaskTooLargeForTheRingTakesTheSocketInItsPlace) {
  make(1, 2);
  // Task 0 has 10,000 indices (80 KB: more than half a ring of 128 KiB), task 1 has 2,000.
  const uint64_t epoch = pipeline_->begin_epoch(batches_of(12000, 10000), false);
  auto got = take_tasks(0);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].task, 0u);
  EXPECT_FALSE(got[0].from_ring);
  EXPECT_EQ(got[0].indices.size(), 10000u);
  EXPECT_EQ(got[1].task, 1u);
  EXPECT_TRUE(got[1].from_ring) << "the next task still takes the ring, after the socket's";
  EXPECT_EQ(got[1].indices.front(), 10000);
  EXPECT_EQ(got[1].indices.size(), 2000u);
  answer(0, got[0]);
  answer(0, got[1]);
  EXPECT_EQ(next_now(epoch).task, 0u);
  EXPECT_EQ(next_now(epoch).task, 1u);
  EXPECT_EQ(next_now(epoch).kind, Delivery::Kind::End);
}

TEST_F(PipelineScripted, ARestartIsTheSupervisorsAndResendsHeldTasksAfterTheFirstFrames) {
  make(2, 2, /*max_restarts=*/1);
  const uint64_t epoch = pipeline_->begin_epoch(batches_of(12, 2), false);
  auto w0 = take_tasks(0);
  auto w1 = take_tasks(1);
  ASSERT_EQ(w1.size(), 2u);
  answer(0, w0[0]);
  answer(1, w1[0]);  // task 1 is answered before worker 1 dies: it is not re-sent
  Incarnation& first = current(1);
  pipeline_->on_down(1, first.gen, WorkerExit{WorkerExit::Kind::Signal, 9, ""});
  EXPECT_EQ(incarnations_[1].size(), 1u) << "nothing restarts before worker 1's actor handles its message";
  // A result the dead incarnation writes late goes nowhere: its ring is the next one's.
  ASSERT_TRUE(sched_.try_run_once());  // worker 1's actor: down(gen) -> Pipeline::restart
  ASSERT_EQ(incarnations_[1].size(), 2u);
  Incarnation& second = current(1);
  EXPECT_EQ(second.gen, first.gen + 1);
  EXPECT_FALSE(first.ring->write_result(FrameType::Result, "late", [] { return false; }));
  std::vector<FrameType> before;
  auto again = take_tasks(1, &before);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].task, 3u) << "only the unanswered task";
  EXPECT_EQ(again[0].indices, w1[1].indices);
  ASSERT_GE(before.size(), 3u);
  EXPECT_EQ(before[0], FrameType::StatePage);
  EXPECT_EQ(before[1], FrameType::Rings);
  EXPECT_EQ(before[2], FrameType::Init);
  say_ready(1);
  // Deliveries in order, task 3 from the new incarnation.
  EXPECT_EQ(next_now(epoch).task, 0u);
  EXPECT_EQ(next_now(epoch).task, 1u);
  answer(0, w0[1]);
  EXPECT_EQ(next_now(epoch).task, 2u);
  answer(1, again[0], " again");
  Delivery d3 = next_now(epoch);
  EXPECT_EQ(d3.task, 3u);
  EXPECT_EQ(d3.payload, "batch 3 again");
  EXPECT_EQ(pipeline_->worker_state(1), WorkerLifecycle::State::Running);
}

TEST_F(PipelineScripted, TheSamplerActorsTaskToAWorkerThatDiesMidTaskIsReissuedExactlyOnce) {
  make(2, /*prefetch=*/1, /*max_restarts=*/2);
  const uint64_t epoch = pipeline_->begin_epoch(batches_of(8, 2), false);  // tasks 0-3
  auto w0 = take_tasks(0);
  auto w1 = take_tasks(1);
  ASSERT_EQ(w0.size(), 1u);
  ASSERT_EQ(w1.size(), 1u);
  EXPECT_EQ(w1[0].task, 1u);
  const uint32_t dead_gen = current(1).gen;
  pipeline_->on_down(1, dead_gen, WorkerExit{WorkerExit::Kind::Signal, 9, ""});  // mid-task 1
  ASSERT_TRUE(sched_.try_run_once());  // its slot actor restarts it
  auto again = take_tasks(1);
  ASSERT_EQ(again.size(), 1u) << "the held task, once";
  EXPECT_EQ(again[0].task, 1u);
  EXPECT_EQ(again[0].indices, w1[0].indices);
  EXPECT_TRUE(take_tasks(0).empty()) << "no other worker gets it";
  say_ready(1);
  // A late answer of the dead incarnation (its reader still had a frame) changes nothing.
  WorkerReply late;
  late.kind = WorkerReply::Kind::Result;
  late.task = 1;
  late.payload = "late";
  pipeline_->on_result(1, dead_gen, std::move(late));
  answer(0, w0[0]);
  answer(1, again[0], " again");
  std::vector<std::string> delivered;
  for (int step = 0; step < 8 && delivered.size() < 4; ++step) {
    Delivery d = next_now(epoch);
    if (d.kind == Delivery::Kind::Batch) {
      delivered.push_back(d.payload);
      continue;
    }
    ASSERT_EQ(d.kind, Delivery::Kind::Timeout);
    for (int w = 0; w < 2; ++w)
      for (const Got& g : take_tasks(w)) answer(w, g);
  }
  EXPECT_EQ(delivered, (std::vector<std::string>{"batch 0", "batch 1 again", "batch 2", "batch 3"}));
  EXPECT_EQ(next_now(epoch).kind, Delivery::Kind::End);
  for (int w = 0; w < 2; ++w) EXPECT_TRUE(take_tasks(w).empty()) << "nothing sent twice";
}

TEST_F(PipelineScripted, AWorkerThatDiesWithNoRestartLeftFailsTheEpochWithPyTorchsWords) {
  make(2, 2);
  const uint64_t epoch = pipeline_->begin_epoch(batches_of(12, 2), false);
  take_tasks(0);
  take_tasks(1);
  pipeline_->on_down(1, current(1).gen, WorkerExit{WorkerExit::Kind::Signal, 9, ""});
  EXPECT_FALSE(sched_.try_run_once()) << "no restart was asked for";
  Delivery d = next_now(epoch);
  ASSERT_EQ(d.kind, Delivery::Kind::Fatal);
  EXPECT_EQ(d.error_message.rfind("DataLoader worker (pid 1001) is killed by signal: Killed.", 0), 0u)
      << d.error_message;
  // The next epoch gets the same error at once: a dead worker stays dead.
  const uint64_t next = pipeline_->begin_epoch(batches_of(12, 2), false);
  EXPECT_EQ(next_now(next).kind, Delivery::Kind::Fatal);
}

TEST_F(PipelineScripted, AKeptWorkerThatDiesBeforeItsFirstTaskOfAnEpochIsReplacedForFree) {
  // A non-persistent loader keeps its idle pool and re-initialises it for the next epoch
  // (fresh-worker semantics). A worker that dies before it starts a task of that epoch
  // died between epochs: PyTorch would have started a fresh process anyway.
  make(2, 2);  // no restarts allowed
  const std::vector<WorkerConfig> fresh = configs(2, 200);
  ASSERT_TRUE(pipeline_->reinit(fresh));
  const uint32_t old_gen = current(0).gen;
  pipeline_->on_down(0, old_gen, WorkerExit{WorkerExit::Kind::Signal, 9, ""});
  ASSERT_TRUE(sched_.try_run_once()) << "its worker actor restarts it";
  ASSERT_EQ(incarnations_[0].size(), 2u);
  EXPECT_EQ(current(0).gen, old_gen + 1);
  say_ready(0);
  const uint64_t epoch = pipeline_->begin_epoch(batches_of(8, 2), false);
  auto w0 = take_tasks(0);
  auto w1 = take_tasks(1);
  ASSERT_EQ(w0.size(), 2u);
  for (const Got& g : w0) answer(0, g);
  for (const Got& g : w1) answer(1, g);
  for (uint64_t t = 0; t < 4; ++t) EXPECT_EQ(next_now(epoch).task, t);
  // Worker 1 has started a task of this epoch (its state page says so): its death is a
  // death in the epoch, fatal without restarts, whatever pool it came from.
  ASSERT_TRUE(pipeline_->reinit(fresh));
  RngStatePage(current(1).state_mapping.data(), current(1).state_mapping.size()).write(1000, RngStatePage::Before, Generator(1));
  pipeline_->on_down(1, current(1).gen, WorkerExit{WorkerExit::Kind::Signal, 9, ""});
  EXPECT_FALSE(sched_.try_run_once()) << "no restart";
  EXPECT_EQ(pipeline_->worker_state(1), WorkerLifecycle::State::Dead);
}

TEST_F(PipelineScripted, AKeptPoolWhoseWorkerDiedIdleRefusesTheNextEpochAndSendsNothing) {
  // A worker of a non-persistent loader's idle pool dies after the epoch in which it ran
  // tasks: its death is judged when reported, before the pool is re-initialised (no
  // restarts: dead).  The pool then refuses the re-initialisation in the same step that
  // would send the new configurations, so the loader makes a new pool (it once checked
  // health first and re-initialised after, and a death reported in between failed the
  // next epoch).
  make(2, 2);
  say_ready(0);
  say_ready(1);
  const uint64_t epoch = pipeline_->begin_epoch(batches_of(8, 2), false);
  for (int w = 0; w < 2; ++w)
    for (const Got& g : take_tasks(w)) answer(w, g);
  for (uint64_t t = 0; t < 4; ++t) EXPECT_EQ(next_now(epoch).kind, Delivery::Kind::Batch);
  pipeline_->end_epoch(epoch);
  RngStatePage(current(0).state_mapping.data(), current(0).state_mapping.size()).write(3, RngStatePage::Before, Generator(1));
  pipeline_->on_down(0, current(0).gen, WorkerExit{WorkerExit::Kind::Signal, 9, ""});
  EXPECT_FALSE(sched_.try_run_once()) << "no restart";
  EXPECT_EQ(pipeline_->worker_state(0), WorkerLifecycle::State::Dead);
  const size_t frames_before = current(1).socket.size();
  EXPECT_FALSE(pipeline_->healthy());
  EXPECT_FALSE(pipeline_->reinit(configs(2, 300)));
  EXPECT_EQ(current(1).socket.size(), frames_before) << "no configuration went to the live worker";
}

}  // namespace
}  // namespace loader::runtime
