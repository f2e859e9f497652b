// The CUDA unit, compiled when the build has CUDA (LOADER_WITH_CUDA and a toolkit):
// the only file that calls the CUDA runtime.  cuda_none.cpp takes its place otherwise.
// Public API: cuda_copy.h and built_with_cuda() (pinned.h); internal: detail/cuda.h.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <utility>

#include "loader/cuda_copy.h"
#include "loader/detail/cuda.h"
#include "loader/pinned.h"

namespace loader {

bool built_with_cuda() { return true; }

bool cuda_device_available(std::string* reason) { return cuda_pinning_available(reason); }

namespace {
[[noreturn]] void throw_unavailable() {
  std::string why;
  cuda_device_available(&why);
  throw CudaUnavailable("no CUDA device: " + why);
}

void check(cudaError_t e, const char* call, const std::string& what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();
  throw RuntimeError(std::string(call) + " failed " + what + ": " + std::to_string(static_cast<int>(e)) + " " +
                     cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

constexpr size_t kDeviceAlign = 256;
size_t align_up(size_t n) { return (n + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign; }

std::string cuda_version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string cuda_error_text(const char* call, cudaError_t e) {
  return std::string(call) + ": " + std::to_string(static_cast<int>(e)) + " " + cudaGetErrorName(e) + " (" +
         cudaGetErrorString(e) + ")";
}
}  // namespace

// ------------------------------------------------------------------ page-locking (pinned.cpp)
namespace detail {

bool cuda_probe(std::string* why) {
  // Neither call creates a context.  Without a driver cudaDriverGetVersion
  // succeeds with 0 and cudaGetDeviceCount names the problem (35,
  // cudaErrorInsufficientDriver); with a driver too old for this runtime the
  // same 35 comes back, and the versions below tell by how much.
  int driver = 0, runtime = 0;
  (void)cudaDriverGetVersion(&driver);
  (void)cudaRuntimeGetVersion(&runtime);
  std::string versions = driver == 0 ? "no CUDA driver is loaded (cudaDriverGetVersion reports 0)"
                                     : "driver supports CUDA " + cuda_version_text(driver);
  versions += ", runtime CUDA " + cuda_version_text(runtime);
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    if (why) *why = cuda_error_text("cudaGetDeviceCount", e) + "; " + versions;
    (void)cudaGetLastError();
    return false;
  }
  if (count == 0) {
    if (why) *why = "cudaGetDeviceCount found 0 CUDA devices; " + versions;
    return false;
  }
  if (why) why->clear();
  return true;
}

std::string cuda_host_register(void* data, size_t bytes) {
  cudaError_t e = cudaHostRegister(data, bytes, cudaHostRegisterPortable);
  if (e == cudaSuccess) return "";
  (void)cudaGetLastError();
  return cuda_error_text("cudaHostRegister", e);
}

void cuda_host_unregister(void* data) {
  if (cudaHostUnregister(data) != cudaSuccess) (void)cudaGetLastError();
}

void* cuda_host_alloc(size_t bytes, std::string* error) {
  void* p = nullptr;
  cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (e == cudaSuccess) return p;
  (void)cudaGetLastError();
  if (error) *error = cuda_error_text("cudaHostAlloc", e);
  return nullptr;
}

void cuda_host_free(void* p) {
  if (cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
}

}  // namespace detail

CudaDeviceInfo cuda_device_info(int device) {
  if (!cuda_device_available()) throw_unavailable();
  CudaDeviceInfo info;
  info.device = device;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties", "for device " + std::to_string(device));
  info.name = prop.name;
  info.total_memory = prop.totalGlobalMem;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.pci_bus_id = prop.pciBusID;
  (void)cudaDriverGetVersion(&info.driver_version);
  (void)cudaRuntimeGetVersion(&info.runtime_version);
  return info;
}

// ------------------------------------------------------------------ stream
struct CudaStream::Impl {
  int device = 0;
  bool async_alloc = false;  ///< stream-ordered allocation (cudaMallocAsync) supported
  cudaStream_t stream = nullptr;
  ~Impl() {
    if (stream) {
      (void)cudaSetDevice(device);
      (void)cudaStreamSynchronize(stream);
      (void)cudaStreamDestroy(stream);
      (void)cudaGetLastError();
    }
  }
};

CudaStream::CudaStream(int device) {
  if (!cuda_device_available()) throw_unavailable();
  impl_ = std::make_shared<Impl>();
  impl_->device = device;
  const std::string where = "on CUDA device " + std::to_string(device);
  check(cudaSetDevice(device), "cudaSetDevice", where);
  check(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", where);
  int pools = 0;
  if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device) == cudaSuccess)
    impl_->async_alloc = pools != 0;
  if (impl_->async_alloc) {
    // Keep freed batch buffers in the pool instead of returning them to the driver at
    // every synchronisation: the next batch of the same size reuses them.
    cudaMemPool_t pool = nullptr;
    uint64_t keep = UINT64_MAX;
    if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess)
      (void)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  (void)cudaGetLastError();
}

int CudaStream::device() const { return impl_->device; }

void CudaStream::synchronize() {
  check(cudaStreamSynchronize(impl_->stream), "cudaStreamSynchronize", "");
}

void* CudaStream::native_handle() const {
  return impl_->stream;
}

// ------------------------------------------------------------------ device batch
struct DeviceBatch::Impl {
  std::shared_ptr<CudaStream::Impl> stream;
  void* device_buffer = nullptr;
  size_t bytes = 0;
  std::vector<DeviceTensor> tensors;
  bool from_pinned = true;
  bool done = false;
  Value host;                       ///< keeps the source (and its slab) alive during the copy
  std::vector<Tensor> staging;      ///< contiguous copies of non-contiguous tensors
  cudaEvent_t event = nullptr;

  void finish() {
    if (done) return;
    if (event) check(cudaEventSynchronize(event), "cudaEventSynchronize", "waiting for a batch copy");
    done = true;
    host = Value();
    staging.clear();
  }

  ~Impl() {
    // Never throws: wait for the copies (the host bytes must outlive them), then
    // free the device buffer in stream order.
    if (event) {
      (void)cudaEventSynchronize(event);
      (void)cudaEventDestroy(event);
    } else if (device_buffer) {
      (void)cudaStreamSynchronize(stream->stream);  // a copy failed half-way: let the queued ones end
    }
    if (device_buffer) {
      (void)cudaSetDevice(stream->device);
      if (stream->async_alloc) (void)cudaFreeAsync(device_buffer, stream->stream);
      else (void)cudaFree(device_buffer);
    }
    (void)cudaGetLastError();
  }
};

DeviceBatch::DeviceBatch() = default;
DeviceBatch::~DeviceBatch() = default;
DeviceBatch::DeviceBatch(DeviceBatch&&) noexcept = default;
DeviceBatch& DeviceBatch::operator=(DeviceBatch&&) noexcept = default;

bool DeviceBatch::ready() const {
  if (!impl_ || impl_->done) return true;
  if (!impl_->event) return true;
  cudaError_t e = cudaEventQuery(impl_->event);
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  check(e, "cudaEventQuery", "on a batch copy");
  return true;
}

DeviceBatch& DeviceBatch::wait() {
  if (impl_) impl_->finish();
  return *this;
}

const std::vector<DeviceTensor>& DeviceBatch::tensors() const {
  static const std::vector<DeviceTensor> none;
  return impl_ ? impl_->tensors : none;
}

size_t DeviceBatch::bytes() const { return impl_ ? impl_->bytes : 0; }
bool DeviceBatch::from_pinned() const { return impl_ && impl_->from_pinned; }

Tensor DeviceBatch::to_host(size_t i) const {
  if (!impl_ || i >= impl_->tensors.size())
    throw IndexError("DeviceBatch::to_host: tensor " + std::to_string(i) + " out of range for a batch of " +
                     std::to_string(tensors().size()) + " tensors");
  const DeviceTensor& d = impl_->tensors[i];
  Tensor out = Tensor::empty(d.sizes, d.dtype);
  check(cudaSetDevice(impl_->stream->device), "cudaSetDevice", "");
  // Stream order: the copy back follows the copy in.
  check(cudaMemcpyAsync(out.data_ptr(), d.data, d.nbytes, cudaMemcpyDeviceToHost, impl_->stream->stream),
        "cudaMemcpyAsync", "copying tensor " + std::to_string(i) + " back to the host");
  check(cudaStreamSynchronize(impl_->stream->stream), "cudaStreamSynchronize", "");
  return out;
}

DeviceBatch to_device_async(const Value& batch, CudaStream& stream) {
  auto impl = std::make_unique<DeviceBatch::Impl>();
  impl->stream = stream.impl();
  impl->host = batch;
  // Layout: each tensor at a 256-byte aligned offset of one device buffer.
  std::vector<const void*> sources;
  std::vector<size_t> offsets;
  size_t total = 0;
  batch.for_each_tensor([&](const Tensor& t) {
    if (!t.defined()) return;
    Tensor src = t;
    if (!t.is_contiguous()) {
      src = t.contiguous();
      impl->staging.push_back(src);
    }
    impl->from_pinned = impl->from_pinned && src.is_pinned();
    DeviceTensor d;
    d.dtype = t.dtype();
    d.sizes = t.sizes();
    d.nbytes = t.nbytes();
    impl->tensors.push_back(d);
    sources.push_back(src.data_ptr());
    offsets.push_back(total);
    total += align_up(d.nbytes);
  });
  impl->bytes = 0;
  for (const auto& d : impl->tensors) impl->bytes += d.nbytes;
  const auto& s = *impl->stream;
  check(cudaSetDevice(s.device), "cudaSetDevice", "");
  if (total > 0) {
    const std::string what = "for a batch of " + std::to_string(total) + " bytes on CUDA device " +
                             std::to_string(s.device);
    if (s.async_alloc) check(cudaMallocAsync(&impl->device_buffer, total, s.stream), "cudaMallocAsync", what);
    else check(cudaMalloc(&impl->device_buffer, total), "cudaMalloc", what);
  }
  auto* base = static_cast<uint8_t*>(impl->device_buffer);
  for (size_t i = 0; i < impl->tensors.size(); ++i) {
    auto& d = impl->tensors[i];
    d.data = base + offsets[i];
    if (d.nbytes == 0) continue;
    check(cudaMemcpyAsync(d.data, sources[i], d.nbytes, cudaMemcpyHostToDevice, s.stream), "cudaMemcpyAsync",
          "copying tensor " + std::to_string(i) + " (" + std::to_string(d.nbytes) + " bytes) to the device");
  }
  check(cudaEventCreateWithFlags(&impl->event, cudaEventDisableTiming), "cudaEventCreateWithFlags", "");
  check(cudaEventRecord(impl->event, s.stream), "cudaEventRecord", "after a batch copy");
  DeviceBatch out;
  out.impl_ = std::move(impl);
  return out;
}

detail::CopyTiming detail::time_host_to_device(const void* host, size_t bytes, int repeats, CudaStream& stream) {
  CopyTiming r;
  if (repeats <= 0 || bytes == 0) return r;
  const auto& s = *stream.impl();
  check(cudaSetDevice(s.device), "cudaSetDevice", "");
  void* dev = nullptr;
  check(cudaMalloc(&dev, bytes), "cudaMalloc", "for " + std::to_string(bytes) + " bytes");
  cudaEvent_t start = nullptr, stop = nullptr;
  try {
    check(cudaEventCreate(&start), "cudaEventCreate", "");
    check(cudaEventCreate(&stop), "cudaEventCreate", "");
    // One untimed copy first: the first touch of a pageable buffer pays page faults.
    check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s.stream), "cudaMemcpyAsync", "(warm-up)");
    check(cudaStreamSynchronize(s.stream), "cudaStreamSynchronize", "");
    const auto t0 = std::chrono::steady_clock::now();
    check(cudaEventRecord(start, s.stream), "cudaEventRecord", "");
    for (int i = 0; i < repeats; ++i)
      check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s.stream), "cudaMemcpyAsync", "");
    check(cudaEventRecord(stop, s.stream), "cudaEventRecord", "");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize", "");
    r.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime", "");
    r.seconds = static_cast<double>(ms) / 1e3;
    r.gb_per_s = r.seconds > 0 ? static_cast<double>(bytes) * repeats / r.seconds / 1e9 : 0;
  } catch (...) {
    if (start) (void)cudaEventDestroy(start);
    if (stop) (void)cudaEventDestroy(stop);
    (void)cudaFree(dev);
    throw;
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  (void)cudaFree(dev);
  return r;
}

}  // namespace loader
