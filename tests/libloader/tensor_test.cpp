#include "loader/tensor.h"

#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <cmath>

namespace loader {
namespace {

TEST(Tensor, FromVectorIsContiguousRowMajor) {
  auto t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.dim(), 2);
  EXPECT_EQ(t.sizes(), (Dims{2, 3}));
  EXPECT_EQ(t.strides(), (Dims{3, 1}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.at<float>({1, 2}), 6.0f);
  EXPECT_EQ(t.nbytes(), 24u);
}

TEST(Tensor, SelectAndSliceAreViewsOfOneStorage) {
  auto t = Tensor::arange(12).view({3, 4});
  Tensor row = t[1];
  EXPECT_EQ(row.storage(), t.storage());
  EXPECT_EQ(row.storage_offset(), 4);
  EXPECT_EQ(row.to_int64_vector(), (std::vector<int64_t>{4, 5, 6, 7}));
  Tensor col = t.slice(1, 1, 4, 2);  // columns 1 and 3
  EXPECT_EQ(col.sizes(), (Dims{3, 2}));
  EXPECT_EQ(col.strides(), (Dims{4, 2}));
  EXPECT_FALSE(col.is_contiguous());
  EXPECT_EQ(col.to_int64_vector(), (std::vector<int64_t>{1, 3, 5, 7, 9, 11}));
  // A write through the storage shows in every view.
  static_cast<int64_t*>(t.data_ptr())[5] = 100;
  EXPECT_EQ(row.at<int64_t>({1}), 100);
}

TEST(Tensor, TransposeThenContiguousCopiesInRowMajorOrder) {
  auto t = Tensor::arange(6).view({2, 3});
  Tensor tt = t.transpose(0, 1);
  EXPECT_FALSE(tt.is_contiguous());
  Tensor c = tt.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_NE(c.storage(), t.storage());
  EXPECT_EQ(c.to_int64_vector(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  // contiguous() of a contiguous tensor is the tensor itself.
  EXPECT_EQ(t.contiguous().storage(), t.storage());
}

TEST(Tensor, ExpandUsesStrideZero) {
  auto t = Tensor::from_vector<int32_t>({7, 8, 9});
  Tensor e = t.expand({4, 3});
  EXPECT_EQ(e.strides(), (Dims{0, 1}));
  EXPECT_EQ(e.contiguous().to_int64_vector(),
            (std::vector<int64_t>{7, 8, 9, 7, 8, 9, 7, 8, 9, 7, 8, 9}));
  EXPECT_THROW(t.expand({4, 2}), ValueError);
}

TEST(Tensor, ViewRejectsNonContiguousAndInfersMinusOne) {
  auto t = Tensor::arange(12);
  EXPECT_EQ(t.view({-1, 4}).sizes(), (Dims{3, 4}));
  EXPECT_THROW(t.view({5, -1}), ValueError);
  EXPECT_THROW(t.view({3, 4}).transpose(0, 1).view({12}), RuntimeError);
  EXPECT_EQ(t.view({3, 4}).transpose(0, 1).reshape({12}).to_int64_vector()[1], 4);
}

TEST(Tensor, OutOfRangeIndexRaisesIndexError) {
  auto t = Tensor::arange(3);
  EXPECT_THROW(t[3], IndexError);
  EXPECT_EQ(t[-1].item<int64_t>(), 2);
  EXPECT_THROW(Tensor::scalar(int64_t{1})[0], IndexError);
}

TEST(Tensor, ViewOutsideStorageIsRejected) {
  auto s = Storage::allocate(16);
  EXPECT_THROW(Tensor(s, DType::Float32, Dims{5}, Dims{1}, 0), ValueError);
  EXPECT_NO_THROW(Tensor(s, DType::Float32, Dims{4}, Dims{1}, 0));
  EXPECT_THROW(Tensor(s, DType::Float32, Dims{2}, Dims{1}, 3), ValueError);
}

TEST(Tensor, ScalarsHaveTorchDtypes) {
  EXPECT_EQ(Tensor::scalar(int64_t{3}).dtype(), DType::Int64);
  EXPECT_EQ(Tensor::scalar(2.5).dtype(), DType::Float64);
  EXPECT_EQ(Tensor::scalar_bool(true).dtype(), DType::Bool);
  EXPECT_EQ(Tensor::scalar(2.5).dim(), 0);
  EXPECT_EQ(Tensor::scalar(2.5).numel(), 1);
}

TEST(Tensor, DtypeConversionRoundsHalfAndBfloat16) {
  auto t = Tensor::from_vector<float>({1.0f, 0.1f, 65504.0f, -2.5f});
  Tensor h = t.to(DType::Float16);
  EXPECT_EQ(h.element_size(), 2u);
  EXPECT_FLOAT_EQ(static_cast<float>(h.item_double_at(1)), 0.0999755859375f);
  EXPECT_EQ(h.item_double_at(2), 65504.0);
  Tensor b = t.to(DType::BFloat16);
  EXPECT_EQ(b.item_double_at(1), 0.10009765625);
  EXPECT_EQ(b.item_double_at(3), -2.5);
  EXPECT_EQ(half_to_float(float_to_half(INFINITY)), INFINITY);
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
}

TEST(Tensor, EqualComparesValuesAcrossLayouts) {
  auto a = Tensor::arange(6).view({2, 3});
  auto b = a.transpose(0, 1).contiguous().transpose(0, 1);
  EXPECT_TRUE(a.equal(b));
  EXPECT_FALSE(a.equal(a.to(DType::Int32)));
}

// torch.equal's rules on the contiguous fast path as on the strided one: values, not
// bytes, for floating types (NaN differs from itself, -0 equals +0); a difference in the
// last element is found; a view at an offset compares its own elements.
TEST(Tensor, EqualFollowsValuesOnContiguousAndStridedTensorsAlike) {
  for (bool strided : {false, true}) {
    SCOPED_TRACE(strided ? "strided" : "contiguous");
    auto layout = [strided](const Tensor& t) {
      return strided ? t.view({2, 3}).transpose(0, 1).contiguous().transpose(0, 1) : t.view({2, 3});
    };
    auto f = layout(Tensor::from_vector<float>({1, 2, 3, 4, 5, -0.0f}, {6}));
    EXPECT_EQ(f.is_contiguous(), !strided);
    EXPECT_TRUE(f.equal(layout(Tensor::from_vector<float>({1, 2, 3, 4, 5, 0.0f}, {6}))));
    EXPECT_FALSE(f.bitwise_equal(layout(Tensor::from_vector<float>({1, 2, 3, 4, 5, 0.0f}, {6}))));
    auto nan = layout(Tensor::from_vector<double>({1, 2, 3, 4, 5, NAN}, {6}));
    EXPECT_FALSE(nan.equal(nan));
    EXPECT_TRUE(nan.bitwise_equal(nan));
    auto i = layout(Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {6}));
    EXPECT_TRUE(i.equal(layout(Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {6}))));
    EXPECT_FALSE(i.equal(layout(Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 7}, {6}))));
    auto u = layout(Tensor::from_vector<uint8_t>({9, 2, 3, 4, 5, 6}, {6}));
    EXPECT_FALSE(u.equal(layout(Tensor::from_vector<uint8_t>({1, 2, 3, 4, 5, 6}, {6}))));
  }
  auto rows = Tensor::arange(12).view({4, 3});
  EXPECT_TRUE(rows.select(0, 2).equal(Tensor::from_vector<int64_t>({6, 7, 8}, {3})));  // offset 6
  EXPECT_FALSE(rows.select(0, 2).equal(Tensor::from_vector<int64_t>({0, 1, 2}, {3})));
}

TEST(Tensor, DLPackExportSharesMemoryAndKeepsItAlive) {
  DLManagedTensor* m = nullptr;
  void* data = nullptr;
  {
    auto t = Tensor::arange(12, DType::Float32).view({3, 4}).slice(0, 1, 3);
    data = t.data_ptr();
    m = t.to_dlpack();
  }  // the tensor is gone; the export keeps the storage
  EXPECT_EQ(m->dl_tensor.ndim, 2);
  EXPECT_EQ(m->dl_tensor.shape[0], 2);
  EXPECT_EQ(m->dl_tensor.strides[0], 4);
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLFloat);
  EXPECT_EQ(m->dl_tensor.dtype.bits, 32);
  EXPECT_EQ(static_cast<char*>(m->dl_tensor.data) + m->dl_tensor.byte_offset, data);
  EXPECT_EQ(static_cast<float*>(data)[0], 4.0f);
  Tensor back = Tensor::from_dlpack(m);  // takes ownership; deleter runs with `back`
  EXPECT_EQ(back.data_ptr(), data);
  EXPECT_EQ(back.to_double_vector(), (std::vector<double>{4, 5, 6, 7, 8, 9, 10, 11}));
}

TEST(Tensor, DLPackExportOfPinnedMemoryNamesTheCpuUnlessAskedForCudaHost) {
  // A storage flagged pinned (as a CUDA-registered slab is); the bytes are heap memory.
  auto heap = Storage::allocate(4 * sizeof(float));
  auto pinned = Storage::wrap(heap->data(), heap->nbytes(), heap, MemoryKind::External, {}, /*pinned=*/true);
  Tensor t(pinned, DType::Float32, {4}, {1}, 0);
  ASSERT_TRUE(t.is_pinned());

  DLManagedTensor* cpu = t.to_dlpack();  // PyTorch's choice: libtorch 1.13 accepts only kDLCPU
  EXPECT_EQ(cpu->dl_tensor.device.device_type, kDLCPU);
  EXPECT_EQ(cpu->dl_tensor.data, heap->data());
  Tensor back = Tensor::from_dlpack(cpu);
  EXPECT_EQ(back.data_ptr(), heap->data());
  EXPECT_FALSE(back.is_pinned()) << "kDLCPU does not say pinned; the import must not guess";

  DLManagedTensor* host = t.to_dlpack(Tensor::DLPackDevice::CudaHostWhenPinned);
  EXPECT_EQ(host->dl_tensor.device.device_type, kDLCUDAHost);
  Tensor back_host = Tensor::from_dlpack(host);
  EXPECT_TRUE(back_host.is_pinned()) << "kDLCUDAHost says pinned";

  DLManagedTensor* plain = Tensor::arange(3).to_dlpack(Tensor::DLPackDevice::CudaHostWhenPinned);
  EXPECT_EQ(plain->dl_tensor.device.device_type, kDLCPU) << "memory that is not pinned is plain CPU memory";
  plain->deleter(plain);
}

}  // namespace
}  // namespace loader
