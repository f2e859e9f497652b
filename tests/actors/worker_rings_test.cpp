// WorkerRings / WorkerRingEnd: the shared-memory path of Task and Result frames, driven
// directly (the test plays both ends, or one of them in a thread), without a pipeline
// or processes.
#include "loader/runtime/worker_rings.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <chrono>
#include <string>
#include <thread>

namespace loader::runtime {
namespace {

std::string body_of(int i, size_t size) {
  std::string b(size, static_cast<char>('a' + i % 26));
  if (size >= 4) std::memcpy(b.data(), &i, 4);
  return b;
}

TEST(WorkerRings, FramesComeOutWholeAndInOrderAcrossTheWrap) {
  WorkerRings rings(2, 4096);
  rings.reset(1, 7);
  WorkerRingEnd w(rings.segment()->data(), rings.layout(), 1, 7);
  auto never = [] { return false; };
  Frame f;
  EXPECT_FALSE(rings.take(1, f));
  EXPECT_FALSE(rings.take(0, f));  // the other ring is untouched
  // Frames of uneven sizes, taken as they come: the write position wraps many times.
  for (int i = 0; i < 2000; ++i) {
    const size_t size = static_cast<size_t>(i * 37 % 1500);
    ASSERT_TRUE(w.write_result(FrameType::Result, body_of(i, size), never));
    ASSERT_TRUE(rings.take(1, f)) << i;
    EXPECT_EQ(f.type, FrameType::Result);
    EXPECT_EQ(f.body, body_of(i, size)) << i;
    EXPECT_FALSE(rings.take(1, f));
  }
}

TEST(WorkerRings, AFrameLargerThanHalfARingIsRefused) {
  WorkerRings rings(1, 4096);
  rings.reset(0, 1);
  WorkerRingEnd w(rings.segment()->data(), rings.layout(), 0, 1);
  auto never = [] { return false; };
  EXPECT_TRUE(w.write_result(FrameType::Result, std::string(2048 - 5, 'x'), never));
  EXPECT_FALSE(w.write_result(FrameType::Result, std::string(2048 - 4, 'x'), never));  // goes on the socket
}

TEST(WorkerRings, AWriterOfAnOlderGenerationWritesNothing) {
  WorkerRings rings(1, 4096);
  rings.reset(0, 1);
  WorkerRingEnd old_writer(rings.segment()->data(), rings.layout(), 0, 1);
  auto never = [] { return false; };
  ASSERT_TRUE(old_writer.write_result(FrameType::Result, "first", never));
  rings.reset(0, 2);  // the next incarnation's ring: empty
  Frame f;
  EXPECT_FALSE(rings.take(0, f));
  EXPECT_FALSE(old_writer.write_result(FrameType::Result, "late", never));
  EXPECT_FALSE(rings.take(0, f));
  WorkerRingEnd next(rings.segment()->data(), rings.layout(), 0, 2);
  ASSERT_TRUE(next.write_result(FrameType::Result, "new", never));
  ASSERT_TRUE(rings.take(0, f));
  EXPECT_EQ(f.body, "new");
}

TEST(WorkerRings, AFullRingWaitsForTheConsumerOrGivesUpWhenThePeerIsGone) {
  WorkerRings rings(1, 4096);
  rings.reset(0, 1);
  WorkerRingEnd w(rings.segment()->data(), rings.layout(), 0, 1);
  auto never = [] { return false; };
  // Fill it: 3 frames of 1,200 bytes fit in 4,096, a fourth does not.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w.write_result(FrameType::Result, body_of(i, 1200 - 5), never));
  std::atomic<bool> wrote{false};
  std::thread writer([&] { wrote = w.write_result(FrameType::Result, body_of(3, 1200 - 5), never); });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_FALSE(wrote.load());  // still waiting for space
  Frame f;
  ASSERT_TRUE(rings.take(0, f));
  writer.join();
  EXPECT_TRUE(wrote.load());
  for (int i = 1; i < 4; ++i) {
    ASSERT_TRUE(rings.take(0, f));
    EXPECT_EQ(f.body, body_of(i, 1200 - 5));
  }
  // Full again, and nobody will read: the writer asks peer_gone and gives up.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w.write_result(FrameType::Result, body_of(i, 1200 - 5), never));
  int asked = 0;
  EXPECT_FALSE(w.write_result(FrameType::Result, body_of(9, 1200 - 5), [&] { return ++asked >= 2; }));
  EXPECT_EQ(asked, 2);
}

TEST(WorkerRings, TheDoorbellWakesASleeperAndOnlyWhenItSleeps) {
  WorkerRings rings(1, 4096);
  rings.reset(0, 1);
  WorkerRingEnd w(rings.segment()->data(), rings.layout(), 0, 1);
  auto never = [] { return false; };
  // A write while nobody sleeps changes the sequence: a sleeper that read it before
  // returns at once instead of sleeping.
  uint32_t seq = rings.prepare_sleep();
  ASSERT_TRUE(w.write_result(FrameType::Result, "a", never));
  auto t0 = std::chrono::steady_clock::now();
  rings.sleep(seq, std::nullopt);
  rings.awake();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  Frame f;
  ASSERT_TRUE(rings.take(0, f));
  // A sleeper is woken by a write from another thread.
  seq = rings.prepare_sleep();
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    w.write_result(FrameType::Result, "b", never);
  });
  rings.sleep(seq, std::chrono::steady_clock::now() + std::chrono::seconds(10));
  rings.awake();
  writer.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ASSERT_TRUE(rings.take(0, f));
  EXPECT_EQ(f.body, "b");
  // With nothing coming, a deadline ends the sleep.
  seq = rings.prepare_sleep();
  auto t1 = std::chrono::steady_clock::now();
  rings.sleep(seq, t1 + std::chrono::milliseconds(30));
  rings.awake();
  EXPECT_GE(std::chrono::steady_clock::now() - t1, std::chrono::milliseconds(25));
}


TEST(WorkerRings, TasksComeOutInOrderWithTheSocketFramesQueuedBeforeEach) {
  WorkerRings rings(2, 4096);
  rings.reset(1, 3);
  WorkerRingEnd end(rings.segment()->data(), rings.layout(), 1, 3);
  Frame f;
  uint64_t before = 99;
  EXPECT_EQ(end.socket_frames(), 0u);
  EXPECT_FALSE(end.take_task(f, before));
  // Tasks of uneven sizes across many wraps, each after a growing number of socket frames.
  for (int i = 0; i < 1000; ++i) {
    const std::string body = body_of(i, static_cast<size_t>(24 + i * 53 % 1900));
    ASSERT_TRUE(rings.post_task(1, static_cast<uint64_t>(i / 3), body)) << i;
    ASSERT_TRUE(end.take_task(f, before)) << i;
    EXPECT_EQ(f.type, FrameType::Task);
    EXPECT_EQ(f.body, body) << i;
    EXPECT_EQ(before, static_cast<uint64_t>(i / 3));
    EXPECT_FALSE(end.take_task(f, before));
  }
  // Written socket frames are counted for the incarnation they were written to only.
  rings.socket_frames_coming(1, 3, 2);
  rings.socket_frames_coming(1, 2, 5);  // an older incarnation's link
  EXPECT_EQ(end.socket_frames(), 2u);
  // A task that does not fit is refused (the pipeline sends it on the socket).
  EXPECT_FALSE(rings.post_task(1, 0, std::string(2048, 'x')));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(rings.post_task(1, 0, std::string(1200, 'y')));
  EXPECT_FALSE(rings.post_task(1, 0, std::string(1200, 'z')));  // full until the worker reads
  ASSERT_TRUE(end.take_task(f, before));
  EXPECT_TRUE(rings.post_task(1, 0, std::string(1200, 'z')));
}

TEST(WorkerRings, AWorkerAsleepOnItsTaskRingWakesForATaskASocketFrameAndTheClose) {
  WorkerRings rings(1, 4096);
  rings.reset(0, 1);
  WorkerRingEnd end(rings.segment()->data(), rings.layout(), 0, 1);
  Frame f;
  uint64_t before = 0;
  auto wait_for = [&](auto&& ready) {  // the worker's loop: prepare, look again, sleep
    const auto t0 = std::chrono::steady_clock::now();
    while (!ready()) {
      const uint32_t seq = end.prepare_sleep();
      if (!ready()) end.sleep(seq, std::chrono::seconds(10));
      end.awake();
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20)) return false;
    }
    return true;
  };
  // Each event comes from another thread while the worker sleeps; a lost wake-up would
  // cost the 10 s timeout and fail the time check.
  const auto t0 = std::chrono::steady_clock::now();
  std::thread main_process([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    rings.post_task(0, 0, "task");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    rings.socket_frames_coming(0, 1, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    rings.close(0);
  });
  EXPECT_TRUE(wait_for([&] { return end.take_task(f, before); }));
  EXPECT_EQ(f.body, "task");
  EXPECT_TRUE(wait_for([&] { return end.socket_frames() == 1; }));
  EXPECT_TRUE(wait_for([&] { return end.closed(); }));
  main_process.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  // With nothing coming, the worker's sleep ends at its timeout (then it looks at its socket).
  const uint32_t seq = end.prepare_sleep();
  EXPECT_FALSE(end.sleep(seq - 1, std::chrono::milliseconds(10)));  // the bell moved: at once
  EXPECT_TRUE(end.sleep(seq, std::chrono::milliseconds(20)));
  end.awake();
}

TEST(WorkerRings, ARingScribbledOverIsAnErrorNotAReadOutOfBounds) {
  WorkerRings rings(1, 4096);
  rings.reset(0, 1);
  WorkerRingEnd end(rings.segment()->data(), rings.layout(), 0, 1);
  auto* base = static_cast<char*>(rings.segment()->data());
  auto& results = *reinterpret_cast<RingHeader*>(base + rings.layout().result_header(0));
  Frame f;
  // More published than the ring holds.
  results.head.store(1u << 20);
  EXPECT_THROW(rings.take(0, f), RuntimeError);
  // A length beyond what was published.
  rings.reset(0, 1);
  ASSERT_TRUE(end.write_result(FrameType::Result, "abc", [] { return false; }));
  const uint32_t bad = 4000;
  std::memcpy(base + rings.layout().result_header(0) + RingLayout::kHeaderBytes, &bad, 4);
  EXPECT_THROW(rings.take(0, f), RuntimeError);
  // A task ring holding another frame type.
  rings.reset(0, 1);
  auto& tasks = *reinterpret_cast<RingHeader*>(base + rings.layout().task_header(0));
  ASSERT_TRUE(rings.post_task(0, 0, "0123456789"));
  base[rings.layout().task_header(0) + RingLayout::kHeaderBytes + 4] = static_cast<char>(FrameType::Shutdown);
  uint64_t before = 0;
  EXPECT_THROW(end.take_task(f, before), RuntimeError);
  EXPECT_EQ(tasks.generation.load(), 1u);
}

TEST(WorkerRings, AnEndOfAnOlderGenerationReadsNoTask) {
  WorkerRings rings(1, 4096);
  rings.reset(0, 1);
  WorkerRingEnd old_end(rings.segment()->data(), rings.layout(), 0, 1);
  rings.reset(0, 2);
  ASSERT_TRUE(rings.post_task(0, 0, "for the new one"));
  Frame f;
  uint64_t before = 0;
  EXPECT_FALSE(old_end.take_task(f, before));
  WorkerRingEnd next(rings.segment()->data(), rings.layout(), 0, 2);
  ASSERT_TRUE(next.take_task(f, before));
  EXPECT_EQ(f.body, "for the new one");
}

}  // namespace
}  // namespace loader::runtime
