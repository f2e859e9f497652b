// RngStatePage: a small shared-memory page in which a worker records its
// generator's state as it goes, so that a restarted worker can resume the random
// stream exactly where its first unfinished task began (restarts are then
// byte-identical also for datasets that draw random numbers).
//
// The worker keeps two records: Before (task X, the state as X starts), written
// before it runs X, and After (task X, the state once X is done), written before it
// sends X's result.  The parent, whose first unfinished task of that worker is X:
//   - Before is for X: X had started; its state is the one to resume from;
//   - otherwise X had not started, and After is for the worker's previous task
//     (< X), whose result the parent has: nothing draws between tasks, so that
//     state is the one X would have started from.
// Each record is double-buffered with its own sequence number (a seqlock with one
// writer), so a record being written when the process was killed is invisible.
//
// Thread use: write() by the worker (process or thread) only; read() by the parent,
// only once the worker is gone.
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
  enum Phase : uint64_t { Before = 0, After = 1 };
  struct Record {
    uint64_t task;
    std::vector<unsigned char> state;  ///< Generator::kStateBytes
  };
  static constexpr size_t kSlotBytes = (8 + Generator::kStateBytes + 63) / 64 * 64;
  static constexpr size_t kBytes = 64 + 4 * kSlotBytes;

  /// Views `kBytes` bytes at `base` (zero-filled memory is an empty page).
  explicit RngStatePage(void* base) : base_(static_cast<unsigned char*>(base)) {}

  void write(uint64_t task, Phase phase, const Generator& g) {
    auto* seq = seq_of(phase);
    uint64_t s = seq->load(std::memory_order_relaxed) + 1;
    unsigned char* slot = slot_of(phase, s);
    std::memcpy(slot, &task, 8);
    g.save_state(slot + 8);
    seq->store(s, std::memory_order_release);
  }

  std::optional<Record> read(Phase phase) const {
    uint64_t s = seq_of(phase)->load(std::memory_order_acquire);
    if (s == 0) return std::nullopt;
    const unsigned char* slot = slot_of(phase, s);
    Record r;
    std::memcpy(&r.task, slot, 8);
    r.state.assign(slot + 8, slot + 8 + Generator::kStateBytes);
    return r;
  }

  /// The state at the start of task `first_unfinished`, if the records give it.
  /// Records of tasks below `floor` predate the worker's last Init (a fresh
  /// generator since): they give nothing, and the fresh state is the answer.
  std::optional<std::vector<unsigned char>> state_before(uint64_t first_unfinished, uint64_t floor = 0) const {
    auto before = read(Before);
    if (before && before->task == first_unfinished) return before->state;
    auto after = read(After);
    if (after && after->task < first_unfinished && after->task >= floor) return after->state;
    return std::nullopt;
  }

 private:
  std::atomic<uint64_t>* seq_of(Phase p) const {
    return reinterpret_cast<std::atomic<uint64_t>*>(base_ + 8 * static_cast<size_t>(p));
  }
  unsigned char* slot_of(Phase p, uint64_t s) const {
    return base_ + 64 + (2 * static_cast<size_t>(p) + (s & 1)) * kSlotBytes;
  }
  unsigned char* base_;
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "the page is shared between processes");

}  // namespace loader::runtime
