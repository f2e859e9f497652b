// A tensor: dtype + shape + strides + offset over a shared Storage.
//
// Views (select, slice, transpose, expand, view) share the storage; `contiguous()`
// copies only when needed.  Strides and offsets count elements, as in PyTorch.
//
//   auto t = loader::Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
//   loader::Tensor row = t[1];                 // view, shape [3]
//   float x = row.at<float>({2});              // 6
//   auto tt = t.transpose(0, 1).contiguous();  // copy, shape [3, 2]
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "loader/dtype.h"
#include "loader/error.h"
#include "loader/storage.h"

struct DLManagedTensor;

namespace loader {

/// A small vector of int64 (sizes or strides): up to 6 entries live inline.
class Dims {
 public:
  static constexpr size_t kInline = 6;
  Dims() = default;
  Dims(std::initializer_list<int64_t> v) { assign(v.begin(), v.size()); }
  Dims(const std::vector<int64_t>& v) { assign(v.data(), v.size()); }  // NOLINT: implicit by design
  Dims(const int64_t* p, size_t n) { assign(p, n); }
  Dims(const Dims& o) { assign(o.data(), o.size()); }
  Dims& operator=(const Dims& o) {
    if (this != &o) assign(o.data(), o.size());
    return *this;
  }
  // Moves keep Tensor and Value moves cheap (a Value is moved several times on its way
  // from a dataset into a batch): the heap part is stolen, the inline part copied.
  Dims(Dims&& o) noexcept : heap_(std::move(o.heap_)), n_(o.n_) {
    if (n_ <= kInline)
      for (size_t i = 0; i < n_; ++i) inline_[i] = o.inline_[i];
    o.n_ = 0;
  }
  Dims& operator=(Dims&& o) noexcept {
    if (this != &o) {
      heap_ = std::move(o.heap_);
      n_ = o.n_;
      if (n_ <= kInline)
        for (size_t i = 0; i < n_; ++i) inline_[i] = o.inline_[i];
      o.heap_.clear();
      o.n_ = 0;
    }
    return *this;
  }

  size_t size() const noexcept { return n_; }
  bool empty() const noexcept { return n_ == 0; }
  const int64_t* data() const noexcept { return n_ <= kInline ? inline_ : heap_.data(); }
  int64_t* data() noexcept { return n_ <= kInline ? inline_ : heap_.data(); }
  int64_t operator[](size_t i) const noexcept { return data()[i]; }
  int64_t& operator[](size_t i) noexcept { return data()[i]; }
  const int64_t* begin() const noexcept { return data(); }
  const int64_t* end() const noexcept { return data() + n_; }
  void push_front(int64_t v);
  void erase(size_t i);
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  bool operator==(const Dims& o) const;
  bool operator!=(const Dims& o) const { return !(*this == o); }
  std::string str() const;  ///< "[2, 3]"

 private:
  void assign(const int64_t* p, size_t n);
  int64_t inline_[kInline] = {};
  std::vector<int64_t> heap_;
  size_t n_ = 0;
};

/// Product of sizes (1 for a 0-dim shape).
int64_t numel_of(const Dims& sizes);
/// Row-major (C-order) strides for `sizes`.
Dims contiguous_strides(const Dims& sizes);

class Tensor {
 public:
  Tensor() = default;  ///< an undefined tensor (defined() == false)
  Tensor(std::shared_ptr<Storage> storage, DType dtype, Dims sizes, Dims strides, int64_t offset);

  // ---- factories
  /// Uninitialised contiguous tensor; bytes come from `alloc` (heap when null).
  static Tensor empty(const Dims& sizes, DType dtype, TensorAllocator* alloc = nullptr);
  static Tensor zeros(const Dims& sizes, DType dtype);
  /// 0-dim tensors as PyTorch's torch.tensor(x) makes them: int64, float64, bool.
  static Tensor scalar(int64_t v);
  static Tensor scalar(double v);
  static Tensor scalar_bool(bool v);
  /// Copies `values`; `sizes` defaults to [values.size()].
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Dims& sizes = Dims{});
  /// 0..n-1 as int64.
  static Tensor arange(int64_t n, DType dtype = DType::Int64);

  // ---- metadata
  bool defined() const noexcept { return static_cast<bool>(storage_); }
  DType dtype() const noexcept { return dtype_; }
  int64_t dim() const noexcept { return static_cast<int64_t>(sizes_.size()); }
  const Dims& sizes() const noexcept { return sizes_; }
  const Dims& strides() const noexcept { return strides_; }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t storage_offset() const noexcept { return offset_; }
  int64_t numel() const noexcept { return numel_of(sizes_); }
  size_t element_size() const { return loader::element_size(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  const std::shared_ptr<Storage>& storage() const noexcept { return storage_; }
  bool is_contiguous() const;
  bool is_pinned() const noexcept { return storage_ && storage_->is_pinned(); }
  /// Tensor.is_shared(): the bytes are in memory other processes map too (a worker's
  /// shared-memory slab, as every batch from a worker process; a shared file mapping).
  bool is_shared() const noexcept {
    return storage_ && (storage_->kind() == MemoryKind::SharedMemory || storage_->kind() == MemoryKind::FileMapping);
  }

  /// Address of element [0, 0, ...] (storage data + offset).
  void* data_ptr() const;
  /// Typed pointer; throws TypeError when T does not match dtype().
  template <class T> T* data() const;

  // ---- views (share storage)
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor expand(const Dims& sizes) const;
  Tensor unsqueeze(int64_t dim) const;
  /// Same elements, new shape (one size may be -1); requires a contiguous tensor.
  Tensor view(const Dims& sizes) const;
  Tensor reshape(const Dims& sizes) const;

  // ---- copies
  Tensor contiguous(TensorAllocator* alloc = nullptr) const;
  Tensor clone(TensorAllocator* alloc = nullptr) const;
  /// Converts element type (a copy, even when dtype matches).
  Tensor to(DType dtype) const;
  /// Copies `src` (same shape; dtype converted) into this tensor's elements.
  void copy_(const Tensor& src);

  // ---- element access (tests, small tensors)
  template <class T> T item() const;                             ///< one element, converted
  template <class T> T at(std::initializer_list<int64_t> idx) const;  ///< converted
  double item_double_at(int64_t flat_row_major_index) const;
  int64_t item_int64_at(int64_t flat_row_major_index) const;
  std::vector<double> to_double_vector() const;   ///< row-major
  std::vector<int64_t> to_int64_vector() const;   ///< row-major
  /// Same dtype, shape and values (NaN != NaN, as torch.equal).
  bool equal(const Tensor& other) const;
  /// Same dtype, shape and bytes of every element (NaN patterns compared bitwise).
  bool bitwise_equal(const Tensor& other) const;
  std::string repr() const;

  // ---- DLPack (zero-copy export/import)
  /// Exports a view of this tensor; the DLManagedTensor keeps the storage alive until
  /// its deleter runs. Complex64 maps to kDLComplex, bfloat16 to kDLBfloat, bool to kDLBool
  /// (to 8-bit kDLUInt with DLPack < 0.8, which has no bool type).
  ///
  /// The device is kDLCPU, for pinned (CUDA page-locked) tensors too, as PyTorch's own
  /// torch.utils.dlpack.to_dlpack does: libtorch 1.13's at::fromDLPack and
  /// torch.from_dlpack reject kDLCUDAHost ("Unsupported device_type: 3").  Pinned memory
  /// stays pinned: a CUDA consumer finds it with cudaPointerGetAttributes (that is how
  /// torch's is_pinned() answers), and is_pinned() here still says so.  Pass
  /// DLPackDevice::CudaHostWhenPinned for consumers that want DLPack's own word for
  /// page-locked host memory (kDLCUDAHost: CuPy, NumPy).  See docs/gpu.md.
  enum class DLPackDevice : uint8_t {
    Cpu,                 ///< kDLCPU always (default; what PyTorch exports)
    CudaHostWhenPinned,  ///< kDLCUDAHost when is_pinned(), kDLCPU otherwise
  };
  DLManagedTensor* to_dlpack(DLPackDevice device = DLPackDevice::Cpu) const;
  /// Imports a CPU (kDLCPU or kDLCUDAHost) DLPack tensor without copying; the deleter
  /// runs when the last view dies.  kDLCUDAHost marks the storage pinned; a kDLCPU
  /// tensor is taken as not pinned (the export does not say).
  static Tensor from_dlpack(DLManagedTensor* managed);

 private:
  const uint8_t* element_address(int64_t flat_row_major_index) const;
  std::shared_ptr<Storage> storage_;
  DType dtype_ = DType::Float32;
  Dims sizes_;
  Dims strides_;
  int64_t offset_ = 0;
};

/// Reads one element at `p` of type `t` as double / int64 (conversions as static_cast).
double load_as_double(const void* p, DType t);
int64_t load_as_int64(const void* p, DType t);
void store_from_double(void* p, DType t, double v);
void store_from_int64(void* p, DType t, int64_t v);

/// Calls fn(dst_ptr, src_ptr, n_contiguous_bytes) over the row-major traversal of `src`
/// copied into contiguous `dst` bytes: the primitive under contiguous() and collate.
void copy_to_contiguous(const Tensor& src, void* dst);

// ---- template definitions
template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Dims& sizes) {
  Dims s = sizes.empty() ? Dims{static_cast<int64_t>(values.size())} : sizes;
  if (numel_of(s) != static_cast<int64_t>(values.size()))
    throw ValueError("from_vector: " + std::to_string(values.size()) +
                     " values do not fill shape " + s.str());
  Tensor t = empty(s, dtype_of<T>::value);
  if constexpr (std::is_same_v<T, bool>) {
    auto* d = static_cast<bool*>(t.data_ptr());
    for (size_t i = 0; i < values.size(); ++i) d[i] = values[i];
  } else {
    if (!values.empty()) std::memcpy(t.data_ptr(), values.data(), values.size() * sizeof(T));
  }
  return t;
}

template <class T>
T* Tensor::data() const {
  if (dtype_of<T>::value != dtype_)
    throw TypeError(std::string("Tensor::data<T>: tensor has dtype ") + dtype_name(dtype_) +
                    ", asked for " + dtype_name(dtype_of<T>::value));
  return static_cast<T*>(data_ptr());
}

template <class T>
T Tensor::item() const {
  if (numel() != 1)
    throw ValueError("a Tensor with " + std::to_string(numel()) +
                     " elements cannot be converted to Scalar");
  if constexpr (std::is_floating_point_v<T>) return static_cast<T>(item_double_at(0));
  else return static_cast<T>(item_int64_at(0));
}

template <class T>
T Tensor::at(std::initializer_list<int64_t> idx) const {
  if (static_cast<int64_t>(idx.size()) != dim())
    throw IndexError("Tensor::at: " + std::to_string(idx.size()) + " indices for a " +
                     std::to_string(dim()) + "-dim tensor");
  int64_t flat = 0;
  size_t d = 0;
  for (int64_t i : idx) {
    if (i < 0) i += sizes_[d];
    if (i < 0 || i >= sizes_[d])
      throw IndexError("index " + std::to_string(i) + " is out of bounds for dimension " +
                       std::to_string(d) + " with size " + std::to_string(sizes_[d]));
    flat = flat * sizes_[d] + i;
    ++d;
  }
  if constexpr (std::is_floating_point_v<T>) return static_cast<T>(item_double_at(flat));
  else return static_cast<T>(item_int64_at(flat));
}

}  // namespace loader
