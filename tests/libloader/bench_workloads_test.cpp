// The benchmark workloads W1-W4 (tools/bench_workloads.*) against the spot values of
// bench/WORKLOADS.md, and the sample_spec()/get_into() fast path against get().
//
// tools/ sources are linked into the `loader` executable only; this test compiles the
// workloads' translation unit itself (no CMake change needed).  If the build ever
// links tools/bench_workloads.cpp into this binary, drop the include of the .cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../../tools/bench_workloads.cpp"  // NOLINT: see above
#include "loader/collate.h"
#include "loader/fetch.h"
#include "loader/worker_info.h"

namespace lb = loader::bench;
using loader::DType;
using loader::Tensor;
using loader::Value;

namespace {

// An independent scalar statement of W3's formula (WORKLOADS.md), for bit-exact checks.
std::vector<float> w3_reference(int64_t i) {
  const float mean[3] = {123.675f, 116.28f, 103.53f};
  const double std255[3] = {58.395, 57.12, 57.375};
  std::vector<float> out(static_cast<size_t>(lb::kImageBytes));
  for (int c = 0; c < 3; ++c) {
    const auto r = static_cast<float>(1.0 / std255[c]);
    for (int h = 0; h < 224; ++h)
      for (int w = 0; w < 224; ++w) {
        const int ws = (i & 1) ? 223 - w : w;
        const int64_t k = c * 224 * 224 + h * 224 + ws;
        volatile float x = static_cast<float>(static_cast<uint8_t>((i * 31 + k) & 0xFF));
        volatile float y = x - mean[c];  // volatile: two separate float roundings
        out[static_cast<size_t>(c * 224 * 224 + h * 224 + w)] = y * r;
      }
  }
  return out;
}

float at3(const std::vector<float>& img, int c, int h, int w) {
  return img[static_cast<size_t>(c * 224 * 224 + h * 224 + w)];
}

std::vector<Value> drain(loader::IterableDataset& ds) {
  std::vector<Value> out;
  auto cur = ds.iter();
  while (auto v = cur->next()) out.push_back(std::move(*v));
  return out;
}

}  // namespace

TEST(BenchWorkloads, W1SpotValueAtLastIndex) {
  float f[16];
  lb::w1_features(999999, f);
  const float want[16] = {0.984f, 0.985f, 0.986f, 0.987f, 0.988f, 0.989f, 0.990f, 0.991f,
                          0.992f, 0.993f, 0.994f, 0.995f, 0.996f, 0.997f, 0.998f, 0.999f};
  for (int j = 0; j < 16; ++j) EXPECT_EQ(f[j], want[j]) << "j=" << j;
  EXPECT_EQ(lb::label_of(999999), 9);
  auto ds = lb::make_bench_dataset("W1", 1000000, "gen");
  Value s = ds->get(999999);
  EXPECT_EQ(s[0].to_tensor().at<float>({15}), 0.999f);
  EXPECT_EQ(s[1].to_int(), 9);
}

TEST(BenchWorkloads, W1FeaturesWrapAt1000AsDefined) {
  // i = 62: i*16 = 992, so j = 8 wraps to numerator 0.
  float f[16];
  lb::w1_features(62, f);
  for (int j = 0; j < 16; ++j)
    EXPECT_EQ(f[j], static_cast<float>((62 * 16 + j) % 1000) / 1000.0f) << "j=" << j;
  EXPECT_EQ(f[8], 0.0f);
}

TEST(BenchWorkloads, W2SpotValueAt12345) {
  std::vector<uint8_t> img(static_cast<size_t>(lb::kImageBytes));
  lb::w2_image(12345, img.data());
  EXPECT_EQ(img[0], 231);
  EXPECT_EQ(img[1], 232);
  EXPECT_EQ(img[2], 233);
  EXPECT_EQ(img[3], 234);
  EXPECT_EQ(img.back(), 230);
  for (size_t k = 0; k < img.size(); k += 997)
    EXPECT_EQ(img[k], static_cast<uint8_t>((12345 * 31 + static_cast<int64_t>(k)) & 0xFF)) << "k=" << k;
}

TEST(BenchWorkloads, W3IsBitExactForEvenAndOddIndex) {
  for (int64_t i : {0, 1}) {
    std::vector<float> got(static_cast<size_t>(lb::kImageBytes));
    lb::w3_image(i, nullptr, got.data());
    const auto want = w3_reference(i);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << "i=" << i;
    // The same from a materialised source image (the "tensor" variant's path).
    std::vector<uint8_t> src(static_cast<size_t>(lb::kImageBytes));
    lb::w2_image(i, src.data());
    std::vector<float> from_src(got.size());
    lb::w3_image(i, src.data(), from_src.data());
    EXPECT_EQ(std::memcmp(from_src.data(), want.data(), got.size() * sizeof(float)), 0) << "i=" << i;
  }
  std::vector<float> img(static_cast<size_t>(lb::kImageBytes));
  lb::w3_image(0, nullptr, img.data());
  EXPECT_EQ(at3(img, 0, 0, 0), std::strtof("-2.1179039", nullptr));
  EXPECT_EQ(at3(img, 0, 0, 1), std::strtof("-2.1007793", nullptr));
  EXPECT_EQ(at3(img, 0, 0, 2), std::strtof("-2.0836544", nullptr));
  EXPECT_EQ(at3(img, 2, 223, 223), std::strtof("2.6399999", nullptr));
  lb::w3_image(1, nullptr, img.data());
  EXPECT_EQ(at3(img, 0, 0, 0), std::strtof("2.2317834", nullptr));
  EXPECT_EQ(at3(img, 0, 0, 1), std::strtof("2.2146587", nullptr));
  EXPECT_EQ(at3(img, 0, 0, 2), std::strtof("2.1975338", nullptr));
}

TEST(BenchWorkloads, LabelSumMatchesClosedForm) {
  EXPECT_EQ(lb::label_sum(1000000), 4500000);
  EXPECT_EQ(lb::label_sum(250000), 1125000);
  EXPECT_EQ(lb::label_sum(20000), 90000);
  EXPECT_EQ(lb::label_sum(5000), 22500);
  int64_t s = 0;
  for (int64_t i = 0; i < 1237; ++i) s += lb::label_of(i);
  EXPECT_EQ(lb::label_sum(1237), s);
}

TEST(BenchWorkloads, W4ShardsFollowThePyTorchDocsExample) {
  struct Case {
    int64_t n;
    int workers;
    std::vector<int64_t> batches_per_worker;
    int64_t last_batch;  // samples in each worker's last batch
  };
  // WORKLOADS.md: W=2 gives 2 x 1,954 batches (last holds 32); W <= 1 gives 3,907;
  // the suite's N = 250,000 gives 977, or 2 x 489.
  const std::vector<Case> cases = {{1000000, 0, {3907}, 64},        {1000000, 1, {3907}, 64},
                                   {1000000, 2, {1954, 1954}, 32}, {250000, 1, {977}, 144},
                                   {250000, 2, {489, 489}, 72}};
  for (const auto& c : cases) {
    auto ds = loader::make_iterable_dataset({"bench_w4", Value::dict({{"n", c.n}})});
    const int w = std::max(c.workers, 1);
    int64_t expect_next = 0;
    for (int id = 0; id < w; ++id) {
      loader::WorkerInfo info;
      info.id = id;
      info.num_workers = c.workers;
      std::unique_ptr<loader::WorkerInfoScope> scope;
      if (c.workers > 0) scope = std::make_unique<loader::WorkerInfoScope>(&info);
      int64_t count = 0;
      auto cur = ds->iter();
      // consecutive values, continuing where the previous shard stopped
      while (auto v = cur->next()) {
        ASSERT_EQ(v->to_int(), expect_next++) << "n=" << c.n << " worker " << id;
        ++count;
      }
      const int64_t batches = (count + 255) / 256;
      EXPECT_EQ(batches, c.batches_per_worker[static_cast<size_t>(id)]) << "n=" << c.n << " worker " << id;
      EXPECT_EQ(count - (batches - 1) * 256, c.last_batch) << "n=" << c.n << " worker " << id;
    }
    EXPECT_EQ(expect_next, c.n);
  }
  EXPECT_EQ(lb::w4_shard(1000000, 1, 2), std::make_pair(int64_t{500000}, int64_t{1000000}));
}

TEST(BenchWorkloads, W4BatchedVariantYieldsConsecutiveTensors) {
  auto ds = loader::make_iterable_dataset(
      {"bench_w4", Value::dict({{"n", 1000}, {"variant", "batched"}, {"batch_size", 256}})});
  auto batches = drain(*ds);
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches[3].to_tensor().numel(), 1000 - 3 * 256);
  EXPECT_EQ(batches[1].to_tensor().at<int64_t>({0}), 256);
  EXPECT_EQ(batches[3].to_tensor().at<int64_t>({231}), 999);
}

TEST(BenchWorkloads, GetIntoWritesWhatGetReturnsForEveryWorkloadAndVariant) {
  const int64_t n = 300;
  for (const char* wl : {"W1", "W2", "W3"}) {
    lb::MaterializedFile file(wl, n);
    auto gen = lb::make_bench_dataset(wl, n, "gen");
    auto mem = lb::make_bench_dataset(wl, n, "tensor", file.path());
    for (auto* ds : {gen.get(), mem.get()}) {
      auto spec = ds->sample_spec();
      ASSERT_TRUE(spec.has_value()) << wl;
      std::vector<Tensor> leaves;
      spec->for_each_tensor([&](const Tensor& t) { leaves.push_back(t); });
      ASSERT_EQ(leaves.size(), 2u) << wl;
      EXPECT_EQ(leaves[1].dtype(), DType::Int64);
      EXPECT_EQ(leaves[1].dim(), 0);
      for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{137}, n - 1}) {
        std::vector<uint8_t> row0(leaves[0].nbytes()), row1(8);
        void* rows[2] = {row0.data(), row1.data()};
        ds->get_into(i, rows);
        Value s = ds->get(i);
        const Tensor f = s[0].to_tensor().contiguous();
        ASSERT_EQ(f.dtype(), leaves[0].dtype()) << wl;
        ASSERT_EQ(f.sizes(), leaves[0].sizes()) << wl;
        EXPECT_EQ(std::memcmp(f.data_ptr(), row0.data(), row0.size()), 0) << wl << " i=" << i;
        const int64_t label = s[1].is_tensor() ? s[1].to_tensor().item<int64_t>() : s[1].to_int();
        int64_t into_label;
        std::memcpy(&into_label, row1.data(), 8);
        EXPECT_EQ(label, i % 10) << wl << " i=" << i;
        EXPECT_EQ(into_label, i % 10) << wl << " i=" << i;
      }
    }
    // the two variants hold the same samples
    for (int64_t i : {int64_t{5}, int64_t{298}})
      EXPECT_TRUE(gen->get(i)[0].to_tensor().bitwise_equal(mem->get(i)[0].to_tensor())) << wl << " i=" << i;
  }
}

TEST(BenchWorkloads, RejectsOutOfRangeIndexAndMismatchedDataFile) {
  lb::MaterializedFile file("W1", 100);
  auto ds = lb::make_bench_dataset("W1", 100, "tensor", file.path());
  EXPECT_THROW(ds->get(100), loader::IndexError);
  EXPECT_THROW(ds->get(-1), loader::IndexError);
  EXPECT_THROW(lb::make_bench_dataset("W1", 101, "tensor", file.path()), loader::ValueError);
  EXPECT_THROW(lb::make_bench_dataset("W2", 100, "tensor", file.path()), loader::ValueError);
  EXPECT_THROW(lb::make_bench_dataset("W1", 100, "tensor"), loader::ValueError);
  EXPECT_THROW(lb::make_bench_dataset("W1", 100, "pickled"), loader::ValueError);
  EXPECT_THROW(lb::workload_info("W6"), loader::ValueError);
  EXPECT_THROW(lb::make_bench_dataset("W5", 100, "gen"), loader::ValueError);  // make_w5_dataset makes W5
}

TEST(BenchWorkloads, FastPathBatchEqualsDefaultCollateOfGet) {
  // The sample_spec() contract: the batch the fetcher writes through get_into() equals
  // default_collate of get() for the same indices (a custom collate forces the get() path).
  const int64_t n = 200;
  const loader::IndexBatch indices = {7, 0, 199, 64, 3};
  for (const char* wl : {"W1", "W2", "W3"}) {
    lb::MaterializedFile file(wl, n);
    for (const char* variant : {"gen", "tensor"}) {
      auto ds = lb::make_bench_dataset(wl, n, variant, std::string(variant) == "tensor" ? file.path() : "");
      loader::MapFetcher fast(ds, true, {});
      loader::MapFetcher slow(ds, true, [](std::vector<Value>& s) { return loader::default_collate(s); });
      Value a = fast.fetch(indices);
      Value b = slow.fetch(indices);
      EXPECT_TRUE(a == b) << wl << "/" << variant << ": " << a.repr().substr(0, 200) << " vs "
                          << b.repr().substr(0, 200);
    }
  }
}
