// The CUDA unit of a build without CUDA (LOADER_WITH_CUDA=OFF, or no toolkit found):
// the API of cuda_copy.h and detail/cuda.h, where CUDA is never available.  cuda.cpp
// takes its place in a build with CUDA.
#include <string>

#include "loader/cuda_copy.h"
#include "loader/detail/cuda.h"
#include "loader/pinned.h"

namespace loader {

namespace {
constexpr const char* kWhy =
    "built without CUDA (the CUDA toolkit was not found at configure time, or LOADER_WITH_CUDA=OFF)";

[[noreturn]] void throw_unavailable() { throw CudaUnavailable(std::string("no CUDA device: ") + kWhy); }
}  // namespace

bool built_with_cuda() { return false; }

namespace detail {
bool cuda_probe(std::string* why) {
  if (why) *why = kWhy;
  return false;
}
std::string cuda_host_register(void*, size_t) { return kWhy; }
void cuda_host_unregister(void*) {}
void* cuda_host_alloc(size_t, std::string* error) {
  if (error) *error = kWhy;
  return nullptr;
}
void cuda_host_free(void*) {}
CopyTiming time_host_to_device(const void*, size_t, int, CudaStream&) { throw_unavailable(); }
}  // namespace detail

bool cuda_device_available(std::string* reason) { return cuda_pinning_available(reason); }

CudaDeviceInfo cuda_device_info(int) { throw_unavailable(); }

struct CudaStream::Impl {
  int device = 0;
};

CudaStream::CudaStream(int) { throw_unavailable(); }
int CudaStream::device() const { return impl_ ? impl_->device : 0; }
void CudaStream::synchronize() {}
void* CudaStream::native_handle() const { return nullptr; }

struct DeviceBatch::Impl {};

DeviceBatch::DeviceBatch() = default;
DeviceBatch::~DeviceBatch() = default;
DeviceBatch::DeviceBatch(DeviceBatch&&) noexcept = default;
DeviceBatch& DeviceBatch::operator=(DeviceBatch&&) noexcept = default;
bool DeviceBatch::ready() const { return true; }
DeviceBatch& DeviceBatch::wait() { return *this; }
const std::vector<DeviceTensor>& DeviceBatch::tensors() const {
  static const std::vector<DeviceTensor> none;
  return none;
}
size_t DeviceBatch::bytes() const { return 0; }
bool DeviceBatch::from_pinned() const { return false; }
Tensor DeviceBatch::to_host(size_t i) const {
  throw IndexError("DeviceBatch::to_host: tensor " + std::to_string(i) + " out of range for a batch of 0 tensors");
}

DeviceBatch to_device_async(const Value&, CudaStream&) { throw_unavailable(); }

}  // namespace loader
