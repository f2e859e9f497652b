// ShmTransport alone, with a recording link in place of a worker process: what the
// worker is told becomes its frames, in order (the incarnation's first frames, the typed
// operations, AddSlab before the first task into a slab, a task too large for the ring
// on the socket); flush writes what was queued and says how many frames come first; each
// frame the link's reader brings becomes one typed event for the pool (hello, ready,
// stream_start, init_error, a result on the socket, unreadable, down); and the results a
// worker publishes in its result ring are taken and decoded.
#include <gtest/gtest.h>

#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "loader/error.h"
#include "loader/generator.h"
#include "loader/runtime/frames.h"
#include "loader/runtime/os/shm.h"
#include "loader/runtime/parent/shm_transport.h"
#include "loader/runtime/parent/slab_store.h"
#include "loader/runtime/worker_rings.h"

namespace loader::runtime {
namespace {

/// What the link of one incarnation was given.
struct Wire {
  std::vector<Frame> frames;  ///< written to the socket, in order (descriptors not kept)
  LinkFrames* reader = nullptr;  ///< the transport's side of the link's reader thread
  ShmMapping rings;              ///< the rings, mapped as the worker maps them
  std::unique_ptr<WorkerRingEnd> end;
  uint32_t gen = 0;
  bool stopped = false;
};

class RecordingLink final : public Link {
 public:
  RecordingLink(Wire& w, uint32_t gen) : w_(w), gen_(gen) {}
  bool send(FrameType type, const std::string& body, int fd) override {
    if (type == FrameType::Rings) {
      const RingsFrame r = RingsFrame::decode(body);
      RingLayout layout;
      layout.capacity = r.capacity;
      layout.workers = static_cast<int>(r.workers);
      w_.rings = ShmMapping(UniqueFd(dup(fd)), layout.bytes());
      w_.end = std::make_unique<WorkerRingEnd>(w_.rings.data(), layout, static_cast<int>(r.index),
                                               static_cast<uint32_t>(r.generation));
    }
    w_.frames.push_back(Frame{type, body, UniqueFd()});
    return true;
  }
  void stop() override { w_.stopped = true; }
  void kill_with_reason(const WorkerExit&) override {}
  char process_state() const override { return '?'; }
  std::optional<WorkerExit> exited_with_socket_open() const override { return std::nullopt; }
  int pid() const override { return -1; }
  uint32_t generation() const override { return gen_; }

 private:
  Wire& w_;
  uint32_t gen_;
};

/// The pool's side: every event, as a line.
class EventLog final : public LinkEvents {
 public:
  void on_hello(int w, uint32_t gen) override { add(w, gen, "hello"); }
  void on_ready(int w, uint32_t gen) override { add(w, gen, "ready"); }
  void on_stream_start(int w, uint32_t gen, uint64_t task, StreamStart start) override {
    add(w, gen, "stream_start " + std::to_string(task) + " rng=" + start.rng + " state=" + start.state.value_or("-"));
  }
  void on_init_error(int w, uint32_t gen, const std::string& type, const std::string& message,
                     const std::string& when) override {
    add(w, gen, "init_error " + type + ": " + message + " (" + when + ")");
  }
  void on_result(int w, uint32_t gen, WorkerReply&& r) override {
    add(w, gen, "result " + std::to_string(r.task) + " " + r.payload);
  }
  void on_unreadable(int w, uint32_t gen, const std::string& what) override { add(w, gen, "unreadable " + what); }
  void on_down(int w, uint32_t gen, const WorkerExit& how) override { add(w, gen, "down " + how.describe()); }
  std::vector<std::string> lines;

 private:
  void add(int w, uint32_t gen, const std::string& what) {
    lines.push_back(std::to_string(w) + "/" + std::to_string(gen) + " " + what);
  }
};

class ShmTransportTest : public ::testing::Test {
 protected:
  ShmTransportTest() : rings_(2, /*capacity=*/4096) {
    SlabPolicy policy;
    policy.num_workers = 2;
    slabs_ = std::make_unique<SlabStore>(2, policy, false, nullptr);
    LinkFactory make = [this](const Link::Spec& spec, LinkFrames* frames) -> std::unique_ptr<Link> {
      wire_.reader = frames;
      wire_.gen = spec.generation;
      return std::make_unique<RecordingLink>(wire_, spec.generation);
    };
    t_ = std::make_unique<ShmTransport>(Link::Spec{1, 0, false, ""}, std::move(make), rings_, *slabs_, 8, &log_);
  }
  /// Incarnation `gen` started, its first frames queued and written.
  void start(uint32_t gen) {
    t_->reset(gen);
    t_->start(gen);
    t_->prepare("config");
    t_->flush();
  }
  std::vector<FrameType> types(size_t from = 0) const {
    std::vector<FrameType> out;
    for (size_t i = from; i < wire_.frames.size(); ++i) out.push_back(wire_.frames[i].type);
    return out;
  }

  WorkerRings rings_;
  std::unique_ptr<SlabStore> slabs_;
  Wire wire_;
  EventLog log_;
  std::unique_ptr<ShmTransport> t_;
};

TEST_F(ShmTransportTest, EachIncarnationBeginsWithItsStatePageItsRingsAndItsConfiguration) {
  start(3);
  EXPECT_EQ(types(), (std::vector<FrameType>{FrameType::StatePage, FrameType::Rings, FrameType::Init}));
  const RingsFrame r = RingsFrame::decode(wire_.frames[1].body);
  EXPECT_EQ(r.index, 1u);
  EXPECT_EQ(r.workers, 2u);
  EXPECT_EQ(r.generation, 3u);
  EXPECT_EQ(wire_.frames[2].body, "config");
  EXPECT_FALSE(t_->dirty());
}

TEST_F(ShmTransportTest, WhatTheWorkerIsToldBecomesItsFramesInOrderAndWaitsForTheFlush) {
  start(1);
  const size_t first = wire_.frames.size();
  const std::string state7 = Generator(7).state();
  t_->set_rng(7, state7);
  t_->task_seeds(TaskSeeds{42, 5});
  t_->restart_stream();
  StreamResume resume;
  resume.state = "s";
  resume.skip = 3;
  resume.rng = "rng";
  t_->resume_stream(resume);
  t_->init("again");
  EXPECT_TRUE(t_->dirty());
  EXPECT_EQ(wire_.frames.size(), first) << "nothing is written before the flush";
  t_->flush();
  EXPECT_FALSE(t_->dirty());
  ASSERT_EQ(types(first), (std::vector<FrameType>{FrameType::SetRng, FrameType::TaskSeeds, FrameType::Epoch,
                                                  FrameType::ResumeStream, FrameType::Init}));
  const SetRngFrame set = SetRngFrame::decode(wire_.frames[first].body);
  EXPECT_EQ(set.task, 7u);
  EXPECT_EQ(set.state, state7);
  const TaskSeedsFrame seeds = TaskSeedsFrame::decode(wire_.frames[first + 1].body);
  EXPECT_EQ(seeds.base_seed, 42u);
  EXPECT_EQ(seeds.task_base, 5u);
  const StreamResume back = decode_stream_resume(wire_.frames[first + 3].body);
  EXPECT_EQ(back.state, "s");
  EXPECT_EQ(back.skip, 3u);
  EXPECT_EQ(back.rng, "rng");
  EXPECT_EQ(wire_.frames[first + 4].body, "again");
  // The worker is told how many socket frames to read before its next ring task.
  EXPECT_EQ(wire_.end->socket_frames(), 3u + 5u);
}

TEST_F(ShmTransportTest, ATaskGoesInTheRingAfterItsSlabsAddSlabAndATooLargeOneTakesTheSocket) {
  start(1);
  const size_t first = wire_.frames.size();
  const uint64_t slab = slabs_->acquire_at_least(1, 1024);
  t_->send_task(10, slab, IndexBatch{1, 2, 3});
  t_->flush();
  ASSERT_EQ(types(first), (std::vector<FrameType>{FrameType::AddSlab}));
  EXPECT_EQ(AddSlabFrame::decode(wire_.frames[first].body).id, slab);
  Frame task;
  uint64_t socket_before = 0;
  ASSERT_TRUE(wire_.end->take_task(task, socket_before));
  EXPECT_EQ(socket_before, 4u) << "the task is read after the AddSlab of its slab";
  // A task larger than the 4 KiB ring: on the socket, in order.
  IndexBatch big(2000, 9);
  t_->send_task(11, slab, big);
  t_->flush();
  EXPECT_EQ(types(first + 1), (std::vector<FrameType>{FrameType::Task}));
  EXPECT_FALSE(wire_.end->take_task(task, socket_before));
}

TEST_F(ShmTransportTest, EachFrameTheReaderBringsIsOneTypedEventForThePool) {
  start(2);
  ASSERT_NE(wire_.reader, nullptr);
  Frame hello{FrameType::Hello, PidFrame{12}.encode(), UniqueFd()};
  wire_.reader->on_frame(1, 2, hello);
  Frame ready{FrameType::Ready, PidFrame{12}.encode(), UniqueFd()};
  wire_.reader->on_frame(1, 2, ready);
  Frame stream{FrameType::StreamStart, encode_stream_start(9, StreamStart{"r9", std::string("st")}), UniqueFd()};
  wire_.reader->on_frame(1, 2, stream);
  Frame init{FrameType::InitError, InitErrorFrame{"ValueError", "bad root", "to restart its stream"}.encode(),
             UniqueFd()};
  wire_.reader->on_frame(1, 2, init);
  WorkerReply r;
  r.task = 4;
  r.payload = "big batch";
  auto [type, body] = encode_reply(r);
  Frame result{static_cast<FrameType>(type), body, UniqueFd()};
  wire_.reader->on_frame(1, 2, result);
  Frame broken{FrameType::StreamStart, "\x01", UniqueFd()};
  wire_.reader->on_frame(1, 2, broken);
  WorkerExit killed;
  killed.kind = WorkerExit::Kind::Signal;
  killed.code = 9;
  wire_.reader->on_down(1, 2, killed);
  ASSERT_EQ(log_.lines.size(), 7u);
  EXPECT_EQ(log_.lines[0], "1/2 hello");
  EXPECT_EQ(log_.lines[1], "1/2 ready");
  EXPECT_EQ(log_.lines[2], "1/2 stream_start 9 rng=r9 state=st");
  EXPECT_EQ(log_.lines[3], "1/2 init_error ValueError: bad root (to restart its stream)");
  EXPECT_EQ(log_.lines[4], "1/2 result 4 big batch");
  EXPECT_EQ(log_.lines[5].rfind("1/2 unreadable a frame the main process cannot read (StreamStart): ", 0), 0u)
      << log_.lines[5];
  EXPECT_EQ(log_.lines[6].rfind("1/2 down killed by signal", 0), 0u) << log_.lines[6];
}

TEST_F(ShmTransportTest, TheResultsAWorkerPublishesAreTakenDecodedAndAnUnreadableOneNamesItself) {
  start(1);
  for (uint64_t task : {5u, 6u}) {
    WorkerReply r;
    r.task = task;
    r.payload = "batch " + std::to_string(task);
    auto [type, body] = encode_reply(r);
    ASSERT_TRUE(wire_.end->write_result(static_cast<FrameType>(type), body, [] { return false; }));
  }
  std::vector<std::string> got;
  EXPECT_EQ(t_->take_results([&](WorkerReply&& r) { got.push_back(std::to_string(r.task) + " " + r.payload); }), 2u);
  EXPECT_EQ(got, (std::vector<std::string>{"5 batch 5", "6 batch 6"}));
  // A frame that is no reply: the error names the worker and the frame; the ring is reset.
  ASSERT_TRUE(wire_.end->write_result(FrameType::Hello, "x", [] { return false; }));
  try {
    t_->take_results([](WorkerReply&&) {});
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("DataLoader worker 1 sent a result the main process cannot read (Hello)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(t_->take_results([](WorkerReply&&) {}), 0u);
}

TEST_F(ShmTransportTest, ShutdownDropsWhatWasQueuedClosesTheRingsAndTellsTheWorker) {
  start(1);
  const size_t first = wire_.frames.size();
  t_->set_rng(1, Generator(1).state());
  t_->say_shutdown();
  EXPECT_FALSE(t_->dirty());
  EXPECT_EQ(types(first), (std::vector<FrameType>{FrameType::Shutdown}));
  EXPECT_TRUE(wire_.end->closed());
  t_->stop();
  EXPECT_TRUE(wire_.stopped);
}

}  // namespace
}  // namespace loader::runtime
