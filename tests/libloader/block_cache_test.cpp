// detail::BlockCache, the cache behind allocate_pinned (pinned.cpp), driven with
// ordinary memory: reuse by size class, the bound on cached bytes, the retry after an
// allocation failure, and every block freed exactly once.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "loader/detail/block_cache.h"

using loader::detail::BlockCache;

namespace {
struct Heap {
  std::set<void*> live;
  int allocs = 0, frees = 0, fail_next = 0;
  BlockCache make(uint64_t max_cached) {
    return BlockCache(
        [this](size_t bytes, std::string* error) -> void* {
          if (fail_next > 0) {
            --fail_next;
            *error = "out of memory for " + std::to_string(bytes) + " bytes";
            return nullptr;
          }
          ++allocs;
          void* p = std::malloc(bytes);
          live.insert(p);
          return p;
        },
        [this](void* p) {
          ++frees;
          EXPECT_EQ(live.erase(p), 1u) << "freed twice or never allocated";
          std::free(p);
        },
        max_cached);
  }
};
}  // namespace

TEST(BlockCache, SizeClassesArePowersOfTwoFromFourKiB) {
  EXPECT_EQ(BlockCache::block_size_for(1), 4096u);
  EXPECT_EQ(BlockCache::block_size_for(4096), 4096u);
  EXPECT_EQ(BlockCache::block_size_for(4097), 8192u);
  EXPECT_EQ(BlockCache::block_size_for(9633792), size_t{16} << 20);  // a W2 batch of images
}

TEST(BlockCache, ABlockGivenBackIsHandedOutAgainForItsSizeClassOnly) {
  Heap heap;
  {
    BlockCache cache = heap.make(uint64_t{1} << 30);
    std::string err;
    size_t b1 = 0, b2 = 0, b3 = 0;
    void* p = cache.get(5000, &b1, &err);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(b1, 8192u);
    cache.put(p, b1);
    EXPECT_EQ(cache.stats().cached_bytes, 8192u);
    EXPECT_EQ(cache.get(8000, &b2, &err), p);  // same class: the same block
    void* q = cache.get(100000, &b3, &err);     // another class: a new one
    EXPECT_NE(q, p);
    const auto st = cache.stats();
    EXPECT_EQ(st.hits, 1u);
    EXPECT_EQ(st.misses, 2u);
    EXPECT_EQ(st.cached_bytes, 0u);
    EXPECT_EQ(heap.allocs, 2);
    cache.put(p, b2);
    cache.put(q, b3);
    EXPECT_EQ(heap.frees, 0);
  }
  EXPECT_EQ(heap.frees, 2);  // the destructor freed what was cached
  EXPECT_TRUE(heap.live.empty());
}

TEST(BlockCache, CachedBytesStayWithinTheBound) {
  Heap heap;
  BlockCache cache = heap.make(3 * 4096);
  std::string err;
  std::vector<std::pair<void*, size_t>> blocks(5);
  for (auto& [p, size] : blocks) p = cache.get(4096, &size, &err);
  for (auto& [p, size] : blocks) cache.put(p, size);
  EXPECT_EQ(cache.stats().cached_blocks, 3u);
  EXPECT_EQ(cache.stats().cached_bytes, 3u * 4096);
  EXPECT_EQ(heap.frees, 2);  // the two that did not fit went at once
  cache.release_all();
  EXPECT_EQ(heap.frees, 5);
  EXPECT_TRUE(heap.live.empty());
}

TEST(BlockCache, AFailedAllocationEmptiesTheCacheAndTriesOnceMore) {
  Heap heap;
  BlockCache cache = heap.make(uint64_t{1} << 30);
  std::string err;
  size_t small = 0, big = 0;
  cache.put(cache.get(4096, &small, &err), small);
  heap.fail_next = 1;
  void* p = cache.get(1 << 20, &big, &err);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(heap.frees, 1);  // the cached block went before the retry
  EXPECT_EQ(cache.stats().cached_bytes, 0u);
  heap.fail_next = 2;
  size_t other = 0;
  EXPECT_EQ(cache.get(1 << 21, &other, &err), nullptr);
  EXPECT_EQ(err, "out of memory for 2097152 bytes");
  cache.put(p, big);
}

TEST(BlockCache, ThreadsSharingTheCacheNeverGetTheSameBlockTwice) {
  Heap heap;
  std::mutex heap_mu;  // Heap itself is not thread-safe: serialise its callbacks
  BlockCache cache(
      [&](size_t bytes, std::string*) {
        std::lock_guard<std::mutex> l(heap_mu);
        ++heap.allocs;
        void* p = std::malloc(bytes);
        heap.live.insert(p);
        return p;
      },
      [&](void* p) {
        std::lock_guard<std::mutex> l(heap_mu);
        ++heap.frees;
        heap.live.erase(p);
        std::free(p);
      },
      uint64_t{1} << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&cache, t] {
      std::string err;
      for (int i = 0; i < 2000; ++i) {
        size_t size = 0;
        auto* p = static_cast<int*>(cache.get(4096, &size, &err));
        *p = t;  // a block held by two threads at once would show here
        std::this_thread::yield();
        EXPECT_EQ(*p, t);
        cache.put(p, size);
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_LE(heap.allocs, 4);
  cache.release_all();
  EXPECT_TRUE(heap.live.empty());
}
