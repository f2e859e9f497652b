// Host-to-device copies of batches on a CUDA stream: the C++ side of PyTorch's
// `batch.to('cuda', non_blocking=True)`.
//
// to_device_async() queues one copy per tensor of a batch on a stream and returns
// at once; the loader meanwhile prepares the next batch.  From pinned memory
// (DataLoaderOptions::pin_memory with a CUDA device: the shared-memory slabs are
// registered with CUDA) the copies are true DMA transfers that overlap the host;
// from ordinary memory CUDA stages them through its own pinned buffer, so the call
// returns only once the bytes are staged.  The DeviceBatch keeps the host batch
// (and so its slab) alive until the copy has finished: drop the host batch freely.
//
//   loader::CudaStream stream;                        // throws CudaUnavailable without a device
//   auto it = loader_.iter();
//   std::optional<loader::DeviceBatch> in_flight;
//   while (auto batch = it.next()) {
//     loader::DeviceBatch d = loader::to_device_async(*batch, stream);
//     if (in_flight) train_step(in_flight->wait());   // the previous batch is on the GPU now
//     in_flight = std::move(d);
//   }
//
// Without a CUDA device (or in a build without CUDA) CudaStream's constructor
// throws CudaUnavailable whose message starts with "no CUDA device: " and gives the
// CUDA runtime's reason; nothing else in this header touches CUDA before that.
// The implementation is the library's CUDA unit (cuda.cpp with CUDA, cuda_none.cpp
// without): the same API either way, and no CUDA header reaches the program.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loader/error.h"
#include "loader/tensor.h"
#include "loader/value.h"

namespace loader {

/// No usable CUDA device (no driver, no GPU, driver too old, or built without CUDA).
class CudaUnavailable : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

/// Whether a CUDA device can be used, and if not why (cudaGetDeviceCount's answer).
bool cuda_device_available(std::string* reason = nullptr);

struct CudaDeviceInfo {
  int device = 0;
  std::string name;            ///< e.g. "NVIDIA H100 80GB HBM3"
  uint64_t total_memory = 0;   ///< bytes
  int driver_version = 0;      ///< CUDA version the driver supports, e.g. 12040
  int runtime_version = 0;     ///< CUDA runtime linked into this program, e.g. 13000
  int compute_major = 0, compute_minor = 0;
  int pci_bus_id = 0;
};
/// Properties of `device`; throws CudaUnavailable without one.
CudaDeviceInfo cuda_device_info(int device = 0);

/// A CUDA stream on one device (non-blocking with respect to the default stream).
/// Copyable handle; the stream is destroyed with its last copy and the DeviceBatches
/// made on it.
class CudaStream {
 public:
  /// Throws CudaUnavailable("no CUDA device: <reason>") when CUDA cannot be used.
  explicit CudaStream(int device = 0);
  int device() const;
  /// Blocks until every operation queued on the stream has finished.
  void synchronize();
  /// The cudaStream_t, for the application's own kernels and copies.
  void* native_handle() const;

  struct Impl;
  const std::shared_ptr<Impl>& impl() const { return impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

/// One tensor of a DeviceBatch: contiguous bytes in device memory.
struct DeviceTensor {
  void* data = nullptr;  ///< device pointer (valid after DeviceBatch::wait())
  DType dtype = DType::Float32;
  Dims sizes;
  size_t nbytes = 0;
};

/// A batch's tensors in device memory (one allocation, freed stream-ordered when the
/// DeviceBatch goes).  Move-only.
class DeviceBatch {
 public:
  DeviceBatch();
  ~DeviceBatch();
  DeviceBatch(DeviceBatch&&) noexcept;
  DeviceBatch& operator=(DeviceBatch&&) noexcept;
  DeviceBatch(const DeviceBatch&) = delete;
  DeviceBatch& operator=(const DeviceBatch&) = delete;

  /// True once every copy of the batch has finished (never blocks).
  bool ready() const;
  /// Blocks until the copies have finished, then lets the host batch go (its slab
  /// returns to the worker).  Returns *this for chaining.
  DeviceBatch& wait();
  /// The tensors in Value::for_each_tensor order (custom objects' tensors() included).
  const std::vector<DeviceTensor>& tensors() const;
  /// Bytes copied to the device.
  size_t bytes() const;
  /// Whether every source tensor was CUDA-pinned (so the copies were truly asynchronous).
  bool from_pinned() const;
  /// Copies tensor `i` back into host memory (synchronous; for checks and tests).
  Tensor to_host(size_t i) const;

 private:
  friend DeviceBatch to_device_async(const Value& batch, CudaStream& stream);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Queues the copy of every tensor of `batch` to `stream`'s device and returns at
/// once.  Non-contiguous tensors are made contiguous on the host first.  Throws
/// RuntimeError naming the CUDA call that failed (e.g. out of device memory).
DeviceBatch to_device_async(const Value& batch, CudaStream& stream);

}  // namespace loader
