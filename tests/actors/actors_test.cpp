// The runtime's actors one at a time, driven by scoped actors with fixed deadlines:
// the reorder actor, the sampler actor (with scoped actors as fake workers) and an
// in-process worker actor.  No sleeps: every check waits for a message, and "no
// more messages" is checked only after a reply that the actor under test sends
// after everything it could have sent before (local sends are enqueued at once).
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loader/datasets.h"
#include "loader/error.h"
#include "loader/fetch.h"
#include "loader/generator.h"
#include "loader/runtime/actors.h"
#include "loader/runtime/batch_codec.h"
#include "loader/runtime/protocol.h"
#include "loader/runtime/shm.h"
#include "loader/samplers.h"
#include "loader/worker_info.h"
#include "sanitizers.h"

namespace loader::runtime {
namespace {

constexpr auto kDeadline = std::chrono::seconds(5 * testing::kSlowdown);

/// Sample i: [i, worker id, num_workers, worker seed, initial seed]; ValueError at fail_at.
class ActorProbe : public Dataset {
 public:
  ActorProbe(int64_t n, int64_t fail_at) : n_(n), fail_at_(fail_at) {}
  Value get(int64_t i) override {
    if (i == fail_at_) throw ValueError("actor probe failure at " + std::to_string(i));
    const WorkerInfo* w = get_worker_info();
    return Value::list({Value(i), Value(int64_t{w ? w->id : -1}), Value(int64_t{w ? w->num_workers : 0}),
                        Value(static_cast<int64_t>(w ? w->seed : 0)),
                        Value(static_cast<int64_t>(default_generator().initial_seed()))});
  }
  int64_t size() const override { return n_; }

 private:
  int64_t n_, fail_at_;
};
LOADER_REGISTER_DATASET("actors_test_probe", [](const Value& p) {
  return std::make_shared<ActorProbe>(p.at("n").to_int(), p.get("fail_at", Value(-1)).to_int());
});

/// 0, 1, 2, ... but raises at `fail_at`.
class FailingSampler : public Sampler {
 public:
  explicit FailingSampler(int64_t fail_at) : fail_at_(fail_at) {}
  std::unique_ptr<Cursor<int64_t>> iter() override {
    return make_cursor<int64_t>([i = int64_t{0}, f = fail_at_]() mutable -> std::optional<int64_t> {
      if (i == f) throw ValueError("sampler broke at " + std::to_string(i));
      return i++;
    });
  }

 private:
  int64_t fail_at_;
};

batch_msg result(uint64_t task, uint8_t status = batch_msg::Ok) {
  batch_msg m;
  m.task = task;
  m.worker = 0;
  m.status = status;
  m.payload = "payload of task " + std::to_string(task);
  return m;
}

/// One message a fake worker received.
struct Received {
  enum Kind { Epoch, Task, Release, Nothing } kind = Nothing;
  uint64_t epoch = 0;
  uint64_t task = 0;
  std::vector<int64_t> indices;
  caf::actor sampler;
  caf::actor reorder;
};

/// The next message of a fake worker, or Nothing when none comes in time.
Received next_at_worker(caf::scoped_actor& w, caf::duration wait = caf::duration(kDeadline)) {
  Received r;
  w->receive(
      [&](epoch_atom, uint64_t epoch, caf::actor sampler, caf::actor reorder) {
        r.kind = Received::Epoch;
        r.epoch = epoch;
        r.sampler = std::move(sampler);
        r.reorder = std::move(reorder);
      },
      [&](task_atom, uint64_t epoch, uint64_t task, std::vector<int64_t> indices) {
        r.kind = Received::Task;
        r.epoch = epoch;
        r.task = task;
        r.indices = std::move(indices);
      },
      [&](release_atom, uint64_t) { r.kind = Received::Release; }, caf::after(wait) >> [] {});
  return r;
}

/// The next batch_msg a fake reorder actor received (nullopt after the deadline).
std::optional<batch_msg> next_result(caf::scoped_actor& r, caf::duration wait = caf::duration(kDeadline)) {
  std::optional<batch_msg> out;
  r->receive([&](result_atom, batch_msg& m) { out = std::move(m); }, caf::after(wait) >> [] {});
  return out;
}

class ActorTest : public ::testing::Test {
 protected:
  void TearDown() override {
    caf::scoped_actor self{*sys_};
    for (auto& a : spawned_) self->send_exit(a, caf::exit_reason::user_shutdown);
    for (auto& a : spawned_) self->wait_for(a);
  }
  template <class Handle>
  Handle track(Handle h) {
    spawned_.push_back(caf::actor_cast<caf::actor>(h));
    return h;
  }
  /// A reorder answer to next_atom, or a failure after the deadline.
  batch_msg ask_next(caf::scoped_actor& self, const caf::actor& reorder) {
    batch_msg out;
    out.status = 255;
    self->request(reorder, kDeadline, next_atom::value)
        .receive([&](batch_msg& m) { out = std::move(m); },
                 [&](caf::error& e) { ADD_FAILURE() << "next_atom: " << sys_->render(e); });
    return out;
  }

  std::shared_ptr<caf::actor_system> sys_ = acquire_system();
  std::vector<caf::actor> spawned_;
};

// ------------------------------------------------------------------ reorder actor
using ReorderActor = ActorTest;

TEST_F(ReorderActor, ResultsPushedOutOfOrderComeBackInOrder) {
  caf::scoped_actor self{*sys_};
  auto reorder = track(spawn_reorder(*sys_, true, 0));
  for (uint64_t t : {2, 0, 3, 1}) self->send(reorder, result_atom::value, result(t));
  for (uint64_t t = 0; t < 4; ++t) {
    batch_msg m = ask_next(self, reorder);
    EXPECT_EQ(m.status, batch_msg::Ok);
    EXPECT_EQ(m.task, t);
    EXPECT_EQ(m.payload, "payload of task " + std::to_string(t));
  }
}

TEST_F(ReorderActor, AWaitingRequestIsAnsweredOnlyByTheAwaitedTask) {
  caf::scoped_actor self{*sys_};
  auto reorder = track(spawn_reorder(*sys_, true, 5));
  auto pending = self->request(reorder, kDeadline, next_atom::value);
  self->send(reorder, result_atom::value, result(6));
  self->send(reorder, result_atom::value, result(5));
  pending.receive([&](batch_msg& m) { EXPECT_EQ(m.task, 5u) << "task 6 arrived first but 5 is awaited"; },
                  [&](caf::error& e) { ADD_FAILURE() << sys_->render(e); });
  EXPECT_EQ(ask_next(self, reorder).task, 6u);
}

TEST_F(ReorderActor, EndComesAfterTheTotalWasAnnouncedAndEveryTaskLeft) {
  caf::scoped_actor self{*sys_};
  auto reorder = track(spawn_reorder(*sys_, true, 0));
  self->send(reorder, end_atom::value, uint64_t{3});
  auto pending = self->request(reorder, kDeadline, next_atom::value);
  self->send(reorder, result_atom::value, result(2));
  self->send(reorder, result_atom::value, result(1));
  self->send(reorder, result_atom::value, result(0, batch_msg::Skipped));
  pending.receive([&](batch_msg& m) { EXPECT_EQ(m.task, 1u) << "task 0 was skipped"; },
                  [&](caf::error& e) { ADD_FAILURE() << sys_->render(e); });
  EXPECT_EQ(ask_next(self, reorder).task, 2u);
  EXPECT_EQ(ask_next(self, reorder).status, batch_msg::End);
  EXPECT_EQ(ask_next(self, reorder).status, batch_msg::End) << "End stays End";
}

TEST_F(ReorderActor, EndAnnouncedLastStillEndsTheEpoch) {
  caf::scoped_actor self{*sys_};
  auto reorder = track(spawn_reorder(*sys_, true, 0));
  self->send(reorder, result_atom::value, result(0));
  EXPECT_EQ(ask_next(self, reorder).task, 0u);
  auto pending = self->request(reorder, kDeadline, next_atom::value);
  self->send(reorder, end_atom::value, uint64_t{1});
  pending.receive([&](batch_msg& m) { EXPECT_EQ(m.status, batch_msg::End); },
                  [&](caf::error& e) { ADD_FAILURE() << sys_->render(e); });
}

TEST_F(ReorderActor, ErrorResultsTakeTheirPlaceInTheOrder) {
  caf::scoped_actor self{*sys_};
  auto reorder = track(spawn_reorder(*sys_, true, 0));
  batch_msg err = result(0, batch_msg::Error);
  err.error_type = "ValueError";
  err.error_message = "Caught ValueError in DataLoader worker process 0.";
  self->send(reorder, result_atom::value, result(1));
  self->send(reorder, result_atom::value, err);
  batch_msg first = ask_next(self, reorder);
  EXPECT_EQ(first.status, batch_msg::Error);
  EXPECT_EQ(first.task, 0u);
  EXPECT_EQ(first.error_message, err.error_message);
  EXPECT_EQ(ask_next(self, reorder).task, 1u);
}

TEST_F(ReorderActor, FatalIsDeliveredBeforeAnythingElse) {
  caf::scoped_actor self{*sys_};
  auto reorder = track(spawn_reorder(*sys_, true, 0));
  self->send(reorder, result_atom::value, result(0));
  self->send(reorder, result_atom::value, result(1));
  batch_msg fatal;
  fatal.status = batch_msg::Fatal;
  fatal.error_type = "RuntimeError";
  fatal.error_message = "DataLoader worker 1 (pid 123) killed by signal: Killed (SIGKILL, 9).";
  self->send(reorder, result_atom::value, fatal);
  batch_msg m = ask_next(self, reorder);
  EXPECT_EQ(m.status, batch_msg::Fatal) << "a fatal error overtakes releasable results";
  EXPECT_EQ(m.error_message, fatal.error_message);
  EXPECT_EQ(ask_next(self, reorder).status, batch_msg::Fatal) << "the loader cannot continue";
}

TEST_F(ReorderActor, CompletionOrderWhenInOrderIsFalse) {
  caf::scoped_actor self{*sys_};
  auto reorder = track(spawn_reorder(*sys_, false, 0));
  self->send(reorder, result_atom::value, result(2));
  self->send(reorder, result_atom::value, result(0));
  self->send(reorder, result_atom::value, result(1, batch_msg::Skipped));
  self->send(reorder, end_atom::value, uint64_t{3});
  EXPECT_EQ(ask_next(self, reorder).task, 2u);
  EXPECT_EQ(ask_next(self, reorder).task, 0u);
  EXPECT_EQ(ask_next(self, reorder).status, batch_msg::End);
}

TEST_F(ReorderActor, StatusNamesTheAwaitedTask) {
  caf::scoped_actor self{*sys_};
  auto reorder = track(spawn_reorder(*sys_, true, 4));
  self->send(reorder, result_atom::value, result(4));
  EXPECT_EQ(ask_next(self, reorder).task, 4u);
  uint64_t awaited = 0;
  self->request(reorder, kDeadline, status_atom::value)
      .receive([&](uint64_t t) { awaited = t; }, [&](caf::error& e) { ADD_FAILURE() << sys_->render(e); });
  EXPECT_EQ(awaited, 5u);
}

// ------------------------------------------------------------------ sampler actor
class SamplerActor : public ActorTest {
 protected:
  /// `workers` fake workers and a fake reorder actor, all scoped actors.
  void make_fakes(int workers) {
    for (int w = 0; w < workers; ++w) fakes_.push_back(std::make_unique<caf::scoped_actor>(*sys_));
    reorder_ = std::make_unique<caf::scoped_actor>(*sys_);
  }
  std::shared_ptr<SamplerSetup> setup(std::optional<TaskSource> source, int prefetch, uint64_t first_task = 0,
                                      uint64_t epoch = 1) {
    auto s = std::make_shared<SamplerSetup>();
    s->source = std::move(source);
    for (auto& f : fakes_) s->workers.push_back(caf::actor_cast<worker_actor>(*f));
    s->reorder = caf::actor_cast<caf::actor>(*reorder_);
    s->epoch = epoch;
    s->first_task = first_task;
    s->prefetch_factor = prefetch;
    return s;
  }
  static TaskSource batches(int64_t n, int64_t batch_size) {
    return TaskSource(std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(n), batch_size, false),
                      nullptr);
  }
  /// Stops the sampler; returns the next task index it would have sent.
  uint64_t stop(const caf::actor& sampler) {
    caf::scoped_actor self{*sys_};
    uint64_t next = 0;
    self->request(sampler, kDeadline, stop_atom::value)
        .receive([&](uint64_t n) { next = n; }, [&](caf::error& e) { ADD_FAILURE() << sys_->render(e); });
    return next;
  }
  /// Receives worker w's epoch notice and checks it.
  void expect_epoch_notice(int w, uint64_t epoch, const caf::actor& sampler) {
    Received r = next_at_worker(*fakes_[static_cast<size_t>(w)]);
    ASSERT_EQ(r.kind, Received::Epoch) << "worker " << w << " must hear of the epoch before its first task";
    EXPECT_EQ(r.epoch, epoch);
    EXPECT_EQ(r.sampler, sampler);
    EXPECT_EQ(r.reorder, caf::actor_cast<caf::actor>(*reorder_));
  }
  /// Receives worker w's next task and checks its index (and indices, when given).
  void expect_task(int w, uint64_t task, uint64_t epoch, std::optional<std::vector<int64_t>> indices) {
    Received r = next_at_worker(*fakes_[static_cast<size_t>(w)]);
    ASSERT_EQ(r.kind, Received::Task) << "worker " << w << " expected task " << task;
    EXPECT_EQ(r.task, task) << "worker " << w;
    EXPECT_EQ(r.epoch, epoch);
    if (indices) {
      EXPECT_EQ(r.indices, *indices) << "task " << task;
    }
  }
  /// No message is waiting at any fake worker (call after a reply of the sampler).
  void expect_no_more_tasks() {
    for (size_t w = 0; w < fakes_.size(); ++w) {
      Received r = next_at_worker(*fakes_[w], caf::duration(std::chrono::milliseconds(0)));
      EXPECT_EQ(r.kind, Received::Nothing) << "worker " << w << " got an unexpected task " << r.task;
    }
  }

  std::vector<std::unique_ptr<caf::scoped_actor>> fakes_;
  std::unique_ptr<caf::scoped_actor> reorder_;
};

TEST_F(SamplerActor, SendsTheEpochNoticeThenPrefetchFactorTimesWorkersTasks) {
  for (int workers : {1, 2, 3}) {
    for (int prefetch : {1, 2, 3}) {
      fakes_.clear();
      make_fakes(workers);
      auto sampler = track(spawn_sampler(*sys_, setup(batches(100, 2), prefetch, 0, 1)));
      EXPECT_EQ(stop(sampler), static_cast<uint64_t>(workers * prefetch))
          << workers << " workers, prefetch " << prefetch;
      for (int w = 0; w < workers; ++w) {
        expect_epoch_notice(w, 1, sampler);
        for (int k = 0; k < prefetch; ++k) {
          int64_t t = w + k * workers;
          expect_task(w, static_cast<uint64_t>(t), 1, std::vector<int64_t>{2 * t, 2 * t + 1});
        }
      }
      expect_no_more_tasks();
    }
  }
}

TEST_F(SamplerActor, EachCreditReleasesExactlyOneMoreTaskRoundRobin) {
  make_fakes(2);
  auto sampler = track(spawn_sampler(*sys_, setup(batches(100, 1), 2, 0, 3)));
  // Credits name the task whose batch the application took.
  for (uint64_t t = 0; t < 3; ++t) caf::anon_send(sampler, credit_atom::value, t);
  EXPECT_EQ(stop(sampler), 7u) << "4 tasks up front, one per credit";
  expect_epoch_notice(0, 3, sampler);
  expect_epoch_notice(1, 3, sampler);
  for (uint64_t t = 0; t < 7; ++t) expect_task(static_cast<int>(t % 2), t, 3, std::vector<int64_t>{int64_t(t)});
  expect_no_more_tasks();
}

TEST_F(SamplerActor, EndsWithTheTotalWhenTheSamplerRunsDry) {
  make_fakes(2);
  // 5 tasks of 2 indices over 10 samples, task numbers continuing from 10.
  auto sampler = track(spawn_sampler(*sys_, setup(batches(10, 2), 2, 10, 2)));
  caf::anon_send(sampler, credit_atom::value, uint64_t{10});  // task 14 goes out
  caf::anon_send(sampler, credit_atom::value, uint64_t{11});  // nothing left: end
  uint64_t total = 0;
  (*reorder_)->receive([&](end_atom, uint64_t n) { total = n; },
                       caf::after(kDeadline) >> [] { ADD_FAILURE() << "no end_atom within 5 s"; });
  EXPECT_EQ(total, 5u) << "the total counts this epoch's tasks only";
  EXPECT_EQ(stop(sampler), 15u);
  expect_epoch_notice(0, 2, sampler);
  expect_epoch_notice(1, 2, sampler);
  for (uint64_t j = 0; j < 5; ++j) {
    int64_t first = static_cast<int64_t>(2 * j);
    expect_task(static_cast<int>(j % 2), 10 + j, 2, std::vector<int64_t>{first, first + 1});
  }
  expect_no_more_tasks();
}

TEST_F(SamplerActor, StatusNamesTheWorkerHoldingAnUnfinishedTask) {
  make_fakes(3);
  auto sampler = track(spawn_sampler(*sys_, setup(batches(100, 1), 1, 6, 1)));
  caf::scoped_actor self{*sys_};
  auto worker_of = [&](uint64_t task) {
    int32_t w = -2;
    self->request(sampler, kDeadline, status_atom::value, task)
        .receive([&](int32_t x) { w = x; }, [&](caf::error& e) { ADD_FAILURE() << sys_->render(e); });
    return w;
  };
  EXPECT_EQ(worker_of(6), 0);
  EXPECT_EQ(worker_of(7), 1);
  EXPECT_EQ(worker_of(8), 2);
  EXPECT_EQ(worker_of(9), -1) << "not sent yet";
  caf::anon_send(sampler, credit_atom::value, uint64_t{7});
  EXPECT_EQ(worker_of(7), -1) << "task 7 was delivered: no worker holds it";
  EXPECT_EQ(worker_of(9), 0) << "the credit let task 9 go to worker 0";
}

TEST_F(SamplerActor, StopReturnsTheNextTaskIndexAndEndsDispatching) {
  make_fakes(1);
  auto sampler = track(spawn_sampler(*sys_, setup(batches(100, 1), 2, 40, 1)));
  EXPECT_EQ(stop(sampler), 42u);
  caf::anon_send(sampler, credit_atom::value, uint64_t{40});
  EXPECT_EQ(stop(sampler), 42u) << "a credit after stop sends nothing";
  expect_epoch_notice(0, 1, sampler);
  expect_task(0, 40, 1, std::nullopt);
  expect_task(0, 41, 1, std::nullopt);
  expect_no_more_tasks();
}

TEST_F(SamplerActor, IterableStreamsSkipRetiredWorkersAndEndWhenAllRetired) {
  make_fakes(3);
  auto sampler = track(spawn_sampler(*sys_, setup(std::nullopt, 1, 0, 1)));
  for (int w = 0; w < 3; ++w) expect_epoch_notice(w, 1, sampler);
  for (int w = 0; w < 3; ++w) expect_task(w, static_cast<uint64_t>(w), 1, std::vector<int64_t>{});
  // Worker 1's stream ran dry on task 1: its credit comes back, the cycle skips it.
  caf::anon_send(sampler, retire_atom::value, int32_t{1}, false, uint64_t{1});
  expect_task(0, 3, 1, std::nullopt);
  caf::anon_send(sampler, credit_atom::value, uint64_t{0});
  expect_task(2, 4, 1, std::nullopt);
  caf::anon_send(sampler, credit_atom::value, uint64_t{2});
  expect_task(0, 5, 1, std::nullopt);
  caf::anon_send(sampler, retire_atom::value, int32_t{0}, false, uint64_t{5});
  expect_task(2, 6, 1, std::nullopt);
  caf::anon_send(sampler, retire_atom::value, int32_t{2}, false, uint64_t{6});
  uint64_t total = 0;
  (*reorder_)->receive([&](end_atom, uint64_t n) { total = n; },
                       caf::after(kDeadline) >> [] { ADD_FAILURE() << "no end_atom within 5 s"; });
  EXPECT_EQ(total, 7u);
  EXPECT_EQ(stop(sampler), 7u);
  expect_no_more_tasks();
}

TEST_F(SamplerActor, ASamplerErrorIsFatalForTheEpoch) {
  make_fakes(1);
  auto src = TaskSource(std::make_shared<BatchSampler>(std::make_shared<FailingSampler>(3), 1, false), nullptr);
  auto sampler = track(spawn_sampler(*sys_, setup(std::move(src), 2, 0, 1)));
  caf::anon_send(sampler, credit_atom::value, uint64_t{0});  // task 2
  caf::anon_send(sampler, credit_atom::value, uint64_t{1});  // index 3 raises
  auto m = next_result(*reorder_);
  ASSERT_TRUE(m.has_value()) << "no Fatal result within 5 s";
  EXPECT_EQ(m->status, batch_msg::Fatal);
  EXPECT_EQ(m->error_type, "ValueError");
  EXPECT_NE(m->error_message.find("sampler broke at 3"), std::string::npos) << m->error_message;
  EXPECT_EQ(stop(sampler), 3u);
}

// ------------------------------------------------------------------ worker actor (in-process)
class WorkerActor : public ActorTest {
 protected:
  WorkerSetup setup(DatasetHandle handle, bool iterable = false) {
    WorkerSetup s;
    s.config.worker_id = 0;
    s.config.num_workers = 1;
    s.config.seed = 77;
    s.config.dataset = std::move(handle);
    s.config.iterable = iterable;
    s.config.batch_size = 2;
    // One slab, and no room for a second: a busy slab makes the next task wait.
    s.policy.num_workers = 1;
    s.policy.slabs_per_worker = 1;
    s.policy.shm_limit_bytes = 64 * 1024;
    s.directory = directory_;
    s.in_process = true;
    return s;
  }
  static DatasetHandle probe(int64_t n, int64_t fail_at = -1) {
    return {"actors_test_probe", Value::dict({{"n", n}, {"fail_at", fail_at}})};
  }
  Value decode(const batch_msg& m) {
    auto seg = directory_->find(m.slab);
    if (!seg) {
      ADD_FAILURE() << "slab " << m.slab << " is not in the directory";
      return {};
    }
    return decode_batch(m.payload, m.slab, std::make_shared<BatchLease>(seg, nullptr, false));
  }

  std::shared_ptr<SlabDirectory> directory_ = std::make_shared<SlabDirectory>();
  caf::scoped_actor sampler_{*sys_};
  caf::scoped_actor reorder_{*sys_};
};

TEST_F(WorkerActor, EpochNoticeAndTaskGiveAResultAtTheReorderActor) {
  worker_actor worker = track(spawn_worker(*sys_, setup(probe(10))));
  caf::anon_send(worker, epoch_atom::value, uint64_t{1}, caf::actor_cast<caf::actor>(sampler_),
                 caf::actor_cast<caf::actor>(reorder_));
  caf::anon_send(worker, task_atom::value, uint64_t{1}, uint64_t{0}, std::vector<int64_t>{3, 1, 4});
  auto m = next_result(reorder_);
  ASSERT_TRUE(m.has_value()) << "no result within 5 s";
  EXPECT_EQ(m->status, batch_msg::Ok) << m->error_message;
  EXPECT_EQ(m->task, 0u);
  EXPECT_EQ(m->worker, 0);
  EXPECT_NE(m->slab, 0u) << "the batch travels in a shared-memory slab";
  Value batch = decode(*m);
  ASSERT_EQ(batch.size(), 5u);
  EXPECT_EQ(batch[0].to_tensor().to_int64_vector(), (std::vector<int64_t>{3, 1, 4}));
  EXPECT_EQ(batch[3].to_tensor().to_int64_vector(), (std::vector<int64_t>{77, 77, 77})) << "worker seed";
  EXPECT_EQ(batch[4].to_tensor().to_int64_vector(), (std::vector<int64_t>{77, 77, 77})) << "initial_seed()";
}

TEST_F(WorkerActor, ReleaseReturnsTheSlabSoAWaitingTaskRuns) {
  worker_actor worker = track(spawn_worker(*sys_, setup(probe(10))));
  caf::scoped_actor self{*sys_};
  caf::anon_send(worker, epoch_atom::value, uint64_t{1}, caf::actor_cast<caf::actor>(sampler_),
                 caf::actor_cast<caf::actor>(reorder_));
  caf::anon_send(worker, task_atom::value, uint64_t{1}, uint64_t{0}, std::vector<int64_t>{0, 1});
  auto first = next_result(reorder_);
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->status, batch_msg::Ok) << first->error_message;

  // The only slab is busy: task 1 must wait for it.
  self->send(worker, task_atom::value, uint64_t{1}, uint64_t{1}, std::vector<int64_t>{2, 3});
  int32_t pid = 0;
  self->request(worker, kDeadline, status_atom::value)
      .receive([&](int32_t p) { pid = p; }, [&](caf::error& e) { ADD_FAILURE() << sys_->render(e); });
  EXPECT_EQ(pid, -1) << "an in-process worker has no pid";
  EXPECT_FALSE(next_result(reorder_, caf::duration(std::chrono::milliseconds(0))).has_value())
      << "task 1 ran although its worker had no free slab";

  self->send(worker, release_atom::value, first->slab);
  auto second = next_result(reorder_);
  ASSERT_TRUE(second.has_value()) << "releasing the slab must let the waiting task run";
  EXPECT_EQ(second->task, 1u);
  EXPECT_EQ(second->slab, first->slab) << "the released slab is reused";
  EXPECT_EQ(decode(*second)[0].to_tensor().to_int64_vector(), (std::vector<int64_t>{2, 3}));
}

TEST_F(WorkerActor, DatasetErrorIsAnErrorResultAndTheWorkerContinues) {
  worker_actor worker = track(spawn_worker(*sys_, setup(probe(10, 5))));
  caf::anon_send(worker, epoch_atom::value, uint64_t{1}, caf::actor_cast<caf::actor>(sampler_),
                 caf::actor_cast<caf::actor>(reorder_));
  caf::anon_send(worker, task_atom::value, uint64_t{1}, uint64_t{0}, std::vector<int64_t>{4, 5});
  caf::anon_send(worker, task_atom::value, uint64_t{1}, uint64_t{1}, std::vector<int64_t>{6, 7});
  auto err = next_result(reorder_);
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->status, batch_msg::Error);
  EXPECT_EQ(err->task, 0u);
  EXPECT_EQ(err->error_type, "ValueError");
  EXPECT_NE(err->error_message.find("Caught ValueError in DataLoader worker process 0."), std::string::npos)
      << err->error_message;
  EXPECT_NE(err->error_message.find("actor probe failure at 5"), std::string::npos) << err->error_message;
  auto ok = next_result(reorder_);
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->status, batch_msg::Ok) << ok->error_message;
  EXPECT_EQ(ok->task, 1u);
}

TEST_F(WorkerActor, TasksOfAnOlderEpochAreIgnored) {
  worker_actor worker = track(spawn_worker(*sys_, setup(probe(10))));
  caf::anon_send(worker, epoch_atom::value, uint64_t{2}, caf::actor_cast<caf::actor>(sampler_),
                 caf::actor_cast<caf::actor>(reorder_));
  caf::anon_send(worker, task_atom::value, uint64_t{1}, uint64_t{0}, std::vector<int64_t>{0});
  caf::anon_send(worker, task_atom::value, uint64_t{2}, uint64_t{7}, std::vector<int64_t>{1});
  auto m = next_result(reorder_);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->task, 7u) << "the task of epoch 1 must be dropped";
}

TEST_F(WorkerActor, ExhaustedIterableSkipsItsTaskAndRetiresAtTheSampler) {
  register_builtin_datasets();
  worker_actor worker = track(spawn_worker(*sys_, setup({"counting", Value::dict({{"n", 3}})}, true)));
  caf::anon_send(worker, epoch_atom::value, uint64_t{1}, caf::actor_cast<caf::actor>(sampler_),
                 caf::actor_cast<caf::actor>(reorder_));
  for (uint64_t t = 0; t < 3; ++t)
    caf::anon_send(worker, task_atom::value, uint64_t{1}, t, std::vector<int64_t>{});
  auto a = next_result(reorder_);
  ASSERT_TRUE(a.has_value());
  ASSERT_EQ(a->status, batch_msg::Ok) << a->error_message;
  EXPECT_EQ(decode(*a).to_tensor().to_int64_vector(), (std::vector<int64_t>{0, 1}));
  caf::anon_send(worker, release_atom::value, a->slab);
  auto b = next_result(reorder_);
  ASSERT_TRUE(b.has_value());
  ASSERT_EQ(b->status, batch_msg::Ok) << b->error_message;
  EXPECT_EQ(decode(*b).to_tensor().to_int64_vector(), (std::vector<int64_t>{2}));
  caf::anon_send(worker, release_atom::value, b->slab);
  auto c = next_result(reorder_);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->status, batch_msg::Skipped);
  EXPECT_EQ(c->task, 2u);
  bool retired = false;
  sampler_->receive(
      [&](retire_atom, int32_t w, bool died, uint64_t task) {
        retired = true;
        EXPECT_EQ(w, 0);
        EXPECT_FALSE(died) << "a stream that ran dry is not a dead worker";
        EXPECT_EQ(task, 2u);
      },
      caf::after(kDeadline) >> [] {});
  EXPECT_TRUE(retired) << "no retire_atom at the sampler within 5 s";
}

TEST_F(WorkerActor, UnknownDatasetTypeIsAFatalStartError) {
  worker_actor worker = track(spawn_worker(*sys_, setup({"actors_test_no_such_type", Value::dict({})})));
  caf::anon_send(worker, epoch_atom::value, uint64_t{1}, caf::actor_cast<caf::actor>(sampler_),
                 caf::actor_cast<caf::actor>(reorder_));
  auto m = next_result(reorder_);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->status, batch_msg::Fatal);
  EXPECT_NE(m->error_message.find("failed to start"), std::string::npos) << m->error_message;
  EXPECT_NE(m->error_message.find("actors_test_no_such_type"), std::string::npos) << m->error_message;
  bool died = false;
  sampler_->receive([&](retire_atom, int32_t, bool d, uint64_t) { died = d; }, caf::after(kDeadline) >> [] {});
  EXPECT_TRUE(died) << "the sampler must stop giving the worker tasks";
}

}  // namespace
}  // namespace loader::runtime
