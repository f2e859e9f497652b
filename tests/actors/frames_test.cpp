// Every frame body of the worker protocol (frames.h) round-trips through its encoder
// and decoder, and a body that is cut short, too long or lies about its counts is a
// RuntimeError naming the frame, never a read past its end.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "loader/error.h"
#include "loader/generator.h"
#include "loader/runtime/frames.h"
#include "loader/runtime/os/unique_fd.h"

namespace loader::runtime {
namespace {

/// Every cut of `body` short of its length, and `body` with a byte more, fail to decode.
template <class Decode>
void expect_only_whole_bodies(const std::string& body, Decode decode, bool trailing_allowed = false) {
  for (size_t n = 0; n < body.size(); ++n) {
    std::string cut = body.substr(0, n);
    bool threw = false;
    try {
      decode(cut);
    } catch (const RuntimeError& e) {
      threw = true;
      EXPECT_NE(std::string(e.what()).find("frame"), std::string::npos) << e.what();
    }
    // A prefix may be a whole smaller body only where the format has an optional tail.
    if (!trailing_allowed) {
      EXPECT_TRUE(threw) << "a body cut to " << n << " of " << body.size() << " bytes was read";
    }
  }
  if (!trailing_allowed) {
    EXPECT_THROW(decode(body + "x"), RuntimeError);
  }
}

TEST(Frames, TaskRoundTripsAndRefusesBadCounts) {
  const TaskFrame t{41, kInlineSlab, {5, -1, 0, 1ll << 40}};
  const TaskFrame d = TaskFrame::decode(t.encode());
  EXPECT_EQ(d.task, 41u);
  EXPECT_EQ(d.slab, kInlineSlab);
  EXPECT_EQ(d.indices, t.indices);
  EXPECT_EQ(TaskFrame::encode(41, kInlineSlab, t.indices), t.encode());
  EXPECT_TRUE(TaskFrame::decode(TaskFrame{1, 2, {}}.encode()).indices.empty());
  expect_only_whole_bodies(t.encode(), [](const std::string& b) { TaskFrame::decode(b); });
  // A count larger than the indices that follow.
  std::string lying;
  put_u64(lying, 1);
  put_u64(lying, 2);
  put_u64(lying, 1000000);
  put_u64(lying, 7);
  EXPECT_THROW(TaskFrame::decode(lying), RuntimeError);
}

TEST(Frames, SlabAndPageFramesRoundTrip) {
  const UseSlabFrame u = UseSlabFrame::decode(UseSlabFrame{9, 3}.encode());
  EXPECT_EQ(u.task, 9u);
  EXPECT_EQ(u.slab, 3u);
  expect_only_whole_bodies(UseSlabFrame{9, 3}.encode(), [](const std::string& b) { UseSlabFrame::decode(b); });
  const AddSlabFrame a = AddSlabFrame::decode(AddSlabFrame{4, 1 << 20}.encode());
  EXPECT_EQ(a.id, 4u);
  EXPECT_EQ(a.size, 1u << 20);
  EXPECT_THROW(AddSlabFrame::decode(AddSlabFrame{4, 0}.encode()), RuntimeError);
  expect_only_whole_bodies(AddSlabFrame{4, 9}.encode(), [](const std::string& b) { AddSlabFrame::decode(b); });
  EXPECT_EQ(DropSlabFrame::decode(DropSlabFrame{12}.encode()).id, 12u);
  EXPECT_EQ(StatePageFrame::decode(StatePageFrame{8192}.encode()).size, 8192u);
  expect_only_whole_bodies(DropSlabFrame{12}.encode(), [](const std::string& b) { DropSlabFrame::decode(b); });
}

TEST(Frames, RingsRoundTripAndRefuseImpossibleLayouts) {
  const RingsFrame r{128 * 1024, 3, 2, 7};
  const RingsFrame d = RingsFrame::decode(r.encode());
  EXPECT_EQ(d.capacity, r.capacity);
  EXPECT_EQ(d.workers, 3u);
  EXPECT_EQ(d.index, 2u);
  EXPECT_EQ(d.generation, 7u);
  expect_only_whole_bodies(r.encode(), [](const std::string& b) { RingsFrame::decode(b); });
  EXPECT_THROW(RingsFrame::decode(RingsFrame{128 * 1024, 3, 3, 1}.encode()), RuntimeError);  // index past the workers
  EXPECT_THROW(RingsFrame::decode(RingsFrame{16, 3, 0, 1}.encode()), RuntimeError);          // a tiny ring
  EXPECT_THROW(RingsFrame::decode(RingsFrame{128 * 1024, 0, 0, 1}.encode()), RuntimeError);  // no worker
}

TEST(Frames, GeneratorAndSeedFramesRoundTrip) {
  Generator g(5);
  const SetRngFrame s{77, g.state()};
  const SetRngFrame d = SetRngFrame::decode(s.encode());
  EXPECT_EQ(d.task, 77u);
  EXPECT_EQ(d.state, s.state);
  EXPECT_THROW(SetRngFrame::decode(SetRngFrame{1, "short"}.encode()), RuntimeError);
  expect_only_whole_bodies(s.encode(), [](const std::string& b) { SetRngFrame::decode(b); });
  const TaskSeedsFrame t = TaskSeedsFrame::decode(TaskSeedsFrame{123456789, 640}.encode());
  EXPECT_EQ(t.base_seed, 123456789u);
  EXPECT_EQ(t.task_base, 640u);
  StreamResume r;
  r.skip = 3;
  r.rng = "rng-bytes";
  r.state = std::string("\0state", 6);
  const StreamResume rd = decode_stream_resume(encode_stream_resume(r));
  EXPECT_EQ(rd.skip, 3u);
  EXPECT_EQ(rd.rng, r.rng);
  EXPECT_EQ(rd.state, r.state);
  expect_only_whole_bodies(encode_stream_resume(r), [](const std::string& b) { decode_stream_resume(b); });
}

TEST(Frames, WorkerFramesRoundTrip) {
  EXPECT_EQ(PidFrame::decode(PidFrame{4321}.encode()).pid, 4321);
  const InitErrorFrame e{"ValueError", "bad root", "as its epoch began"};
  const InitErrorFrame ed = InitErrorFrame::decode(e.encode());
  EXPECT_EQ(ed.type, e.type);
  EXPECT_EQ(ed.message, e.message);
  EXPECT_EQ(ed.when, e.when);
  const InitErrorFrame start = InitErrorFrame::decode(InitErrorFrame{"OSError", "no file", ""}.encode());
  EXPECT_TRUE(start.when.empty());  // "to start"
  EXPECT_THROW(InitErrorFrame::decode(e.encode() + "z"), RuntimeError);
  // Binary generator and dataset states, with a state and without one (no state hooks).
  const StreamStart with{std::string("\0rng\xff", 5), std::string("state\0", 6)};
  const StreamStart without{"rng", std::nullopt};
  for (const StreamStart& s : {with, without}) {
    auto [task, d] = decode_stream_start(encode_stream_start(77, s));
    EXPECT_EQ(task, 77u);
    EXPECT_EQ(d.rng, s.rng);
    EXPECT_EQ(d.state, s.state);
    expect_only_whole_bodies(encode_stream_start(77, s), [](const std::string& b) { decode_stream_start(b); });
  }
}

TEST(Frames, EveryReplyKindRoundTrips) {
  std::vector<WorkerReply> replies(4);
  replies[0].kind = WorkerReply::Kind::Result;
  replies[0].task = 3;
  replies[0].slab = kInlineSlab;
  replies[0].bytes = 12;
  replies[0].busy_ns = 999;
  replies[0].collate_ns = 333;
  replies[0].payload = std::string("\0\1payload", 9);
  replies[1].kind = WorkerReply::Kind::Need;
  replies[1].task = 4;
  replies[1].bytes = 1 << 30;
  replies[2].kind = WorkerReply::Kind::Error;
  replies[2].task = 5;
  replies[2].error_type = "IndexError";
  replies[2].error_message = "Caught IndexError in DataLoader worker process 0.";
  replies[2].busy_ns = 7;
  replies[2].collate_ns = 2;
  replies[3].kind = WorkerReply::Kind::IterEnd;
  replies[3].task = 6;
  for (const WorkerReply& r : replies) {
    auto [type, body] = encode_reply(r);
    EXPECT_TRUE(is_reply(static_cast<FrameType>(type)));
    const WorkerReply d = decode_reply(type, body);
    EXPECT_EQ(d.kind, r.kind);
    EXPECT_EQ(d.task, r.task);
    EXPECT_EQ(d.bytes, r.bytes);
    EXPECT_EQ(d.busy_ns, r.busy_ns);
    EXPECT_EQ(d.collate_ns, r.collate_ns);
    EXPECT_EQ(d.payload, r.payload);
    EXPECT_EQ(d.error_type, r.error_type);
    EXPECT_EQ(d.error_message, r.error_message);
    if (r.kind == WorkerReply::Kind::Result) {
      EXPECT_EQ(d.slab, r.slab);
    }
    // A Result's payload is the rest of the body: any cut of it is still a Result.
    if (r.kind != WorkerReply::Kind::Result) {
      expect_only_whole_bodies(body, [type = type](const std::string& b) { decode_reply(type, b); });
    }
  }
  EXPECT_THROW(decode_reply(static_cast<uint8_t>(FrameType::Task), std::string(8, '\0')), RuntimeError);
}

// A remote worker's reply on its bulk stream, through a socket: the head (generator
// states, the reply without its batch), then a Result's batch, whose tensors are read
// straight into the batch the main process gets.
TEST(Frames, ARemoteReplyCrossesASocketWithItsBatchReadIntoItsTensors) {
  std::vector<WorkerReply> replies(4);
  replies[0].kind = WorkerReply::Kind::Result;
  replies[0].task = 9;
  replies[0].busy_ns = 123;
  replies[0].collate_ns = 45;
  replies[0].value = std::make_shared<Value>(Value::dict(
      {{"x", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
       {"t", Tensor::from_vector<int64_t>({1, 2, 3, 4}, {2, 2}).transpose(0, 1)},
       {"y", Value::list({Tensor::zeros({0, 4}, DType::UInt8), Value("label"), Value(int64_t{7})})}}));
  replies[1].kind = WorkerReply::Kind::Error;
  replies[1].task = 10;
  replies[1].error_type = "ValueError";
  replies[1].error_message = "Caught ValueError in DataLoader worker process 1.";
  replies[2].kind = WorkerReply::Kind::IterEnd;
  replies[2].task = 11;
  replies[3].kind = WorkerReply::Kind::Result;  // a batch already encoded, and one without a tensor
  replies[3].task = 12;
  encode_value(Value::tuple({Value(int64_t{1}), Value("two")}), replies[3].payload);
  const std::string before(Generator::kStateBytes, '\7'), after("after-state");
  for (const WorkerReply& r : replies) {
    int sv[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    UniqueFd a(sv[0]), b(sv[1]);
    const RemoteReplyFrame f = RemoteReplyFrame::encode(r, before, after);
    std::vector<std::string_view> parts{f.front};
    uint64_t body = f.front.size();
    for (const Tensor& t : f.tensors) {
      parts.emplace_back(static_cast<const char*>(t.data_ptr()), t.nbytes());
      body += t.nbytes();
    }
    std::thread writer([&] { EXPECT_TRUE(write_frame_parts(a.get(), FrameType::RemoteReply, parts)); });
    char header[5];
    ASSERT_EQ(read_bytes(b.get(), header, 5), ReadStatus::Ok);
    uint32_t len = 0;
    std::memcpy(&len, header, 4);
    EXPECT_EQ(len, body + 1);
    EXPECT_EQ(static_cast<FrameType>(header[4]), FrameType::RemoteReply);
    WorkerReply d;
    std::string got_before, got_after;
    ASSERT_EQ(RemoteReplyFrame::read(b.get(), body, d, &got_before, &got_after), ReadStatus::Ok);
    writer.join();
    EXPECT_EQ(d.kind, r.kind);
    EXPECT_EQ(d.task, r.task);
    EXPECT_EQ(d.busy_ns, r.busy_ns);
    EXPECT_EQ(d.collate_ns, r.collate_ns);
    EXPECT_EQ(d.error_type, r.error_type);
    EXPECT_EQ(d.error_message, r.error_message);
    EXPECT_TRUE(d.payload.empty());
    if (r.kind == WorkerReply::Kind::Result) {
      ASSERT_TRUE(d.value);
      EXPECT_EQ(*d.value, r.value ? *r.value : decode_value(r.payload));
    } else {
      EXPECT_FALSE(d.value);
    }
    EXPECT_EQ(got_before, before);
    EXPECT_EQ(got_after, after);
    // The head alone refuses every cut of itself.
    Reader in(f.front);
    const std::string head = in.string();
    expect_only_whole_bodies(head, [&](const std::string& h) { RemoteReplyFrame::decode_head(h, nullptr, nullptr); },
                             r.kind == WorkerReply::Kind::Result);
  }
}

// A body whose parts claim more than the frame holds, or bytes after a reply that has
// none, is refused naming the frame; a stream that ends inside the batch is not Ok.
TEST(Frames, ARemoteReplyThatLiesAboutItsPartsIsRefused) {
  auto read_body = [](const std::string& body, uint64_t claimed) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) throw std::runtime_error("socketpair");
    UniqueFd a(sv[0]), b(sv[1]);
    EXPECT_EQ(::write(a.get(), body.data(), body.size()), static_cast<ssize_t>(body.size()));
    ::shutdown(a.get(), SHUT_WR);
    WorkerReply d;
    return RemoteReplyFrame::read(b.get(), claimed, d, nullptr, nullptr);
  };
  WorkerReply error;
  error.kind = WorkerReply::Kind::Error;
  error.error_type = "ValueError";
  const std::string front = RemoteReplyFrame::encode(error, "", "").front;
  EXPECT_EQ(read_body(front, front.size()), ReadStatus::Ok);
  try {
    read_body(front + "stray", front.size() + 5);
    ADD_FAILURE() << "bytes after an Error reply were read";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("RemoteReply"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_body(front, front.size() - 1), RuntimeError);  // the head is longer than the body
  WorkerReply result;
  result.value = std::make_shared<Value>(Value::list({Tensor::zeros({1000}, DType::Float32)}));
  const RemoteReplyFrame f = RemoteReplyFrame::encode(result, "", "");
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_THROW(read_body(f.front, f.front.size() + 10), RuntimeError);    // 10 bytes for 4000
  EXPECT_EQ(read_body(f.front, f.front.size() + 4000), ReadStatus::Eof);  // the stream ends inside the batch
}

// The bulk stream's reader (RemoteTransport's bulk reader thread): a header that claims
// more than a frame may have is an error naming the claim, read before any body is
// allocated; a frame of a type the bulk stream does not carry is refused; real frames pass.
TEST(Frames, ABulkStreamFrameThatClaimsMoreThanTheCapIsRefusedBeforeAnAllocation) {
  auto read_stream = [](const std::string& bytes, BulkFrame& out) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) throw std::runtime_error("socketpair");
    UniqueFd a(sv[0]), b(sv[1]);
    EXPECT_EQ(::write(a.get(), bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::shutdown(a.get(), SHUT_WR);
    return read_bulk_frame(b.get(), out);
  };
  auto header = [](uint32_t len, FrameType type) {
    std::string h(kFrameHeaderBytes, '\0');
    std::memcpy(h.data(), &len, 4);
    h[4] = static_cast<char>(type);
    return h;
  };
  for (FrameType type : {FrameType::Ready, FrameType::StreamStart, FrameType::InitError, FrameType::RemoteReply}) {
    SCOPED_TRACE(frame_type_name(type));
    for (uint32_t len : {0xFFFFFFFFu, static_cast<uint32_t>(kMaxFrameBody + 2)}) {
      BulkFrame f;
      try {
        read_stream(header(len, type) + "abc", f);  // a peer that claims ~4 GiB and sends 3 bytes
        ADD_FAILURE() << "a frame claiming " << len << " bytes was read";
      } catch (const RuntimeError& e) {
        EXPECT_NE(std::string(e.what()).find(std::to_string(len - 1)), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("more than a frame may have"), std::string::npos) << e.what();
      }
      EXPECT_TRUE(f.body.empty());
    }
  }
  {
    BulkFrame f;
    EXPECT_THROW(read_stream(header(1, FrameType::Task), f), RuntimeError);  // not a bulk stream's frame
    EXPECT_THROW(read_stream(header(0, FrameType::Ready), f), RuntimeError);  // no type byte
  }
  // Real frames: a Ready body and an Error reply.
  {
    BulkFrame f;
    ASSERT_EQ(read_stream(header(4, FrameType::Ready) + "pid", f), ReadStatus::Ok);
    EXPECT_EQ(f.type, FrameType::Ready);
    EXPECT_EQ(f.body, "pid");
  }
  {
    WorkerReply error;
    error.kind = WorkerReply::Kind::Error;
    error.task = 9;
    error.error_type = "ValueError";
    const std::string front = RemoteReplyFrame::encode(error, "b", "a").front;
    BulkFrame f;
    ASSERT_EQ(read_stream(header(static_cast<uint32_t>(front.size() + 1), FrameType::RemoteReply) + front, f),
              ReadStatus::Ok);
    EXPECT_EQ(f.reply.task, 9u);
    EXPECT_EQ(f.reply.error_type, "ValueError");
    EXPECT_EQ(f.before, "b");
    EXPECT_EQ(f.after, "a");
  }
}

}  // namespace
}  // namespace loader::runtime
