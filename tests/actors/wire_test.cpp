// The parent <-> worker-process frames over a real socketpair: round trips,
// descriptors passed with a frame, bodies larger than the socket buffer, EOF,
// timeouts, truncated frames.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>

#include "loader/error.h"
#include "loader/runtime/os/shm.h"
#include "loader/runtime/wire.h"

namespace loader::runtime {
namespace {

/// Both ends of a Unix stream socket, closed at the end of the test.
struct SocketPair {
  int parent = -1;
  int child = -1;
  SocketPair() {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) throw std::runtime_error("socketpair failed");
    parent = sv[0];
    child = sv[1];
  }
  ~SocketPair() {
    close_parent();
    close_child();
  }
  void close_parent() {
    if (parent >= 0) close(parent);
    parent = -1;
  }
  void close_child() {
    if (child >= 0) close(child);
    child = -1;
  }
};

std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + i / 977) & 0xff);
  return s;
}

TEST(Wire, FramesRoundTripInOrder) {
  SocketPair sp;
  std::string task;
  put_u64(task, 7);
  put_u64(task, 3);
  put_string(task, "indices");
  ASSERT_TRUE(write_frame(sp.parent, FrameType::Task, task));
  ASSERT_TRUE(write_frame(sp.parent, FrameType::Epoch, {}));
  ASSERT_TRUE(write_frame(sp.parent, FrameType::Shutdown, "x"));

  Frame f;
  ASSERT_EQ(read_frame(sp.child, f, 1000), ReadStatus::Ok);
  EXPECT_EQ(f.type, FrameType::Task);
  EXPECT_EQ(f.body, task);
  EXPECT_FALSE(f.fd);
  Reader in(f.body);
  EXPECT_EQ(in.u64(), 7u);
  EXPECT_EQ(in.u64(), 3u);
  EXPECT_EQ(in.string(), "indices");
  EXPECT_EQ(in.remaining(), 0u);

  ASSERT_EQ(read_frame(sp.child, f, 1000), ReadStatus::Ok);
  EXPECT_EQ(f.type, FrameType::Epoch);
  EXPECT_TRUE(f.body.empty());
  ASSERT_EQ(read_frame(sp.child, f, 1000), ReadStatus::Ok);
  EXPECT_EQ(f.type, FrameType::Shutdown);
  EXPECT_EQ(f.body, "x");
}

TEST(Wire, WorksInBothDirections) {
  SocketPair sp;
  std::string body;
  put_u64(body, 4242);
  ASSERT_TRUE(write_frame(sp.child, FrameType::Ready, body));
  Frame f;
  ASSERT_EQ(read_frame(sp.parent, f, 1000), ReadStatus::Ok);
  EXPECT_EQ(f.type, FrameType::Ready);
  EXPECT_EQ(Reader(f.body).u64(), 4242u);
}

TEST(Wire, PassesADescriptorThatMapsTheSameSharedMemory) {
  SocketPair sp;
  auto seg = ShmSegment::create(1 << 16);
  std::string body;
  put_u64(body, 9);
  put_u64(body, seg->size());
  ASSERT_TRUE(write_frame(sp.parent, FrameType::AddSlab, body, seg->fd()));

  Frame f;
  ASSERT_EQ(read_frame(sp.child, f, 1000), ReadStatus::Ok);
  EXPECT_EQ(f.type, FrameType::AddSlab);
  ASSERT_TRUE(f.fd) << "the descriptor travels with the frame";
  EXPECT_NE(f.fd.get(), seg->fd());
  EXPECT_TRUE(fcntl(f.fd.get(), F_GETFD) & FD_CLOEXEC) << "received descriptors must not leak into exec'd programs";
  struct stat a {}, b {};
  ASSERT_EQ(fstat(seg->fd(), &a), 0);
  ASSERT_EQ(fstat(f.fd.get(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(a.st_dev, b.st_dev);

  Reader in(f.body);
  EXPECT_EQ(in.u64(), 9u);
  uint64_t size = in.u64();
  ShmMapping m(std::move(f.fd), size);  // closes the descriptor
  std::memcpy(m.data(), "written by the worker", 22);
  EXPECT_EQ(std::memcmp(seg->data(), "written by the worker", 22), 0) << "both sides see one segment";
}

// A frame written in parts (a head and a batch payload from where they are) is the
// frame of their concatenation; empty parts and a large payload included.
TEST(Wire, AFrameWrittenInPartsReadsAsOneBody) {
  SocketPair sp;
  const std::string head = "head", big = pattern(12u << 20);
  bool wrote = false;
  std::thread writer([&] {
    wrote = write_frame_parts(sp.parent, FrameType::RemoteReply, {head, std::string_view(), big}) &&
            write_frame_parts(sp.parent, FrameType::Ready, {});
  });
  Frame f, g;
  const ReadStatus st = read_frame(sp.child, f, 5000);
  const ReadStatus st2 = read_frame(sp.child, g, 5000);
  shutdown(sp.child, SHUT_RDWR);
  writer.join();
  ASSERT_TRUE(wrote);
  ASSERT_EQ(st, ReadStatus::Ok);
  EXPECT_EQ(f.type, FrameType::RemoteReply);
  EXPECT_TRUE(f.body == head + big) << "body differs";
  ASSERT_EQ(st2, ReadStatus::Ok);
  EXPECT_EQ(g.type, FrameType::Ready);
  EXPECT_TRUE(g.body.empty());
  char c;
  shutdown(sp.parent, SHUT_WR);
  EXPECT_EQ(read_bytes(sp.child, &c, 1), ReadStatus::Eof);
}

TEST(Wire, LargeBodiesCrossTheSocketWhileTheReaderDrainsIt) {
  SocketPair sp;
  const std::string big = pattern(24u << 20);  // far beyond the socket buffer
  auto seg = ShmSegment::create(4096);
  bool wrote = false;
  std::thread writer([&] {
    wrote = write_frame(sp.parent, FrameType::Result, big, seg->fd()) &&
            write_frame(sp.parent, FrameType::Need, "after");
  });
  Frame f;
  ReadStatus st = read_frame(sp.child, f, 5000);
  Frame g;
  ReadStatus st2 = read_frame(sp.child, g, 5000);
  shutdown(sp.child, SHUT_RDWR);  // never leave the writer blocked if a read failed
  writer.join();
  ASSERT_TRUE(wrote);
  ASSERT_EQ(st, ReadStatus::Ok);
  EXPECT_EQ(f.type, FrameType::Result);
  EXPECT_EQ(f.body.size(), big.size());
  EXPECT_TRUE(f.body == big) << "body differs";
  EXPECT_TRUE(f.fd);
  f.fd.reset();
  ASSERT_EQ(st2, ReadStatus::Ok);
  EXPECT_EQ(g.type, FrameType::Need);
  EXPECT_EQ(g.body, "after");
  EXPECT_FALSE(g.fd);
}

TEST(Wire, ClosedPeerIsEndOfFile) {
  SocketPair sp;
  ASSERT_TRUE(write_frame(sp.parent, FrameType::Epoch, {}));
  sp.close_parent();
  Frame f;
  EXPECT_EQ(read_frame(sp.child, f, 1000), ReadStatus::Ok) << "frames sent before the close still arrive";
  EXPECT_EQ(read_frame(sp.child, f, 1000), ReadStatus::Eof);
}

TEST(Wire, WritingToAClosedPeerFailsWithoutSignal) {
  SocketPair sp;
  sp.close_child();
  EXPECT_FALSE(write_frame(sp.parent, FrameType::Task, pattern(1 << 20))) << "no SIGPIPE, just false";
}

TEST(Wire, ReadTimesOutWhenNothingArrives) {
  SocketPair sp;
  Frame f;
  EXPECT_EQ(read_frame(sp.child, f, 20), ReadStatus::Timeout);
  // The link still works afterwards.
  ASSERT_TRUE(write_frame(sp.parent, FrameType::Epoch, "e"));
  EXPECT_EQ(read_frame(sp.child, f, 1000), ReadStatus::Ok);
  EXPECT_EQ(f.body, "e");
}

TEST(Wire, FrameCutShortByTheWriterDyingIsAnError) {
  SocketPair sp;
  // Header announcing 100 bytes (type + 99 body bytes), then only 10 body bytes.
  uint32_t len = 100;
  char header[5];
  std::memcpy(header, &len, 4);
  header[4] = static_cast<char>(FrameType::Result);
  ASSERT_EQ(send(sp.parent, header, 5, MSG_NOSIGNAL), 5);
  ASSERT_EQ(send(sp.parent, "0123456789", 10, MSG_NOSIGNAL), 10);
  sp.close_parent();
  Frame f;
  EXPECT_EQ(read_frame(sp.child, f, 1000), ReadStatus::Error);
}

TEST(Wire, AbsurdFrameLengthIsRejected) {
  SocketPair sp;
  uint32_t len = 0;
  char header[5];
  std::memcpy(header, &len, 4);
  header[4] = 0;
  ASSERT_EQ(send(sp.parent, header, 5, MSG_NOSIGNAL), 5);
  Frame f;
  EXPECT_EQ(read_frame(sp.child, f, 1000), ReadStatus::Error) << "a zero length cannot hold the type byte";
}

TEST(Wire, ReaderRejectsAStringThatOverrunsTheBody) {
  std::string body;
  put_u64(body, 1000);
  body += "short";
  Reader in(body);
  EXPECT_THROW(in.string(), ValueError);
}

TEST(Wire, ReaderRestReturnsTheUnreadBytes) {
  std::string body;
  put_u64(body, 1);
  body += "payload";
  Reader in(body);
  EXPECT_EQ(in.u64(), 1u);
  EXPECT_EQ(in.rest(), "payload");
  EXPECT_EQ(in.remaining(), 0u);
}

TEST(Wire, FrameTypesHaveNames) {
  EXPECT_STREQ(frame_type_name(FrameType::AddSlab), "AddSlab");
  EXPECT_STREQ(frame_type_name(FrameType::IterEnd), "IterEnd");
  EXPECT_STREQ(frame_type_name(static_cast<FrameType>(200)), "?");
}

}  // namespace
}  // namespace loader::runtime
