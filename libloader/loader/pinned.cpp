#include "loader/pinned.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#ifdef LOADER_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace loader {

const char* pin_backend_name(PinBackend b) {
  switch (b) {
    case PinBackend::Cuda: return "cuda";
    case PinBackend::Mlock: return "mlock";
    case PinBackend::None: return "none";
  }
  return "none";
}

bool built_with_cuda() {
#ifdef LOADER_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_pinning_available(std::string* reason) {
  static std::once_flag once;
  static bool ok = false;
  static std::string why;
  std::call_once(once, [] {
#ifdef LOADER_HAVE_CUDA
    int driver = 0;
    cudaError_t e = cudaDriverGetVersion(&driver);
    if (e != cudaSuccess || driver == 0) {
      why = "no CUDA driver (cudaDriverGetVersion: " + std::to_string(driver) + ")";
      return;
    }
    int count = 0;
    e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      why = std::string("cudaGetDeviceCount: ") + std::to_string(static_cast<int>(e)) + " " +
            cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
      (void)cudaGetLastError();
      return;
    }
    if (count == 0) {
      why = "cudaGetDeviceCount: no CUDA device";
      return;
    }
    ok = true;
#else
    why = "built without CUDA (the CUDA toolkit was not found at configure time)";
#endif
  });
  if (reason) *reason = why;
  return ok;
}

PinResult pin_region(void* data, size_t bytes) {
  PinResult r;
  std::string why;
  if (cuda_pinning_available(&why)) {
#ifdef LOADER_HAVE_CUDA
    cudaError_t e = cudaHostRegister(data, bytes, cudaHostRegisterPortable);
    if (e == cudaSuccess) {
      r.backend = PinBackend::Cuda;
      r.pinned = true;
      return r;
    }
    why = std::string("cudaHostRegister: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    (void)cudaGetLastError();
#endif
  }
  if (mlock(data, bytes) == 0) {
    r.backend = PinBackend::Mlock;
    r.reason = why + "; page-locked with mlock instead (not CUDA-pinned)";
    return r;
  }
  r.reason = why + "; mlock failed too (" + std::strerror(errno) +
             ": raise `ulimit -l` or grant CAP_IPC_LOCK), so batches are not pinned";
  return r;
}

void unpin_region(void* data, size_t bytes, PinBackend backend) {
  switch (backend) {
    case PinBackend::Cuda:
#ifdef LOADER_HAVE_CUDA
      (void)cudaHostUnregister(data);
#endif
      break;
    case PinBackend::Mlock: munlock(data, bytes); break;
    case PinBackend::None: break;
  }
}

}  // namespace loader
