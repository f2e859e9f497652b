// Who owns the bytes of a tensor.
//
// A Storage is a span of bytes plus an owner that keeps them alive: heap memory
// (64-byte aligned), a shared-memory slab lent by the runtime, a memory-mapped
// file, or foreign memory (DLPack).  How the bytes are viewed (dtype, shape,
// strides) lives in Tensor; several tensors may share one Storage.
//
//   auto s = loader::Storage::allocate(1024);              // heap
//   auto v = loader::Storage::wrap(ptr, n, keep_alive, loader::MemoryKind::External);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace loader {

enum class MemoryKind : uint8_t {
  Heap,          ///< private memory of this process
  SharedMemory,  ///< a slab of the runtime's shared-memory pool
  FileMapping,   ///< a memory-mapped file (shared by every process that maps it)
  External,      ///< memory owned by someone else (DLPack import, user buffer)
};

/// Where shared bytes live, so that a batch can cross processes as descriptors:
/// `region` names a slab known to both sides (0: none), `offset` is the byte offset
/// of this storage's first byte in that slab.
struct Placement {
  uint64_t region = 0;
  uint64_t offset = 0;
};

class Storage {
 public:
  /// Heap bytes, 64-byte aligned, uninitialised. Throws std::bad_alloc.
  static std::shared_ptr<Storage> allocate(size_t nbytes);
  /// Heap bytes set to zero.
  static std::shared_ptr<Storage> allocate_zeroed(size_t nbytes);
  /// Views `nbytes` at `data`; `owner` is kept alive as long as the storage is.
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, std::shared_ptr<const void> owner,
                                       MemoryKind kind, Placement placement = {},
                                       bool pinned = false);

  Storage(void* data, size_t nbytes, std::shared_ptr<const void> owner, MemoryKind kind,
          Placement placement, bool pinned) noexcept
      : data_(data), nbytes_(nbytes), owner_(std::move(owner)), kind_(kind),
        placement_(placement), pinned_(pinned) {}
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();

  void* data() const noexcept { return data_; }
  size_t nbytes() const noexcept { return nbytes_; }
  MemoryKind kind() const noexcept { return kind_; }
  const Placement& placement() const noexcept { return placement_; }
  /// True only when the bytes are page-locked for CUDA (cudaHostRegister/cudaHostAlloc).
  bool is_pinned() const noexcept { return pinned_; }

 private:
  void* data_;
  size_t nbytes_;
  std::shared_ptr<const void> owner_;  // empty for heap storages (freed in the destructor)
  MemoryKind kind_;
  Placement placement_;
  bool pinned_;
};

/// Where collate and Tensor::empty get bytes from.  The runtime passes an allocator
/// that carves tensors out of a shared-memory slab, so a worker collates straight
/// into memory the main process can map.
class TensorAllocator {
 public:
  virtual ~TensorAllocator() = default;
  virtual std::shared_ptr<Storage> allocate(size_t nbytes) = 0;
};

/// The process-wide heap allocator (Storage::allocate).
TensorAllocator& heap_allocator();

/// The allocator collate uses when none is passed: the heap, unless a worker has
/// installed its shared-memory slab allocator for the batch being collated.
TensorAllocator& current_tensor_allocator();

/// Installs `alloc` as this thread's current_tensor_allocator() for its lifetime.
class AllocatorScope {
 public:
  explicit AllocatorScope(TensorAllocator& alloc);
  ~AllocatorScope();
  AllocatorScope(const AllocatorScope&) = delete;
  AllocatorScope& operator=(const AllocatorScope&) = delete;

 private:
  TensorAllocator* previous_;
};

}  // namespace loader
