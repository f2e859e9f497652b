// The frames between the main process and a worker: the transport under the worker
// actor's messages (protocol.h).  Task and Result frames travel in the shared-memory
// rings (worker_rings.h); every frame travels on the worker's Unix stream socket when
// a ring cannot take it, and the frames that carry a descriptor (a slab, the state page,
// the rings) always do, the descriptor passed as SCM_RIGHTS.  In the worker, the worker
// host turns each frame into the worker actor's message (child/worker_host.h); in the
// main process the pipeline reads them (pipeline.h).
//
// Frame: u32 length of (type + body), u8 type, body.  Bodies are built with
// put_u64 / put_string and read with the Reader below.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "loader/runtime/os/unique_fd.h"

namespace loader::runtime {

enum class FrameType : uint8_t {
  // parent -> worker
  Init = 1,      ///< WorkerConfig (encoded Value)
  AddSlab = 2,   ///< slab id, size; carries the segment's descriptor
  DropSlab = 3,  ///< slab id
  Task = 4,      ///< task index, slab id, indices
  UseSlab = 5,   ///< task index, slab id: retry a task whose batch did not fit
  Epoch = 6,     ///< epoch number: restart iterable streams (persistent workers)
  Shutdown = 7,
  StatePage = 8, ///< size; carries the descriptor of the worker's RNG state page
  SetRng = 9,    ///< generator state bytes: resume the random stream (restarted worker)
  Rings = 10,    ///< capacity, workers, worker index, generation; carries the task and result rings' descriptor
  ResumeStream = 11,  ///< results to skip, generator state, dataset state: an iterable stream resumes (state hooks)
  TaskSeeds = 12,     ///< base_seed, task_base: WorkerSeeding::PerTask seeds of the epoch (persistent workers, restarts)
  // worker -> parent
  Ready = 64,     ///< pid
  InitError = 65, ///< error type, message (dataset could not be built, worker_init_fn threw)
  Result = 66,    ///< task index, slab id, bytes used, encoded batch
  Need = 67,      ///< task index, bytes: the batch needs a larger slab
  TaskError = 68, ///< task index, error type, message
  IterEnd = 69,   ///< task index: the worker's iterable stream is exhausted
  Hello = 70,     ///< pid: sent first thing by run_worker_if_requested (start-up handshake)
  StreamStart = 71, ///< task, generator state, has state, state: how the iterable stream answering `task` began
  // a worker host on another machine -> the main process, on the session's bulk stream
  RemoteReply = 72, ///< head length, head (the generator states and the reply), the batch payload
};

const char* frame_type_name(FrameType t);

struct Frame {
  FrameType type = FrameType::Shutdown;
  std::string body;
  UniqueFd fd;  ///< a received descriptor (the frame owns it until it is moved out), or none
};

/// Writes one frame whose body is `parts` one after another (at most 7), each from where
/// it is (no copy into one body: a batch payload goes out as it is), and optionally
/// passes `fd` with it.  Returns false when the peer is gone or the socket's send timeout
/// passed; throws RuntimeError for a body of 4 GiB or more (the frame's length is 32 bits).
bool write_frame_parts(int sock, FrameType type, std::initializer_list<std::string_view> parts, int fd = -1);
/// The same, for any number of parts (a batch's tensors).
bool write_frame_parts(int sock, FrameType type, const std::vector<std::string_view>& parts, int fd = -1);
/// write_frame_parts with one part.
bool write_frame(int sock, FrameType type, const std::string& body, int fd = -1);

enum class ReadStatus { Ok, Eof, Timeout, Error };
/// Reads exactly `n` bytes (no descriptor); Eof when the peer closed first.
ReadStatus read_bytes(int sock, char* buf, size_t n);
/// Reads one frame, waiting at most `timeout_ms` for its first byte (-1: forever).
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
