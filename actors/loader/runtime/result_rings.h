// ResultRings: the Result frames of worker processes, in shared memory, read by the
// main process's application thread without a reader-thread hop (docs/transport.md,
// "The batch path in the main process": 6-10 us of parent CPU per batch against 14-26 us
// for a socket with a reader thread).
//
// One name-less segment per pipeline (ShmSegment), mapped by the main process and by
// every worker (it travels by SCM_RIGHTS in a `Rings` frame):
//
//   [ Doorbell: seq, waiting ][ ring 0: head, tail, generation | data ][ ring 1 ... ]
//
// Each ring is a byte ring with one producer (worker k's current incarnation) and one
// consumer (the main process, under Pipeline::mu_).  A frame is written whole
// ([u32 length][u8 type][body], wrapping at the end of the data area) and published by
// advancing `head`; the consumer never sees part of a frame.  Only Result frames use the
// rings, and only those up to half a ring; every other frame keeps the socket, and a
// frame's order against socket frames never matters (docs/architecture.md, Messages).
//
// The doorbell is one futex word for the whole pipeline: the application thread says
// it is about to sleep (`waiting`), looks at every ring once more, and sleeps on `seq`;
// whoever publishes something it may need (a worker after a frame, a reader thread or
// the supervisor after an event) bumps `seq` and wakes it only if it said so.  So a batch
// costs no system call at all while the application thread is busy.
//
// A ring belongs to one incarnation: the main process resets it (head = tail = 0, the
// new generation) before the incarnation's first frame, while the previous one is dead
// or killed; a writer whose generation is no longer the ring's writes nothing.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "loader/runtime/shm.h"
#include "loader/runtime/wire.h"

namespace loader::runtime {

struct RingDoorbell {
  std::atomic<uint32_t> seq{0};
  std::atomic<uint32_t> waiting{0};
};

struct RingHeader {
  alignas(64) std::atomic<uint64_t> head{0};  ///< bytes published (producer)
  alignas(64) std::atomic<uint64_t> tail{0};  ///< bytes consumed (consumer)
  std::atomic<uint32_t> generation{0};        ///< the incarnation allowed to write
};

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the rings need lock-free atomics in memory shared between processes");

/// Offsets inside the segment (the same arithmetic on both sides).
struct RingLayout {
  static constexpr size_t kDoorbellBytes = 4096;
  static constexpr size_t kHeaderBytes = 256;
  static constexpr uint64_t kDefaultCapacity = 256 * 1024;  ///< data bytes per ring
  int rings = 0;
  uint64_t capacity = 0;
  size_t bytes() const { return kDoorbellBytes + static_cast<size_t>(rings) * (kHeaderBytes + capacity); }
  size_t header(int k) const { return kDoorbellBytes + static_cast<size_t>(k) * (kHeaderBytes + capacity); }
  size_t data(int k) const { return header(k) + kHeaderBytes; }
};

/// Rings the doorbell: bumps the sequence and wakes a sleeping application thread.
void ring_doorbell(RingDoorbell& bell);

/// Worker side: writes frames into ring `index` while the ring is its generation's.
/// Called by the worker loop's thread only.
class RingWriter {
 public:
  RingWriter(void* base, RingLayout layout, int index, uint32_t generation);
  /// Writes one frame; false when it is too large for the ring (send it on the socket)
  /// or the ring belongs to another incarnation now.  Waits while the ring is full
  /// (pauses of 200 us), asking `peer_gone` every 10 pauses (true: gives up, returns false).
  template <class PeerGone>
  bool write(FrameType type, const std::string& body, PeerGone peer_gone) {
    const uint64_t need = 5 + body.size();
    if (need > layout_.capacity / 2) return false;
    for (int pauses = 0; !fits(need); ++pauses) {
      if (!mine()) return false;
      if (pauses % 10 == 9 && peer_gone()) return false;
      pause_a_little();
    }
    if (!mine()) return false;
    put(type, body);
    return true;
  }

 private:
  bool mine() const { return header_->generation.load(std::memory_order_acquire) == generation_; }
  bool fits(uint64_t need) const;
  void put(FrameType type, const std::string& body);
  void pause_a_little();

  char* base_;
  RingLayout layout_;
  RingHeader* header_;
  char* data_;
  RingDoorbell* bell_;
  uint32_t generation_;
};

/// Main-process side: the segment, every ring's consumer, and the doorbell's sleeper.
/// Every method but `ring` is called under Pipeline::mu_ (one consumer at a time);
/// `sleep` is called without it.
class ResultRings {
 public:
  /// Throws ShmError when the segment cannot be made (the pipeline then keeps sockets).
  ResultRings(int rings, uint64_t capacity = RingLayout::kDefaultCapacity);
  const std::shared_ptr<ShmSegment>& segment() const { return segment_; }
  const RingLayout& layout() const { return layout_; }
  /// Hands ring `k` to incarnation `generation` (empties it).  REQUIRES: its previous
  /// writer is dead or was never started.
  void reset(int k, uint32_t generation);
  /// The next whole frame of ring `k`, if one was published.
  bool take(int k, Frame& out);
  /// Bumps the doorbell (an in-process event the application thread may need).
  void ring() { ring_doorbell(*bell_); }
  /// Application thread: the doorbell's value to sleep on; call before the last look
  /// at the rings, then `sleep`, then `awake`.
  uint32_t prepare_sleep();
  /// Sleeps while the doorbell still reads `seq`, at most until `deadline`.
  void sleep(uint32_t seq, std::optional<std::chrono::steady_clock::time_point> deadline);
  void awake();

 private:
  RingHeader& header(int k) const;

  RingLayout layout_;
  std::shared_ptr<ShmSegment> segment_;
  char* base_;
  RingDoorbell* bell_;
};

}  // namespace loader::runtime
