// BufferPool: a TensorAllocator that keeps the heap buffers of large tensors when their
// storages are freed, and hands them out again for the same size.
//
// A stream of batches of one shape (a remote worker's inline batches on its host, the
// batches a bulk stream's reader makes on the trainer) otherwise gets fresh pages from
// the kernel for every batch: freed blocks of several MB go back to it (munmap, or a
// trimmed heap), and the next batch faults and zeroes each page again.  Measured on the
// remote path: a sixth of the machine's CPU.  Small tensors (below `min_bytes`) go to
// the heap as they would.
//
// Thread use: allocate() on any thread; a storage it made may be freed on any thread
// (the bulk stream's writer, the application's), which gives its buffer back.  The
// buffers kept live as long as the pool or any storage it made.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "loader/storage.h"

namespace loader::runtime {

class BufferPool final : public TensorAllocator {
 public:
  /// Keeps at most `max_free` buffers free (the oldest goes back to the heap first).
  explicit BufferPool(size_t max_free = 4, size_t min_bytes = size_t{1} << 20);
  std::shared_ptr<Storage> allocate(size_t nbytes) override;
  /// Buffers free in the pool now, and allocations served from them so far (tests).
  size_t free_buffers() const;
  uint64_t reused() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
  size_t min_bytes_;
};

}  // namespace loader::runtime
