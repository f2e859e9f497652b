#include "loader/detail/block_cache.h"

#include <utility>

namespace loader::detail {

BlockCache::BlockCache(AllocFn alloc, FreeFn free, uint64_t max_cached_bytes)
    : alloc_(std::move(alloc)), free_(std::move(free)), max_cached_bytes_(max_cached_bytes) {}

BlockCache::~BlockCache() { release_all(); }

size_t BlockCache::block_size_for(size_t bytes) {
  size_t size = size_t{4} << 10;
  while (size < bytes && size <= (SIZE_MAX >> 1)) size <<= 1;
  return size < bytes ? bytes : size;  // beyond the largest power of two: the size itself
}

void* BlockCache::get(size_t bytes, size_t* block_size, std::string* error) {
  const size_t size = block_size_for(bytes);
  *block_size = size;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_blocks_.find(size);
    if (it != free_blocks_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= size;
      --stats_.cached_blocks;
      ++stats_.hits;
      return p;
    }
    ++stats_.misses;
  }
  if (void* p = alloc_(size, error)) return p;
  // Out of this kind of memory: what the cache holds goes back, then one more try.
  release_all();
  return alloc_(size, error);
}

void BlockCache::put(void* block, size_t block_size) {
  if (!block) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stats_.cached_bytes + block_size <= max_cached_bytes_) {
      free_blocks_[block_size].push_back(block);
      stats_.cached_bytes += block_size;
      ++stats_.cached_blocks;
      return;
    }
    ++stats_.freed_blocks;
  }
  free_(block);
}

std::vector<void*> BlockCache::take_all_locked() {
  std::vector<void*> out;
  for (auto& [size, blocks] : free_blocks_) out.insert(out.end(), blocks.begin(), blocks.end());
  free_blocks_.clear();
  stats_.freed_blocks += out.size();
  stats_.cached_bytes = 0;
  stats_.cached_blocks = 0;
  return out;
}

void BlockCache::release_all() {
  std::vector<void*> blocks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks = take_all_locked();
  }
  for (void* p : blocks) free_(p);
}

BlockCache::Stats BlockCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace loader::detail
