// PinnedRegion: the one owner of a page-lock registration of a shared-memory slab
// (cudaHostRegister, else mlock: pin_region in loader/pinned.h).  It keeps the segment
// mapped while the registration lives and unpins before it lets the segment go.
// Move-only; an empty one holds nothing; the destructor never throws.
//
//   PinResult r;
//   PinnedRegion pin = PinnedRegion::pin(segment, r);   // r: CUDA, mlock or none, and why
//   ...                                                 // ~PinnedRegion: unpinned, then unmapped
//
// Thread use: one owner (SlabStore, under its lock).
#pragma once

#include <memory>
#include <utility>

#include "loader/pinned.h"
#include "loader/runtime/os/shm.h"

namespace loader::runtime {

class PinnedRegion {
 public:
  PinnedRegion() = default;
  /// Page-locks all of `segment`; `result` says how (or why not).
  static PinnedRegion pin(std::shared_ptr<ShmSegment> segment, PinResult& result) {
    result = pin_region(segment->data(), segment->size());
    PinnedRegion p;
    p.backend_ = result.backend;
    p.segment_ = std::move(segment);
    return p;
  }
  ~PinnedRegion() { reset(); }
  PinnedRegion(PinnedRegion&& o) noexcept : segment_(std::move(o.segment_)), backend_(o.backend_) {}
  PinnedRegion& operator=(PinnedRegion&& o) noexcept {
    if (this != &o) {
      reset();
      segment_ = std::move(o.segment_);
      backend_ = o.backend_;
    }
    return *this;
  }
  PinnedRegion(const PinnedRegion&) = delete;
  PinnedRegion& operator=(const PinnedRegion&) = delete;

  /// Unpins (then lets the segment go).
  void reset() noexcept {
    if (!segment_) return;
    unpin_region(segment_->data(), segment_->size(), backend_);
    segment_.reset();
  }

 private:
  std::shared_ptr<ShmSegment> segment_;  ///< keeps the memory mapped until unpinned
  PinBackend backend_{};
};

}  // namespace loader::runtime
