// FashionMNIST: the real files from dataset-fashion-mnist, checked against a
// reference computed by Python reading the same .gz files; corrupt files in a
// temporary directory; the sample_spec()/get_into() fast path against get().
#include "loader/fashion_mnist.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loader/collate.h"
#include "loader/dataloader.h"
#include "loader/error.h"
#include "loader/fetch.h"
#include "loader/idx.h"
#include "loader/samplers.h"
#include "test_util.h"

namespace {

const std::string kRoot = loader::FashionMNIST::kDefaultRoot;

bool have_data() {
  struct stat st {};
  return ::stat((kRoot + "/train-images-idx3-ubyte.gz").c_str(), &st) == 0 &&
         ::stat((kRoot + "/t10k-images-idx3-ubyte.gz").c_str(), &st) == 0;
}

#define REQUIRE_DATA()                                                                          \
  if (!have_data())                                                                             \
  GTEST_SKIP() << "Fashion-MNIST is not installed in " << kRoot                                 \
               << " (apt-get install dataset-fashion-mnist)"

std::string run_command(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

// The reference: Python's gzip + struct over the same files (computed once per run).
const nlohmann::json& python_reference() {
  static const nlohmann::json ref = [] {
    const char* script = R"PY(
import gzip, json, struct, sys
root = sys.argv[1]
out = {}
for split, prefix in (("train", "train"), ("test", "t10k")):
    with gzip.open(f"{root}/{prefix}-labels-idx1-ubyte.gz") as f:
        magic, n = struct.unpack(">II", f.read(8)); labels = f.read()
    with gzip.open(f"{root}/{prefix}-images-idx3-ubyte.gz") as f:
        magic, m, r, c = struct.unpack(">IIII", f.read(16)); images = f.read()
    pick = [0, 1, 2, 12345 % m, m - 1]
    out[split] = {
        "size": m, "labels_in_file": n, "rows": r, "cols": c,
        "first_labels": list(labels[:20]),
        "class_counts": [labels.count(k) for k in range(10)],
        "picked": pick,
        "pixel_sums": [sum(images[i * r * c:(i + 1) * r * c]) for i in pick],
        "pixel_at_14_14": [images[i * r * c + 14 * c + 14] for i in pick],
    }
print(json.dumps(out))
)PY";
    char path[] = "/tmp/fashion_mnist_ref_XXXXXX.py";
    int fd = ::mkstemps(path, 3);
    if (fd < 0) return nlohmann::json();
    ::close(fd);
    std::ofstream(path) << script;
    std::string text = run_command("/usr/bin/python3 " + std::string(path) + " " + kRoot + " 2>/dev/null");
    std::remove(path);
    return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  }();
  return ref;
}

class FashionMNISTReal : public ::testing::TestWithParam<bool> {};

TEST_P(FashionMNISTReal, MatchesPythonReadingTheSameFiles) {
  REQUIRE_DATA();
  const auto& ref = python_reference();
  if (ref.is_discarded() || ref.is_null())
    GTEST_SKIP() << "/usr/bin/python3 could not compute the reference (is python3 installed?)";
  const bool train = GetParam();
  const auto& r = ref[train ? "train" : "test"];
  loader::FashionMNIST ds(kRoot, train);
  ASSERT_EQ(ds.size(), r["size"].get<int64_t>());
  ASSERT_EQ(ds.size(), train ? 60000 : 10000);  // the published split sizes
  EXPECT_EQ(r["rows"].get<int>(), 28);
  EXPECT_EQ(r["cols"].get<int>(), 28);

  const auto first = r["first_labels"].get<std::vector<int64_t>>();
  for (size_t i = 0; i < first.size(); ++i) {
    loader::Value s = ds.get(static_cast<int64_t>(i));
    ASSERT_TRUE(s.is_tuple());
    ASSERT_EQ(s.size(), 2u);
    EXPECT_EQ(s[1].to_int(), first[i]) << "label of sample " << i;
    EXPECT_EQ(ds.label(static_cast<int64_t>(i)), first[i]);
  }
  std::vector<int64_t> counts(10, 0);
  for (uint8_t l : ds.labels()) ++counts[l];
  EXPECT_EQ(counts, r["class_counts"].get<std::vector<int64_t>>());

  const auto picked = r["picked"].get<std::vector<int64_t>>();
  const auto sums = r["pixel_sums"].get<std::vector<int64_t>>();
  const auto centre = r["pixel_at_14_14"].get<std::vector<int64_t>>();
  for (size_t k = 0; k < picked.size(); ++k) {
    loader::Value s = ds.get(picked[k]);
    const loader::Tensor& img = s[0].to_tensor();
    ASSERT_EQ(img.dtype(), loader::DType::Float32);
    ASSERT_EQ(img.sizes(), (loader::Dims{1, 28, 28}));
    double sum = 0;
    for (double v : img.to_double_vector()) {
      ASSERT_GE(v, 0.0);
      ASSERT_LE(v, 1.0);
      sum += v;
    }
    // pixel / 255 summed: equal to the byte sum / 255 up to float rounding.
    EXPECT_NEAR(sum * 255.0, static_cast<double>(sums[k]), 0.05) << "sample " << picked[k];
    // ToTensor's exact value: float32(pixel) / 255 in float32.
    EXPECT_EQ(img.at<float>({0, 14, 14}), static_cast<float>(centre[k]) / 255.0f);
  }
}

INSTANTIATE_TEST_SUITE_P(Splits, FashionMNISTReal, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "train" : "test"; });

TEST(FashionMNIST, RegisteredTypeBuildsFromItsHandle) {
  REQUIRE_DATA();
  loader::register_fashion_mnist();
  loader::register_fashion_mnist();  // idempotent
  ASSERT_TRUE(loader::is_registered_dataset("fashion_mnist"));
  auto ds = loader::make_dataset({"fashion_mnist", loader::Value::dict({{"train", false}})});
  EXPECT_EQ(ds->size(), 10000);
  ASSERT_TRUE(ds->handle().has_value());
  EXPECT_EQ(ds->handle()->type, "fashion_mnist");
  EXPECT_THROW(loader::make_dataset({"fashion_mnist", loader::Value::dict({{"split", "test"}})}),
               loader::ValueError);
}

TEST(FashionMNIST, NormalizeAppliesMeanAndStdAfterToTensor) {
  REQUIRE_DATA();
  loader::FashionMNIST plain(kRoot, false);
  loader::FashionMNIST norm(kRoot, false, 0.2860, 0.3530);
  auto a = plain.get(7)[0].to_tensor().to_double_vector();
  auto b = norm.get(7)[0].to_tensor().to_double_vector();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    float expect = (static_cast<float>(a[i]) - 0.2860f) / 0.3530f;
    ASSERT_EQ(static_cast<float>(b[i]), expect) << "pixel " << i;
  }
  EXPECT_THROW(loader::FashionMNIST(kRoot, false, 0.5, std::nullopt), loader::ValueError);
  EXPECT_THROW(loader::FashionMNIST(kRoot, false, 0.5, 0.0), loader::ValueError);
}

TEST(FashionMNIST, OutOfRangeIndexIsIndexError) {
  REQUIRE_DATA();
  loader::FashionMNIST ds(kRoot, false);
  EXPECT_THROW(ds.get(10000), loader::IndexError);
  EXPECT_THROW(ds.get(-10001), loader::IndexError);
  EXPECT_EQ(ds.get(-1)[1].to_int(), ds.label(9999));  // Python's negative indexing
  try {
    ds.get(12345);
    FAIL() << "no IndexError";
  } catch (const loader::IndexError& e) {
    EXPECT_NE(std::string(e.what()).find("12345"), std::string::npos) << e.what();
  }
}

TEST(FashionMNIST, FastPathBatchEqualsDefaultCollateOfGet) {
  REQUIRE_DATA();
  auto ds = std::make_shared<loader::FashionMNIST>(kRoot, false, 0.2860, 0.3530);
  ASSERT_TRUE(ds->sample_spec().has_value());
  const loader::IndexBatch indices = {0, 9999, 17, 4242, 5, 5, 1234};
  // Default collate with no function given: the fetcher takes the sample_spec fast path.
  loader::MapFetcher fast(ds, /*auto_collation=*/true, /*collate=*/{});
  // The same collate given as a function: the fetcher calls get() for every sample.
  loader::MapFetcher slow(ds, true, [](std::vector<loader::Value>& s) { return loader::default_collate(s); });
  loader::Value a = fast.fetch(indices);
  loader::Value b = slow.fetch(indices);
  ASSERT_TRUE(a.is_list()) << a.repr();
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].to_tensor().sizes(), (loader::Dims{7, 1, 28, 28}));
  EXPECT_EQ(a[0].to_tensor().dtype(), loader::DType::Float32);
  EXPECT_EQ(a[1].to_tensor().dtype(), loader::DType::Int64);
  EXPECT_EQ(a[1].to_tensor().sizes(), (loader::Dims{7}));
  EXPECT_TRUE(a[0].to_tensor().bitwise_equal(b[0].to_tensor()));
  EXPECT_TRUE(a[1].to_tensor().bitwise_equal(b[1].to_tensor()));
  EXPECT_EQ(a, b);
  for (size_t r = 0; r < indices.size(); ++r)
    EXPECT_EQ(a[1].to_tensor().item_int64_at(static_cast<int64_t>(r)), ds->label(indices[r]));
}

TEST(FashionMNIST, WorkerProcessesDeliverTheSameBatchesAsTheMainProcess) {
  REQUIRE_DATA();
  loader::register_fashion_mnist();
  auto ds = loader::make_dataset({"fashion_mnist", loader::Value::dict({{"train", false}})});
  auto batches = [&](int workers) {
    loader::DataLoaderOptions o;
    o.batch_size = 1000;
    o.num_workers = workers;
    o.sampler = std::make_shared<loader::RandomSampler>(ds, std::make_shared<loader::Generator>(7));
    loader::DataLoader dl(ds, o);
    std::vector<loader::Value> out;
    for (loader::Value& b : dl) out.push_back(b.map_tensors([](const loader::Tensor& t) { return t.clone(); }));
    return out;
  };
  auto in_process = batches(0);
  auto workers = batches(2);
  ASSERT_EQ(in_process.size(), 10u);
  ASSERT_EQ(workers.size(), in_process.size());
  for (size_t i = 0; i < in_process.size(); ++i) {
    EXPECT_TRUE(workers[i][0].to_tensor().bitwise_equal(in_process[i][0].to_tensor())) << "batch " << i;
    EXPECT_TRUE(workers[i][1].to_tensor().bitwise_equal(in_process[i][1].to_tensor())) << "batch " << i;
  }
}

// ------------------------------------------------------------------ corrupt files
class FashionMNISTFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fashion_mnist_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const auto& f : written_) std::remove(f.c_str());
    ::rmdir(dir_.c_str());
  }

  static std::string be32(uint32_t v) {
    std::string s(4, '\0');
    for (int i = 0; i < 4; ++i) s[i] = static_cast<char>((v >> (24 - 8 * i)) & 0xff);
    return s;
  }
  static std::string images(uint32_t n, uint32_t rows = 28, uint32_t cols = 28, uint32_t magic = 0x803) {
    std::string s = be32(magic) + be32(n) + be32(rows) + be32(cols);
    for (uint32_t i = 0; i < n * rows * cols; ++i) s.push_back(static_cast<char>(i % 251));
    return s;
  }
  static std::string labels(uint32_t n, uint32_t magic = 0x801) {
    std::string s = be32(magic) + be32(n);
    for (uint32_t i = 0; i < n; ++i) s.push_back(static_cast<char>(i % 10));
    return s;
  }
  void write_gz(const std::string& name, const std::string& bytes) {
    std::string path = dir_ + "/" + name;
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
    gzclose(f);
    written_.push_back(path);
  }
  void write_raw(const std::string& name, const std::string& bytes) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path, std::ios::binary) << bytes;
    written_.push_back(path);
  }
  // The ValueError message of building the test split from dir_ ("" if none).
  std::string load_error() {
    try {
      loader::FashionMNIST ds(dir_, /*train=*/false);
    } catch (const loader::ValueError& e) {
      return e.what();
    }
    return "";
  }

  std::string dir_;
  std::vector<std::string> written_;
};

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "message: " << (text)

TEST_F(FashionMNISTFiles, SmallValidFilesLoad) {
  write_gz("t10k-images-idx3-ubyte.gz", images(3));
  write_gz("t10k-labels-idx1-ubyte.gz", labels(3));
  loader::FashionMNIST ds(dir_, false);
  EXPECT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.get(2)[1].to_int(), 2);
  EXPECT_EQ(ds.pixels(1)[0], static_cast<uint8_t>(784 % 251));
}

TEST_F(FashionMNISTFiles, UncompressedFilesAreUsedWhenNoGzExists) {
  write_raw("t10k-images-idx3-ubyte", images(2));
  write_raw("t10k-labels-idx1-ubyte", labels(2));
  loader::FashionMNIST ds(dir_, false);
  EXPECT_EQ(ds.size(), 2);
}

TEST_F(FashionMNISTFiles, MissingFileNamesThePathAndThePackage) {
  write_gz("t10k-labels-idx1-ubyte.gz", labels(3));
  std::string msg = load_error();
  EXPECT_CONTAINS(msg, dir_ + "/t10k-images-idx3-ubyte.gz");
  EXPECT_CONTAINS(msg, "apt-get install dataset-fashion-mnist");
}

TEST_F(FashionMNISTFiles, BadMagicIsReported) {
  write_gz("t10k-images-idx3-ubyte.gz", images(3, 28, 28, 0x801));  // labels' magic in the images file
  write_gz("t10k-labels-idx1-ubyte.gz", labels(3));
  std::string msg = load_error();
  EXPECT_CONTAINS(msg, "bad magic number 0x00000801");
  EXPECT_CONTAINS(msg, "0x00000803");
  EXPECT_CONTAINS(msg, "t10k-images-idx3-ubyte.gz");
}

TEST_F(FashionMNISTFiles, NotAnIdxFileIsReported) {
  write_gz("t10k-images-idx3-ubyte.gz", "<html>404 not found</html>");
  write_gz("t10k-labels-idx1-ubyte.gz", labels(3));
  EXPECT_CONTAINS(load_error(), "not an IDX file");
}

TEST_F(FashionMNISTFiles, TruncatedDataIsReported) {
  std::string img = images(3);
  write_gz("t10k-images-idx3-ubyte.gz", img.substr(0, img.size() - 100));
  write_gz("t10k-labels-idx1-ubyte.gz", labels(3));
  std::string msg = load_error();
  EXPECT_CONTAINS(msg, "truncated");
  EXPECT_CONTAINS(msg, std::to_string(3 * 784));
}

TEST_F(FashionMNISTFiles, TruncatedGzipStreamIsReported) {
  // A complete gzip file cut short: zlib reports the early end of the stream.
  std::string path = dir_ + "/full.gz";
  {
    gzFile f = gzopen(path.c_str(), "wb");
    std::string img = images(50);
    gzwrite(f, img.data(), static_cast<unsigned>(img.size()));
    gzclose(f);
  }
  std::string gz = loader::testing::read_file(path);
  std::remove(path.c_str());
  write_raw("t10k-images-idx3-ubyte.gz", gz.substr(0, gz.size() / 2));
  write_gz("t10k-labels-idx1-ubyte.gz", labels(50));
  std::string msg = load_error();
  EXPECT_FALSE(msg.empty());
  EXPECT_CONTAINS(msg, "t10k-images-idx3-ubyte.gz");
}

TEST_F(FashionMNISTFiles, LabelImageCountMismatchIsReported) {
  write_gz("t10k-images-idx3-ubyte.gz", images(4));
  write_gz("t10k-labels-idx1-ubyte.gz", labels(3));
  std::string msg = load_error();
  EXPECT_CONTAINS(msg, "4 images");
  EXPECT_CONTAINS(msg, "3 labels");
}

TEST_F(FashionMNISTFiles, WrongImageSizeIsReported) {
  write_gz("t10k-images-idx3-ubyte.gz", images(2, 32, 32));
  write_gz("t10k-labels-idx1-ubyte.gz", labels(2));
  EXPECT_CONTAINS(load_error(), "32x32");
}

TEST_F(FashionMNISTFiles, IdxReaderStreamsRecordsAndSeeksBothWays) {
  write_gz("t10k-images-idx3-ubyte.gz", images(5));
  const std::string path = dir_ + "/t10k-images-idx3-ubyte.gz";
  const loader::IdxArray all = loader::read_idx_ubyte(path, 3);
  loader::IdxReader r(path, 3);
  EXPECT_EQ(r.dims(), (std::vector<int64_t>{5, 28, 28}));
  EXPECT_EQ(r.count(), 5);
  EXPECT_EQ(r.record_bytes(), 784u);
  auto record = [&](int64_t i) {
    return std::vector<uint8_t>(all.data.begin() + i * 784, all.data.begin() + (i + 1) * 784);
  };
  std::vector<uint8_t> buf(784 * 2);
  r.seek(3);
  r.read(buf.data(), 2);  // records 3 and 4
  EXPECT_EQ(std::vector<uint8_t>(buf.begin(), buf.begin() + 784), record(3));
  EXPECT_EQ(std::vector<uint8_t>(buf.begin() + 784, buf.end()), record(4));
  EXPECT_EQ(r.position(), 5);
  r.check_at_end();
  r.seek(1);  // backwards
  r.read(buf.data(), 1);
  EXPECT_EQ(std::vector<uint8_t>(buf.begin(), buf.begin() + 784), record(1));
  EXPECT_THROW(r.read(buf.data(), 4), loader::ValueError);  // only 3 left
  EXPECT_THROW(r.seek(6), loader::IndexError);
  EXPECT_THROW(loader::IdxReader(path, 1), loader::ValueError);  // 3 dimensions, not 1
}

TEST_F(FashionMNISTFiles, IdxReaderReportsATruncatedRecord) {
  std::string img = images(3);
  write_gz("t10k-images-idx3-ubyte.gz", img.substr(0, img.size() - 100));
  loader::IdxReader r(dir_ + "/t10k-images-idx3-ubyte.gz", 3);
  std::vector<uint8_t> buf(784);
  r.read(buf.data(), 1);
  r.read(buf.data(), 1);
  try {
    r.read(buf.data(), 1);
    FAIL() << "no error";
  } catch (const loader::ValueError& e) {
    EXPECT_CONTAINS(e.what(), "truncated");
    EXPECT_CONTAINS(e.what(), std::to_string(3 * 784 - 100));
  }
}

TEST_F(FashionMNISTFiles, LabelOutsideTheTenClassesIsReported) {
  std::string l = labels(3);
  l.back() = 12;
  write_gz("t10k-images-idx3-ubyte.gz", images(3));
  write_gz("t10k-labels-idx1-ubyte.gz", l);
  std::string msg = load_error();
  EXPECT_CONTAINS(msg, "label 12 at index 2");
}

}  // namespace
