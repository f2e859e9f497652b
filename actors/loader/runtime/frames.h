// The bodies of the frames between the main process and a worker (wire.h names the
// frame types and moves frames; this header says what is in each one).  Every body is
// encoded and decoded here and nowhere else: the main process's transports and the
// worker host use these types, and tests/actors/frames_test.cpp round-trips each one.
//
// Decoding checks what it reads against the body (a truncated or oversized body, a
// count that overruns it) and throws RuntimeError naming the frame: a peer that sends
// garbage is a clean protocol error, never a read out of bounds.  A frame that carries
// a descriptor (AddSlab, StatePage, Rings) has it in Frame::fd, not in its body.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "loader/runtime/epoch.h"
#include "loader/runtime/protocol.h"
#include "loader/runtime/wire.h"
#include "loader/sampler.h"
#include "loader/tensor.h"

namespace loader::runtime {

// ---------------------------------------------------------------- main process -> worker

/// Task: worker, compute `indices` as task `task` into slab `slab` (0: none yet, the
/// worker answers Need; kInlineSlab: the batch comes back in the reply).
struct TaskFrame {
  static constexpr FrameType kType = FrameType::Task;
  uint64_t task = 0;
  uint64_t slab = 0;
  IndexBatch indices;
  std::string encode() const;
  /// The body of a task without building a TaskFrame (the indices are not copied twice).
  static std::string encode(uint64_t task, uint64_t slab, const IndexBatch& indices);
  static TaskFrame decode(const std::string& body);
};

/// UseSlab: retry task `task`, whose batch did not fit its slab, into slab `slab`.
struct UseSlabFrame {
  static constexpr FrameType kType = FrameType::UseSlab;
  uint64_t task = 0;
  uint64_t slab = 0;
  std::string encode() const;
  static UseSlabFrame decode(const std::string& body);
};

/// AddSlab: slab `id` of `size` bytes (its descriptor in the frame).
struct AddSlabFrame {
  static constexpr FrameType kType = FrameType::AddSlab;
  uint64_t id = 0;
  uint64_t size = 0;
  std::string encode() const;
  static AddSlabFrame decode(const std::string& body);
};

/// DropSlab: slab `id` is gone (the worker unmaps it).
struct DropSlabFrame {
  static constexpr FrameType kType = FrameType::DropSlab;
  uint64_t id = 0;
  std::string encode() const;
  static DropSlabFrame decode(const std::string& body);
};

/// StatePage: the worker's generator state page of `size` bytes (its descriptor in the frame).
struct StatePageFrame {
  static constexpr FrameType kType = FrameType::StatePage;
  uint64_t size = 0;
  std::string encode() const;
  static StatePageFrame decode(const std::string& body);
};

/// Rings: the pool's task and result rings (their descriptor in the frame): ring
/// `capacity`, how many `workers` the segment holds, this worker's `index` in it and
/// the `generation` allowed to use its rings.
struct RingsFrame {
  static constexpr FrameType kType = FrameType::Rings;
  uint64_t capacity = 0;
  uint64_t workers = 0;
  uint64_t index = 0;
  uint64_t generation = 0;
  std::string encode() const;
  static RingsFrame decode(const std::string& body);
};

/// SetRng: the generator state task `task` starts from (a restart, a resumed epoch).
struct SetRngFrame {
  static constexpr FrameType kType = FrameType::SetRng;
  uint64_t task = 0;
  std::string state;  ///< Generator::kStateBytes bytes
  std::string encode() const;
  static SetRngFrame decode(const std::string& body);
};

/// TaskSeeds: WorkerSeeding::PerTask's seeds of the epoch.
struct TaskSeedsFrame {
  static constexpr FrameType kType = FrameType::TaskSeeds;
  uint64_t base_seed = 0;
  uint64_t task_base = 0;
  std::string encode() const;
  static TaskSeedsFrame decode(const std::string& body);
};

/// ResumeStream: an iterable stream resumes (state hooks).
std::string encode_stream_resume(const StreamResume& resume);
StreamResume decode_stream_resume(const std::string& body);

// (Init's body is the encoded WorkerConfig, child/worker_core.h: WorkerConfig::to_value;
// Epoch and Shutdown have none.)

// ---------------------------------------------------------------- worker -> main process

/// Hello and Ready: the worker's pid.
struct PidFrame {
  int64_t pid = -1;
  std::string encode() const;
  static PidFrame decode(const std::string& body);
};

/// InitError: the worker cannot go on (`type`, `message`; `when`: what it was doing,
/// empty: starting).
struct InitErrorFrame {
  static constexpr FrameType kType = FrameType::InitError;
  std::string type;
  std::string message;
  std::string when;
  std::string encode() const;
  static InitErrorFrame decode(const std::string& body);
};

/// Result, Need, TaskError, IterEnd: a worker's reply, as the frame type and body.
std::pair<uint8_t, std::string> encode_reply(const WorkerReply& r);
/// An inline batch (WorkerReply::value) into the reply's payload, for a message that
/// crosses to another process some other way (CAF serializes the payload, never the value).
void encode_inline_batch(WorkerReply& r);
/// Parses a Result/Need/TaskError/IterEnd frame body (`type` as in wire.h).
WorkerReply decode_reply(uint8_t type, const std::string& body);
/// True for the frame types decode_reply reads.
bool is_reply(FrameType type);

/// RemoteReply: a reply of a worker on another host, on its session's bulk stream
/// (remote_protocol.h), with the generator states its task started from and ended with.
/// Body: u64 head length, the head (the states, the reply's frame type and its body
/// without the batch); for a Result, then u64 skeleton length, the batch's skeleton and
/// its tensors' bytes (batch_codec.h: split_batch).  The host writes those bytes from
/// where collate put them; the main process reads them straight into the batch's tensors.
struct RemoteReplyFrame {
  static constexpr FrameType kType = FrameType::RemoteReply;
  std::string front;            ///< the body up to the tensors' bytes
  std::vector<Tensor> tensors;  ///< whose bytes follow `front`, in order
  /// The frame of `r` (a Result's batch: r.value, or else its encoded payload).
  static RemoteReplyFrame encode(const WorkerReply& r, const std::string& before, const std::string& after);
  /// The reply from its head (the states into `before`/`after` when given); a Result
  /// has no batch yet.
  static WorkerReply decode_head(const std::string& head, std::string* before, std::string* after);
  /// Reads the body of a RemoteReply frame of `body` bytes from `sock` (its 5-byte header
  /// read already) into `out`, a Result's tensors straight from the socket.  Not Ok when
  /// the stream ended or broke first; throws RuntimeError when the body is malformed.
  /// The batch's tensors come from `alloc` (null: the heap).
  static ReadStatus read(int sock, uint64_t body, WorkerReply& out, std::string* before, std::string* after,
                         TensorAllocator* alloc = nullptr);
};

/// One frame of a remote session's bulk stream, as the trainer reads it: a RemoteReply
/// (its tensors read straight from the socket), or a Ready, StreamStart or InitError
/// frame's body.
struct BulkFrame {
  FrameType type = FrameType::RemoteReply;
  WorkerReply reply;          ///< RemoteReply
  std::string before, after;  ///< RemoteReply: the generator states its task started from and ended with
  std::string body;           ///< the other types
};
/// Reads the next frame of a bulk stream from `sock` into `out` (the one reader of the
/// bulk stream: header, cap, body).  Not Ok when the stream ended or broke first; throws
/// RuntimeError for a header that claims more than kMaxFrameBody (nothing is allocated
/// for it), a malformed body, or a frame type the bulk stream does not carry.
ReadStatus read_bulk_frame(int sock, BulkFrame& out, TensorAllocator* alloc = nullptr);

/// StreamStart: how the stream answering `task` began.
std::string encode_stream_start(uint64_t task, const StreamStart& start);
std::pair<uint64_t, StreamStart> decode_stream_start(const std::string& body);

}  // namespace loader::runtime
