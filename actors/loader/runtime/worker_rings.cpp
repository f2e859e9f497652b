#include "loader/runtime/worker_rings.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <new>

#include "loader/error.h"

namespace loader::runtime {

namespace {

// Shared (not FUTEX_PRIVATE): the word lives in memory mapped by several processes.
long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

// A count, not a flag: an iterator of a replaced epoch may still sleep beside this one.
uint32_t bell_prepare_sleep(RingDoorbell& bell) {
  const uint32_t seq = bell.seq.load(std::memory_order_seq_cst);
  bell.waiting.fetch_add(1, std::memory_order_seq_cst);
  return seq;
}

// EINTR, EAGAIN (the sequence moved), ETIMEDOUT: the caller looks again.  True when
// the whole timeout passed.
bool bell_sleep(RingDoorbell& bell, uint32_t seq, std::chrono::nanoseconds timeout) {
  if (timeout <= std::chrono::nanoseconds::zero()) return true;
  const auto ns = timeout.count();
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  return futex(&bell.seq, FUTEX_WAIT, seq, &ts) != 0 && errno == ETIMEDOUT;
}

// Copies `n` bytes in or out of a ring's data area at byte position `pos` (wrapping).
// REQUIRES: n <= capacity.
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

bool spin_on(const RingDoorbell& bell, uint32_t seq, std::chrono::nanoseconds budget) {
  if (budget <= std::chrono::nanoseconds::zero()) return false;
  const auto until = std::chrono::steady_clock::now() + budget;
  while (bell.seq.load(std::memory_order_acquire) == seq) {
    if (std::chrono::steady_clock::now() >= until) return false;
    // Yield, not pause: with more processes than cores (2 workers and the main process
    // on 2 cores) a busy loop would take the core from the very process it waits for.
    sched_yield();
  }
  return true;
}

std::chrono::nanoseconds spin_budget() {
  static const std::chrono::nanoseconds budget = [] {
    long us = 50;
    if (const char* v = std::getenv("LOADER_SPIN_US")) {
      char* end = nullptr;
      const long parsed = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && parsed >= 0) us = std::min(parsed, 100000L);
    }
    return std::chrono::nanoseconds(std::chrono::microseconds(us));
  }();
  return budget;
}

void ring_doorbell(RingDoorbell& bell) {
  bell.seq.fetch_add(1, std::memory_order_seq_cst);
  if (bell.waiting.load(std::memory_order_seq_cst) != 0) futex(&bell.seq, FUTEX_WAKE, INT_MAX, nullptr);
}

// ------------------------------------------------------------------ one ring
ByteRing::ByteRing(char* base, size_t header_offset, uint64_t capacity)
    : header_(reinterpret_cast<RingHeader*>(base + header_offset)),
      data_(base + header_offset + RingLayout::kHeaderBytes),
      capacity_(capacity) {}

bool ByteRing::fits(size_t body_bytes) const {
  const uint64_t head = header_->head.load(std::memory_order_relaxed);
  const uint64_t tail = header_->tail.load(std::memory_order_acquire);
  return head - tail + 5 + body_bytes <= capacity_;
}

void ByteRing::put(FrameType type, const char* prefix, size_t prefix_bytes, const std::string& body) {
  const uint64_t head = header_->head.load(std::memory_order_relaxed);
  char start[5];
  const auto len = static_cast<uint32_t>(prefix_bytes + body.size() + 1);
  std::memcpy(start, &len, 4);
  start[4] = static_cast<char>(type);
  ring_copy_in(data_, capacity_, head, start, 5);
  if (prefix_bytes) ring_copy_in(data_, capacity_, head + 5, prefix, prefix_bytes);
  ring_copy_in(data_, capacity_, head + 5 + prefix_bytes, body.data(), body.size());
  // Published whole; seq_cst against the consumer's `waiting` (it stores `waiting`,
  // then reads `head`): one of the two sees the other.
  header_->head.store(head + 5 + prefix_bytes + body.size(), std::memory_order_seq_cst);
}

bool ByteRing::take(Frame& out, const std::string& what) {
  const uint64_t tail = header_->tail.load(std::memory_order_relaxed);
  const uint64_t head = header_->head.load(std::memory_order_seq_cst);
  if (head == tail) return false;
  // The producer may be another process: every number read from the ring is checked
  // before it is used.
  if (head - tail > capacity_ || head - tail < 5)
    throw RuntimeError(what + " is corrupt (" + std::to_string(head - tail) + " bytes published, ring of " +
                       std::to_string(capacity_) + ")");
  char start[5];
  uint32_t len = 0;
  ring_copy_out(data_, capacity_, tail, start, 5);
  std::memcpy(&len, start, 4);
  if (len == 0 || 4 + static_cast<uint64_t>(len) > head - tail)
    throw RuntimeError(what + " holds a frame of a bad length (" + std::to_string(len) + ")");
  out.type = static_cast<FrameType>(static_cast<uint8_t>(start[4]));
  out.body.resize(len - 1);
  ring_copy_out(data_, capacity_, tail + 5, out.body.data(), len - 1);
  out.fd.reset();
  header_->tail.store(tail + 4 + len, std::memory_order_release);
  return true;
}

void ByteRing::reset(uint32_t generation) {
  header_->generation.store(generation, std::memory_order_seq_cst);
  header_->closed.store(0, std::memory_order_seq_cst);
  header_->socket_frames.store(0, std::memory_order_seq_cst);
  header_->head.store(0, std::memory_order_seq_cst);
  header_->tail.store(0, std::memory_order_seq_cst);
}

// ------------------------------------------------------------------ worker side
WorkerRingEnd::WorkerRingEnd(void* base, RingLayout layout, int index, uint32_t generation)
    : results_(static_cast<char*>(base), layout.result_header(index), layout.capacity),
      tasks_(static_cast<char*>(base), layout.task_header(index), layout.capacity),
      bell_(reinterpret_cast<RingDoorbell*>(base)),
      generation_(generation) {}

bool WorkerRingEnd::take_task(Frame& out, uint64_t& socket_before) {
  if (tasks_.header().generation.load(std::memory_order_acquire) != generation_) return false;
  if (!tasks_.take(out, "the task ring")) return false;
  if (out.type != FrameType::Task || out.body.size() < 8)
    throw RuntimeError(std::string("the task ring holds a ") + frame_type_name(out.type) + " frame");
  std::memcpy(&socket_before, out.body.data(), 8);
  out.body.erase(0, 8);
  return true;
}

uint32_t WorkerRingEnd::prepare_sleep() { return bell_prepare_sleep(tasks_.header().bell); }

bool WorkerRingEnd::sleep(uint32_t seq, std::chrono::milliseconds timeout) {
  return bell_sleep(tasks_.header().bell, seq, timeout);
}

void WorkerRingEnd::awake() { tasks_.header().bell.waiting.fetch_sub(1, std::memory_order_seq_cst); }

void WorkerRingEnd::pause_a_little() {
  timespec ts{0, 200 * 1000};  // the ring is full only when the main process stopped reading
  nanosleep(&ts, nullptr);
}

// ------------------------------------------------------------------ main-process side
WorkerRings::WorkerRings(int workers, uint64_t capacity) {
  layout_.workers = workers;
  layout_.capacity = capacity;
  segment_ = ShmSegment::create(layout_.bytes());
  base_ = static_cast<char*>(segment_->data());
  bell_ = new (base_) RingDoorbell();
  for (int k = 0; k < workers; ++k) {
    new (base_ + layout_.result_header(k)) RingHeader();
    new (base_ + layout_.task_header(k)) RingHeader();
  }
}

ByteRing WorkerRings::results(int k) const { return ByteRing(base_, layout_.result_header(k), layout_.capacity); }
ByteRing WorkerRings::tasks(int k) const { return ByteRing(base_, layout_.task_header(k), layout_.capacity); }

void WorkerRings::reset(int k, uint32_t generation) {
  results(k).reset(generation);
  tasks(k).reset(generation);
}

bool WorkerRings::take(int k, Frame& out) {
  return results(k).take(out, "the result ring of worker " + std::to_string(k));
}

bool WorkerRings::post_task(int k, uint64_t socket_before, const std::string& body) {
  ByteRing ring = tasks(k);
  if (5 + 8 + body.size() > layout_.capacity / 2 || !ring.fits(8 + body.size())) return false;
  char prefix[8];
  std::memcpy(prefix, &socket_before, 8);
  ring.put(FrameType::Task, prefix, 8, body);
  ring_doorbell(ring.header().bell);
  return true;
}

void WorkerRings::socket_frames_coming(int k, uint32_t generation, uint64_t n) {
  if (n == 0) return;
  RingHeader& h = tasks(k).header();
  if (h.generation.load(std::memory_order_acquire) != generation) return;
  h.socket_frames.fetch_add(n, std::memory_order_release);
  ring_doorbell(h.bell);
}

void WorkerRings::close(int k) {
  RingHeader& h = tasks(k).header();
  h.closed.store(1, std::memory_order_seq_cst);
  ring_doorbell(h.bell);
}

uint32_t WorkerRings::prepare_sleep() { return bell_prepare_sleep(*bell_); }

void WorkerRings::sleep(uint32_t seq, std::optional<std::chrono::steady_clock::time_point> deadline) {
  if (!deadline) {
    futex(&bell_->seq, FUTEX_WAIT, seq, nullptr);
    return;
  }
  bell_sleep(*bell_, seq, *deadline - std::chrono::steady_clock::now());
}

void WorkerRings::awake() { bell_->waiting.fetch_sub(1, std::memory_order_seq_cst); }

}  // namespace loader::runtime
