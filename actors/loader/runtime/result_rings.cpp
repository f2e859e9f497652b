#include "loader/runtime/result_rings.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <new>

#include "loader/error.h"

namespace loader::runtime {

namespace {

// Shared (not FUTEX_PRIVATE): the word lives in memory mapped by several processes.
long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

// Copies `n` bytes in or out of a ring's data area at byte position `pos` (wrapping).
void ring_copy_in(char* data, uint64_t capacity, uint64_t pos, const char* src, size_t n) {
  const auto at = static_cast<size_t>(pos % capacity);
  const size_t first = std::min(n, static_cast<size_t>(capacity) - at);
  std::memcpy(data + at, src, first);
  if (first < n) std::memcpy(data, src + first, n - first);
}

void ring_copy_out(const char* data, uint64_t capacity, uint64_t pos, char* dst, size_t n) {
  const auto at = static_cast<size_t>(pos % capacity);
  const size_t first = std::min(n, static_cast<size_t>(capacity) - at);
  std::memcpy(dst, data + at, first);
  if (first < n) std::memcpy(dst + first, data, n - first);
}

}  // namespace

void ring_doorbell(RingDoorbell& bell) {
  bell.seq.fetch_add(1, std::memory_order_seq_cst);
  if (bell.waiting.load(std::memory_order_seq_cst) != 0) futex(&bell.seq, FUTEX_WAKE, INT_MAX, nullptr);
}

// ------------------------------------------------------------------ worker side
RingWriter::RingWriter(void* base, RingLayout layout, int index, uint32_t generation)
    : base_(static_cast<char*>(base)),
      layout_(layout),
      header_(reinterpret_cast<RingHeader*>(base_ + layout.header(index))),
      data_(base_ + layout.data(index)),
      bell_(reinterpret_cast<RingDoorbell*>(base_)),
      generation_(generation) {}

bool RingWriter::fits(uint64_t need) const {
  const uint64_t head = header_->head.load(std::memory_order_relaxed);
  const uint64_t tail = header_->tail.load(std::memory_order_acquire);
  return head - tail + need <= layout_.capacity;
}

void RingWriter::put(FrameType type, const std::string& body) {
  const uint64_t head = header_->head.load(std::memory_order_relaxed);
  char prefix[5];
  const auto len = static_cast<uint32_t>(body.size() + 1);
  std::memcpy(prefix, &len, 4);
  prefix[4] = static_cast<char>(type);
  ring_copy_in(data_, layout_.capacity, head, prefix, 5);
  ring_copy_in(data_, layout_.capacity, head + 5, body.data(), body.size());
  // Published whole; seq_cst against the application thread's `waiting` (it stores
  // `waiting`, then reads `head`): one of the two sees the other.
  header_->head.store(head + 5 + body.size(), std::memory_order_seq_cst);
  ring_doorbell(*bell_);
}

void RingWriter::pause_a_little() {
  timespec ts{0, 200 * 1000};  // the ring is full only when the main process stopped reading
  nanosleep(&ts, nullptr);
}

// ------------------------------------------------------------------ main-process side
ResultRings::ResultRings(int rings, uint64_t capacity) {
  layout_.rings = rings;
  layout_.capacity = capacity;
  segment_ = ShmSegment::create(layout_.bytes());
  base_ = static_cast<char*>(segment_->data());
  bell_ = new (base_) RingDoorbell();
  for (int k = 0; k < rings; ++k) new (base_ + layout_.header(k)) RingHeader();
}

RingHeader& ResultRings::header(int k) const { return *reinterpret_cast<RingHeader*>(base_ + layout_.header(k)); }

void ResultRings::reset(int k, uint32_t generation) {
  RingHeader& h = header(k);
  h.generation.store(generation, std::memory_order_seq_cst);
  h.head.store(0, std::memory_order_seq_cst);
  h.tail.store(0, std::memory_order_seq_cst);
}

bool ResultRings::take(int k, Frame& out) {
  RingHeader& h = header(k);
  const uint64_t tail = h.tail.load(std::memory_order_relaxed);
  const uint64_t head = h.head.load(std::memory_order_seq_cst);
  if (head == tail) return false;
  const char* data = base_ + layout_.data(k);
  char prefix[5];
  uint32_t len = 0;
  if (head - tail < 5) throw RuntimeError("result ring of worker " + std::to_string(k) + " holds a torn frame");
  ring_copy_out(data, layout_.capacity, tail, prefix, 5);
  std::memcpy(&len, prefix, 4);
  if (len == 0 || head - tail < 4 + static_cast<uint64_t>(len))
    throw RuntimeError("result ring of worker " + std::to_string(k) + " holds a frame of a bad length");
  out.type = static_cast<FrameType>(static_cast<uint8_t>(prefix[4]));
  out.body.resize(len - 1);
  ring_copy_out(data, layout_.capacity, tail + 5, out.body.data(), len - 1);
  out.fd = -1;
  h.tail.store(tail + 4 + len, std::memory_order_release);
  return true;
}

uint32_t ResultRings::prepare_sleep() {
  // A count, not a flag: an iterator of a replaced epoch may still sleep beside this one.
  const uint32_t seq = bell_->seq.load(std::memory_order_seq_cst);
  bell_->waiting.fetch_add(1, std::memory_order_seq_cst);
  return seq;
}

void ResultRings::sleep(uint32_t seq, std::optional<std::chrono::steady_clock::time_point> deadline) {
  if (!deadline) {
    futex(&bell_->seq, FUTEX_WAIT, seq, nullptr);
    return;
  }
  auto left = *deadline - std::chrono::steady_clock::now();
  if (left <= std::chrono::steady_clock::duration::zero()) return;
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  futex(&bell_->seq, FUTEX_WAIT, seq, &ts);  // EINTR, EAGAIN, ETIMEDOUT: the caller looks again
}

void ResultRings::awake() { bell_->waiting.fetch_sub(1, std::memory_order_seq_cst); }

}  // namespace loader::runtime
