#include "loader/runtime/batch_codec.h"

#include <cstring>

#include "loader/error.h"
#include "loader/runtime/os/shm.h"

namespace loader::runtime {

namespace {
constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

std::shared_ptr<Storage> SlabAllocator::allocate(size_t nbytes) {
  size_t need = align_up(nbytes);
  required_ += need;
  if (base_ && used_ + need <= size_) {
    size_t off = used_;
    used_ += need;
    return Storage::wrap(base_ + off, nbytes, nullptr, MemoryKind::SharedMemory, Placement{slab_id_, off});
  }
  overflowed_ = true;
  return Storage::allocate(nbytes);
}

bool SlabAllocator::owns(const Storage& s) const noexcept {
  return s.kind() == MemoryKind::SharedMemory && s.placement().region == slab_id_ && slab_id_ != 0;
}

Value place_in_slab(const Value& batch, SlabAllocator& alloc) {
  return batch.map_tensors([&](const Tensor& t) -> Tensor {
    if (alloc.owns(*t.storage())) return t;
    return t.clone(&alloc);
  });
}

namespace {
class SlabEncoder final : public TensorCodec {
 public:
  explicit SlabEncoder(uint64_t slab) : slab_(slab) {}
  bool encode(const Tensor& t, std::string& out) override {
    const Storage& s = *t.storage();
    if (s.placement().region != slab_) {
      throw RuntimeError("encode_batch: a tensor is not in slab " + std::to_string(slab_) +
                         " (place_in_slab was not called)");
    }
    loader::put_u64(out, s.placement().offset);
    loader::put_u64(out, s.nbytes());
    out.push_back(static_cast<char>(t.dtype()));
    loader::put_u64(out, t.sizes().size());
    for (int64_t x : t.sizes()) loader::put_u64(out, static_cast<uint64_t>(x));
    for (int64_t x : t.strides()) loader::put_u64(out, static_cast<uint64_t>(x));
    loader::put_u64(out, static_cast<uint64_t>(t.storage_offset()));
    return true;
  }
  Tensor decode(const char*&, const char*) override { throw RuntimeError("SlabEncoder cannot decode"); }

 private:
  uint64_t slab_;
};

class SlabDecoder final : public TensorCodec {
 public:
  SlabDecoder(uint64_t slab, const std::shared_ptr<BatchLease>& lease) : slab_(slab), lease_(lease) {}
  bool encode(const Tensor&, std::string&) override { return false; }
  Tensor decode(const char*& p, const char* end) override {
    uint64_t off = get_u64(p, end);
    uint64_t nbytes = get_u64(p, end);
    if (p >= end) throw ValueError("batch descriptor truncated");
    auto dt = static_cast<uint8_t>(*p++);
    if (dt >= kNumDTypes) throw ValueError("batch descriptor: bad dtype " + std::to_string(dt));
    uint64_t nd = get_u64(p, end);
    if (nd > 64) throw ValueError("batch descriptor: " + std::to_string(nd) + " dimensions");
    std::vector<int64_t> sizes(nd), strides(nd);
    for (auto& x : sizes) x = static_cast<int64_t>(get_u64(p, end));
    for (auto& x : strides) x = static_cast<int64_t>(get_u64(p, end));
    auto soff = static_cast<int64_t>(get_u64(p, end));
    const auto& seg = lease_->segment();
    if (off > seg->size() || nbytes > seg->size() - off)
      throw ValueError("batch descriptor: bytes [" + std::to_string(off) + ", " + std::to_string(off + nbytes) +
                       ") outside slab " + std::to_string(slab_) + " of " + std::to_string(seg->size()) + " bytes");
    auto storage = Storage::wrap(static_cast<uint8_t*>(seg->data()) + off, nbytes, lease_,
                                 MemoryKind::SharedMemory, Placement{slab_, off}, lease_->pinned());
    return Tensor(std::move(storage), static_cast<DType>(dt), Dims(sizes), Dims(strides), soff);
  }

 private:
  uint64_t slab_;
  const std::shared_ptr<BatchLease>& lease_;
};
}  // namespace

std::string encode_batch(const Value& batch, uint64_t slab_id) {
  std::string out;
  SlabEncoder enc(slab_id);
  encode_value(batch, out, &enc);
  return out;
}

BatchLease::~BatchLease() {
  if (on_release_) {
    try {
      on_release_();
    } catch (...) {
      // a destructor never throws; the slab is then simply not reused
    }
  }
}

Value decode_batch(const std::string& payload, uint64_t slab_id, const std::shared_ptr<BatchLease>& lease) {
  SlabDecoder dec(slab_id, lease);
  return decode_value(payload, &dec);
}

namespace {
/// Writes each tensor as dtype and sizes; the tensors' bytes go after the skeleton.
class SplitEncoder final : public TensorCodec {
 public:
  explicit SplitEncoder(SplitBatch& out) : out_(out) {}
  bool encode(const Tensor& t, std::string& out) override {
    out.push_back(static_cast<char>(t.dtype()));
    loader::put_u64(out, t.sizes().size());
    for (int64_t x : t.sizes()) loader::put_u64(out, static_cast<uint64_t>(x));
    out_.tensors.push_back(t.is_contiguous() && t.storage().use_count() == 1 ? t : t.clone());
    out_.data_bytes += t.nbytes();
    return true;
  }
  Tensor decode(const char*&, const char*) override { throw RuntimeError("SplitEncoder cannot decode"); }

 private:
  SplitBatch& out_;
};

/// Allocates each tensor the skeleton names, counting its bytes against the data that follows.
class UnfilledDecoder final : public TensorCodec {
 public:
  UnfilledDecoder(UnfilledBatch& out, uint64_t data_bytes, TensorAllocator* alloc)
      : out_(out), left_(data_bytes), alloc_(alloc) {}
  bool encode(const Tensor&, std::string&) override { return false; }
  Tensor decode(const char*& p, const char* end) override {
    if (p >= end) throw ValueError("batch skeleton: truncated tensor");
    const auto dt = static_cast<uint8_t>(*p++);
    if (dt >= kNumDTypes) throw ValueError("batch skeleton: bad dtype " + std::to_string(dt));
    const uint64_t nd = get_u64(p, end);
    if (nd > 64) throw ValueError("batch skeleton: a tensor with " + std::to_string(nd) + " dimensions");
    std::vector<int64_t> sizes(nd);
    // The bytes must be in the frame before anything is allocated for them, and the
    // sizes ones the tensor's shape arithmetic can hold (a zero size makes no data).
    constexpr uint64_t kMaxElements = uint64_t{1} << 48;
    uint64_t nonzero = 1;
    bool empty = false;
    for (auto& x : sizes) {
      const uint64_t s = get_u64(p, end);
      if (s == 0) {
        empty = true;
      } else {
        if (s > kMaxElements || nonzero > kMaxElements / s) throw ValueError("batch skeleton: tensor sizes too large");
        nonzero *= s;
      }
      x = static_cast<int64_t>(s);
    }
    const uint64_t bytes = empty ? 0 : nonzero * element_size(static_cast<DType>(dt));
    if (!empty && nonzero > left_ / element_size(static_cast<DType>(dt)))
      throw ValueError("batch skeleton: its tensors need more than the " + std::to_string(total_ + left_) +
                       " bytes of data that follow it");
    left_ -= bytes;
    total_ += bytes;
    Tensor t = Tensor::empty(Dims(sizes), static_cast<DType>(dt), alloc_);
    out_.tensors.push_back(t);
    return t;
  }
  uint64_t left() const { return left_; }

 private:
  UnfilledBatch& out_;
  uint64_t left_;
  TensorAllocator* alloc_;
  uint64_t total_ = 0;
};
}  // namespace

SplitBatch split_batch(const Value& batch) {
  SplitBatch out;
  SplitEncoder enc(out);
  encode_value(batch, out.skeleton, &enc);
  return out;
}

UnfilledBatch unfilled_batch(const std::string& skeleton, uint64_t data_bytes, TensorAllocator* alloc) {
  UnfilledBatch out;
  UnfilledDecoder dec(out, data_bytes, alloc);
  out.batch = decode_value(skeleton, &dec);
  if (dec.left() != 0)
    throw ValueError("batch skeleton: its tensors take " + std::to_string(data_bytes - dec.left()) + " of the " +
                     std::to_string(data_bytes) + " bytes of data that follow it");
  return out;
}

}  // namespace loader::runtime
