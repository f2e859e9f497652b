// RngStatePage: a small shared-memory page in which a worker records its
// generator's state as it goes, so that a restarted worker can resume the random
// stream exactly where its first unfinished task began (restarts are then
// byte-identical also for datasets that draw random numbers).
//
// The worker writes, before each task, (task, Before, state) and, after sending the
// task's result, (task, After, state).  The parent, when the worker died holding
// task X as its first unfinished one, uses the record if it is (X, Before) or
// (Y, After) with Y < X (nothing draws between tasks).  A record (X, After) cannot
// happen: it is written after X's result, which the parent reads before it sees the
// socket close.  Two slots and a sequence number make a record written while the
// process was killed invisible (a seqlock with one writer).
//
// Thread use: write() by the worker (process or thread) only; read() by the parent.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "loader/generator.h"

namespace loader::runtime {

class RngStatePage {
 public:
  enum Phase : uint64_t { Before = 1, After = 2 };
  struct Record {
    uint64_t task;
    Phase phase;
    std::vector<unsigned char> state;  ///< Generator::kStateBytes
  };
  static constexpr size_t kSlotBytes = 16 + Generator::kStateBytes;
  static constexpr size_t kBytes = 64 + 2 * ((kSlotBytes + 63) / 64 * 64);

  /// Views `kBytes` bytes at `base` (zero-filled memory is an empty page).
  explicit RngStatePage(void* base) : base_(static_cast<unsigned char*>(base)) {}

  void write(uint64_t task, Phase phase, const Generator& g) {
    auto* seq = reinterpret_cast<std::atomic<uint64_t>*>(base_);
    uint64_t s = seq->load(std::memory_order_relaxed) + 1;
    unsigned char* slot = slot_of(s);
    std::memcpy(slot, &task, 8);
    uint64_t p = phase;
    std::memcpy(slot + 8, &p, 8);
    g.save_state(slot + 16);
    seq->store(s, std::memory_order_release);
  }

  std::optional<Record> read() const {
    auto* seq = reinterpret_cast<const std::atomic<uint64_t>*>(base_);
    uint64_t s = seq->load(std::memory_order_acquire);
    if (s == 0) return std::nullopt;
    const unsigned char* slot = slot_of(s);
    Record r;
    uint64_t p = 0;
    std::memcpy(&r.task, slot, 8);
    std::memcpy(&p, slot + 8, 8);
    r.phase = static_cast<Phase>(p);
    r.state.assign(slot + 16, slot + 16 + Generator::kStateBytes);
    return r;
  }

  /// The state at the start of task `first_unfinished`, if the record gives it.
  std::optional<std::vector<unsigned char>> state_before(uint64_t first_unfinished) const {
    auto r = read();
    if (!r) return std::nullopt;
    if ((r->phase == Before && r->task == first_unfinished) || (r->phase == After && r->task < first_unfinished))
      return r->state;
    return std::nullopt;
  }

 private:
  unsigned char* slot_of(uint64_t s) const { return base_ + 64 + (s & 1) * ((kSlotBytes + 63) / 64 * 64); }
  unsigned char* base_;
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "the page is shared between processes");

}  // namespace loader::runtime
