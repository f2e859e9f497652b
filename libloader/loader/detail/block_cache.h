#pragma once
// Free blocks of an expensive kind of memory kept for reuse: the counterpart of
// PyTorch's CachingHostAllocator, which allocate_pinned() (pinned.cpp) sits on.
// cudaHostAlloc page-locks every page it returns: measured on an H200 machine, a
// DataLoader with num_workers = 0 and pin_memory = true that allocated each W2 batch
// (9.6 MB) anew delivered 219 batches/s against 2,209 unpinned (docs/gpu.md); blocks
// that come back here are handed out again instead.
//
//   BlockCache cache(alloc, free, 1 << 30);      // alloc(bytes, &error) -> pointer or nullptr
//   size_t block = 0;
//   void* p = cache.get(9633792, &block, &err);  // a 16 MiB block (its size class)
//   cache.put(p, block);                          // kept; the next get of that class reuses it
//
// Size classes are powers of two from 4 KiB, as PyTorch's allocator rounds.  Cached
// bytes are bounded: a block that would exceed the bound is freed instead.  When the
// allocator fails, every cached block is freed and the allocation is tried once more.
// A block is never handed out while any holder still uses it: put() is called by the
// last owner (the Storage's deleter), and the owners of asynchronous device copies
// (DeviceBatch) hold the host batch until the copy has ended.
//
// Thread-safe: any thread may call any method.  The allocation and free functions run
// without the lock held.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace loader::detail {

class BlockCache {
 public:
  using AllocFn = std::function<void*(size_t bytes, std::string* error)>;
  using FreeFn = std::function<void(void*)>;

  struct Stats {
    uint64_t hits = 0;           ///< get() served from the cache
    uint64_t misses = 0;         ///< get() that allocated
    uint64_t cached_bytes = 0;   ///< held for reuse now
    uint64_t cached_blocks = 0;
    uint64_t freed_blocks = 0;   ///< given back to the free function so far
  };

  BlockCache(AllocFn alloc, FreeFn free, uint64_t max_cached_bytes);
  ~BlockCache();  ///< frees every cached block
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  /// The size class of a request: the next power of two, at least 4 KiB.
  static size_t block_size_for(size_t bytes);
  /// A block of at least `bytes`; its size goes to *block_size (pass it to put()).
  /// nullptr, with the allocator's reason in *error, when it cannot allocate even
  /// after the cache was emptied.
  void* get(size_t bytes, size_t* block_size, std::string* error);
  /// Gives a block from get() back.
  void put(void* block, size_t block_size);
  /// Frees every cached block (torch.cuda's host emptyCache).
  void release_all();
  Stats stats() const;

 private:
  std::vector<void*> take_all_locked();

  AllocFn alloc_;
  FreeFn free_;
  uint64_t max_cached_bytes_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_blocks_;  // by size class
  Stats stats_;
};

}  // namespace loader::detail
