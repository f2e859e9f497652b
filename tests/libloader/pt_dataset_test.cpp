// PtTensorDataset: a TensorDataset served from a `.pt` file, memory-mapped.
#include <gtest/gtest.h>

#include "loader/serialization/pt_dataset.h"
#include "pt_test_util.h"

namespace {

using loader::Tensor;
using loader::Value;
namespace pt = loader::pt;
using namespace loader::testing;

struct Files {
  TempDir dir;
  Tensor x, y;
  Files() {
    std::vector<float> xv(30);
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = static_cast<float>(i);
    x = Tensor::from_vector<float>(xv, {10, 3});
    y = Tensor::arange(10);
    pt::save(Value::tuple({x, y}), dir.file("tuple.pt"));
    pt::save(Value::dict({{"x", x}, {"y", y}, {"w", pt::make_parameter(x.slice(1, 0, 1))}}), dir.file("dict.pt"));
    pt::save(Value::tuple({x, Tensor::arange(9)}), dir.file("mismatch.pt"));
    pt::save(Value::dict({{"x", x}, {"s", Tensor::scalar(int64_t{1})}}), dir.file("scalar.pt"));
    pt::save(Value::list({x, "not a tensor"}), dir.file("string.pt"));
  }
};

TEST(PtTensorDataset, TupleFileServesTuplesOfRowViews) {
  Files f;
  pt::PtTensorDataset ds(f.dir.file("tuple.pt"));
  EXPECT_EQ(ds.size(), 10);
  EXPECT_FALSE(ds.is_dict());
  Value s = ds.get(4);
  ASSERT_TRUE(s.is_tuple());
  ASSERT_EQ(s.size(), 2u);
  EXPECT_TRUE(s[0].to_tensor().equal(f.x[4]));
  EXPECT_EQ(s[1].to_tensor().dim(), 0);
  EXPECT_EQ(s[1].to_tensor().item<int64_t>(), 4);
  EXPECT_TRUE(ds.get(-1)[0].to_tensor().equal(f.x[9]));
  // samples are views of the mapped file, sharing one storage per tensor
  EXPECT_EQ(s[0].to_tensor().storage(), ds.get(7)[0].to_tensor().storage());
  EXPECT_EQ(s[0].to_tensor().storage()->kind(), loader::MemoryKind::FileMapping);
  EXPECT_THROW(ds.get(10), loader::IndexError);
  EXPECT_THROW(ds.get(-11), loader::IndexError);
}

TEST(PtTensorDataset, DictFileServesDictsAndKeysSelectAndOrder) {
  Files f;
  pt::PtTensorDataset all(f.dir.file("dict.pt"));
  EXPECT_TRUE(all.is_dict());
  Value s = all.get(2);
  ASSERT_TRUE(s.is_dict());
  EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(s.dict_items()[0].first.to_string(), "x");
  EXPECT_EQ(s.at("w").to_tensor().item<float>(), 6.0f);  // a Parameter is served as its tensor
  pt::PtTensorDataset::Options o;
  o.keys = {Value("y"), Value("x")};
  o.mmap = false;
  pt::PtTensorDataset some(f.dir.file("dict.pt"), o);
  Value t = some.get(3);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t.dict_items()[0].first.to_string(), "y");
  EXPECT_EQ(t.at("y").to_tensor().item<int64_t>(), 3);
  EXPECT_EQ(t.at("x").to_tensor().storage()->kind(), loader::MemoryKind::Heap);
  o.keys = {Value("nope")};
  EXPECT_THROW(pt::PtTensorDataset(f.dir.file("dict.pt"), o), loader::KeyError);
  o.keys = {Value(1)};
  pt::PtTensorDataset by_index(f.dir.file("tuple.pt"), o);
  EXPECT_EQ(by_index.get(5)[0].to_tensor().item<int64_t>(), 5);
}

TEST(PtTensorDataset, BadFilesGiveTorchDataMessages) {
  Files f;
  try {
    pt::PtTensorDataset ds(f.dir.file("mismatch.pt"));
    FAIL();
  } catch (const loader::AssertionError& e) {
    EXPECT_STREQ(e.what(), "Size mismatch between tensors");  // TensorDataset's message
  }
  EXPECT_THROW(pt::PtTensorDataset(f.dir.file("scalar.pt")), loader::ValueError);
  EXPECT_THROW(pt::PtTensorDataset(f.dir.file("string.pt")), loader::TypeError);
  EXPECT_THROW(pt::PtTensorDataset(golden_legacy("tar_format_float32.pt")), pt::PtFormatError);
}

TEST(PtTensorDataset, LegacyFormatFilesServeTheSameSamples) {
  Files f;
  pt::SaveOptions o;
  o.legacy_format = true;  // records ordered and padded so that both are aligned, hence mapped
  pt::save(Value::tuple({f.x, f.y}), f.dir.file("legacy.pt"), o);
  pt::PtTensorDataset ds(f.dir.file("legacy.pt"));
  EXPECT_EQ(ds.size(), 10);
  for (int64_t i : {0, 4, 9}) {
    EXPECT_TRUE(ds.get(i)[0].to_tensor().equal(f.x[i]));
    EXPECT_EQ(ds.get(i)[1].to_tensor().item<int64_t>(), i);
  }
  EXPECT_EQ(ds.get(3)[0].to_tensor().storage()->kind(), loader::MemoryKind::FileMapping);
}

TEST(PtTensorDataset, RegisteredTypeBuildsFromParams) {
  Files f;
  pt::register_pt_datasets();
  pt::register_pt_datasets();  // idempotent
  ASSERT_TRUE(loader::is_registered_dataset("pt_tensor_dataset"));
  auto ds = loader::make_dataset({"pt_tensor_dataset",
                                  Value::dict({{"path", f.dir.file("dict.pt")}, {"keys", Value::list({"x"})}, {"mmap", true}})});
  EXPECT_EQ(ds->size(), 10);
  EXPECT_TRUE(ds->get(1).at("x").to_tensor().equal(f.x[1]));
  ASSERT_TRUE(ds->handle().has_value());
  EXPECT_EQ(ds->handle()->type, "pt_tensor_dataset");
  EXPECT_THROW(loader::make_dataset({"pt_tensor_dataset", Value::dict({{"pth", "x"}})}), loader::Error);
  EXPECT_THROW(loader::make_dataset({"pt_tensor_dataset", Value::dict(std::vector<std::pair<Value, Value>>{})}), loader::Error);
}

TEST(PtTensorDataset, ServesAGoldenFileWrittenByPyTorch) {
  // views_sharing_storage.pt: a list of tensors, the last 0-dim (not servable)
  pt::PtTensorDataset::Options o;
  o.keys = {Value(0), Value(2)};  // [4, 6] and its transpose [6, 4]: sizes differ
  EXPECT_THROW(pt::PtTensorDataset(golden_pt("views_sharing_storage.pt"), o), loader::AssertionError);
  o.keys = {Value(0)};
  pt::PtTensorDataset ds(golden_pt("views_sharing_storage.pt"), o);
  EXPECT_EQ(ds.size(), 4);
  EXPECT_EQ(ds.get(3)[0].to_tensor().at<float>({5}), 23.0f);
}

}  // namespace
