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
#pragma once

#include <cstddef>
#include <string>

namespace loader {

enum class PinBackend { Cuda, Mlock, None };
const char* pin_backend_name(PinBackend b);  ///< "cuda", "mlock", "none"

struct PinResult {
  PinBackend backend = PinBackend::None;
  bool pinned = false;  ///< true only for CUDA page-locked memory
  std::string reason;   ///< why not CUDA (empty when CUDA)
};

/// Whether CUDA pinning is possible in this process, and if not why (cached after
/// the first call; never initialises a CUDA context when there is no device).
bool cuda_pinning_available(std::string* reason = nullptr);
/// True when this build was compiled with the CUDA runtime.
bool built_with_cuda();

PinResult pin_region(void* data, size_t bytes);
void unpin_region(void* data, size_t bytes, PinBackend backend);

}  // namespace loader
