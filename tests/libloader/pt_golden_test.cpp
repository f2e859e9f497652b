// The reader and writer against the files torch 1.13 wrote (golden/pt, pt_manifest.json).
#include <gtest/gtest.h>

#include "loader/serialization/pt.h"
#include "loader/serialization/sha256.h"
#include "loader/serialization/zip.h"
#include "pt_test_util.h"

namespace {

using loader::Value;
namespace pt = loader::pt;
using namespace loader::testing;

std::vector<std::string> zip_golden_files() {
  std::vector<std::string> names;
  for (const auto& [name, entry] : pt_manifest()["files"].items())
    if (!entry.contains("format")) names.push_back(name);  // "format" marks the legacy file
  return names;
}

std::vector<std::string> all_golden_files() {
  std::vector<std::string> names;
  for (const auto& [name, entry] : pt_manifest()["files"].items()) names.push_back(name);
  return names;
}

TEST(PtGolden, ManifestListsTheZipFilesAndOneLegacyFile) {
  EXPECT_EQ(zip_golden_files().size(), 26u);
  EXPECT_EQ(all_golden_files().size(), 27u);
}

TEST(PtGolden, EveryFileLoadsToTheManifestObject) {
  for (const std::string& name : all_golden_files()) {
    SCOPED_TRACE(name);
    const auto& want = pt_manifest()["files"][name];
    pt::Archive a = pt::load_archive(golden_pt(name));
    int n_storages = 0;
    nlohmann::json got = describe_manifest_style(a, &n_storages);
    EXPECT_EQ(got, want["object"]) << json_diff(got, want["object"]);
    if (want.contains("format")) {  // legacy_nonzip_float32.pt
      EXPECT_EQ(a.format, pt::Format::Legacy);
      EXPECT_EQ(n_storages, 1);
      continue;
    }
    EXPECT_EQ(a.format, pt::Format::Zip);
    EXPECT_EQ(n_storages, want["num_distinct_storages"].get<int>());
    EXPECT_EQ(a.archive_name, want["zip"]["archive_prefix"].get<std::string>());
  }
}

TEST(PtGolden, ZipLayoutMatchesTheManifest) {
  for (const std::string& name : zip_golden_files()) {
    SCOPED_TRACE(name);
    const auto& want = pt_manifest()["files"][name]["zip"]["entries"];
    pt::ZipReader zip(pt::ByteSource::from_file(golden_pt(name)));
    ASSERT_EQ(zip.entries().size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const pt::ZipEntry& e = zip.entries()[i];
      EXPECT_EQ(e.name, want[i]["name"].get<std::string>());
      EXPECT_EQ(e.method, want[i]["compress_type"].get<int>());
      EXPECT_EQ(e.uncompressed_size, want[i]["file_size"].get<uint64_t>());
      EXPECT_EQ(e.data_offset, want[i]["data_offset"].get<uint64_t>());
      char crc[9];
      std::snprintf(crc, sizeof crc, "%08x", e.crc32);
      EXPECT_EQ(crc, want[i]["crc32"].get<std::string>());
      EXPECT_NO_THROW(zip.read(e, true));  // CRC verified
    }
  }
}

TEST(PtGolden, ViewsOfOneStorageShareOneStoragePointer) {
  Value v = pt::load(golden_pt("views_sharing_storage.pt"));
  ASSERT_TRUE(v.is_list());
  ASSERT_EQ(v.size(), 4u);
  const auto& s0 = v[0].to_tensor().storage();
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(v[i].to_tensor().storage(), s0) << "view " << i;
  EXPECT_EQ(v[3].to_tensor().dim(), 0);
  EXPECT_EQ(v[3].to_tensor().storage_offset(), 15);
  EXPECT_EQ(v[3].to_tensor().item<float>(), 15.0f);
  // the transposed view reads the same bytes
  EXPECT_EQ(v[2].to_tensor().at<float>({5, 3}), 23.0f);
}

TEST(PtGolden, StateDictKeepsItsMetadata) {
  pt::Archive a = pt::load_archive(golden_pt("state_dict.pt"));
  ASSERT_TRUE(a.value.is_dict());
  EXPECT_EQ(a.value.type_name(), "collections.OrderedDict");
  EXPECT_EQ(a.value.size(), 7u);  // the metadata is not an entry
  Value md = a.metadata_of(a.value);
  ASSERT_TRUE(md.is_dict());
  EXPECT_EQ(md.type_name(), "collections.OrderedDict");
  EXPECT_EQ(md.at("1").at("version").to_int(), 2);
  EXPECT_EQ(md.at("").at("version").to_int(), 1);
  const loader::Tensor& nbt = pt::tensor_of(a.value.at("1.num_batches_tracked"));
  EXPECT_EQ(nbt.dtype(), loader::DType::Int64);
  EXPECT_EQ(nbt.dim(), 0);
  EXPECT_EQ(nbt.item<int64_t>(), 7);
  EXPECT_TRUE(a.metadata_of(a.value.at("0.weight")).is_none());
}

TEST(PtGolden, ParameterAndRequiresGradAreWrappedTensors) {
  Value p = pt::load(golden_pt("parameter.pt"));
  EXPECT_TRUE(pt::is_parameter(p));
  EXPECT_TRUE(pt::requires_grad_of(p));
  EXPECT_EQ(pt::tensor_of(p).at<float>({1, 0}), 3.0f);
  Value r = pt::load(golden_pt("requires_grad_tensor.pt"));
  EXPECT_FALSE(pt::is_parameter(r));
  EXPECT_TRUE(pt::is_tensor_like(r));
  EXPECT_TRUE(pt::requires_grad_of(r));
  Value plain = pt::load(golden_pt("t_float64.pt"));
  EXPECT_TRUE(plain.is_tensor());
  EXPECT_FALSE(pt::requires_grad_of(plain));
}

TEST(PtGolden, NestedHasIntKeysAndBytes) {
  Value v = pt::load(golden_pt("nested.pt"));
  const Value& b = v.at("b");
  bool found_int_key = false;
  for (const auto& [k, val] : b.dict_items())
    if (k.is_int() && k.to_int() == 3) {
      found_int_key = true;
      EXPECT_EQ(val.to_string(), "int key");
    }
  EXPECT_TRUE(found_int_key);
  EXPECT_TRUE(b.at("h").is_bytes());
  EXPECT_EQ(b.at("h").to_string(), std::string("\x00\x01", 2));
}

TEST(PtGolden, LegacyFileStartsWithTheRecordedBytes) {
  const auto& want = pt_manifest()["files"]["legacy_nonzip_float32.pt"];
  const std::string bytes = read_file(golden_pt("legacy_nonzip_float32.pt"));
  EXPECT_EQ(bytes.size(), want["file_size"].get<size_t>());
  char hex[33];
  for (size_t i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(bytes[i]));
  EXPECT_EQ(std::string(hex), want["first_bytes_hex"].get<std::string>());  // the magic number's pickle
}

TEST(PtGolden, SavingReproducesTorchSaveByteForByte) {
  for (const std::string& name : zip_golden_files()) {
    SCOPED_TRACE(name);
    pt::Archive a = pt::load_archive(golden_pt(name));
    pt::SaveOptions o;
    o.write_byteorder = false;  // torch 1.13 writes none
    o.archive_name = a.archive_name;
    o.states = a.states;
    std::string bytes = pt::save_bytes(a.value, o);
    EXPECT_EQ(pt::sha256_hex(bytes.data(), bytes.size()), pt_manifest()["files"][name]["sha256"].get<std::string>());
    EXPECT_TRUE(bytes == read_file(golden_pt(name)));
  }
}

TEST(PtGolden, SavedFilesHaveByteorderAlignedRecordsAndCrcs) {
  TempDir dir;
  for (const std::string& name : all_golden_files()) {  // a legacy input is written as a zip file too
    SCOPED_TRACE(name);
    pt::Archive a = pt::load_archive(golden_pt(name));
    const std::string out = dir.file(name);
    pt::save(a, out);
    pt::ZipReader zip(pt::ByteSource::from_file(out));
    const std::string stem = name.substr(0, name.size() - 3);  // torch 1.x: the file stem
    EXPECT_EQ(pt::load_archive(out).format, pt::Format::Zip);
    const pt::ZipEntry* bo = zip.find(stem + "/byteorder");
    ASSERT_NE(bo, nullptr);
    EXPECT_EQ(zip.read(*bo), "little");
    EXPECT_EQ(zip.read(*zip.find(stem + "/version")), "3\n");
    for (const auto& e : zip.entries()) {
      EXPECT_EQ(e.method, 0) << e.name;
      EXPECT_EQ(e.data_offset % 64, 0u) << e.name;
      EXPECT_NO_THROW(zip.read(e, true)) << e.name;
    }
    pt::Archive back = pt::load_archive(out);
    EXPECT_EQ(describe_manifest_style(back), pt_manifest()["files"][name]["object"]);
  }
}

TEST(PtGolden, MmapLoadWrapsTheFilePagesAndGivesTheSameValues) {
  for (const std::string& name : zip_golden_files()) {  // legacy files: pt_legacy_test.cpp
    SCOPED_TRACE(name);
    pt::LoadOptions o;
    o.mmap = true;
    pt::Archive a = pt::load_archive(golden_pt(name), o);
    EXPECT_EQ(describe_manifest_style(a), pt_manifest()["files"][name]["object"]);
    a.value.for_each_tensor([&](const loader::Tensor& t) {
      EXPECT_EQ(t.storage()->kind(), loader::MemoryKind::FileMapping);
    });
  }
  // copy-on-write: writing into a mapped tensor does not change the file
  pt::LoadOptions o;
  o.mmap = true;
  Value v = pt::load(golden_pt("t_float64.pt"), o);
  const std::string before = read_file(golden_pt("t_float64.pt"));
  v.to_tensor().data<double>()[0] = 42.0;
  EXPECT_EQ(read_file(golden_pt("t_float64.pt")), before);
  EXPECT_EQ(pt::load(golden_pt("t_float64.pt")).to_tensor().data<double>()[0], 0.1);
}

TEST(PtGolden, CopyLoadOwnsHeapStorages) {
  Value v = pt::load(golden_pt("t_large_f32_1000.pt"));
  EXPECT_EQ(v.to_tensor().storage()->kind(), loader::MemoryKind::Heap);
  EXPECT_EQ(v.to_tensor().numel(), 1000);
  EXPECT_EQ(v.to_tensor().at<float>({999}), 499.5f);
}

}  // namespace
