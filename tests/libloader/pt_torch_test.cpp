// Round trips through real PyTorch (/usr/bin/python3 with torch, or $LOADER_PYTHON):
// files we write load in torch.load with the same values, and files torch.save writes
// load here with the same values.  Skipped (with the reason) where torch is missing.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "loader/serialization/pt.h"
#include "pt_test_util.h"

namespace {

using loader::DType;
using loader::Tensor;
using loader::Value;
namespace pt = loader::pt;
using namespace loader::testing;

const std::string kHelper = std::string(LOADER_SOURCE_DIR) + "/tests/libloader/pt_torch_helper.py";

#define REQUIRE_TORCH()                                                                              \
  if (torch_python().empty())                                                                        \
  GTEST_SKIP() << "PyTorch not found (/usr/bin/python3 -c 'import torch' failed; set LOADER_PYTHON); " \
                  "the round trip through torch.load/torch.save cannot run"

template <class T>
Tensor tensor_of_values(std::vector<T> v, loader::Dims shape = {}) {
  return Tensor::from_vector<T>(v, shape);
}

Tensor half_tensor(const std::vector<float>& v, bool bf16) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, bf16 ? DType::BFloat16 : DType::Float16);
  auto* p = static_cast<uint16_t*>(t.data_ptr());
  for (size_t i = 0; i < v.size(); ++i) p[i] = bf16 ? loader::float_to_bfloat16(v[i]) : loader::float_to_half(v[i]);
  return t;
}

// What we write, by name; `weights_only` says whether torch 1.13's weights_only loader can
// read it (it has no BINFLOAT, _codecs.encode, set or torch.Size).
struct Written {
  pt::Archive archive;
  bool weights_only;
};

std::map<std::string, Written> cpp_objects() {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::map<std::string, Written> m;
  auto add = [&](const std::string& name, Value v, bool wo = true) { m[name] = {pt::Archive{v, {}, "", {}}, wo}; };
  add("cpp_float32", tensor_of_values<float>({0.0f, -0.0f, inf, -inf, nan, 1e-45f, 3.4e38f, 1.0f / 3}, {2, 4}));
  add("cpp_float64", tensor_of_values<double>({0.1, -1e300, 5e-324, std::nan("")}));
  add("cpp_float16", half_tensor({65504.0f, -6e-8f, inf, 0.1f}, false));
  add("cpp_bfloat16", half_tensor({1e38f, -3.0f, nan, 0.1f}, true));
  add("cpp_int64", tensor_of_values<int64_t>({std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), 0, -1}));
  add("cpp_int32", tensor_of_values<int32_t>({-2147483647 - 1, 2147483647}, {2, 1}));
  add("cpp_int16", tensor_of_values<int16_t>({-32768, 32767}));
  add("cpp_int8", tensor_of_values<int8_t>({-128, 127}));
  add("cpp_uint8", tensor_of_values<uint8_t>({0, 51, 255}));
  add("cpp_bool", tensor_of_values<bool>({true, false, true}, {3, 1}));
  {
    Tensor c = Tensor::empty({2}, DType::Complex64);
    float parts[4] = {1.0f, -2.0f, nan, inf};
    std::memcpy(c.data_ptr(), parts, sizeof parts);
    add("cpp_complex64", c);
  }
  add("cpp_scalar", Tensor::scalar(int64_t{-7}));
  add("cpp_empty", Tensor::empty({0, 3}, DType::Float16));
  {
    std::vector<float> v(24);
    for (int i = 0; i < 24; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
    Tensor base = Tensor::from_vector<float>(v, {4, 6});
    add("cpp_views", Value::list({base, base.transpose(0, 1), base.slice(0, 1, 4).slice(1, 0, 6, 2), base[2][3],
                                  base.slice(1, 1, 2).expand({4, 5})}));
  }
  add("cpp_parameter", pt::make_parameter(tensor_of_values<float>({1.5f, 2.5f}, {1, 2})));
  add("cpp_parameter_no_grad", pt::make_parameter(tensor_of_values<float>({3.0f}), false));
  add("cpp_requires_grad", pt::make_requires_grad(tensor_of_values<float>({1.0f, -2.0f})));
  {
    Value sd = Value::dict({}, "collections.OrderedDict");
    sd.set("0.weight", tensor_of_values<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
    sd.set("0.bias", tensor_of_values<float>({0.5f, -0.5f}));
    sd.set("1.num_batches_tracked", Tensor::scalar(int64_t{7}));
    Value md = Value::dict({}, "collections.OrderedDict");
    md.set("", Value::dict({{"version", 1}}));
    md.set("0", Value::dict({{"version", 1}}));
    md.set("1", Value::dict({{"version", 2}}));
    m["cpp_state_dict"] = {pt::Archive{sd, {{sd, Value::dict({{"_metadata", md}})}}, "", {}}, true};
  }
  {
    std::vector<Value> many;
    for (int i = 0; i < 12; ++i) many.emplace_back(tensor_of_values<int32_t>({i, i}));
    add("cpp_many_storages", Value::list(many));
  }
  {
    Tensor shared = Tensor::arange(6);
    add("cpp_shared", Value::dict({{"a", shared}, {"b", shared}, {"c", shared.slice(0, 1, 3)}}));
  }
  {
    Value d = Value::dict({{"ints", Value::list({0, 255, 256, 65535, 65536, -1, int64_t{-2147483647 - 1}, int64_t{2147483648LL},
                                                int64_t{1LL << 40}, std::numeric_limits<int64_t>::min(),
                                                std::numeric_limits<int64_t>::max()})},
                           {"str", "ünï \xF0\x9F\x98\x80"},
                           {"none", Value()},
                           {"bools", Value::tuple({true, false})},
                           {"nested", Value::list({Value::list({Value::list()}), Value::tuple({Value::tuple()}),
                                                   Value::dict(std::vector<std::pair<Value, Value>>{})})}});
    d.set(Value(7), "int key");
    d.set(Value::tuple({1, "t"}), "tuple key");
    add("cpp_containers", d);
  }
  {
    Value d = Value::dict({{"floats", Value::list({1.5, -0.0, std::numeric_limits<double>::infinity(), std::nan("")})},
                           {"bytes", Value::bytes(std::string("\x00\xff\x80" "a", 4))},
                           {"empty_bytes", Value::bytes("")},
                           {"set", Value::list({1, 2, 3}, "set")},
                           {"frozenset", Value::list({5}, "frozenset")},
                           {"size", Value::tuple({2, 3}, "torch.Size")}});
    add("cpp_python_only_types", d, false);
  }
  {
    std::vector<float> big(30000);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.25f;
    add("cpp_big", Tensor::from_vector<float>(big, {100, 300}).transpose(0, 1));
  }
  return m;
}

TEST(PtTorch, FilesWeWriteLoadInPyTorchWithTheSameValues) {
  REQUIRE_TORCH();
  TempDir dir;
  auto objs = cpp_objects();
  std::string files;
  for (const auto& [name, w] : objs) {
    pt::save(w.archive, dir.file(name + ".pt"));
    files += " " + shell_quote(dir.file(name + ".pt"));
  }
  const std::string out = dir.file("described.json");
  auto r = run_command(shell_quote(torch_python()) + " " + shell_quote(kHelper) + " describe " + shell_quote(out) + files + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json got = nlohmann::json::parse(read_file(out));
  ASSERT_EQ(got.size(), objs.size());
  for (const auto& [name, w] : objs) {
    SCOPED_TRACE(name);
    const auto& py = got[name + ".pt"];
    int n_storages = 0;
    nlohmann::json ours = describe_manifest_style(w.archive, &n_storages);
    EXPECT_EQ(py["object"], ours) << json_diff(py["object"], ours);
    EXPECT_EQ(py["num_distinct_storages"].get<int>(), n_storages);
    EXPECT_TRUE(py["testzip"].is_null()) << "zipfile.testzip() found a bad CRC in " << py["testzip"];
    EXPECT_EQ(py["weights_only"].get<bool>(), w.weights_only) << py.value("weights_only_error", "");
    const auto records = py["records"].get<std::vector<std::string>>();
    EXPECT_NE(std::find(records.begin(), records.end(), name + "/byteorder"), records.end());
  }
}

TEST(PtTorch, FilesPyTorchWritesLoadWithTheSameValues) {
  REQUIRE_TORCH();
  TempDir dir;
  auto r = run_command(shell_quote(torch_python()) + " " + shell_quote(kHelper) + " make " + shell_quote(dir.path()) + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json manifest = nlohmann::json::parse(read_file(dir.file("manifest.json")));
  EXPECT_GE(manifest.size(), 25u);
  for (const auto& [name, want] : manifest.items()) {
    SCOPED_TRACE(name);
    for (bool mmap : {false, true}) {
      pt::LoadOptions o;
      o.mmap = mmap;
      pt::Archive a = pt::load_archive(dir.file(name), o);
      int n_storages = 0;
      nlohmann::json got = describe_manifest_style(a, &n_storages);
      EXPECT_EQ(got, want["object"]) << json_diff(got, want["object"]);
      EXPECT_EQ(n_storages, want["num_distinct_storages"].get<int>());
    }
  }
  // views of one tensor saved twice share one storage pointer
  Value same = pt::load(dir.file("py_same_tensor_twice.pt"));
  EXPECT_EQ(same.at("a").to_tensor().storage(), same.at("c").to_tensor().storage());
  EXPECT_EQ(pt::load_archive(dir.file("py_bytesio.pt")).archive_name, "archive");
  // what PyTorch wrote, written again by us, loads in PyTorch to the same description
  std::string files;
  for (const auto& [name, want] : manifest.items()) {
    pt::save(pt::load_archive(dir.file(name)), dir.file("again_" + name));
    files += " " + shell_quote(dir.file("again_" + name));
  }
  const std::string out = dir.file("again.json");
  r = run_command(shell_quote(torch_python()) + " " + shell_quote(kHelper) + " describe " + shell_quote(out) + files + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json again = nlohmann::json::parse(read_file(out));
  for (const auto& [name, want] : manifest.items()) {
    SCOPED_TRACE("again_" + name);
    const nlohmann::json& w = want["object"];
    EXPECT_EQ(again["again_" + name]["object"], w) << json_diff(again["again_" + name]["object"], w);
  }
}

}  // namespace

namespace {

// S6 in small: zip64 extra fields and 64-bit data descriptors on every record (written
// for real only past 4 GiB) are read by PyTorch's reader too.
TEST(PtTorch, Zip64RecordsLoadInPyTorch) {
  REQUIRE_TORCH();
  TempDir dir;
  pt::SaveOptions o;
  o.force_zip64 = true;
  Value v = Value::dict({{"x", Tensor::arange(5)}, {"y", pt::make_parameter(Tensor::from_vector<float>({1.5f, -2.0f}))}});
  pt::save(v, dir.file("z64.pt"), o);
  EXPECT_EQ(describe_manifest_style(pt::load_archive(dir.file("z64.pt"))),
            describe_manifest_style(pt::Archive{v, {}, "", {}}));
  const std::string out = dir.file("z64.json");
  auto r = run_command(shell_quote(torch_python()) + " " + shell_quote(kHelper) + " describe " + shell_quote(out) + " " +
                       shell_quote(dir.file("z64.pt")) + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json py = nlohmann::json::parse(read_file(out))["z64.pt"];
  EXPECT_TRUE(py["weights_only"].get<bool>());
  EXPECT_TRUE(py["testzip"].is_null());
  EXPECT_EQ(py["object"], describe_manifest_style(pt::Archive{v, {}, "", {}}));
}

}  // namespace

namespace {

const std::string kTool = std::string(LOADER_BINARY_DIR) + "/loader";

// `loader pt dump --all-values FILE`: the object, the number of distinct storages, the format.
nlohmann::json dump_of(const std::string& path) {
  auto r = run_command(shell_quote(kTool) + " pt dump --all-values " + shell_quote(path) + " 2>&1");
  EXPECT_EQ(r.status, 0) << r.output;
  if (r.status != 0) return nullptr;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  return {j["object"], j["num_distinct_storages"], j["format"]};
}

// What we write in the legacy format loads in PyTorch, with weights_only where the zip
// format does too.
TEST(PtTorch, LegacyFilesWeWriteLoadInPyTorchWithTheSameValues) {
  REQUIRE_TORCH();
  TempDir dir;
  auto objs = cpp_objects();
  std::string files;
  pt::SaveOptions o;
  o.legacy_format = true;
  for (const auto& [name, w] : objs) {
    pt::save(w.archive, dir.file(name + ".pt"), o);
    files += " " + shell_quote(dir.file(name + ".pt"));
  }
  const std::string out = dir.file("described.json");
  auto r = run_command(shell_quote(torch_python()) + " " + shell_quote(kHelper) + " describe " + shell_quote(out) + files + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json got = nlohmann::json::parse(read_file(out));
  ASSERT_EQ(got.size(), objs.size());
  for (const auto& [name, w] : objs) {
    SCOPED_TRACE(name);
    const auto& py = got[name + ".pt"];
    EXPECT_EQ(py["format"], "legacy");
    int n_storages = 0;
    nlohmann::json ours = describe_manifest_style(w.archive, &n_storages);
    EXPECT_EQ(py["object"], ours) << json_diff(py["object"], ours);
    EXPECT_EQ(py["num_distinct_storages"].get<int>(), n_storages);
    EXPECT_EQ(py["weights_only"].get<bool>(), w.weights_only) << py.value("weights_only_error", "");
  }
}

// Random objects saved by PyTorch in both formats: `loader pt dump` gives the same
// object for both files, and PyTorch's own description; `loader pt copy --legacy-format`
// of either loads in PyTorch (weights_only=True) equal to the original.
TEST(PtTorch, RandomObjectsDumpTheSameFromLegacyAndZipFilesAndCopyBack) {
  REQUIRE_TORCH();
  if (!std::filesystem::exists(kTool)) GTEST_SKIP() << "the loader tool is not built at " << kTool;
  TempDir dir;
  const int n = 40;
  auto r = run_command(shell_quote(torch_python()) + " " + shell_quote(kHelper) + " make_pairs " + shell_quote(dir.path()) +
                       " " + std::to_string(n) + " 20240601 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json manifest = nlohmann::json::parse(read_file(dir.file("manifest.json")));
  ASSERT_EQ(manifest.size(), static_cast<size_t>(n));
  std::string copies;
  int tensors = 0;
  for (const auto& [name, want] : manifest.items()) {
    SCOPED_TRACE(name);
    const std::string zip = dir.file(name + "_zip.pt"), legacy = dir.file(name + "_legacy.pt");
    const nlohmann::json dz = dump_of(zip), dl = dump_of(legacy);
    ASSERT_FALSE(dz.is_null() || dl.is_null());
    EXPECT_EQ(dz[2], "zip");
    EXPECT_EQ(dl[2], "legacy");
    EXPECT_EQ(dl[0], dz[0]) << json_diff(dl[0], dz[0]);
    EXPECT_EQ(dl[1], dz[1]);
    // and both are what PyTorch describes (in the manifest's spelling of NaN and inf)
    int n_storages = 0;
    const nlohmann::json ours = describe_manifest_style(pt::load_archive(legacy), &n_storages);
    EXPECT_EQ(ours, want["object"]) << json_diff(ours, want["object"]);
    EXPECT_EQ(n_storages, want["num_distinct_storages"].get<int>());
    tensors += n_storages;
    for (const std::string& in : {zip, legacy}) {
      const std::string out = in.substr(0, in.size() - 3) + "_copy.pt";
      r = run_command(shell_quote(kTool) + " pt copy --legacy-format " + shell_quote(in) + " " + shell_quote(out) + " 2>&1");
      ASSERT_EQ(r.status, 0) << r.output;
      copies += " " + shell_quote(out);
    }
  }
  EXPECT_GT(tensors, 100);
  const std::string out = dir.file("copies.json");
  r = run_command(shell_quote(torch_python()) + " " + shell_quote(kHelper) + " describe " + shell_quote(out) + copies + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json got = nlohmann::json::parse(read_file(out));
  ASSERT_EQ(got.size(), 2u * n);
  for (const auto& [name, want] : manifest.items())
    for (const char* kind : {"_zip_copy.pt", "_legacy_copy.pt"}) {
      SCOPED_TRACE(name + kind);
      const auto& py = got[name + kind];
      EXPECT_EQ(py["format"], "legacy");
      EXPECT_TRUE(py["weights_only"].get<bool>()) << py.value("weights_only_error", "");
      EXPECT_EQ(py["object"], want["object"]) << json_diff(py["object"], want["object"]);
      EXPECT_EQ(py["num_distinct_storages"], want["num_distinct_storages"]);
    }
}

}  // namespace
