#include "loader/storage.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "loader/detail/block_cache.h"

namespace loader {

namespace {
constexpr size_t kAlignment = 64;

class HeapAllocator final : public TensorAllocator {
 public:
  std::shared_ptr<Storage> allocate(size_t nbytes) override { return Storage::allocate(nbytes); }
};
}  // namespace

// Large blocks (a batch collated in this process: W2's 9.6 MB) are reused instead of being
// given back to glibc: above its mmap threshold every free unmapped the block and every
// allocation faulted its pages in again (about 1,500 page faults per W2 batch, a third of
// torch's speed with num_workers = 0).  At most kMaxCachedBytes wait for reuse; the cache is
// never destroyed (storages freed during exit still find it).  Thread-safe (BlockCache).
constexpr size_t kCachedFrom = size_t{1} << 20;
constexpr uint64_t kMaxCachedBytes = uint64_t{256} << 20;

detail::BlockCache& large_block_cache() {
  static auto* cache = new detail::BlockCache(
      [](size_t bytes, std::string* error) -> void* {
        void* p = std::aligned_alloc(kAlignment, bytes);
        if (!p) *error = "out of memory";
        return p;
      },
      [](void* p) { std::free(p); }, kMaxCachedBytes);
  return *cache;
}

std::shared_ptr<Storage> Storage::allocate(size_t nbytes) {
  if (nbytes >= kCachedFrom) {
    size_t block = 0;
    std::string error;
    void* p = large_block_cache().get(nbytes, &block, &error);
    if (!p) throw std::bad_alloc();
    std::shared_ptr<const void> owner(p, [block](const void* q) { large_block_cache().put(const_cast<void*>(q), block); });
    return std::make_shared<Storage>(p, nbytes, std::move(owner), MemoryKind::Heap, Placement{}, false);
  }
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = rounded == 0 ? nullptr : std::aligned_alloc(kAlignment, rounded);
  if (rounded != 0 && p == nullptr) throw std::bad_alloc();
  try {
    return std::make_shared<Storage>(p, nbytes, nullptr, MemoryKind::Heap, Placement{}, false);
  } catch (...) {
    std::free(p);
    throw;
  }
}

std::shared_ptr<Storage> Storage::allocate_zeroed(size_t nbytes) {
  auto s = allocate(nbytes);
  if (nbytes) std::memset(s->data(), 0, nbytes);
  return s;
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, std::shared_ptr<const void> owner,
                                       MemoryKind kind, Placement placement, bool pinned) {
  return std::make_shared<Storage>(data, nbytes, std::move(owner), kind, placement, pinned);
}

Storage::~Storage() {
  if (kind_ == MemoryKind::Heap && !owner_) std::free(data_);
}

TensorAllocator& heap_allocator() {
  static HeapAllocator instance;
  return instance;
}

namespace {
thread_local TensorAllocator* tls_allocator = nullptr;
}

TensorAllocator& current_tensor_allocator() {
  return tls_allocator ? *tls_allocator : heap_allocator();
}

AllocatorScope::AllocatorScope(TensorAllocator& alloc) : previous_(tls_allocator) {
  tls_allocator = &alloc;
}

AllocatorScope::~AllocatorScope() { tls_allocator = previous_; }

}  // namespace loader
