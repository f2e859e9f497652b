// SlabStore: the shared-memory slabs of one DataLoader, per worker index, kept for
// the loader's whole life: the pools of non-persistent epochs come and go, the slabs
// (created, reserved and page-locked once) stay, so fresh worker processes do not
// make and zero them again.  It also owns the page-lock (pin_memory) registration of
// every slab: a slab is pinned once, when it is made, and unpinned before it is
// unmapped.
//
// Thread-safe: every method may be called from any thread (the worker stage and the
// pin actor on the pool's strand, batch leases from whichever thread drops a batch).
// Lock order: the strand (StageActors::enter) before SlabStore::mu_; the store never
// calls out while locked.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "loader/pinned.h"
#include "loader/runtime/os/pinned_region.h"
#include "loader/runtime/parent/worker_slabs.h"

namespace loader::runtime {

class SlabStore {
 public:
  /// `pin`: page-lock every slab when it is made (pin_memory); outcomes go to `tracker`.
  SlabStore(int num_workers, SlabPolicy policy, bool pin, std::shared_ptr<PinTracker> tracker);
  ~SlabStore();
  SlabStore(const SlabStore&) = delete;
  SlabStore& operator=(const SlabStore&) = delete;

  /// See WorkerSlabs: 0 when no size is known yet, nullopt when the worker must wait.
  std::optional<uint64_t> acquire(int worker);
  uint64_t acquire_at_least(int worker, uint64_t bytes);
  void release(int worker, uint64_t slab);
  /// Sizes every worker's slabs for batches of `bytes` (before the first task).
  void size_for(uint64_t bytes);
  std::shared_ptr<ShmSegment> segment(uint64_t slab) const { return directory_->find(slab); }
  bool pinned(uint64_t slab) const { return directory_->pinned(slab); }
  /// Every slab destroyed so far, in order (workers that mapped them drop them).
  std::vector<uint64_t> dropped_since(size_t& cursor) const;
  int num_workers() const { return static_cast<int>(workers_.size()); }

  /// The pool's figures (EpochStats slab_*): bytes mapped now, held now (acquired and
  /// not released: a task's or a batch's), the most held at once since the last
  /// new_window(), and slabs made since the store began (each a growth of the pool).
  struct Stats {
    uint64_t mapped = 0;
    uint64_t in_use = 0;
    uint64_t peak = 0;
    uint64_t grown = 0;
  };
  Stats stats() const;
  /// Starts a new window for `peak` (an epoch begins): the peak becomes what is held now.
  void new_window();

 private:
  void settle_locked(int worker);  // pins new slabs, unpins dropped ones

  mutable std::mutex mu_;
  std::shared_ptr<SlabDirectory> directory_;
  std::vector<std::unique_ptr<WorkerSlabs>> workers_;
  bool pin_;
  std::shared_ptr<PinTracker> tracker_;
  std::map<uint64_t, PinnedRegion> pins_;  ///< erased: unpinned
  std::vector<uint64_t> dropped_;
  uint64_t in_use_ = 0;
  uint64_t peak_ = 0;
  uint64_t grown_ = 0;
  void took_locked(int worker, uint64_t slab);  // counts an acquired slab in in_use_
};

}  // namespace loader::runtime
