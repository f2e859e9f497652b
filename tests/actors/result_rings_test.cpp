// ResultRings / RingWriter: the shared-memory path of Result frames, driven directly
// (one writer thread, the test as the consumer), without a pipeline or processes.
#include "loader/runtime/result_rings.h"

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

TEST(ResultRings, FramesComeOutWholeAndInOrderAcrossTheWrap) {
  ResultRings rings(2, 4096);
  rings.reset(1, 7);
  RingWriter w(rings.segment()->data(), rings.layout(), 1, 7);
  auto never = [] { return false; };
  Frame f;
  EXPECT_FALSE(rings.take(1, f));
  EXPECT_FALSE(rings.take(0, f));  // the other ring is untouched
  // Frames of uneven sizes, taken as they come: the write position wraps many times.
  for (int i = 0; i < 2000; ++i) {
    const size_t size = static_cast<size_t>(i * 37 % 1500);
    ASSERT_TRUE(w.write(FrameType::Result, body_of(i, size), never));
    ASSERT_TRUE(rings.take(1, f)) << i;
    EXPECT_EQ(f.type, FrameType::Result);
    EXPECT_EQ(f.body, body_of(i, size)) << i;
    EXPECT_FALSE(rings.take(1, f));
  }
}

TEST(ResultRings, AFrameLargerThanHalfARingIsRefused) {
  ResultRings rings(1, 4096);
  rings.reset(0, 1);
  RingWriter w(rings.segment()->data(), rings.layout(), 0, 1);
  auto never = [] { return false; };
  EXPECT_TRUE(w.write(FrameType::Result, std::string(2048 - 5, 'x'), never));
  EXPECT_FALSE(w.write(FrameType::Result, std::string(2048 - 4, 'x'), never));  // goes on the socket
}

TEST(ResultRings, AWriterOfAnOlderGenerationWritesNothing) {
  ResultRings rings(1, 4096);
  rings.reset(0, 1);
  RingWriter old_writer(rings.segment()->data(), rings.layout(), 0, 1);
  auto never = [] { return false; };
  ASSERT_TRUE(old_writer.write(FrameType::Result, "first", never));
  rings.reset(0, 2);  // the next incarnation's ring: empty
  Frame f;
  EXPECT_FALSE(rings.take(0, f));
  EXPECT_FALSE(old_writer.write(FrameType::Result, "late", never));
  EXPECT_FALSE(rings.take(0, f));
  RingWriter next(rings.segment()->data(), rings.layout(), 0, 2);
  ASSERT_TRUE(next.write(FrameType::Result, "new", never));
  ASSERT_TRUE(rings.take(0, f));
  EXPECT_EQ(f.body, "new");
}

TEST(ResultRings, AFullRingWaitsForTheConsumerOrGivesUpWhenThePeerIsGone) {
  ResultRings rings(1, 4096);
  rings.reset(0, 1);
  RingWriter w(rings.segment()->data(), rings.layout(), 0, 1);
  auto never = [] { return false; };
  // Fill it: 3 frames of 1,200 bytes fit in 4,096, a fourth does not.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w.write(FrameType::Result, body_of(i, 1200 - 5), never));
  std::atomic<bool> wrote{false};
  std::thread writer([&] { wrote = w.write(FrameType::Result, body_of(3, 1200 - 5), never); });
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
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(w.write(FrameType::Result, body_of(i, 1200 - 5), never));
  int asked = 0;
  EXPECT_FALSE(w.write(FrameType::Result, body_of(9, 1200 - 5), [&] { return ++asked >= 2; }));
  EXPECT_EQ(asked, 2);
}

TEST(ResultRings, TheDoorbellWakesASleeperAndOnlyWhenItSleeps) {
  ResultRings rings(1, 4096);
  rings.reset(0, 1);
  RingWriter w(rings.segment()->data(), rings.layout(), 0, 1);
  auto never = [] { return false; };
  // A write while nobody sleeps changes the sequence: a sleeper that read it before
  // returns at once instead of sleeping.
  uint32_t seq = rings.prepare_sleep();
  ASSERT_TRUE(w.write(FrameType::Result, "a", never));
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
    w.write(FrameType::Result, "b", never);
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

}  // namespace
}  // namespace loader::runtime
