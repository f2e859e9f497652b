// WorkerSlabs: one worker's pool of shared-memory slabs, kept by the parent.
//
// The parent picks the slab each task writes into.  The pool starts empty: the
// first task of a worker runs without a slab, the worker reports how many bytes
// its batch needs, and from then on slabs are that size plus headroom.  Before
// the first slab is made the whole pool (workers x slabs per worker x slab size)
// is checked against the free space of /dev/shm and shm_limit, so a too-small
// /dev/shm is an error before the first batch, with the numbers.  When every slab
// is in use the pool grows (up to the budget), then tasks wait for a release.
//
//   WorkerSlabs slabs(0, {.num_workers = 2, .slabs_per_worker = 4}, directory);
//   auto id = slabs.acquire();      // 0: no size known yet, run without a slab
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <atomic>
#include <mutex>
#include <optional>
#include <vector>

#include "loader/runtime/os/shm.h"

namespace loader::runtime {

/// Slab id -> mapped segment, for the iterator thread that decodes batches.
class SlabDirectory {
 public:
  void add(uint64_t id, std::shared_ptr<ShmSegment> seg);
  void remove(uint64_t id);
  std::shared_ptr<ShmSegment> find(uint64_t id) const;
  /// Marks slab `id` as page-locked (batches from it report is_pinned()).
  void set_pinned(uint64_t id, bool pinned);
  bool pinned(uint64_t id) const;

 private:
  mutable std::mutex mu_;
  std::map<uint64_t, std::pair<std::shared_ptr<ShmSegment>, bool>> slabs_;
};

/// What every worker's slabs of one loader have together (shared by its WorkerSlabs):
/// the bytes they hold and the slab size the /dev/shm budget was checked for, so the
/// whole pool is checked once per slab size, not once per worker.
struct SlabBudget {
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> checked_size{0};
  /// Where new slabs go: ShmDir until the pool does not fit there, then Memory (memfds,
  /// limited by available memory, not by the size of /dev/shm), with one warning.
  std::atomic<SlabPlace> place{SlabPlace::ShmDir};
};

struct SlabPolicy {
  int num_workers = 1;
  int slabs_per_worker = 4;      ///< expected: prefetch_factor + 2
  uint64_t shm_limit_bytes = 0;  ///< 0: limited by free /dev/shm only
  double headroom = 1.25;        ///< slab size = need * headroom, rounded up to 64 KiB (not for size_for)
  std::shared_ptr<SlabBudget> budget;  ///< shared by the loader's workers (made when null)
};

class WorkerSlabs {
 public:
  WorkerSlabs(int worker_id, SlabPolicy policy, std::shared_ptr<SlabDirectory> directory);
  ~WorkerSlabs();

  /// A free slab (creating one when allowed), 0 when no size is known yet, nullopt
  /// when every slab is busy and the budget is spent (the task must wait).
  std::optional<uint64_t> acquire();
  /// A slab of at least `bytes` for a task whose batch did not fit; grows the
  /// standard slab size.  Throws ShmError when shared memory cannot hold the pool.
  uint64_t acquire_at_least(uint64_t bytes);
  /// Sets the slab size for batches of `bytes` before the first task (from the
  /// dataset's sample_spec(): exact, so no headroom); checks the pool budget.  No
  /// effect once sized.
  void size_for(uint64_t bytes);
  /// Returns slab `id`.  Returns true when the slab was destroyed instead (it was
  /// smaller than the current slab size): the worker must forget it.
  bool release(uint64_t id);
  /// Slabs created since the last call (the worker must be told about them).
  std::vector<uint64_t> take_new();
  /// Slabs destroyed since the last call (the worker must forget them).
  std::vector<uint64_t> take_dropped();
  std::shared_ptr<ShmSegment> segment(uint64_t id) const;
  uint64_t slab_size() const { return slab_size_; }
  size_t count() const { return slabs_.size(); }
  size_t free_count() const { return free_.size(); }
  uint64_t bytes() const;

 private:
  uint64_t create(uint64_t size);
  void check_budget(uint64_t new_slab_size) const;

  int worker_id_;
  SlabPolicy policy_;
  std::shared_ptr<SlabDirectory> directory_;
  uint64_t slab_size_ = 0;
  std::map<uint64_t, std::shared_ptr<ShmSegment>> slabs_;
  std::vector<uint64_t> free_;
  std::vector<uint64_t> new_;
  std::vector<uint64_t> dropped_;
};

/// Process-wide unique slab ids (never 0).
uint64_t next_slab_id();

}  // namespace loader::runtime
