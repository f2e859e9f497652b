// The frames between the main process and a worker: the transport under the worker
// actor's messages (protocol.h).  Task and Result frames travel in the shared-memory
// rings (worker_rings.h); every frame travels on the worker's Unix stream socket when
// a ring cannot take it, and the frames that carry a descriptor (a slab, the state page,
// the rings) always do, the descriptor passed as SCM_RIGHTS.  In the worker, the worker
// host turns each frame into the worker actor's message (child/worker_host.h); in the
// main process the pipeline reads them (pipeline.h).
//
// Frame: u32 length of (type + body), u8 type, body (parse_frame_header reads the
// header, with the cap).  Bodies are built with put_u64 / put_string and read with the
// Reader below, in frames.{h,cpp}.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "loader/runtime/os/unique_fd.h"

namespace loader::runtime {

/// The frame types.  What each body holds is said, encoded and decoded in frames.h
/// (and nowhere else).
enum class FrameType : uint8_t {
  // parent -> worker
  Init = 1,      ///< the worker's configuration (WorkerConfig)
  AddSlab = 2,   ///< a new slab; carries the segment's descriptor
  DropSlab = 3,  ///< a slab is gone
  Task = 4,      ///< compute a batch of indices into a slab
  UseSlab = 5,   ///< retry a task whose batch did not fit, into a larger slab
  Epoch = 6,     ///< restart iterable streams (persistent workers); no body
  Shutdown = 7,  ///< exit; no body
  StatePage = 8, ///< carries the descriptor of the worker's RNG state page
  SetRng = 9,    ///< the generator state a task starts from (a restarted or moved worker)
  Rings = 10,    ///< carries the task and result rings' descriptor
  ResumeStream = 11,  ///< an iterable stream resumes from a checkpoint (state hooks)
  TaskSeeds = 12,     ///< WorkerSeeding::PerTask seeds of the epoch (persistent workers, restarts)
  // worker -> parent
  Ready = 64,     ///< the dataset is built (its pid)
  InitError = 65, ///< the worker cannot go on (the dataset could not be built, worker_init_fn threw)
  Result = 66,    ///< a batch, in its slab or inline
  Need = 67,      ///< the batch needs a larger slab
  TaskError = 68, ///< a task's error
  IterEnd = 69,   ///< the worker's iterable stream is exhausted
  Hello = 70,     ///< sent first thing by run_worker_if_requested (start-up handshake; its pid)
  StreamStart = 71, ///< how the iterable stream answering a task began
  // a worker host on another machine -> the main process, on the session's bulk stream
  RemoteReply = 72, ///< a reply with the generator states its task started from and ended with
};

const char* frame_type_name(FrameType t);

/// Every frame begins with this header: u32 length of (type + body), u8 type.
constexpr size_t kFrameHeaderBytes = 5;
/// The largest body a frame may have: writers refuse a larger one, readers reject a
/// header that claims one (before anything is allocated for it).
constexpr uint64_t kMaxFrameBody = uint64_t{1} << 30;
struct FrameHeader {
  FrameType type;
  uint64_t body;  ///< the body's bytes (the length less the type byte)
};
/// The one reader of a frame header (`h`: kFrameHeaderBytes bytes).  Throws RuntimeError
/// naming the claimed length for a length of 0 or a body above kMaxFrameBody.
FrameHeader parse_frame_header(const char* h);

struct Frame {
  FrameType type = FrameType::Shutdown;
  std::string body;
  UniqueFd fd;  ///< a received descriptor (the frame owns it until it is moved out), or none
};

/// Writes one frame whose body is `parts` one after another (at most 7), each from where
/// it is (no copy into one body: a batch payload goes out as it is), and optionally
/// passes `fd` with it.  Returns false when the peer is gone or the socket's send timeout
/// passed; throws RuntimeError for a body above kMaxFrameBody.
bool write_frame_parts(int sock, FrameType type, std::initializer_list<std::string_view> parts, int fd = -1);
/// The same, for any number of parts (a batch's tensors).
bool write_frame_parts(int sock, FrameType type, const std::vector<std::string_view>& parts, int fd = -1);
/// write_frame_parts with one part.
bool write_frame(int sock, FrameType type, const std::string& body, int fd = -1);

enum class ReadStatus { Ok, Eof, Timeout, Error };
/// Reads exactly `n` bytes (no descriptor); Eof when the peer closed first.
ReadStatus read_bytes(int sock, char* buf, size_t n);
/// Reads one frame, waiting at most `timeout_ms` for its first byte (-1: forever).
/// Error for a header parse_frame_header rejects.
ReadStatus read_frame(int sock, Frame& out, int timeout_ms);

/// Reads frames through a buffer: one recv() brings every frame that has arrived,
/// so a reader that is behind catches up without a system call per frame.  For
/// streams that carry no descriptors (worker -> parent).  Move-free; one reader thread.
class FrameReader {
 public:
  explicit FrameReader(int sock, size_t buffer_bytes = 64 * 1024) : sock_(sock), buf_(buffer_bytes) {}
  /// The next frame; blocks until one has arrived.
  ReadStatus next(Frame& out);

 private:
  int sock_;
  std::vector<char> buf_;
  size_t begin_ = 0, end_ = 0;
};

/// Body helpers.
void put_u64(std::string& out, uint64_t v);
void put_string(std::string& out, const std::string& s);
class Reader {
 public:
  explicit Reader(const std::string& body) : p_(body.data()), end_(body.data() + body.size()) {}
  uint64_t u64();
  std::string string();
  /// The bytes not read yet.
  std::string rest();
  const char* pos() const { return p_; }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }

 private:
  const char* p_;
  const char* end_;
};

}  // namespace loader::runtime
