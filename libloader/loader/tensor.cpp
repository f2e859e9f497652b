#include "loader/tensor.h"

#include <dlpack/dlpack.h>

#include <cmath>
#include <cstring>
#include <sstream>

namespace loader {

// ------------------------------------------------------------------ Dims
void Dims::assign(const int64_t* p, size_t n) {
  if (n <= kInline) {
    heap_.clear();
    n_ = n;
    for (size_t i = 0; i < n; ++i) inline_[i] = p[i];
  } else {
    heap_.assign(p, p + n);
    n_ = n;
  }
}

void Dims::push_front(int64_t v) {
  std::vector<int64_t> tmp;
  tmp.reserve(n_ + 1);
  tmp.push_back(v);
  tmp.insert(tmp.end(), begin(), end());
  assign(tmp.data(), tmp.size());
}

void Dims::erase(size_t i) {
  std::vector<int64_t> tmp(begin(), end());
  tmp.erase(tmp.begin() + static_cast<std::ptrdiff_t>(i));
  assign(tmp.data(), tmp.size());
}

bool Dims::operator==(const Dims& o) const {
  if (n_ != o.n_) return false;
  for (size_t i = 0; i < n_; ++i)
    if ((*this)[i] != o[i]) return false;
  return true;
}

std::string Dims::str() const {
  std::string s = "[";
  for (size_t i = 0; i < n_; ++i) {
    if (i) s += ", ";
    s += std::to_string((*this)[i]);
  }
  return s + "]";
}

int64_t numel_of(const Dims& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

Dims contiguous_strides(const Dims& sizes) {
  Dims st = sizes;
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = acc;
    acc *= sizes[i] > 0 ? sizes[i] : 1;
  }
  return st;
}

// ------------------------------------------------------------------ element conversions
double load_as_double(const void* p, DType t) {
  switch (t) {
    case DType::Bool: return *static_cast<const uint8_t*>(p) ? 1.0 : 0.0;
    case DType::UInt8: return *static_cast<const uint8_t*>(p);
    case DType::Int8: return *static_cast<const int8_t*>(p);
    case DType::Int16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::Int32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::Int64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<double>(v); }
    case DType::Float16: { uint16_t v; std::memcpy(&v, p, 2); return half_to_float(v); }
    case DType::BFloat16: { uint16_t v; std::memcpy(&v, p, 2); return bfloat16_to_float(v); }
    case DType::Float32: { float v; std::memcpy(&v, p, 4); return v; }
    case DType::Float64: { double v; std::memcpy(&v, p, 8); return v; }
    case DType::Complex64: { float v; std::memcpy(&v, p, 4); return v; }  // real part
  }
  return 0;
}

int64_t load_as_int64(const void* p, DType t) {
  switch (t) {
    case DType::Bool: return *static_cast<const uint8_t*>(p) ? 1 : 0;
    case DType::UInt8: return *static_cast<const uint8_t*>(p);
    case DType::Int8: return *static_cast<const int8_t*>(p);
    case DType::Int16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::Int32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::Int64: { int64_t v; std::memcpy(&v, p, 8); return v; }
    default: {
      double d = load_as_double(p, t);
      if (!std::isfinite(d)) return 0;
      return static_cast<int64_t>(d);
    }
  }
}

void store_from_double(void* p, DType t, double v) {
  switch (t) {
    case DType::Bool: *static_cast<uint8_t*>(p) = v != 0.0; break;
    case DType::Float16: { uint16_t h = float_to_half(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
    case DType::BFloat16: { uint16_t h = float_to_bfloat16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
    case DType::Float32: { float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
    case DType::Float64: std::memcpy(p, &v, 8); break;
    case DType::Complex64: { float f[2] = {static_cast<float>(v), 0.f}; std::memcpy(p, f, 8); break; }
    default: store_from_int64(p, t, std::isfinite(v) ? static_cast<int64_t>(v) : 0); break;
  }
}

void store_from_int64(void* p, DType t, int64_t v) {
  switch (t) {
    case DType::Bool: *static_cast<uint8_t*>(p) = v != 0; break;
    case DType::UInt8: *static_cast<uint8_t*>(p) = static_cast<uint8_t>(v); break;
    case DType::Int8: *static_cast<int8_t*>(p) = static_cast<int8_t>(v); break;
    case DType::Int16: { auto x = static_cast<int16_t>(v); std::memcpy(p, &x, 2); break; }
    case DType::Int32: { auto x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); break; }
    case DType::Int64: std::memcpy(p, &v, 8); break;
    default: store_from_double(p, t, static_cast<double>(v)); break;
  }
}

// ------------------------------------------------------------------ Tensor
Tensor::Tensor(std::shared_ptr<Storage> storage, DType dtype, Dims sizes, Dims strides,
               int64_t offset)
    : storage_(std::move(storage)), dtype_(dtype), sizes_(std::move(sizes)),
      strides_(std::move(strides)), offset_(offset) {
  if (sizes_.size() != strides_.size())
    throw ValueError("Tensor: sizes " + sizes_.str() + " and strides " + strides_.str() +
                     " differ in length");
  if (!storage_) throw ValueError("Tensor: null storage");
  // The furthest element addressed must lie inside the storage.
  if (numel() > 0) {
    int64_t lo = offset_, hi = offset_;
    for (size_t i = 0; i < sizes_.size(); ++i) {
      if (sizes_[i] < 0) throw ValueError("Tensor: negative size in " + sizes_.str());
      int64_t span = (sizes_[i] - 1) * strides_[i];
      (span < 0 ? lo : hi) += span;
    }
    size_t es = loader::element_size(dtype_);
    if (lo < 0 || static_cast<size_t>(hi + 1) * es > storage_->nbytes())
      throw ValueError("Tensor: view with sizes " + sizes_.str() + ", strides " + strides_.str() +
                       " and offset " + std::to_string(offset_) + " needs " +
                       std::to_string(static_cast<size_t>(hi + 1) * es) +
                       " bytes but the storage has " + std::to_string(storage_->nbytes()));
  }
}

Tensor Tensor::empty(const Dims& sizes, DType dtype, TensorAllocator* alloc) {
  for (int64_t s : sizes)
    if (s < 0) throw ValueError("Tensor::empty: negative size in " + sizes.str());
  size_t nbytes = static_cast<size_t>(numel_of(sizes)) * loader::element_size(dtype);
  auto storage = alloc ? alloc->allocate(nbytes) : Storage::allocate(nbytes);
  Tensor t;
  t.storage_ = std::move(storage);
  t.dtype_ = dtype;
  t.sizes_ = sizes;
  t.strides_ = contiguous_strides(sizes);
  t.offset_ = 0;
  return t;
}

Tensor Tensor::zeros(const Dims& sizes, DType dtype) {
  Tensor t = empty(sizes, dtype);
  if (t.nbytes()) std::memset(t.data_ptr(), 0, t.nbytes());
  return t;
}

Tensor Tensor::scalar(int64_t v) {
  Tensor t = empty({}, DType::Int64);
  std::memcpy(t.data_ptr(), &v, 8);
  return t;
}

Tensor Tensor::scalar(double v) {
  Tensor t = empty({}, DType::Float64);
  std::memcpy(t.data_ptr(), &v, 8);
  return t;
}

Tensor Tensor::scalar_bool(bool v) {
  Tensor t = empty({}, DType::Bool);
  *static_cast<uint8_t*>(t.data_ptr()) = v ? 1 : 0;
  return t;
}

Tensor Tensor::arange(int64_t n, DType dtype) {
  Tensor t = empty({n}, dtype);
  auto* p = static_cast<uint8_t*>(t.data_ptr());
  size_t es = loader::element_size(dtype);
  for (int64_t i = 0; i < n; ++i) store_from_int64(p + static_cast<size_t>(i) * es, dtype, i);
  return t;
}

int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  if (d < 0) d += n;
  if (d < 0 || d >= n)
    throw IndexError("Dimension out of range (expected to be in range of [" +
                     std::to_string(-n) + ", " + std::to_string(n - 1) + "], but got " +
                     std::to_string(d) + ")");
  return sizes_[static_cast<size_t>(d)];
}

int64_t Tensor::stride(int64_t d) const {
  int64_t n = dim();
  if (d < 0) d += n;
  if (d < 0 || d >= n) throw IndexError("Dimension out of range: " + std::to_string(d));
  return strides_[static_cast<size_t>(d)];
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = sizes_.size(); i-- > 0;) {
    if (sizes_[i] == 1) continue;
    if (strides_[i] != expected) return numel() == 0;
    expected *= sizes_[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  if (!storage_) return nullptr;
  return static_cast<uint8_t*>(storage_->data()) + static_cast<size_t>(offset_) * element_size();
}

static int64_t wrap_dim(int64_t d, int64_t n, const char* what) {
  if (d < 0) d += n;
  if (d < 0 || d >= n)
    throw IndexError(std::string(what) + ": dimension out of range (expected to be in range of [" +
                     std::to_string(-n) + ", " + std::to_string(n - 1) + "], but got " +
                     std::to_string(d) + ")");
  return d;
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  if (dim() == 0) throw IndexError("invalid index of a 0-dim tensor.");
  d = wrap_dim(d, dim(), "select");
  int64_t n = sizes_[static_cast<size_t>(d)];
  if (index < -n || index >= n)
    throw IndexError("index " + std::to_string(index) + " is out of bounds for dimension " +
                     std::to_string(d) + " with size " + std::to_string(n));
  if (index < 0) index += n;
  Tensor t = *this;
  t.offset_ += index * strides_[static_cast<size_t>(d)];
  t.sizes_.erase(static_cast<size_t>(d));
  t.strides_.erase(static_cast<size_t>(d));
  return t;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, dim(), "slice");
  if (step <= 0) throw ValueError("slice step must be positive");
  int64_t n = sizes_[static_cast<size_t>(d)];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::min(std::max<int64_t>(start, 0), n);
  end = std::min(std::max<int64_t>(end, start), n);
  Tensor t = *this;
  t.offset_ += start * strides_[static_cast<size_t>(d)];
  t.sizes_[static_cast<size_t>(d)] = (end - start + step - 1) / step;
  t.strides_[static_cast<size_t>(d)] *= step;
  return t;
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  Tensor t = *this;
  std::swap(t.sizes_[static_cast<size_t>(d0)], t.sizes_[static_cast<size_t>(d1)]);
  std::swap(t.strides_[static_cast<size_t>(d0)], t.strides_[static_cast<size_t>(d1)]);
  return t;
}

Tensor Tensor::expand(const Dims& sizes) const {
  if (sizes.size() < sizes_.size())
    throw ValueError("expand: the number of sizes provided (" + std::to_string(sizes.size()) +
                     ") must be greater or equal to the number of dimensions in the tensor (" +
                     std::to_string(dim()) + ")");
  size_t lead = sizes.size() - sizes_.size();
  Dims ns = sizes, st = sizes;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i < lead) {
      st[i] = 0;
      continue;
    }
    int64_t have = sizes_[i - lead];
    int64_t want = sizes[i] == -1 ? have : sizes[i];
    ns[i] = want;
    if (have == want) st[i] = strides_[i - lead];
    else if (have == 1) st[i] = 0;
    else
      throw ValueError("The expanded size of the tensor (" + std::to_string(want) +
                       ") must match the existing size (" + std::to_string(have) +
                       ") at non-singleton dimension " + std::to_string(i));
  }
  return Tensor(storage_, dtype_, ns, st, offset_);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  int64_t n = dim() + 1;
  if (d < 0) d += n;
  if (d < 0 || d >= n) throw IndexError("unsqueeze: dimension out of range");
  std::vector<int64_t> s = sizes_.vec(), st = strides_.vec();
  int64_t stride = static_cast<size_t>(d) < s.size() ? s[static_cast<size_t>(d)] * st[static_cast<size_t>(d)] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  return Tensor(storage_, dtype_, Dims(s), Dims(st), offset_);
}

static Dims infer_shape(const Dims& sizes, int64_t numel) {
  Dims out = sizes;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      if (infer >= 0) throw ValueError("only one dimension can be inferred");
      infer = static_cast<int64_t>(i);
    } else {
      known *= sizes[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      throw ValueError("shape '" + sizes.str() + "' is invalid for input of size " +
                       std::to_string(numel));
    out[static_cast<size_t>(infer)] = numel / known;
  } else if (known != numel) {
    throw ValueError("shape '" + sizes.str() + "' is invalid for input of size " +
                     std::to_string(numel));
  }
  return out;
}

Tensor Tensor::view(const Dims& sizes) const {
  if (!is_contiguous())
    throw RuntimeError("view size is not compatible with input tensor's size and stride; use "
                       ".reshape(...) instead.");
  Dims s = infer_shape(sizes, numel());
  return Tensor(storage_, dtype_, s, contiguous_strides(s), offset_);
}

Tensor Tensor::reshape(const Dims& sizes) const {
  return is_contiguous() ? view(sizes) : contiguous().view(sizes);
}

void copy_to_contiguous(const Tensor& src, void* dst) {
  const size_t es = src.element_size();
  const int64_t n = src.numel();
  if (n == 0) return;
  auto* out = static_cast<uint8_t*>(dst);
  const auto* base = static_cast<const uint8_t*>(src.data_ptr());
  if (src.is_contiguous()) {
    std::memcpy(out, base, static_cast<size_t>(n) * es);
    return;
  }
  // Merge the innermost dimensions that are contiguous into one run.
  const int64_t nd = src.dim();
  const Dims& sz = src.sizes();
  const Dims& st = src.strides();
  int64_t inner = 1;
  int64_t k = nd;  // dims [k, nd) form one contiguous run
  while (k > 0 && st[static_cast<size_t>(k - 1)] == inner) {
    inner *= sz[static_cast<size_t>(k - 1)];
    --k;
  }
  const size_t run = static_cast<size_t>(inner) * es;
  std::vector<int64_t> idx(static_cast<size_t>(k), 0);
  int64_t outer = n / inner;
  for (int64_t o = 0; o < outer; ++o) {
    int64_t off = 0;
    for (int64_t d = 0; d < k; ++d) off += idx[static_cast<size_t>(d)] * st[static_cast<size_t>(d)];
    const uint8_t* p = base + off * static_cast<int64_t>(es);
    std::memcpy(out, p, run);
    out += run;
    for (int64_t d = k - 1; d >= 0; --d) {
      if (++idx[static_cast<size_t>(d)] < sz[static_cast<size_t>(d)]) break;
      idx[static_cast<size_t>(d)] = 0;
    }
  }
}

Tensor Tensor::contiguous(TensorAllocator* alloc) const {
  if (is_contiguous() && !alloc) return *this;
  return clone(alloc);
}

Tensor Tensor::clone(TensorAllocator* alloc) const {
  Tensor t = empty(sizes_, dtype_, alloc);
  copy_to_contiguous(*this, t.data_ptr());
  return t;
}

const uint8_t* Tensor::element_address(int64_t flat) const {
  int64_t n = numel();
  if (flat < 0 || flat >= n)
    throw IndexError("element " + std::to_string(flat) + " out of range for a tensor of " +
                     std::to_string(n) + " elements");
  int64_t off = 0;
  for (size_t d = sizes_.size(); d-- > 0;) {
    int64_t i = flat % sizes_[d];
    flat /= sizes_[d];
    off += i * strides_[d];
  }
  return static_cast<const uint8_t*>(data_ptr()) + off * static_cast<int64_t>(element_size());
}

double Tensor::item_double_at(int64_t flat) const { return load_as_double(element_address(flat), dtype_); }
int64_t Tensor::item_int64_at(int64_t flat) const { return load_as_int64(element_address(flat), dtype_); }

std::vector<double> Tensor::to_double_vector() const {
  std::vector<double> v(static_cast<size_t>(numel()));
  Tensor c = contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_double(p + i * element_size(), dtype_);
  return v;
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  std::vector<int64_t> v(static_cast<size_t>(numel()));
  Tensor c = contiguous();
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_int64(p + i * element_size(), dtype_);
  return v;
}

Tensor Tensor::to(DType dtype) const {
  Tensor out = empty(sizes_, dtype);
  out.copy_(*this);
  return out;
}

void Tensor::copy_(const Tensor& src) {
  if (src.sizes() != sizes_)
    throw ValueError("copy_: source shape " + src.sizes().str() + " differs from destination " +
                     sizes_.str());
  if (src.dtype() == dtype_ && is_contiguous()) {
    copy_to_contiguous(src, data_ptr());
    return;
  }
  Tensor s = src.contiguous();
  const auto* sp = static_cast<const uint8_t*>(s.data_ptr());
  const size_t ses = s.element_size();
  const bool as_int = !is_floating(dtype_) && !is_floating(s.dtype()) && dtype_ != DType::Complex64 &&
                      s.dtype() != DType::Complex64;
  int64_t n = numel();
  for (int64_t i = 0; i < n; ++i) {
    auto* dp = const_cast<uint8_t*>(element_address(i));
    const uint8_t* e = sp + static_cast<size_t>(i) * ses;
    if (s.dtype() == dtype_) std::memcpy(dp, e, ses);
    else if (as_int) store_from_int64(dp, dtype_, load_as_int64(e, s.dtype()));
    else store_from_double(dp, dtype_, load_as_double(e, s.dtype()));
  }
}

bool Tensor::equal(const Tensor& o) const {
  if (!defined() || !o.defined()) return defined() == o.defined();
  if (dtype_ != o.dtype_ || sizes_ != o.sizes_) return false;
  int64_t n = numel();
  if (n > 0 && is_contiguous() && o.is_contiguous()) {  // the common case, without an index per element
    const size_t count = static_cast<size_t>(n);
    if (is_integral(dtype_)) return std::memcmp(data_ptr(), o.data_ptr(), count * element_size()) == 0;
    auto same = [count](const auto* a, const auto* b) {  // == per element: NaN differs, -0 == +0
      for (size_t i = 0; i < count; ++i)
        if (!(a[i] == b[i])) return false;
      return true;
    };
    if (dtype_ == DType::Float32)
      return same(static_cast<const float*>(data_ptr()), static_cast<const float*>(o.data_ptr()));
    if (dtype_ == DType::Float64)
      return same(static_cast<const double*>(data_ptr()), static_cast<const double*>(o.data_ptr()));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (is_floating(dtype_) || dtype_ == DType::Complex64) {
      if (dtype_ == DType::Complex64) {
        if (std::memcmp(element_address(i), o.element_address(i), 8) != 0) {
          float a[2], b[2];
          std::memcpy(a, element_address(i), 8);
          std::memcpy(b, o.element_address(i), 8);
          if (a[0] != b[0] || a[1] != b[1]) return false;
        }
      } else if (item_double_at(i) != o.item_double_at(i)) {
        return false;
      }
    } else if (item_int64_at(i) != o.item_int64_at(i)) {
      return false;
    }
  }
  return true;
}

bool Tensor::bitwise_equal(const Tensor& o) const {
  if (!defined() || !o.defined()) return defined() == o.defined();
  if (dtype_ != o.dtype_ || sizes_ != o.sizes_) return false;
  int64_t n = numel();
  size_t es = element_size();
  if (n > 0 && is_contiguous() && o.is_contiguous())
    return std::memcmp(data_ptr(), o.data_ptr(), static_cast<size_t>(n) * es) == 0;
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(element_address(i), o.element_address(i), es) != 0) return false;
  return true;
}

std::string Tensor::repr() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "tensor(";
  int64_t n = numel();
  const int64_t shown = std::min<int64_t>(n, 20);
  os << "[";
  for (int64_t i = 0; i < shown; ++i) {
    if (i) os << ", ";
    if (is_floating(dtype_)) os << item_double_at(i);
    else os << item_int64_at(i);
  }
  if (shown < n) os << ", ...";
  os << "], dtype=" << dtype_name(dtype_) << ", shape=" << sizes_.str() << ")";
  return os.str();
}

// ------------------------------------------------------------------ DLPack
namespace {
struct DLPackContext {
  Tensor tensor;  // keeps the storage alive
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLManagedTensor managed{};
};

DLDataType to_dl_dtype(DType t) {
  DLDataType d{};
  d.lanes = 1;
  d.bits = static_cast<uint8_t>(element_size(t) * 8);
  switch (t) {
#if DLPACK_VERSION >= 80
    case DType::Bool: d.code = kDLBool; break;
#else
    case DType::Bool: d.code = kDLUInt; break;  // DLPack < 0.8 has no bool: bytes 0/1
#endif
    case DType::UInt8: d.code = kDLUInt; break;
    case DType::Int8:
    case DType::Int16:
    case DType::Int32:
    case DType::Int64: d.code = kDLInt; break;
    case DType::BFloat16: d.code = kDLBfloat; break;
    case DType::Complex64: d.code = kDLComplex; break;
    default: d.code = kDLFloat; break;
  }
  return d;
}

DType from_dl_dtype(DLDataType d) {
  if (d.lanes != 1) throw TypeError("from_dlpack: vector lanes are not supported");
  switch (d.code) {
#if DLPACK_VERSION >= 80
    case kDLBool: return DType::Bool;
#endif
    case kDLUInt:
      if (d.bits == 8) return DType::UInt8;
      break;
    case kDLInt:
      if (d.bits == 8) return DType::Int8;
      if (d.bits == 16) return DType::Int16;
      if (d.bits == 32) return DType::Int32;
      if (d.bits == 64) return DType::Int64;
      break;
    case kDLFloat:
      if (d.bits == 16) return DType::Float16;
      if (d.bits == 32) return DType::Float32;
      if (d.bits == 64) return DType::Float64;
      break;
    case kDLBfloat:
      if (d.bits == 16) return DType::BFloat16;
      break;
    case kDLComplex:
      if (d.bits == 64) return DType::Complex64;
      break;
    default: break;
  }
  throw TypeError("from_dlpack: unsupported DLPack dtype (code " + std::to_string(d.code) +
                  ", bits " + std::to_string(d.bits) + ")");
}
}  // namespace

DLManagedTensor* Tensor::to_dlpack(DLPackDevice device) const {
  if (!defined()) throw ValueError("to_dlpack: undefined tensor");
  auto* ctx = new DLPackContext;
  ctx->tensor = *this;
  ctx->shape = sizes_.vec();
  ctx->strides = strides_.vec();
  DLTensor& t = ctx->managed.dl_tensor;
  t.data = storage_->data();
  t.byte_offset = static_cast<uint64_t>(offset_) * element_size();
  const bool cuda_host = device == DLPackDevice::CudaHostWhenPinned && ctx->tensor.is_pinned();
  t.device = DLDevice{cuda_host ? kDLCUDAHost : kDLCPU, 0};
  t.ndim = static_cast<int32_t>(dim());
  t.dtype = to_dl_dtype(dtype_);
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = [](DLManagedTensor* self) {
    delete static_cast<DLPackContext*>(self->manager_ctx);
  };
  return &ctx->managed;
}

Tensor Tensor::from_dlpack(DLManagedTensor* managed) {
  if (!managed) throw ValueError("from_dlpack: null tensor");
  std::shared_ptr<DLManagedTensor> owner(managed, [](DLManagedTensor* m) {
    if (m->deleter) m->deleter(m);
  });
  const DLTensor& t = managed->dl_tensor;
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost)
    throw ValueError("from_dlpack: only CPU (or CUDA host) tensors can be imported, got device type " +
                     std::to_string(t.device.device_type));
  DType dtype = from_dl_dtype(t.dtype);
  Dims sizes(t.shape, static_cast<size_t>(t.ndim));
  Dims strides = t.strides ? Dims(t.strides, static_cast<size_t>(t.ndim)) : contiguous_strides(sizes);
  size_t es = loader::element_size(dtype);
  // Span in bytes needed from data + byte_offset.
  int64_t hi = 0;
  bool empty = false;
  for (int32_t i = 0; i < t.ndim; ++i) {
    if (t.shape[i] == 0) empty = true;
    if (strides[static_cast<size_t>(i)] < 0) throw ValueError("from_dlpack: negative strides are not supported");
    hi += (t.shape[i] - 1) * strides[static_cast<size_t>(i)];
  }
  size_t nbytes = empty ? 0 : static_cast<size_t>(hi + 1) * es;
  auto* base = static_cast<uint8_t*>(t.data) + t.byte_offset;
  auto storage = Storage::wrap(base, nbytes, owner, MemoryKind::External, {},
                               t.device.device_type == kDLCUDAHost);
  return Tensor(storage, dtype, sizes, strides, 0);
}

}  // namespace loader
