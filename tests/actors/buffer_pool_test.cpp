// BufferPool: a large tensor's buffer comes back when its storage is freed (on any
// thread) and serves the next tensor of the same size; small tensors and other sizes
// go to the heap; at most max_free buffers wait; storages outlive the pool.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "loader/runtime/buffer_pool.h"
#include "loader/tensor.h"

namespace loader::runtime {
namespace {

constexpr size_t kBig = size_t{3} << 20;

TEST(BufferPool, AFreedBufferServesTheNextTensorOfItsSize) {
  BufferPool pool(2);
  void* first = nullptr;
  {
    Tensor t = Tensor::empty(Dims({static_cast<int64_t>(kBig / 4)}), DType::Float32, &pool);
    first = t.data_ptr();
    std::memset(first, 0x5A, kBig);
  }
  EXPECT_EQ(pool.free_buffers(), 1u);
  Tensor again = Tensor::empty(Dims({static_cast<int64_t>(kBig / 4)}), DType::Float32, &pool);
  EXPECT_EQ(again.data_ptr(), first);
  EXPECT_EQ(pool.reused(), 1u);
  EXPECT_EQ(pool.free_buffers(), 0u);
  // Another size, and a small tensor, are not served from it.
  Tensor other = Tensor::empty(Dims({static_cast<int64_t>(kBig / 4 + 16)}), DType::Float32, &pool);
  EXPECT_NE(other.data_ptr(), first);
  { Tensor small = Tensor::empty(Dims({16}), DType::Float32, &pool); }
  EXPECT_EQ(pool.free_buffers(), 0u) << "a small tensor's buffer went back to the heap";
  EXPECT_EQ(pool.reused(), 1u);
}

TEST(BufferPool, BuffersFreedOnAnotherThreadComeBackAndAtMostMaxFreeWait) {
  BufferPool pool(2);
  std::vector<Tensor> held;
  for (int i = 0; i < 4; ++i) held.push_back(Tensor::empty(Dims({static_cast<int64_t>(kBig)}), DType::UInt8, &pool));
  std::thread([&] { held.clear(); }).join();
  EXPECT_EQ(pool.free_buffers(), 2u);  // the two oldest went back to the heap
  for (int i = 0; i < 3; ++i) held.push_back(Tensor::empty(Dims({static_cast<int64_t>(kBig)}), DType::UInt8, &pool));
  EXPECT_EQ(pool.reused(), 2u);
  EXPECT_EQ(pool.free_buffers(), 0u);
}

TEST(BufferPool, AStorageOutlivesItsPool) {
  Tensor kept;
  {
    BufferPool pool;
    kept = Tensor::empty(Dims({static_cast<int64_t>(kBig)}), DType::UInt8, &pool);
    std::memset(kept.data_ptr(), 7, kBig);
  }
  EXPECT_EQ(static_cast<const uint8_t*>(kept.data_ptr())[kBig - 1], 7);  // freed with the tensor (ASan checks)
}

}  // namespace
}  // namespace loader::runtime
