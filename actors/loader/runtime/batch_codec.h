// How a batch crosses from a worker to the main process without a copy.
//
// In the worker, SlabAllocator hands collate the bytes of the slab chosen for the
// task, so batch tensors are written in place.  place_in_slab() moves any tensor
// that is not in the slab yet (made by a custom collate, or past the slab's end)
// into it, and encode_batch() writes the batch as a Value whose tensors are
// descriptors (slab, offset, dtype, shape, strides).  If the batch does not fit,
// the worker reports the bytes it needs and keeps the batch until the parent
// supplies a larger slab.  In the main process decode_batch() turns descriptors
// back into tensors viewing the mapped slab; the storages share one BatchLease,
// whose destructor (when the application drops the batch) returns the slab.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loader/storage.h"
#include "loader/value.h"

namespace loader::runtime {

class ShmSegment;

/// Bump allocator over one slab (64-byte aligned).  Requests past the end fall back
/// to the heap and are counted, so the worker knows how large a slab the batch needs.
class SlabAllocator final : public TensorAllocator {
 public:
  SlabAllocator(uint64_t slab_id, void* base, size_t size) : slab_id_(slab_id), base_(static_cast<uint8_t*>(base)), size_(size) {}
  std::shared_ptr<Storage> allocate(size_t nbytes) override;
  /// Bytes the batch needs in total (in the slab or not), 64-byte aligned.
  size_t required() const noexcept { return required_; }
  bool overflowed() const noexcept { return overflowed_; }
  bool owns(const Storage& s) const noexcept;
  uint64_t slab_id() const noexcept { return slab_id_; }

 private:
  uint64_t slab_id_;
  uint8_t* base_;
  size_t size_;
  size_t used_ = 0;
  size_t required_ = 0;
  bool overflowed_ = false;
};

/// Copies every tensor of `batch` that is not in `alloc`'s slab into it (as a
/// contiguous tensor).  Returns the rewritten batch; check alloc.overflowed() after.
Value place_in_slab(const Value& batch, SlabAllocator& alloc);

/// Encodes a batch whose tensors all live in slab `slab_id`.
std::string encode_batch(const Value& batch, uint64_t slab_id);

/// The main process's view of a returned batch: the mapped slab and the callback
/// that gives the slab back to its worker's pool.
class BatchLease {
 public:
  BatchLease(std::shared_ptr<ShmSegment> segment, std::function<void()> on_release, bool pinned)
      : segment_(std::move(segment)), on_release_(std::move(on_release)), pinned_(pinned) {}
  ~BatchLease();
  BatchLease(const BatchLease&) = delete;
  BatchLease& operator=(const BatchLease&) = delete;
  const std::shared_ptr<ShmSegment>& segment() const { return segment_; }
  bool pinned() const { return pinned_; }

 private:
  std::shared_ptr<ShmSegment> segment_;
  std::function<void()> on_release_;
  bool pinned_;
};

/// Decodes `payload` into tensors viewing `lease`'s slab.  Throws ValueError when a
/// descriptor points outside the slab.
Value decode_batch(const std::string& payload, uint64_t slab_id, const std::shared_ptr<BatchLease>& lease);

// ------------------------------------------------------------------ over a byte stream
// How a batch crosses a byte stream (a remote worker's bulk stream, remote_protocol.h)
// with no copy on either side: its skeleton, the batch encoded with every tensor as a
// reference (dtype and sizes), then each tensor's bytes, contiguous, in the skeleton's
// order.  The host writes the bytes from where collate put them (split_batch); the main
// process decodes the skeleton into tensors that are allocated but not filled
// (unfilled_batch) and reads the bytes straight into them.

/// A batch split for a byte stream.
struct SplitBatch {
  std::string skeleton;
  std::vector<Tensor> tensors;  ///< contiguous, in the skeleton's order: their bytes follow it
  uint64_t data_bytes = 0;      ///< the sum of their nbytes()
};
/// Splits `batch`.  Its tensors are shared, not copied, unless one is not contiguous or
/// its storage is held by something besides `batch` (the dataset's own buffer, another
/// tensor of the batch): that one is copied, so that nothing the host does while the
/// bytes wait to be sent can change them.
SplitBatch split_batch(const Value& batch);

/// The batch a skeleton describes, and its tensors in the skeleton's order, to be filled
/// with the `data_bytes` bytes that follow the skeleton.
struct UnfilledBatch {
  Value batch;
  std::vector<Tensor> tensors;
};
/// Throws ValueError when the skeleton is malformed or its tensors do not add up to
/// exactly `data_bytes` bytes; the sizes are checked against `data_bytes` as they are
/// read, before anything is allocated for them.
/// The tensors come from `alloc` (null: the heap).
UnfilledBatch unfilled_batch(const std::string& skeleton, uint64_t data_bytes, TensorAllocator* alloc = nullptr);

}  // namespace loader::runtime
