#include "loader/storage.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace loader {

namespace {
constexpr size_t kAlignment = 64;

class HeapAllocator final : public TensorAllocator {
 public:
  std::shared_ptr<Storage> allocate(size_t nbytes) override { return Storage::allocate(nbytes); }
};
}  // namespace

std::shared_ptr<Storage> Storage::allocate(size_t nbytes) {
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
