// SharedTensorFile ("shared_tensors": a TensorDataset's tensors placed once in name-less
// shared memory for worker processes) and InterruptCheck (a wait for a batch that the
// embedding program can stop: Ctrl-C in the Python package).
#include "loader/shared_tensors.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "loader/dataloader.h"
#include "loader/datasets.h"
#include "loader/error.h"
#include "loader/interrupt.h"
#include "loader/registration.h"

namespace loader {
namespace {

TEST(SharedTensors, WorkersServeTheTensorsRowsAsTensorDatasetDoes) {
  Tensor x = Tensor::arange(60, DType::Float32);
  Tensor features(x.storage(), DType::Float32, {20, 3}, {1, 20}, 0);  // column-major: copied row-major
  Tensor labels = Tensor::arange(20);
  SharedTensorFile file({features, labels});
  EXPECT_GE(file.bytes(), 20u * 3 * 4 + 20 * 8);
  const DatasetHandle h = file.handle();
  EXPECT_EQ(h.type, "shared_tensors");
  auto here = make_dataset(h);
  TensorDataset ref({features, labels});
  ASSERT_EQ(here->size(), 20);
  for (int64_t i : {0, 7, 19}) {
    Value a = here->get(i), b = ref.get(i);
    EXPECT_TRUE(a[0].to_tensor().equal(b[0].to_tensor())) << i;
    EXPECT_EQ(a[1].to_tensor().item<int64_t>(), i);
  }
  DataLoaderOptions o;
  o.batch_size = 6;
  o.num_workers = 2;
  DataLoader dl(here, o);
  int64_t seen = 0;
  for (Value& batch : dl) {
    const Tensor& f = batch[0].to_tensor();
    const Tensor& l = batch[1].to_tensor();
    for (int64_t r = 0; r < l.size(0); ++r) {
      const int64_t i = l.select(0, r).item<int64_t>();
      EXPECT_EQ(i, seen);
      EXPECT_TRUE(f.select(0, r).equal(features.select(0, i)));
      ++seen;
    }
  }
  EXPECT_EQ(seen, 20);
}

TEST(SharedTensors, RefusesWhatTensorDatasetRefuses) {
  EXPECT_THROW(SharedTensorFile({}), ValueError);
  EXPECT_THROW(SharedTensorFile({Tensor::arange(3), Tensor::arange(4)}), AssertionError);  // torch's type
  EXPECT_THROW(SharedTensorFile({Tensor::scalar(int64_t{3})}), ValueError);
}

class SlowDataset : public Dataset {
 public:
  Value get(int64_t i) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(i == 0 ? 0 : 3000));
    return Value(static_cast<long long>(i));
  }
  int64_t size() const override { return 4; }
};
LOADER_REGISTER_DATASET("test_interrupt_slow", [](const Value&) { return std::make_shared<SlowDataset>(); });

struct Stopped {};

TEST(InterruptCheck, StopsAWaitForABatchWithinItsInterval) {
  DataLoaderOptions o;
  o.batch_size = 1;
  o.num_workers = 1;
  o.prefetch_factor = 1;
  DataLoader dl(make_dataset({"test_interrupt_slow", Value::dict({})}), o);
  auto it = dl.iter();
  ASSERT_TRUE(it.next().has_value());  // sample 0 comes at once; sample 1 takes 3 s
  int checks = 0;
  const auto t0 = std::chrono::steady_clock::now();
  {
    InterruptCheck check(
        [&] {
          if (++checks == 3) throw Stopped{};
        },
        std::chrono::milliseconds(20));
    EXPECT_EQ(InterruptCheck::current(), &check);
    EXPECT_THROW(it.next(), Stopped);
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(checks, 3);
  EXPECT_LT(waited, 2.0);  // not the 3 s the batch takes (three 20 ms slices, on a loaded machine)
  EXPECT_EQ(InterruptCheck::current(), nullptr);
}

}  // namespace
}  // namespace loader
