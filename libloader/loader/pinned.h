// Page-locking memory for fast host-to-device copies.
//
// pin_region() tries, in order: CUDA (cudaHostRegister, portable; only when the
// build has CUDA and a device is usable), mlock() (when the memory limit or
// CAP_IPC_LOCK allow), and finally nothing.  The result says which backend took
// the region and, when it is not CUDA, why.  Only CUDA registration makes
// is_pinned() true: mlock keeps pages resident but CUDA still stages copies.
//
//   loader::PinResult r = loader::pin_region(ptr, bytes);
//   if (r.backend != loader::PinBackend::Cuda) std::cerr << r.reason;
//   ...
//   loader::unpin_region(ptr, bytes, r.backend);
//
// pin_memory() is torch.utils.data's pin_memory(data): every tensor of a batch is
// copied into CUDA page-locked host memory (cudaHostAlloc) unless it is pinned
// already, and a CustomObject's own pin_memory() hook is called.  Without a usable
// CUDA device tensors are returned unchanged (no copy, is_pinned() false):
//
//   loader::PinResult how;
//   loader::Value pinned = loader::pin_memory(batch, &how);   // how.backend: Cuda or None
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "loader/storage.h"
#include "loader/tensor.h"
#include "loader/value.h"

namespace loader {

enum class PinBackend { Cuda, Mlock, None };
const char* pin_backend_name(PinBackend b);  ///< "cuda", "mlock", "none"

struct PinResult {
  PinBackend backend = PinBackend::None;
  bool pinned = false;  ///< true only for CUDA page-locked memory
  std::string reason;   ///< why not CUDA (empty when CUDA)
};

/// Folds `r` into `into`: the weaker backend wins (None < Mlock < Cuda) with its
/// reason, and `pinned` stays true only while every part is CUDA-pinned.
void merge_pin_result(PinResult& into, const PinResult& r);

/// Whether CUDA pinning is possible in this process, and if not why, in the CUDA
/// runtime's words, e.g. "cudaGetDeviceCount: 35 cudaErrorInsufficientDriver (CUDA
/// driver version is insufficient for CUDA runtime version); no CUDA driver is
/// loaded (cudaDriverGetVersion reports 0), runtime CUDA 13.0".  Cached after the
/// first call; never creates a CUDA context.
bool cuda_pinning_available(std::string* reason = nullptr);
/// True when this build was compiled with the CUDA runtime.
bool built_with_cuda();

PinResult pin_region(void* data, size_t bytes);
void unpin_region(void* data, size_t bytes, PinBackend backend);

// ------------------------------------------------------------------ pinned tensors
/// `nbytes` of CUDA page-locked host memory (cudaHostAlloc, portable, 64-byte
/// aligned or better).  Like PyTorch's caching host allocator, blocks come in
/// power-of-two sizes and go back to a process-wide cache when the storage goes (up to
/// 1 GiB cached; beyond that, and on empty_pinned_cache(), cudaFreeHost), so pinning
/// batch after batch page-locks memory once.  Returns nullptr when CUDA cannot pin (no
/// device, built without CUDA, out of pinned memory even after the cache was
/// emptied); `how`, when given, says which and why.
std::shared_ptr<Storage> allocate_pinned(size_t nbytes, PinResult* how = nullptr);

/// The cache behind allocate_pinned (torch.cuda.host_memory_stats in spirit).
struct PinnedCacheStats {
  uint64_t hits = 0;          ///< allocations served by a cached block
  uint64_t misses = 0;        ///< allocations that called cudaHostAlloc
  uint64_t cached_bytes = 0;  ///< page-locked bytes held for reuse now
  uint64_t cached_blocks = 0;
};
PinnedCacheStats pinned_cache_stats();
/// Frees every cached pinned block (cudaFreeHost); blocks in use are not affected.
void empty_pinned_cache();

/// A TensorAllocator over allocate_pinned(); falls back to ordinary heap memory
/// (is_pinned() false) when CUDA cannot pin.  result() is the merge of every
/// allocation so far (Cuda until one falls back).
class PinnedHostAllocator final : public TensorAllocator {
 public:
  std::shared_ptr<Storage> allocate(size_t nbytes) override;
  PinResult result() const;

 private:
  mutable std::mutex mu_;
  PinResult result_{PinBackend::Cuda, true, ""};
};

/// Tensor.pin_memory(): `t` itself when already pinned; otherwise a contiguous copy
/// in CUDA page-locked memory; `t` unchanged (not pinned, no copy) when CUDA cannot
/// pin.  `how` receives the outcome.
Tensor pin_memory(const Tensor& t, PinResult* how = nullptr);

/// torch.utils.data._utils.pin_memory.pin_memory(data): pins every tensor of a
/// batch (lists, tuples, namedtuples and dicts keep their kind and type name) and
/// replaces each CustomObject by what its pin_memory() hook returns (the object
/// itself when the hook returns nullptr).  The hook is called whether or not CUDA
/// can pin: it decides, usually by calling pin_memory(Tensor) on its members.
/// `how` receives the merged outcome (Cuda only when every tensor, the custom
/// objects' included, ends up pinned).
Value pin_memory(const Value& batch, PinResult* how = nullptr);

// ------------------------------------------------------------------ per-loader status
/// What pinning did for one DataLoader (DataLoader::pin_memory_status()).
struct PinStatus {
  bool requested = false;               ///< pin_memory was true
  PinBackend backend = PinBackend::None;
  bool pinned = false;                  ///< every region so far is CUDA page-locked
  std::string reason;                   ///< why not CUDA ("" when CUDA)
  int64_t regions = 0;                  ///< slabs registered (workers) or batches pinned (no workers)
  const char* backend_name() const { return pin_backend_name(backend); }
};

/// Thread-safe running merge of the PinResults of one loader.
class PinTracker {
 public:
  explicit PinTracker(bool requested = true);
  /// Folds one outcome in.  Returns true exactly once: for the first outcome that is
  /// not CUDA-pinned (the moment to warn).
  bool record(const PinResult& r);
  PinStatus status() const;

 private:
  mutable std::mutex mu_;
  PinStatus status_;
  bool warned_ = false;
};

}  // namespace loader
