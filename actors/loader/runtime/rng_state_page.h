// RngStatePage: a small shared-memory page in which a worker records its
// generator's state as it goes, so that the main process knows the state at the
// start of any task the worker holds:
//   - a restarted worker resumes the random stream exactly where its first
//     unfinished task began (restarts are byte-identical also for datasets that
//     draw random numbers);
//   - a checkpoint of a running epoch (DataLoader::Iterator::state_dict) saves, for
//     each worker, the state at the start of its first task not yet delivered, so
//     that a resumed epoch gives the same batches (docs/architecture.md, "Mid-epoch
//     resume").
//
// Records:
//   Before(task X): the state as X starts, written before the worker runs X (or when
//     a SetRng frame sets the state X starts from).  A ring of `before_slots` of them,
//     X in slot X % before_slots: the parent makes the ring longer than the number of
//     tasks that can be in flight, so the record of a task not yet delivered is never
//     overwritten by a later task's.
//   After(task X): the state once X is done, written before X's result leaves.  The
//     latest one only (double-buffered).
// The state at the start of the worker's task X, as the parent reads it:
//   - Before(X) if it exists: X had started;
//   - otherwise X had not started when Before(X) was looked at, and After is read
//     first: if After is for a task below X (and from this Init on: `floor`), nothing
//     drew since, and that is the state X starts from;
//   - otherwise the worker has run nothing since its last Init: its fresh state.
// Every record is a seqlock with one writer, so a record being written, or a writer
// killed halfway, is never read as a state.
//
// Layout: [ header: after_seq, before_slots, last_before ][ After x2 ][ Before x N ].
//
// Thread use: write() by the worker (process or thread) only; state_before() and
// last_before() by the parent, while the worker runs or once it is gone.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "loader/error.h"
#include "loader/generator.h"

// The words of a record are copied with memcpy (a seqlock's readers check the tag
// around the copy and retry): about 0.2 us for a task's two records against 1 us
// word by word as atomics.  Under ThreadSanitizer, which cannot see the seqlock,
// in-process worker threads copy them as relaxed atomics instead.
#if defined(__SANITIZE_THREAD__)
#define LOADER_RNG_PAGE_ATOMIC_WORDS 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LOADER_RNG_PAGE_ATOMIC_WORDS 1
#endif
#endif
#ifndef LOADER_RNG_PAGE_ATOMIC_WORDS
#define LOADER_RNG_PAGE_ATOMIC_WORDS 0
#endif

namespace loader::runtime {

class RngStatePage {
 public:
  enum Phase : uint64_t { Before = 0, After = 1 };
  static_assert(Generator::kStateBytes % 4 == 0, "states are copied as 32-bit words");
  static constexpr size_t kWords = Generator::kStateBytes / 4;
  /// A record: [tag u64][state words], padded to a cache line.
  static constexpr size_t kSlotBytes = (8 + Generator::kStateBytes + 63) / 64 * 64;
  static constexpr size_t kHeaderBytes = 64;
  static constexpr uint64_t kMaxBeforeSlots = 1u << 16;

  /// Bytes of a page with `before_slots` Before records.
  static constexpr size_t bytes_for(uint64_t before_slots) {
    return kHeaderBytes + (2 + static_cast<size_t>(before_slots)) * kSlotBytes;
  }
  /// Parent: formats a zero-filled page of bytes_for(before_slots) bytes.
  static void format(void* base, uint64_t before_slots) {
    reinterpret_cast<std::atomic<uint64_t>*>(static_cast<unsigned char*>(base) + 8)
        ->store(before_slots, std::memory_order_release);
  }

  /// Views a formatted page of `size` bytes.  Throws RuntimeError when it is not one.
  RngStatePage(void* base, size_t size) : base_(static_cast<unsigned char*>(base)) {
    if (size < bytes_for(1)) throw RuntimeError("the RNG state page is too small");
    slots_ = word(8).load(std::memory_order_acquire);
    if (slots_ == 0 || slots_ > kMaxBeforeSlots || bytes_for(slots_) > size)
      throw RuntimeError("the RNG state page is not formatted for " + std::to_string(size) + " bytes");
  }

  void write(uint64_t task, Phase phase, const Generator& g) {
    if (phase == Before) {
      put(before_slot(task), task + 1, g);
      word(16).store(task + 1, std::memory_order_release);
      return;
    }
    // After: double-buffered by its sequence number, so the other copy stays whole.
    const uint64_t s = word(0).load(std::memory_order_relaxed) + 1;
    put(after_slot(s), task + 1, g);
    word(0).store(s, std::memory_order_release);
  }

  /// The state at the start of the worker's task `x`, if the records give it (see the
  /// top of this file).  Records of tasks below `floor` predate the worker's last Init
  /// (a fresh generator since): they give nothing, and the fresh state is the answer.
  std::optional<std::vector<unsigned char>> state_before(uint64_t x, uint64_t floor = 0) const {
    std::vector<unsigned char> after(Generator::kStateBytes);
    uint64_t after_task = 0;  // task + 1; 0: none
    for (int tries = 0; tries < 1000; ++tries) {
      const uint64_t s = word(0).load(std::memory_order_acquire);
      if (s == 0) break;
      const unsigned char* slot = after_slot(s);
      const uint64_t t1 = get(slot, after.data());
      std::atomic_thread_fence(std::memory_order_acquire);
      if (t1 != 0 && tag_of(slot).load(std::memory_order_relaxed) == t1) {
        after_task = t1;
        break;
      }
    }
    std::vector<unsigned char> before(Generator::kStateBytes);
    for (int tries = 0; tries < 1000; ++tries) {
      const unsigned char* slot = before_slot(x);
      const uint64_t t1 = tag_of(slot).load(std::memory_order_acquire);
      if (t1 != x + 1) break;
      get(slot, before.data());
      std::atomic_thread_fence(std::memory_order_acquire);
      if (tag_of(slot).load(std::memory_order_relaxed) == t1) return before;
    }
    if (after_task != 0 && after_task - 1 < x && after_task - 1 >= floor) return after;
    return std::nullopt;
  }

  /// Records a state given as bytes (Generator::kStateBytes of them): a main process
  /// keeping the page of a worker on another host from the states its replies carry.
  void write(uint64_t task, Phase phase, const std::string& state) {
    if (state.size() != Generator::kStateBytes) throw RuntimeError("a generator state of the wrong size");
    Generator g(0);
    if (!g.set_state(state)) throw RuntimeError("a generator state that is not one");
    write(task, phase, g);
  }

  /// The latest After record (the task it follows, the state), if any.  Exact only while
  /// its writer is idle (a worker host reading its own worker's page between tasks).
  std::optional<std::pair<uint64_t, std::string>> last_after() const {
    std::string out(Generator::kStateBytes, '\0');
    for (int tries = 0; tries < 1000; ++tries) {
      const uint64_t s = word(0).load(std::memory_order_acquire);
      if (s == 0) return std::nullopt;
      const unsigned char* slot = after_slot(s);
      const uint64_t t1 = get(slot, reinterpret_cast<unsigned char*>(out.data()));
      std::atomic_thread_fence(std::memory_order_acquire);
      if (t1 != 0 && tag_of(slot).load(std::memory_order_relaxed) == t1) return std::make_pair(t1 - 1, out);
    }
    return std::nullopt;
  }

  /// The task of the most recent Before record, if any.
  std::optional<uint64_t> last_before() const {
    const uint64_t t = word(16).load(std::memory_order_acquire);
    if (t == 0) return std::nullopt;
    return t - 1;
  }

 private:
  std::atomic<uint64_t>& word(size_t offset) const {
    return *reinterpret_cast<std::atomic<uint64_t>*>(base_ + offset);
  }
  static std::atomic<uint64_t>& tag_of(const unsigned char* slot) {
    return *reinterpret_cast<std::atomic<uint64_t>*>(const_cast<unsigned char*>(slot));
  }
  static std::atomic<uint32_t>* words_of(const unsigned char* slot) {
    return reinterpret_cast<std::atomic<uint32_t>*>(const_cast<unsigned char*>(slot) + 8);
  }
  unsigned char* after_slot(uint64_t seq) const { return base_ + kHeaderBytes + (seq & 1) * kSlotBytes; }
  unsigned char* before_slot(uint64_t task) const { return base_ + kHeaderBytes + (2 + task % slots_) * kSlotBytes; }

  /// Seqlock write: the tag says "being written" (0) before the words change.
  static void put(unsigned char* slot, uint64_t tag, const Generator& g) {
    tag_of(slot).store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
#if LOADER_RNG_PAGE_ATOMIC_WORDS
    unsigned char state[Generator::kStateBytes];
    g.save_state(state);
    auto* w = words_of(slot);
    for (size_t i = 0; i < kWords; ++i) {
      uint32_t v;
      std::memcpy(&v, state + 4 * i, 4);
      w[i].store(v, std::memory_order_relaxed);
    }
#else
    g.save_state(slot + 8);
#endif
    tag_of(slot).store(tag, std::memory_order_release);
  }
  /// Copies a record's words out; returns the tag read before them.
  static uint64_t get(const unsigned char* slot, unsigned char* out) {
    const uint64_t tag = tag_of(slot).load(std::memory_order_acquire);
#if LOADER_RNG_PAGE_ATOMIC_WORDS
    const auto* w = words_of(slot);
    for (size_t i = 0; i < kWords; ++i) {
      const uint32_t v = w[i].load(std::memory_order_relaxed);
      std::memcpy(out + 4 * i, &v, 4);
    }
#else
    std::memcpy(out, slot + 8, Generator::kStateBytes);
#endif
    return tag;
  }

  unsigned char* base_;
  uint64_t slots_ = 1;
};

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the page is shared between processes");

}  // namespace loader::runtime
