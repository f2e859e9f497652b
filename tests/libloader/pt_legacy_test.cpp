// The legacy `.pt` format (PyTorch 0.4 to 1.5, and _use_new_zipfile_serialization=False):
// the files torch 1.13 wrote (golden/pt_legacy, recorded by golden/make_legacy.py), and
// the files we write in it.  Hostile legacy files are in pt_hostile_test.cpp, the round
// trips through real PyTorch in pt_torch_test.cpp.
#include <gtest/gtest.h>

#include "loader/serialization/pt.h"
#include "pt_test_util.h"

namespace {

using loader::DType;
using loader::Tensor;
using loader::Value;
namespace pt = loader::pt;
using namespace loader::testing;

// The description `loader pt dump` and the manifests use.
nlohmann::json describe(const pt::Archive& a, int* n_storages = nullptr) { return describe_manifest_style(a, n_storages); }

std::string load_error(const std::string& path) {
  try {
    pt::load(path);
  } catch (const pt::PtFormatError& e) {
    return e.what();
  }
  return "";
}

TEST(PtLegacy, ManifestListsTheRecordedFiles) {
  EXPECT_EQ(legacy_manifest()["files"].size(), 33u);
  EXPECT_EQ(loadable_legacy_files().size(), 31u);
}

TEST(PtLegacy, EveryGoldenFileLoadsToTheManifestObject) {
  for (const std::string& name : loadable_legacy_files()) {
    SCOPED_TRACE(name);
    const auto& want = legacy_manifest()["files"][name];
    const std::string bytes = read_file(golden_legacy(name));
    for (int how = 0; how < 3; ++how) {  // read with pread, mapped, from memory
      SCOPED_TRACE(how);
      pt::LoadOptions o;
      o.mmap = how == 1;
      pt::Archive a = how == 2 ? pt::load_archive_bytes(bytes.data(), bytes.size(), o)
                               : pt::load_archive(golden_legacy(name), o);
      EXPECT_EQ(a.format, pt::Format::Legacy);
      EXPECT_EQ(a.archive_name, "");
      int n_storages = 0;
      const nlohmann::json got = describe(a, &n_storages);
      EXPECT_EQ(got, want["object"]) << json_diff(got, want["object"]);
      EXPECT_EQ(n_storages, want["num_distinct_storages"].get<int>());
      // the layout: sys_info, and every storage record where Python found it
      const auto& lay = want["legacy"];
      EXPECT_EQ(a.legacy.protocol_version, lay["sys_info"]["protocol_version"].get<int64_t>());
      EXPECT_EQ(a.legacy.little_endian, lay["sys_info"]["little_endian"].get<bool>());
      EXPECT_EQ(a.legacy.long_size, lay["sys_info"]["type_sizes"]["long"].get<int64_t>());
      ASSERT_EQ(a.legacy.records.size(), lay["records"].size());
      for (size_t i = 0; i < a.legacy.records.size(); ++i) {
        const pt::LegacyRecord& r = a.legacy.records[i];
        EXPECT_EQ(r.key, lay["records"][i]["key"].get<std::string>());
        EXPECT_EQ(loader::dtype_name(r.dtype), lay["records"][i]["dtype"].get<std::string>());
        EXPECT_EQ(r.numel, lay["records"][i]["numel"].get<uint64_t>());
        EXPECT_EQ(r.data_offset, lay["records"][i]["data_offset"].get<uint64_t>());
      }
    }
  }
}

// The same objects saved by torch 1.13 in both formats load to the same description.
TEST(PtLegacy, ObjectsOfTheZipGoldenFilesDescribeTheSameFromLegacyFiles) {
  int n = 0;
  for (const std::string& name : loadable_legacy_files()) {
    if (!pt_manifest()["files"].contains(name) || pt_manifest()["files"][name].contains("format")) continue;
    if (pt_manifest()["files"][name]["object"] != legacy_manifest()["files"][name]["object"]) continue;  // other objects
    SCOPED_TRACE(name);
    const nlohmann::json legacy = describe(pt::load_archive(golden_legacy(name)));
    const nlohmann::json zip = describe(pt::load_archive(golden_pt(name)));
    EXPECT_EQ(legacy, zip) << json_diff(legacy, zip);
    ++n;
  }
  EXPECT_GE(n, 20);
}

TEST(PtLegacy, MmapWrapsAlignedRecordsAndCopiesTheOthers) {
  int mapped = 0, copied = 0;
  for (const std::string& name : loadable_legacy_files()) {
    SCOPED_TRACE(name);
    pt::LoadOptions o;
    o.mmap = true;
    pt::Archive a = pt::load_archive(golden_legacy(name), o);
    bool all_mapped = true, none_mapped = true;
    for (const pt::LegacyRecord& r : a.legacy.records) {
      EXPECT_EQ(r.mapped, r.data_offset % loader::element_size(r.dtype) == 0) << r.key;
      (r.mapped ? mapped : copied)++;
      all_mapped = all_mapped && r.mapped;
      none_mapped = none_mapped && !r.mapped;
    }
    a.value.for_each_tensor([&](const Tensor& t) {
      if (all_mapped) {
        EXPECT_EQ(t.storage()->kind(), loader::MemoryKind::FileMapping);
      }
      if (none_mapped) {
        EXPECT_EQ(t.storage()->kind(), loader::MemoryKind::Heap);
      }
    });
    // without mmap nothing is mapped
    for (const auto& r : pt::load_archive(golden_legacy(name)).legacy.records) EXPECT_FALSE(r.mapped);
  }
  EXPECT_GT(mapped, 5);
  EXPECT_GT(copied, 5);
  // copy-on-write: writing into a mapped tensor leaves the file as it was
  const std::string path = golden_legacy("t_float64.pt");
  pt::LoadOptions o;
  o.mmap = true;
  pt::Archive a = pt::load_archive(path, o);
  ASSERT_TRUE(a.legacy.records.at(0).mapped);
  const std::string before = read_file(path);
  a.value.to_tensor().data<double>()[0] = 42.0;
  EXPECT_EQ(read_file(path), before);
}

TEST(PtLegacy, StorageViewsShareTheBytesOfTheirStorage) {
  for (bool mmap : {false, true}) {
    pt::LoadOptions o;
    o.mmap = mmap;
    Value v = pt::load(golden_legacy("storage_views.pt"), o);
    const Tensor& root = v.at("root").to_tensor();
    const Tensor& v1 = v.at("v1").to_tensor();
    // ('storage', FloatStorage, root, 'cpu', 10, (view, 2, 4)): elements 2..5 of root's bytes
    EXPECT_EQ(static_cast<const char*>(v1.storage()->data()), static_cast<const char*>(root.storage()->data()) + 8);
    EXPECT_EQ(v1.storage()->nbytes(), 16u);
    EXPECT_EQ(v.at("v1_2x2").to_tensor().storage(), v1.storage());  // one view key, one storage
    root.data<float>()[3] = -1.0f;
    EXPECT_EQ(v1.at<float>({1}), -1.0f);  // the view sees writes to its storage
    EXPECT_EQ(v.at("v2").to_tensor().to_double_vector(), (std::vector<double>{8.0, 9.0}));
  }
}

TEST(PtLegacy, StateDictKeepsItsMetadata) {
  pt::Archive a = pt::load_archive(golden_legacy("state_dict.pt"));
  ASSERT_TRUE(a.value.is_dict());
  EXPECT_EQ(a.value.type_name(), "collections.OrderedDict");
  EXPECT_EQ(a.value.size(), 7u);
  Value md = a.metadata_of(a.value);
  ASSERT_TRUE(md.is_dict());
  EXPECT_EQ(md.at("1").at("version").to_int(), 2);
  EXPECT_EQ(pt::tensor_of(a.value.at("1.num_batches_tracked")).item<int64_t>(), 7);
}

TEST(PtLegacy, PickledModulesAreRefusedWithAClearError) {
  const std::string m = load_error(golden_legacy("module_tiny.pt"));
  EXPECT_NE(m.find("('module', __main__.Tiny"), std::string::npos) << m;
  EXPECT_NE(m.find("torch.nn.Module"), std::string::npos) << m;
  EXPECT_NE(m.find("state_dict()"), std::string::npos) << m;
  EXPECT_NE(m.find("offset"), std::string::npos) << m;
}

TEST(PtLegacy, TarFormatIsRefusedByName) {
  const std::string m = load_error(golden_legacy("tar_format_float32.pt"));
  EXPECT_NE(m.find("tar-format"), std::string::npos) << m;
  EXPECT_NE(m.find("PyTorch 0.3 or older"), std::string::npos) << m;
  EXPECT_NE(m.find("torch.save(torch.load(old_path), new_path)"), std::string::npos) << m;
}

// ---------------------------------------------------------------- the writer

pt::SaveOptions legacy_options(const pt::Archive* a = nullptr) {
  pt::SaveOptions o;
  o.legacy_format = true;
  if (a) o.states = a->states;
  return o;
}

TEST(PtLegacy, OurHeaderIsTorchsByteForByte) {
  // magic number, protocol version and sys_info: everything before the object pickle
  const auto& lay = legacy_manifest()["files"]["t_float32.pt"]["legacy"];
  const size_t object_offset = lay["object_offset"].get<size_t>();
  const std::string torch_bytes = read_file(golden_legacy("t_float32.pt"));
  const std::string ours = pt::save_bytes(pt::load(golden_legacy("t_float32.pt")), legacy_options());
  EXPECT_EQ(ours.substr(0, object_offset), torch_bytes.substr(0, object_offset));
  EXPECT_EQ(ours.substr(0, 4), std::string("\x80\x02\x8a\x0a", 4));
}

TEST(PtLegacy, EveryGoldenFileSavedInTheLegacyFormatLoadsBackTheSame) {
  std::vector<std::string> paths;
  for (const std::string& name : loadable_legacy_files()) paths.push_back(golden_legacy(name));
  for (const auto& [name, entry] : pt_manifest()["files"].items()) paths.push_back(golden_pt(name));
  for (const std::string& path : paths) {
    SCOPED_TRACE(path);
    pt::Archive a = pt::load_archive(path);
    const std::string bytes = pt::save_bytes(a.value, legacy_options(&a));
    pt::Archive back = pt::load_archive_bytes(bytes.data(), bytes.size());
    EXPECT_EQ(back.format, pt::Format::Legacy);
    int n_a = 0, n_back = 0;
    const nlohmann::json want = describe(a, &n_a), got = describe(back, &n_back);
    EXPECT_EQ(got, want) << json_diff(got, want);
    EXPECT_EQ(n_back, n_a);
    EXPECT_EQ(back.states.size(), a.states.size());
  }
}

TEST(PtLegacy, SavedRecordsStartAlignedWheneverTheFormatAllows) {
  // 12 bytes of float32 (not a multiple of 8) between 8-byte-multiple records
  Value sd = Value::dict({}, "collections.OrderedDict");
  sd.set("odd", Tensor::from_vector<float>({1, 2, 3}));
  sd.set("w", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  sd.set("n", Tensor::scalar(int64_t{7}));
  sd.set("d", Tensor::from_vector<double>({0.5, 0.25}));
  sd.set("e", Tensor::empty({0}, DType::Float32));
  TempDir dir;
  const std::string path = dir.file("sd.pt");
  pt::save(sd, path, legacy_options());
  EXPECT_EQ(read_file(path).substr(0, 4), std::string("\x80\x02\x8a\x0a", 4));
  pt::LoadOptions o;
  o.mmap = true;
  pt::Archive a = pt::load_archive(path, o);
  ASSERT_EQ(a.legacy.records.size(), 5u);
  EXPECT_EQ(a.legacy.records[0].data_offset % 64, 0u);
  // the four records whose sizes are multiples of 8 come first, all aligned and mapped
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(a.legacy.records[i].numel * loader::element_size(a.legacy.records[i].dtype) % 8, 0u) << i;
    EXPECT_TRUE(a.legacy.records[i].mapped) << i;
  }
  EXPECT_EQ(a.legacy.records[4].numel, 3u);  // "odd" last
  EXPECT_EQ(pt::tensor_of(a.value.at("w")).storage()->kind(), loader::MemoryKind::FileMapping);
  EXPECT_EQ(describe(a), describe(pt::Archive{sd, {}, "", {}}));
}

TEST(PtLegacy, LargePicklesAreReadThroughAGrowingWindow) {
  // Reading with pread starts from the first 64 KiB: an object pickle of about 120 KB
  // makes the window grow until the pickles fit.
  std::vector<std::pair<Value, Value>> items;
  for (int64_t i = 0; i < 20000; ++i) items.emplace_back(Value(i), Value(i * 3));
  items.emplace_back(Value("t"), Value(Tensor::from_vector<int32_t>({5, 6, 7})));
  Value d = Value::dict(std::move(items));
  TempDir dir;
  const std::string path = dir.file("big.pt");
  pt::save(d, path, legacy_options());
  const std::string bytes = read_file(path);
  ASSERT_GT(bytes.size(), size_t{100} << 10);
  pt::Archive a = pt::load_archive(path);
  EXPECT_EQ(a.value.size(), 20001u);
  EXPECT_EQ(a.value.dict_items()[19999].first.to_int(), 19999);
  EXPECT_EQ(a.value.dict_items()[19999].second.to_int(), 59997);
  EXPECT_EQ(a.value.at("t").to_tensor().to_int64_vector(), (std::vector<int64_t>{5, 6, 7}));
  // the same file cut short fails cleanly through the same path, wherever the cut is
  for (size_t cut : {size_t{100}, (size_t{64} << 10) - 1, size_t{64} << 10, (size_t{64} << 10) + 1, bytes.size() / 2,
                     bytes.size() - 13, bytes.size() - 1}) {
    write_file(dir.file("cut.pt"), bytes.substr(0, cut));
    EXPECT_THROW(pt::load(dir.file("cut.pt")), pt::PtFormatError) << cut;
  }
}

TEST(PtLegacy, TheWriterRefusesWhatTheZipWriterRefuses) {
  Tensor f = Tensor::from_vector<float>({1, 2});
  Tensor i(f.storage(), DType::Int32, {2}, {1}, 0);
  EXPECT_THROW(pt::save_bytes(Value::list({f, i}), legacy_options()), loader::ValueError);
  Value l = Value::list();
  l.push_back(l);
  EXPECT_THROW(pt::save_bytes(l, legacy_options()), loader::ValueError);
  l.items().clear();
}

}  // namespace
