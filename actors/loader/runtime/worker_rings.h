// WorkerRings: the batch path between the main process and its workers, in shared
// memory.  Two byte rings per worker: its Task frames go out in one, its Result frames
// come back in the other, and neither direction costs a system call while the other
// side is busy (docs/transport.md, "The batch path in the main process": 6-10 us of
// parent CPU per batch against 14-26 us for a socket with a reader thread).
//
// One name-less segment per pipeline (ShmSegment), mapped by the main process and by
// every worker (it travels by SCM_RIGHTS in a `Rings` frame):
//
//   [ doorbell: seq, waiting ][ worker 0: result ring | task ring ][ worker 1 ... ]
//   ring = [ header: head, tail, generation, bell, socket_frames, closed | data ]
//
// Each ring is a byte ring with one producer and one consumer.  A frame is written
// whole ([u32 length][u8 type][body], wrapping at the end of the data area) and
// published by advancing `head`; the consumer never sees part of a frame, and checks
// every length it reads against the ring (a worker that scribbles over the segment is
// a clean error, never a read out of bounds).
//
// Result ring of worker k: producer worker k (Result frames up to half a ring; every
// other reply keeps the socket), consumer the main process on the pool's strand.  The
// main process sleeps on the pipeline's doorbell: it says it is about to sleep
// (`waiting`), looks at every ring once more, and sleeps on `seq`; whoever publishes
// something it may need (a worker after a frame, a reader thread or a worker actor
// after an event) bumps `seq` and wakes it only if it said so.
//
// Task ring of worker k: producer the main process on the pool's strand, consumer
// worker k.  A task in the ring carries the number of socket frames the main process
// queued for this incarnation before it (`socket_before`); the main process publishes
// in `socket_frames` how many it has written, after writing them.  The worker reads
// the ring first and, before it runs a task from the ring, reads the socket until it
// has read `socket_before` frames: so a worker sees every frame (an AddSlab with its
// descriptor, a SetRng, a Task that did not fit the ring) in the order the main process
// queued them, whichever way each one travelled.  The worker sleeps on its task ring's
// `bell` with the same protocol as the doorbell; the main process rings it after a
// task, after socket frames, and when it closes the rings (`closed`).  A worker also
// wakes every 100 ms to look at its socket (a main process that vanished without
// closing: EOF).
//
// The two rings of a worker belong to one incarnation: the main process resets them
// (head = tail = 0, the new generation, no socket frames) before the incarnation's
// first frame, while the previous one is dead or never ran; an end whose generation is
// no longer its rings' writes nothing and reads nothing.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "loader/runtime/os/shm.h"
#include "loader/runtime/wire.h"

namespace loader::runtime {

struct RingDoorbell {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> waiting{0};
};

struct RingHeader {
  alignas(64) std::atomic<uint64_t> head{0};  ///< bytes published (producer)
  alignas(64) std::atomic<uint64_t> tail{0};  ///< bytes consumed (consumer)
  alignas(64) std::atomic<uint32_t> generation{0};  ///< the incarnation allowed to use the ring
  std::atomic<uint32_t> closed{0};            ///< task ring: the main process closed the link
  RingDoorbell bell;                          ///< task ring: the worker sleeps on it
  std::atomic<uint64_t> socket_frames{0};     ///< task ring: socket frames written to this incarnation
};

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the rings need lock-free atomics in memory shared between processes");

/// Offsets inside the segment (the same arithmetic on both sides).
struct RingLayout {
  static constexpr size_t kDoorbellBytes = 4096;
  static constexpr size_t kHeaderBytes = 256;
  /// Data bytes per ring: a task of up to 8,000 indices, a result of up to 64 KiB (a
  /// batch in a slab takes a few hundred bytes); larger frames take the socket.  Two
  /// rings per worker: 256 KiB of shared memory per worker.
  static constexpr uint64_t kDefaultCapacity = 128 * 1024;
  int workers = 0;
  uint64_t capacity = 0;
  size_t bytes() const { return kDoorbellBytes + static_cast<size_t>(workers) * 2 * (kHeaderBytes + capacity); }
  size_t result_header(int k) const { return kDoorbellBytes + static_cast<size_t>(2 * k) * (kHeaderBytes + capacity); }
  size_t task_header(int k) const { return result_header(k) + kHeaderBytes + capacity; }
};

static_assert(sizeof(RingHeader) <= RingLayout::kHeaderBytes, "a ring header outgrew its place in the segment");

/// Bumps `bell`'s sequence and wakes its sleeper if it said it sleeps.
void ring_doorbell(RingDoorbell& bell);

/// Before its owner sleeps on `bell`: waits at most `budget` for the bell's sequence
/// to move from `seq` (something was published), yielding the core meanwhile; true
/// when it moved.  A futex sleep and its wake-up cost each side a context switch, tens
/// of microseconds on a virtual machine (docs/transport.md, "Yield a little before
/// sleeping").
bool spin_on(const RingDoorbell& bell, uint32_t seq, std::chrono::nanoseconds budget);

/// How long a worker waiting for a task, or the application thread waiting for a
/// result, yields before it sleeps: 50 us, or `LOADER_SPIN_US` (0: sleep at once).
std::chrono::nanoseconds spin_budget();

/// One side of one ring: the header and data area of ring `header_offset` in a mapping.
/// Producer and consumer are separate objects; neither is thread-safe.
class ByteRing {
 public:
  ByteRing() = default;
  ByteRing(char* base, size_t header_offset, uint64_t capacity);
  RingHeader& header() const { return *header_; }
  uint64_t capacity() const { return capacity_; }
  /// Producer: room for a frame of `body_bytes` (plus `prefix_bytes` before the body)?
  bool fits(size_t body_bytes) const;
  /// Producer: publishes [len][type][prefix][body].  REQUIRES: fits(prefix + body).
  void put(FrameType type, const char* prefix, size_t prefix_bytes, const std::string& body);
  /// Consumer: the next whole frame, if one was published.  Throws RuntimeError naming
  /// `what` when the ring holds something that is not a frame.
  bool take(Frame& out, const std::string& what);
  /// Empties the ring for incarnation `generation`.  REQUIRES: no producer or consumer
  /// of another generation runs.
  void reset(uint32_t generation);

 private:
  RingHeader* header_ = nullptr;
  char* data_ = nullptr;
  uint64_t capacity_ = 0;
};

/// Worker side: writes its Result frames, reads its Task frames, sleeps on its bell.
/// Called by the worker loop's thread only.
class WorkerRingEnd {
 public:
  WorkerRingEnd(void* base, RingLayout layout, int index, uint32_t generation);

  /// Writes one Result frame; false when it is too large for the ring (send it on the
  /// socket) or the ring belongs to another incarnation now.  Waits while the ring is
  /// full (pauses of 200 us), asking `peer_gone` every 10 pauses (true: gives up,
  /// returns false).
  template <class PeerGone>
  bool write_result(FrameType type, const std::string& body, PeerGone peer_gone) {
    if (5 + body.size() > results_.capacity() / 2) return false;
    for (int pauses = 0; !results_.fits(body.size()); ++pauses) {
      if (!mine()) return false;
      if (pauses % 10 == 9 && peer_gone()) return false;
      pause_a_little();
    }
    if (!mine()) return false;
    results_.put(type, nullptr, 0, body);
    ring_doorbell(*bell_);
    return true;
  }

  /// How many socket frames the main process has written or is writing to this
  /// incarnation (a blocking read gets them).  Read it before looking at the task
  /// ring (see take_task).
  uint64_t socket_frames() const { return tasks_.header().socket_frames.load(std::memory_order_acquire); }
  /// The next task from the ring, and the number of socket frames queued before it.
  /// A task published before `socket_frames()` was read is seen by this call.
  bool take_task(Frame& out, uint64_t& socket_before);
  /// The main process closed the rings (the pool ends).
  bool closed() const { return tasks_.header().closed.load(std::memory_order_acquire) != 0; }
  /// The task ring's bell: its sequence moves whenever something is posted.
  const RingDoorbell& bell() const { return tasks_.header().bell; }
  /// Sleep protocol (as the main process's): prepare, look once more, sleep, awake.
  uint32_t prepare_sleep();
  /// Sleeps while the bell still reads `seq`, at most `timeout`; true when it timed out.
  bool sleep(uint32_t seq, std::chrono::milliseconds timeout);
  void awake();

 private:
  bool mine() const { return results_.header().generation.load(std::memory_order_acquire) == generation_; }
  void pause_a_little();

  ByteRing results_;
  ByteRing tasks_;
  RingDoorbell* bell_;  ///< the pipeline's doorbell (woken after a result)
  uint32_t generation_;
};

/// Main-process side: the segment, every result ring's consumer, every task ring's
/// producer, and the doorbell's sleeper.  Every method but `ring` and
/// `socket_frames_coming` is called on the pool's strand (one consumer and one
/// producer at a time); `sleep` is called without it.
class WorkerRings {
 public:
  /// Throws ShmError when the segment cannot be made.
  explicit WorkerRings(int workers, uint64_t capacity = RingLayout::kDefaultCapacity);
  const std::shared_ptr<ShmSegment>& segment() const { return segment_; }
  const RingLayout& layout() const { return layout_; }
  /// Hands worker `k`'s rings to incarnation `generation` (empties both).  REQUIRES:
  /// its previous incarnation is dead or was never started.
  void reset(int k, uint32_t generation);
  /// The next whole Result frame of worker `k`, if one was published.
  bool take(int k, Frame& out);
  /// Puts a Task frame (body as on the socket) in worker `k`'s task ring, after
  /// `socket_before` socket frames; false when it does not fit (send it on the socket).
  bool post_task(int k, uint64_t socket_before, const std::string& body);
  /// `n` more socket frames are being written to worker `k`'s incarnation
  /// `generation`: said before the writes, so that the worker reads while a frame
  /// larger than the socket's buffer is written (said after, both would wait on the
  /// other).  Called by the one thread that writes its socket (ShmTransport::flush, under its transport's owner lock).
  void socket_frames_coming(int k, uint32_t generation, uint64_t n);
  /// Worker `k`: the main process closes its link (the worker loop ends).
  void close(int k);
  /// Bumps the doorbell (an in-process event the application thread may need).
  void ring() { ring_doorbell(*bell_); }
  /// The doorbell: its sequence moves whenever a worker publishes (any thread).
  const RingDoorbell& doorbell() const { return *bell_; }
  /// Application thread: the doorbell's value to sleep on; call before the last look
  /// at the rings, then `sleep`, then `awake`.
  uint32_t prepare_sleep();
  /// Sleeps while the doorbell still reads `seq`, at most until `deadline`.
  void sleep(uint32_t seq, std::optional<std::chrono::steady_clock::time_point> deadline);
  void awake();

 private:
  ByteRing results(int k) const;
  ByteRing tasks(int k) const;

  RingLayout layout_;
  std::shared_ptr<ShmSegment> segment_;
  char* base_;
  RingDoorbell* bell_;
};

}  // namespace loader::runtime
