// The internal interface of the CUDA unit: the one translation unit that calls the
// CUDA runtime (cuda.cpp, compiled when the build has CUDA) or says why it cannot
// (cuda_none.cpp otherwise).  Besides the public API of cuda_copy.h and
// built_with_cuda() (pinned.h), that unit gives pinned.cpp the page-locking calls and
// the loader tool's gpu-check its bandwidth timer.  Not installed: not public API.
#pragma once

#include <cstddef>
#include <string>

#include "loader/cuda_copy.h"

namespace loader::detail {

/// Whether a CUDA device can be used; if not, why, in the CUDA runtime's words.  Not
/// cached (cuda_pinning_available() in pinned.h caches it); never creates a context.
bool cuda_probe(std::string* why);
/// cudaHostRegister(data, bytes, portable): "" on success, else the error text.
std::string cuda_host_register(void* data, size_t bytes);
/// cudaHostUnregister(data), errors ignored.
void cuda_host_unregister(void* data);
/// cudaHostAlloc(portable): the pointer, or nullptr with the error text in *error.
void* cuda_host_alloc(size_t bytes, std::string* error);
/// cudaFreeHost(p), errors ignored.
void cuda_host_free(void* p);

/// Host-to-device bandwidth from `host` (`bytes` bytes) into one device buffer,
/// `repeats` back-to-back copies on `stream`, timed with CUDA events (`loader gpu-check`).
struct CopyTiming {
  double seconds = 0;       ///< all repeats, between CUDA events on the stream
  double gb_per_s = 0;      ///< bytes * repeats / seconds / 1e9
  double wall_seconds = 0;  ///< the same on the host's clock (from pageable memory the host stages the bytes)
};
CopyTiming time_host_to_device(const void* host, size_t bytes, int repeats, CudaStream& stream);

}  // namespace loader::detail
