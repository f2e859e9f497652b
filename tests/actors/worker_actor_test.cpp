// The worker actor, alone, driven by its messages on CAF's deterministic scheduler (each
// message is handled when the test says so, no threads), and in a real worker process
// driven by the frames that carry its messages (worker_host.h).
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "deterministic_system.h"
#include "loader/error.h"
#include "loader/runtime/batch_codec.h"
#include "loader/runtime/child/worker_actor.h"
#include "loader/runtime/frames.h"
#include "loader/runtime/rng_state_page.h"
#include "loader/runtime/os/shm.h"
#include "loader/runtime/wire.h"
#include "loader/runtime/child/worker_core.h"
#include "loader/runtime/parent/worker_link.h"

namespace loader::runtime {
namespace {

/// Sample i: [i, i * i]; sample `fail_at` throws ValueError.
class Squares : public Dataset {
 public:
  Squares(int64_t n, int64_t fail_at) : n_(n), fail_at_(fail_at) {}
  Value get(int64_t i) override {
    if (i < 0 || i >= n_) throw IndexError("Squares index " + std::to_string(i) + " out of range");
    if (i == fail_at_) throw ValueError("no square for " + std::to_string(i));
    return Value::list({Value(i), Value(i * i)});
  }
  int64_t size() const override { return n_; }

 private:
  int64_t n_, fail_at_;
};
LOADER_REGISTER_DATASET("worker_actor_test_squares", [](const Value& p) {
  return std::make_shared<Squares>(p.at("n").to_int(), p.get("fail_at", Value(-1)).to_int());
});

std::string config(int64_t n, int64_t fail_at = -1, const std::string& type = "worker_actor_test_squares") {
  WorkerConfig c;
  c.worker_id = 1;
  c.num_workers = 2;
  c.seed = 41;
  c.dataset = DatasetHandle{type, Value::dict({{"n", n}, {"fail_at", fail_at}})};
  c.batch_size = 3;
  std::string s;
  encode_value(c.to_value(), s);
  return s;
}

/// What the uplink actor was sent, in order.
struct Uplinked {
  std::vector<result_msg> results;
  std::vector<std::string> events;  ///< "ready", "stream <task>[ with state]", "fatal <type> <status>: <message>"
};

// Spawned with an argument: CAF 0.17 binds a reference to a null tuple when a function
// actor has none (UBSan: init_fun_factory.hpp).
uplink_actor::behavior_type recording_uplink(uplink_actor::pointer, Uplinked* out) {
    return {
        [out](result_msg& r) { out->results.push_back(std::move(r)); },
        [out](ready_atom) { out->events.push_back("ready"); },
        [out](stream_atom, uint64_t task, const std::string&, bool has_state, const std::string&) {
          out->events.push_back("stream " + std::to_string(task) + (has_state ? " with state" : ""));
        },
        [out](fatal_atom, const std::string& type, const std::string& message, const std::string& when,
              int32_t status) {
          out->events.push_back("fatal " + type + " " + std::to_string(status) + ": " + message +
                                (when.empty() ? "" : " / " + when));
        },
    };
}

uplink_actor spawn_recording_uplink(caf::actor_system& sys, Uplinked* out) {
  return sys.spawn(recording_uplink, out);
}

std::vector<int64_t> column(const WorkerReply& r, const std::shared_ptr<ShmSegment>& seg, size_t k) {
  auto lease = std::make_shared<BatchLease>(seg, [] {}, false);
  return decode_batch(r.payload, r.slab, lease)[k].to_tensor().to_int64_vector();
}

class WorkerActorTest : public ::testing::Test {
 protected:
  WorkerActorTest()
      : sys_(deterministic_config()), sched_(dynamic_cast<caf::scheduler::test_coordinator&>(sys_.scheduler())) {
    uplink_ = spawn_recording_uplink(sys_, &up_);
    worker_ = spawn_worker_actor(sys_, uplink_);
    sched_.run();
  }
  ~WorkerActorTest() override {
    caf::anon_send_exit(worker_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(uplink_, caf::exit_reason::user_shutdown);
    sched_.run();
  }
  bool worker_alive() {
    bool alive = true;
    auto watcher = sys_.spawn(
        [](caf::event_based_actor* self, worker_actor watched, bool* alive_out) -> caf::behavior {
          self->monitor(watched);
          self->set_down_handler([alive_out](caf::down_msg&) { *alive_out = false; });
          return {[](int32_t) {}};  // stays alive to hear the down message
        },
        worker_, &alive);
    sched_.run();
    caf::anon_send_exit(watcher, caf::exit_reason::user_shutdown);
    sched_.run();
    return alive;
  }

  caf::actor_system sys_;
  caf::scheduler::test_coordinator& sched_;
  Uplinked up_;
  uplink_actor uplink_;
  worker_actor worker_;
};

TEST_F(WorkerActorTest, AnswersATaskWithItsResultInTheSlabTheTaskNames) {
  caf::anon_send(worker_, init_atom::value, config(10));
  sched_.run();
  ASSERT_EQ(up_.events, (std::vector<std::string>{"ready"}));
  auto seg = ShmSegment::create(1 << 16);
  caf::anon_send(worker_, slab_atom::value, uint64_t{11}, reinterpret_cast<uint64_t>(seg->data()),
                 uint64_t{seg->size()});
  caf::anon_send(worker_, task_msg{7, {4, 0, 9}, 11});
  EXPECT_TRUE(up_.results.empty()) << "nothing runs before the scheduler does";
  sched_.run();
  ASSERT_EQ(up_.results.size(), 1u);
  const result_msg& r = up_.results[0];
  EXPECT_EQ(r.task_idx, 7u);
  ASSERT_EQ(r.batch.kind, WorkerReply::Kind::Result) << r.batch.error_message;
  EXPECT_EQ(r.batch.slab, 11u);
  EXPECT_EQ(column(r.batch, seg, 0), (std::vector<int64_t>{4, 0, 9}));
  EXPECT_EQ(column(r.batch, seg, 1), (std::vector<int64_t>{16, 0, 81}));
}

TEST_F(WorkerActorTest, AnswersEachTaskInTheOrderItsMessagesCame) {
  caf::anon_send(worker_, init_atom::value, config(10));
  auto seg = ShmSegment::create(1 << 16);
  caf::anon_send(worker_, slab_atom::value, uint64_t{1}, reinterpret_cast<uint64_t>(seg->data()),
                 uint64_t{seg->size()});
  for (uint64_t t : {3, 1, 2}) caf::anon_send(worker_, task_msg{t, {static_cast<int64_t>(t)}, 1});
  sched_.run();
  ASSERT_EQ(up_.results.size(), 3u);
  EXPECT_EQ(up_.results[0].task_idx, 3u);
  EXPECT_EQ(up_.results[1].task_idx, 1u);
  EXPECT_EQ(up_.results[2].task_idx, 2u);
}

TEST_F(WorkerActorTest, AnswersAFailingSampleWithAnErrorResultAndGoesOn) {
  caf::anon_send(worker_, init_atom::value, config(10, /*fail_at=*/5));
  auto seg = ShmSegment::create(1 << 16);
  caf::anon_send(worker_, slab_atom::value, uint64_t{1}, reinterpret_cast<uint64_t>(seg->data()),
                 uint64_t{seg->size()});
  caf::anon_send(worker_, task_msg{0, {4, 5, 6}, 1});
  caf::anon_send(worker_, task_msg{1, {1, 2}, 1});
  sched_.run();
  ASSERT_EQ(up_.results.size(), 2u);
  EXPECT_EQ(up_.results[0].task_idx, 0u);
  EXPECT_EQ(up_.results[0].batch.kind, WorkerReply::Kind::Error);
  EXPECT_EQ(up_.results[0].batch.error_type, "ValueError");
  EXPECT_NE(up_.results[0].batch.error_message.find("no square for 5"), std::string::npos)
      << up_.results[0].batch.error_message;
  EXPECT_NE(up_.results[0].batch.error_message.find("DataLoader worker process 1"), std::string::npos)
      << up_.results[0].batch.error_message;
  ASSERT_EQ(up_.results[1].batch.kind, WorkerReply::Kind::Result) << up_.results[1].batch.error_message;
  EXPECT_EQ(column(up_.results[1].batch, seg, 0), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(worker_alive());
}

TEST_F(WorkerActorTest, ATaskWithoutASlabAsksForOneAndUseSlabAnswersIt) {
  caf::anon_send(worker_, init_atom::value, config(10));
  caf::anon_send(worker_, task_msg{4, {2, 3}, 0});
  sched_.run();
  ASSERT_EQ(up_.results.size(), 1u);
  ASSERT_EQ(up_.results[0].batch.kind, WorkerReply::Kind::Need);
  auto seg = ShmSegment::create(up_.results[0].batch.bytes);
  caf::anon_send(worker_, slab_atom::value, uint64_t{9}, reinterpret_cast<uint64_t>(seg->data()),
                 uint64_t{seg->size()});
  caf::anon_send(worker_, use_slab_atom::value, uint64_t{4}, uint64_t{9});
  sched_.run();
  ASSERT_EQ(up_.results.size(), 2u);
  EXPECT_EQ(up_.results[1].task_idx, 4u);
  ASSERT_EQ(up_.results[1].batch.kind, WorkerReply::Kind::Result);
  EXPECT_EQ(column(up_.results[1].batch, seg, 1), (std::vector<int64_t>{4, 9}));
}

TEST_F(WorkerActorTest, ADatasetThatCannotBeBuiltIsOneFatalAndTheActorQuits) {
  caf::anon_send(worker_, init_atom::value, config(10, -1, "worker_actor_test_no_such_type"));
  caf::anon_send(worker_, task_msg{0, {1}, 0});
  sched_.run();
  ASSERT_EQ(up_.events.size(), 1u);
  EXPECT_EQ(up_.events[0].rfind("fatal ", 0), 0u) << up_.events[0];
  EXPECT_NE(up_.events[0].find(" 1: "), std::string::npos) << "exit status 1: " << up_.events[0];
  EXPECT_NE(up_.events[0].find("worker_actor_test_no_such_type"), std::string::npos) << up_.events[0];
  EXPECT_TRUE(up_.results.empty()) << "the task after a failed init is never run";
  EXPECT_FALSE(worker_alive());
}

TEST_F(WorkerActorTest, ATaskBeforeItsInitIsAProtocolErrorNamingIt) {
  caf::anon_send(worker_, task_msg{0, {1}, 0});
  sched_.run();
  ASSERT_EQ(up_.events.size(), 1u);
  EXPECT_EQ(up_.events[0], "fatal RuntimeError 2: worker protocol error: Task before Init");
  EXPECT_FALSE(worker_alive());
}

TEST_F(WorkerActorTest, RecordsOnItsStatePageTheGeneratorStateEachTaskStartsFrom) {
  const uint64_t slots = 4;
  auto page_seg = ShmSegment::create(RngStatePage::bytes_for(slots));
  RngStatePage::format(page_seg->data(), slots);
  caf::anon_send(worker_, page_atom::value, reinterpret_cast<uint64_t>(page_seg->data()),
                 uint64_t{page_seg->size()});
  caf::anon_send(worker_, init_atom::value, config(10));
  auto seg = ShmSegment::create(1 << 16);
  caf::anon_send(worker_, slab_atom::value, uint64_t{1}, reinterpret_cast<uint64_t>(seg->data()),
                 uint64_t{seg->size()});
  caf::anon_send(worker_, task_msg{0, {1}, 1});
  sched_.run();
  RngStatePage page(page_seg->data(), page_seg->size());
  EXPECT_TRUE(page.state_before(0, 0).has_value()) << "task 0 started: its state is on the page";
  WorkerConfig c = WorkerConfig::from_value(decode_value(config(10)));
  WorkerCore fresh(c);  // a worker as its init leaves it
  auto before = page.state_before(0, 0);
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(before->data()), before->size()),
            fresh.generator().state());
}

// ---------------------------------------------------------------- in a worker process

/// Records the frames a worker process sends.
class FrameLog : public LinkFrames {
 public:
  void on_frame(int, uint32_t, Frame& f) override {
    std::lock_guard<std::mutex> lock(mu_);
    frames_.push_back(std::move(f));
    cv_.notify_all();
  }
  void on_down(int, uint32_t, const WorkerExit&) override {
    std::lock_guard<std::mutex> lock(mu_);
    down_ = true;
    cv_.notify_all();
  }
  /// The next frame of `type` (others are skipped), within 10 s.
  Frame wait_for(FrameType type) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (true) {
      for (size_t i = seen_; i < frames_.size(); ++i)
        if (frames_[i].type == type) {
          seen_ = i + 1;
          return std::move(frames_[i]);
        }
      if (down_) throw RuntimeError(std::string("the worker went down before sending ") + frame_type_name(type));
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout)
        throw RuntimeError(std::string("no ") + frame_type_name(type) + " frame within 10 s");
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Frame> frames_;
  size_t seen_ = 0;
  bool down_ = false;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// Starts a worker (a process, or a thread of this process), gives it its dataset and a
/// slab, sends two tasks (the second with a failing sample) and checks both answers.
/// Returns the worker's pid (-1: a thread).
int drive_a_worker(bool in_process, FrameLog& log, std::unique_ptr<WorkerLink>& link) {
  link = std::make_unique<WorkerLink>(Link::Spec{0, 1, in_process, ""}, &log);
  log.wait_for(FrameType::Hello);
  EXPECT_TRUE(link->send(FrameType::Init, config(10, /*fail_at=*/8)));
  log.wait_for(FrameType::Ready);
  auto seg = ShmSegment::create(1 << 16);
  EXPECT_TRUE(link->send(FrameType::AddSlab, AddSlabFrame{5, seg->size()}.encode(), seg->fd()));
  for (uint64_t task : {0, 1})
    EXPECT_TRUE(link->send(FrameType::Task, TaskFrame{task, 5, {task == 0 ? 3 : 8, 2}}.encode()));
  WorkerReply r = decode_reply(static_cast<uint8_t>(FrameType::Result), log.wait_for(FrameType::Result).body);
  EXPECT_EQ(r.task, 0u);
  EXPECT_EQ(column(r, seg, 1), (std::vector<int64_t>{9, 4}));
  WorkerReply e = decode_reply(static_cast<uint8_t>(FrameType::TaskError), log.wait_for(FrameType::TaskError).body);
  EXPECT_EQ(e.task, 1u);
  EXPECT_NE(e.error_message.find("no square for 8"), std::string::npos) << e.error_message;
  return link->pid();
}

TEST(WorkerActorProcess, AWorkerProcessHostsTheWorkerActorAndAnswersItsTaskMessages) {
  FrameLog log;
  std::unique_ptr<WorkerLink> link;
  const int pid = drive_a_worker(/*in_process=*/false, log, link);
  ASSERT_GT(pid, 0);
  // The process runs CAF: its actor system's library is mapped and its threads run
  // (the host's own, the scheduler's, the clock's).
  const std::string maps = read_file("/proc/" + std::to_string(pid) + "/maps");
  EXPECT_NE(maps.find("libcaf_core"), std::string::npos) << "the worker process maps no CAF";
  const std::string status = read_file("/proc/" + std::to_string(pid) + "/status");
  const auto at = status.find("Threads:");
  ASSERT_NE(at, std::string::npos);
  EXPECT_GE(std::stoi(status.substr(at + 8)), 2) << "a worker process with no thread but its main one runs no actor system";
  link->stop();
}

TEST(WorkerActorProcess, AnInProcessWorkerIsTheSameWorkerActorInThisProcesssSystem) {
  FrameLog log;
  std::unique_ptr<WorkerLink> link;
  EXPECT_EQ(drive_a_worker(/*in_process=*/true, log, link), -1);
  link->stop();
}

}  // namespace
}  // namespace loader::runtime
