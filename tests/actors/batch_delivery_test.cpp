// BatchDelivery alone: the per-batch path over the real stage actors and worker stage,
// with fake transports whose results the test publishes (as a worker's result ring
// would hold them) and a fake pool that records what the delivery asks of it.  Results
// leave in task order whatever order they came in, each hand-over sends the sampler
// its credit back and the worker its next task, an error result is delivered and the
// epoch goes on, the pool's fatal error, shutdown and a replaced epoch are what next()
// says, a transport that cannot be read fails its worker, and the figures count the
// calls that waited.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "deterministic_system.h"
#include "null_transport.h"
#include "loader/error.h"
#include "loader/runtime/parent/batch_delivery.h"
#include "loader/runtime/parent/slab_store.h"
#include "loader/runtime/parent/slot_placement.h"
#include "loader/runtime/parent/worker_slots.h"
#include "loader/runtime/worker_rings.h"
#include "loader/samplers.h"

namespace loader::runtime {
namespace {

/// A worker's transport without shared memory: tasks recorded, results published by
/// the test, taken by the delivery.
class QueueTransport final : public NullTransport<> {
 public:
  void flush() override {
    ++flushes;
    dirty_ = false;
  }
  void send_task(uint64_t task, uint64_t, const IndexBatch&) override {
    tasks.push_back(task);
    dirty_ = true;
  }
  bool dirty() const override { return dirty_; }
  size_t take_results(const std::function<void(WorkerReply&&)>& sink) override {
    if (unreadable) throw RuntimeError("worker 1's result ring holds a frame of unknown type 99");
    size_t n = 0;
    while (!published.empty()) {
      sink(std::move(published.front()));
      published.pop_front();
      ++n;
    }
    return n;
  }

  std::vector<uint64_t> tasks;       ///< tasks sent, in order
  std::deque<WorkerReply> published;  ///< results waiting to be taken
  bool unreadable = false;
  int flushes = 0;

 private:
  bool dirty_ = false;
};

class BatchDeliveryTest : public ::testing::Test,
                          public BatchDelivery::Pool,
                          public StageFailures,
                          public WorkerStageEvents {
 protected:
  static constexpr int kWorkers = 2;
  static constexpr int kPrefetch = 2;

  BatchDeliveryTest() : sys_(deterministic_config()) {
    SlabPolicy policy;
    policy.num_workers = kWorkers;
    slabs_ = std::make_shared<SlabStore>(kWorkers, policy, false, nullptr);
    rings_ = std::make_unique<WorkerRings>(kWorkers);
    SlotPlacement::Hooks hooks;
    hooks.enter = [this] { return stages_->enter(); };
    hooks.use = [](int, WorkerTransport*) {};
    hooks.make_local = [this](int) {
      auto t = std::make_unique<QueueTransport>();
      transports_.push_back(t.get());
      return t;
    };
    placement_ = std::make_unique<SlotPlacement>(kWorkers, std::vector<HostPort>{}, std::move(hooks));
    slots_ = std::make_unique<WorkerSlots>(placement_->homes(), 0, true, *slabs_, 8, *this, "");
    stages_ = std::make_unique<StageActors>(sys_, kWorkers, *slots_, *this, slabs_);
    delivery_ = std::make_unique<BatchDelivery>(*stages_, *slots_, *rings_, *placement_, *slabs_, pool_, *this);
    const auto lock = stages_->enter();
    for (int w = 0; w < kWorkers; ++w) slots_->attach(w, slots_->begin_incarnation(w), -1, "init");
  }
  ~BatchDeliveryTest() override {
    const auto lock = stages_->enter();
    stages_->stop();
  }

  /// Epoch 1 of `batches` batches of 1, its first tasks sent, as the pool begins one.
  void begin(int64_t batches) {
    const auto lock = stages_->enter();
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < batches; ++i) idx.push_back(i);
    stages_->send(stages_->sampler(), begin_atom::value,
                  std::make_shared<SamplerBegin>(SamplerBegin{
                      TaskSource(std::make_shared<BatchSampler>(idx, 1, false), nullptr), false,
                      TaskDispatcher(kWorkers, kPrefetch, 0, true, 0)}));
    stages_->send(stages_->reorder(), begin_atom::value, uint64_t{0}, true);
    stages_->send(stages_->pin(), begin_atom::value, uint64_t{0});
    slots_->set_epoch(1);
    pool_.epoch = 1;
    pool_.first_task = 0;
    delivery_->begin_epoch_locked(std::chrono::steady_clock::now());
    stages_->send(stages_->sampler(), dispatch_atom::value, int32_t{100});
    stages_->run();
  }
  /// Worker `w` publishes its answer to `task` (`error`: the sample failed).
  void publish(int w, uint64_t task, bool error = false) {
    WorkerReply r;
    r.task = task;
    if (error) {
      r.kind = WorkerReply::Kind::Error;
      r.error_type = "ValueError";
      r.error_message = "Caught ValueError in DataLoader worker process " + std::to_string(w) + ".";
    } else {
      r.kind = WorkerReply::Kind::Result;
      r.payload = "batch " + std::to_string(task);
    }
    transports_.at(static_cast<size_t>(w))->published.push_back(std::move(r));
  }
  /// next() without waiting.
  Delivery next_now(uint64_t epoch = 1) { return delivery_->next(epoch, std::chrono::steady_clock::now()); }
  const std::vector<uint64_t>& tasks(int w) const { return transports_.at(static_cast<size_t>(w))->tasks; }

  // BatchDelivery::Pool
  void run_stages_locked() override { stages_->run(); }
  void worker_failed_locked(int worker, const std::string& type, const std::string& message) override {
    failed_.push_back(std::to_string(worker) + " " + type + ": " + message);
  }
  void flush(int worker) override { placement_->current(worker).flush(); }
  // StageFailures, WorkerStageEvents
  void stage_failed(const std::string& message) override { failed_.push_back("stage: " + message); }
  void epoch_failed(const std::string& type, const std::string& message, int) override {
    failed_.push_back("epoch: " + type + ": " + message);
  }
  void worker_restarting(int, uint32_t, const std::string&) override {}

  caf::actor_system sys_;
  std::shared_ptr<SlabStore> slabs_;
  std::unique_ptr<WorkerRings> rings_;
  std::vector<QueueTransport*> transports_;
  std::unique_ptr<SlotPlacement> placement_;
  std::unique_ptr<WorkerSlots> slots_;
  std::unique_ptr<StageActors> stages_;
  PoolEpoch pool_;
  std::unique_ptr<BatchDelivery> delivery_;
  std::vector<std::string> failed_;
};

TEST_F(BatchDeliveryTest, ResultsLeaveInTaskOrderAndEachHandOverSendsTheWorkerItsNextTask) {
  begin(8);
  // Round robin against the credits: prefetch 2 x 2 workers.
  EXPECT_EQ(tasks(0), (std::vector<uint64_t>{0, 2}));
  EXPECT_EQ(tasks(1), (std::vector<uint64_t>{1, 3}));
  // Task 1 is ready first: nothing for the application until task 0 is.
  publish(1, 1);
  EXPECT_EQ(next_now().kind, Delivery::Kind::Timeout);
  EXPECT_EQ(delivery_->waits(), 1u);
  publish(0, 0);
  Delivery d = next_now();
  ASSERT_EQ(d.kind, Delivery::Kind::Batch);
  EXPECT_EQ(d.task, 0u);
  EXPECT_EQ(d.worker, 0);
  EXPECT_EQ(d.payload, "batch 0");
  // Task 0's credit went back: task 4 went to worker 0 and was written (flushed).
  EXPECT_EQ(tasks(0), (std::vector<uint64_t>{0, 2, 4}));
  EXPECT_FALSE(transports_[0]->dirty());
  d = next_now();
  ASSERT_EQ(d.kind, Delivery::Kind::Batch);
  EXPECT_EQ(d.task, 1u);
  EXPECT_EQ(tasks(1), (std::vector<uint64_t>{1, 3, 5}));
  EXPECT_EQ(delivery_->waits(), 1u);  // these two did not wait
  EXPECT_EQ(slots_->delivered_total(), 2u);
  EXPECT_TRUE(failed_.empty());
}

TEST_F(BatchDeliveryTest, AnErrorResultIsDeliveredAsTheErrorAndTheEpochGoesOnToItsEnd) {
  begin(3);
  publish(0, 0);
  publish(1, 1, /*error=*/true);
  EXPECT_EQ(next_now().task, 0u);
  Delivery e = next_now();
  ASSERT_EQ(e.kind, Delivery::Kind::Error);
  EXPECT_EQ(e.task, 1u);
  EXPECT_EQ(e.error_type, "ValueError");
  EXPECT_EQ(e.error_message, "Caught ValueError in DataLoader worker process 1.");
  EXPECT_EQ(tasks(0), (std::vector<uint64_t>{0, 2}));
  publish(0, 2);
  EXPECT_EQ(next_now().task, 2u);
  EXPECT_EQ(next_now().kind, Delivery::Kind::End);  // 3 tasks, all delivered
  EXPECT_EQ(slots_->delivered_total(), 2u);          // the error is not a batch
}

TEST_F(BatchDeliveryTest, ThePoolsFatalErrorShutdownAndAReplacedEpochAreWhatNextSays) {
  begin(8);
  publish(0, 0);
  EXPECT_EQ(next_now(/*epoch=*/7).kind, Delivery::Kind::End);  // another epoch's iterator: ended
  {
    const auto lock = stages_->enter();
    Delivery f;
    f.kind = Delivery::Kind::Fatal;
    f.error_type = "RuntimeError";
    f.error_message = "DataLoader worker (pid 12) is killed by signal: Killed.";
    pool_.fatal = f;
  }
  Delivery d = next_now();
  ASSERT_EQ(d.kind, Delivery::Kind::Fatal);
  EXPECT_EQ(d.error_message, "DataLoader worker (pid 12) is killed by signal: Killed.");
  {
    const auto lock = stages_->enter();
    pool_.fatal.reset();
    pool_.closed = true;
    delivery_->release_undelivered_locked();
  }
  d = next_now();
  ASSERT_EQ(d.kind, Delivery::Kind::Fatal);
  EXPECT_EQ(d.error_message, "DataLoader: the worker pool was shut down");
}

TEST_F(BatchDeliveryTest, AWorkerWhoseResultsCannotBeReadFailsAndTheOthersAreStillTaken) {
  begin(8);
  transports_[1]->unreadable = true;
  publish(0, 0);
  bool flush_needed = false;
  {
    const auto lock = stages_->enter();
    EXPECT_EQ(delivery_->drain_rings_locked(flush_needed), 1u);
    EXPECT_TRUE(delivery_->releasable_locked());
    EXPECT_EQ(delivery_->next_for_application_locked(), 0u);
  }
  ASSERT_EQ(failed_.size(), 1u);
  EXPECT_EQ(failed_[0], "1 RuntimeError: worker 1's result ring holds a frame of unknown type 99");
  EXPECT_EQ(next_now().task, 0u);
}

TEST_F(BatchDeliveryTest, ACallThatWaitsCountsOnceAndItsTimeGoesToTheWaitFigure) {
  begin(8);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
  EXPECT_EQ(delivery_->next(1, deadline).kind, Delivery::Kind::Timeout);
  EXPECT_GE(std::chrono::steady_clock::now(), deadline);
  EXPECT_EQ(delivery_->waits(), 1u);
  // The time of a call that waited counts when it hands a batch over.
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto lock = stages_->enter();
    publish(0, 0);
    rings_->ring();
  });
  Delivery d = delivery_->next(1, std::chrono::steady_clock::now() + std::chrono::seconds(30));
  late.join();
  EXPECT_EQ(d.task, 0u);
  EXPECT_EQ(delivery_->waits(), 2u);
  EXPECT_GE(delivery_->wait_ns(), 10'000'000u);
}

TEST(EpochOccupancy, MeansAreTheValuesWeightedByTheTimeEachWasSeen) {
  using namespace std::chrono;
  const steady_clock::time_point t0{};
  EpochOccupancy o;
  o.start(t0);
  o.see(t0 + seconds(1), 4, 1);   // 0 for the first second
  o.see(t0 + seconds(3), 2, 3);   // 4 and 1 for two seconds
  const auto [in_flight, ready] = o.means(t0 + seconds(4));  // 2 and 3 for the last one
  EXPECT_DOUBLE_EQ(in_flight, (0 * 1 + 4 * 2 + 2 * 1) / 4.0);
  EXPECT_DOUBLE_EQ(ready, (0 * 1 + 1 * 2 + 3 * 1) / 4.0);
  EXPECT_EQ(o.in_flight_max, 4u);
  EXPECT_EQ(o.ready_max, 3u);
  EXPECT_EQ(o.means(t0), (std::pair<double, double>{0.0, 0.0}));
}

}  // namespace
}  // namespace loader::runtime
