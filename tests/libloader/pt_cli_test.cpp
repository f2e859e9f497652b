// `loader pt dump` and `loader pt copy` (the tool built beside the tests).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <vector>

#include "loader/serialization/pt.h"
#include "pt_test_util.h"
#include "sanitizers.h"

namespace {

namespace pt = loader::pt;
using namespace loader::testing;

const std::string kTool = std::string(LOADER_BINARY_DIR) + "/loader";

#define REQUIRE_TOOL() \
  if (!std::filesystem::exists(kTool)) GTEST_SKIP() << "the loader tool is not built at " << kTool

// The manifest spells non-finite floats as Python's repr; the tool as "NaN"/"Infinity".
nlohmann::json to_tool_style(const nlohmann::json& j) {
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "nan") return "NaN";
    if (s == "inf") return "Infinity";
    if (s == "-inf") return "-Infinity";
    return j;
  }
  if (j.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& x : j) out.push_back(to_tool_style(x));
    return out;
  }
  if (j.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [k, v] : j.items())
      out[k] = (k == "values" || k == "value") ? to_tool_style(v) : v;
    // recurse into containers
    if (out.contains("items")) out["items"] = to_tool_style(j["items"]);
    for (const auto& [k, v] : j.items())
      if (k.rfind("attr_", 0) == 0) out[k] = to_tool_style(v);
    return out;
  }
  return j;
}

TEST(PtCli, DumpMatchesTheManifestForEveryGoldenFile) {
  REQUIRE_TOOL();
  int n = 0;
  for (const auto& [name, want] : pt_manifest()["files"].items()) {
    if (want.contains("format")) continue;  // legacy: below
    SCOPED_TRACE(name);
    auto r = run_command(shell_quote(kTool) + " pt dump --all-values " + shell_quote(golden_pt(name)));
    ASSERT_EQ(r.status, 0) << r.output;
    const nlohmann::json got = nlohmann::json::parse(r.output);
    const nlohmann::json w = to_tool_style(want["object"]);
    EXPECT_EQ(got["object"], w) << json_diff(got["object"], w);
    EXPECT_EQ(got["num_distinct_storages"], want["num_distinct_storages"]);
    EXPECT_EQ(got["zip"]["archive_prefix"], want["zip"]["archive_prefix"]);
    ASSERT_EQ(got["zip"]["entries"].size(), want["zip"]["entries"].size());
    for (size_t i = 0; i < want["zip"]["entries"].size(); ++i)
      for (const char* k : {"name", "compress_type", "file_size", "data_offset", "crc32"})
        EXPECT_EQ(got["zip"]["entries"][i][k], want["zip"]["entries"][i][k]) << k;
    ++n;
  }
  EXPECT_EQ(n, 26);
}

// The tensors of a manifest object, in order, with their keys as list_tensors writes
// them (dict keys and list indices joined by '.'); containers met again (refs) skipped.
void manifest_tensors(const nlohmann::json& o, const std::string& key, std::vector<std::pair<std::string, nlohmann::json>>& out) {
  const std::string kind = o.value("kind", "");
  if (kind == "tensor" || kind == "parameter") {
    out.emplace_back(key, o);
  } else if (o.contains("items")) {
    const bool dict = kind == "dict" || kind == "OrderedDict";
    for (size_t i = 0; i < o["items"].size(); ++i) {
      const auto& item = o["items"][i];
      std::string seg = std::to_string(i);
      if (dict) {
        const auto& k = item[0];
        seg = k["kind"] == "str" ? k["value"].get<std::string>() : std::to_string(k["value"].get<int64_t>());
      }
      manifest_tensors(dict ? item[1] : item, key.empty() ? seg : key + "." + seg, out);
    }
  }
}

int64_t element_size_of(const std::string& dtype) {
  static const std::map<std::string, int64_t> sizes = {
      {"float32", 4}, {"float64", 8}, {"float16", 2}, {"bfloat16", 2}, {"int64", 8},    {"int32", 4},
      {"int16", 2},   {"int8", 1},    {"uint8", 1},   {"bool", 1},     {"complex64", 8}};
  return sizes.at(dtype);
}

TEST(PtCli, DumpSummarizesTensorsWithoutValues) {
  REQUIRE_TOOL();
  int n = 0;
  for (const auto& [name, want] : pt_manifest()["files"].items()) {
    SCOPED_TRACE(name);
    auto r = run_command(shell_quote(kTool) + " pt dump " + shell_quote(golden_pt(name)));
    ASSERT_EQ(r.status, 0) << r.output;
    const nlohmann::json got = nlohmann::json::parse(r.output);
    EXPECT_FALSE(got.contains("object"));
    EXPECT_EQ(r.output.find("sha256"), std::string::npos);
    EXPECT_EQ(got["format"], want.contains("format") ? "legacy" : "zip");
    EXPECT_EQ(got.contains("zip"), !want.contains("format"));
    std::vector<std::pair<std::string, nlohmann::json>> tensors;
    manifest_tensors(want["object"], "", tensors);
    ASSERT_EQ(got["num_tensors"], tensors.size());
    ASSERT_EQ(got["tensors"].size(), tensors.size());
    std::map<int64_t, int64_t> storage_bytes;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& [key, t] = tensors[i];
      const auto& g = got["tensors"][i];
      EXPECT_EQ(g["key"], key);
      EXPECT_EQ(g["dtype"], t["dtype"]);
      EXPECT_EQ(g["shape"], t["shape"]);
      EXPECT_EQ(g["storage_id"], t["storage_id"]);
      int64_t numel = 1;
      for (const auto& d : t["shape"]) numel *= d.get<int64_t>();
      EXPECT_EQ(g["bytes"].get<int64_t>(), numel * element_size_of(t["dtype"]));
      storage_bytes[t["storage_id"].get<int64_t>()] = t["storage_numel"].get<int64_t>() * element_size_of(t["dtype"]);
    }
    EXPECT_EQ(got["num_distinct_storages"], storage_bytes.size());
    int64_t total = 0;
    for (const auto& kv : storage_bytes) total += kv.second;
    EXPECT_EQ(got["total_storage_bytes"].get<int64_t>(), total);
    ++n;
  }
  EXPECT_EQ(n, 27);
  // keys of a state_dict
  auto r = run_command(shell_quote(kTool) + " pt dump " + shell_quote(golden_pt("state_dict.pt")));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["tensors"][0]["key"], "0.weight");
}

TEST(PtCli, MaxValuesLeavesOutTheValuesOfLargerTensors) {
  REQUIRE_TOOL();
  for (const char* name : {"dict_of_tensors.pt", "t_large_f32_1000.pt", "nested.pt"}) {
    SCOPED_TRACE(name);
    auto r = run_command(shell_quote(kTool) + " pt dump --max-values 3 " + shell_quote(golden_pt(name)));
    ASSERT_EQ(r.status, 0) << r.output;
    std::vector<std::pair<std::string, nlohmann::json>> got, want;
    manifest_tensors(nlohmann::json::parse(r.output)["object"], "", got);
    manifest_tensors(to_tool_style(pt_manifest()["files"][name]["object"]), "", want);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      nlohmann::json w = want[i].second;
      int64_t numel = 1;
      for (const auto& d : w["shape"]) numel *= d.get<int64_t>();
      if (numel > 3) {  // no values, but how many there are
        w.erase("values");
        w.erase("values_bits_hex");
        w["values_omitted"] = true;
        w["numel"] = numel;
      }
      EXPECT_EQ(got[i].second, w) << json_diff(got[i].second, w);
    }
  }
  // bad values
  for (const char* bad : {"--max-values -1", "--max-values x", "--max-values 3 --all-values", "--max-values"}) {
    auto r = run_command(shell_quote(kTool) + " pt dump " + bad + " " + shell_quote(golden_pt("t_float32.pt")) + " 2>&1");
    EXPECT_EQ(r.status, 2) << bad << "\n" << r.output;
  }
}

// A .pt file whose pickle nests `levels` lists, each holding the one below twice through
// the memo ("billion laughs": 2^levels tensors when expanded); a tensor at the bottom.
std::string billion_laughs_pt(int levels) {
  pt::Pickler p;
  p.proto();
  tensor_opcodes(p, 4, 0, {4}, {1});
  uint32_t below = p.memoize();
  for (int i = 0; i < levels; ++i) {
    p.op('0');  // POP: the one below stays in the memo
    p.empty_list();
    p.mark();
    p.get(below);
    p.get(below);
    p.op(pt::op::APPENDS);
    below = p.memoize();
  }
  p.stop();
  return archive_with(p.take(), {{"0", std::string(16, '\0')}});
}

CommandResult timed_dump(const std::string& args, double* seconds) {
  auto t0 = std::chrono::steady_clock::now();
  CommandResult r = run_command(shell_quote(kTool) + " pt dump " + args + " 2>&1");
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

TEST(PtCli, DumpPrintsSharedContainersOnce) {
  REQUIRE_TOOL();
  TempDir dir;
  const std::string file = dir.file("laughs.pt");
  write_file(file, billion_laughs_pt(30));
  double s = 0;
  auto r = timed_dump(shell_quote(file), &s);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_LT(s, 5.0 * loader::testing::kSlowdown);
  EXPECT_LT(r.output.size(), 4000u);
  nlohmann::json j = nlohmann::json::parse(r.output);
  // the shared lists are walked once: the tensor at the two places of the bottom list
  EXPECT_EQ(j["num_tensors"], 2);
  EXPECT_EQ(j["num_distinct_storages"], 1);
  std::string key;
  for (int i = 0; i < 29; ++i) key += "0.";
  EXPECT_EQ(j["tensors"][0]["key"], key + "0");
  EXPECT_EQ(j["tensors"][1]["key"], key + "1");
  EXPECT_EQ(j["tensors"][1]["storage_id"], 0);
  EXPECT_EQ(j["total_storage_bytes"], 16);

  for (const char* mode : {"--max-values 10", "--all-values"}) {
    SCOPED_TRACE(mode);
    r = timed_dump(std::string(mode) + " " + shell_quote(file), &s);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_LT(s, 5.0 * loader::testing::kSlowdown);
    EXPECT_LT(r.output.size(), 8000u);
    j = nlohmann::json::parse(r.output);
    // the top list has an id; its two items are the list below: the first described
    // (with an id), the second a ref to it; down to the tensor, described once
    const nlohmann::json* o = &j["object"];
    for (int level = 30; level > 0; --level) {
      ASSERT_EQ(o->at("kind"), "list");
      const int id = 30 - level;
      if (level == 30) EXPECT_FALSE(o->contains("id"));  // met once
      else EXPECT_EQ(o->at("id"), id - 1) << level;
      const auto& items = o->at("items");
      ASSERT_EQ(items.size(), 2u);
      if (level > 1) EXPECT_EQ(items[1], (nlohmann::json{{"kind", "ref"}, {"ref", id}}));
      else EXPECT_EQ(items[1], items[0]);  // a plain tensor has no identity: described again
      o = &items[0];
    }
    EXPECT_EQ(o->at("kind"), "tensor");
    EXPECT_EQ(o->at("values"), (nlohmann::json{0.0, 0.0, 0.0, 0.0}));
  }
}

TEST(PtCli, DumpHandlesATensorWithManyDimensions) {
  REQUIRE_TOOL();
  TempDir dir;
  const std::string file = dir.file("dims.pt");
  const std::vector<int64_t> ones(100000, 1);
  write_file(file, archive_with(tensor_pickle(1, 0, ones, ones), {{"0", std::string("\x00\x00\x80\x3f", 4)}}));
  double s = 0;
  auto r = timed_dump(shell_quote(file), &s);
  ASSERT_EQ(r.status, 0) << r.output.substr(0, 1000);
  EXPECT_LT(s, 5.0 * loader::testing::kSlowdown);
  nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["tensors"][0]["shape"].size(), 100000u);
  EXPECT_EQ(j["tensors"][0]["bytes"], 4);
  r = timed_dump("--max-values 10 " + shell_quote(file), &s);
  ASSERT_EQ(r.status, 0) << r.output.substr(0, 1000);
  EXPECT_LT(s, 5.0 * loader::testing::kSlowdown);
  j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["object"]["values_layout"], "flat");
  EXPECT_EQ(j["object"]["values"], nlohmann::json::array({1.0}));
  EXPECT_EQ(j["object"]["values_bits_hex"], nlohmann::json::array({"3f800000"}));
  // 64 dimensions are still nested, 65 flat
  for (size_t n : {size_t{64}, size_t{65}}) {
    const std::vector<int64_t> d(n, 1);
    write_file(file, archive_with(tensor_pickle(1, 0, d, d), {{"0", std::string("\x00\x00\x80\x3f", 4)}}));
    r = timed_dump("--all-values " + shell_quote(file), &s);
    ASSERT_EQ(r.status, 0) << r.output.substr(0, 1000);
    j = nlohmann::json::parse(r.output)["object"];
    nlohmann::json want = 1.0;
    if (n == 64)
      for (size_t i = 0; i < n; ++i) want = nlohmann::json::array({want});
    else
      want = nlohmann::json::array({1.0});
    EXPECT_EQ(j["values"], want) << n;
    EXPECT_EQ(j.contains("values_layout"), n == 65);
  }
}

TEST(PtCli, DumpHandlesNestingAtTheLoadersLimit) {
  REQUIRE_TOOL();
  TempDir dir;
  const int depth = pt::LoadOptions().max_depth;
  // lists and dicts nested as deep as pt::load accepts, a tensor inside
  for (bool dicts : {false, true}) {
    SCOPED_TRACE(dicts ? "dicts" : "lists");
    pt::Pickler p;
    p.proto();
    for (int i = 0; i < depth; ++i) {
      if (dicts) {
        p.empty_dict();
        p.string("k");
      } else {
        p.empty_list();
      }
    }
    tensor_opcodes(p, 1, 0, {}, {});
    for (int i = 0; i < depth; ++i) p.op(dicts ? pt::op::SETITEM : pt::op::APPEND);
    p.stop();
    const std::string file = dir.file("deep.pt");
    write_file(file, archive_with(p.take(), {{"0", std::string(4, '\0')}}));
    ASSERT_NO_THROW(pt::load(file));
    double s = 0;
    for (const char* mode : {"", "--max-values 10", "--all-values --indent 1"}) {
      SCOPED_TRACE(mode);
      auto r = timed_dump(std::string(mode) + " " + shell_quote(file), &s);
      ASSERT_EQ(r.status, 0) << r.output.substr(0, 1000);
      nlohmann::json j = nlohmann::json::parse(r.output);
      if (*mode == '\0') {
        EXPECT_EQ(j["num_tensors"], 1);
        EXPECT_EQ(j["tensors"][0]["key"].get<std::string>().size(), dicts ? 2u * depth - 1 : 2u * depth - 1);
      }
    }
  }
}

TEST(PtCli, DumpReadsLegacyFiles) {
  REQUIRE_TOOL();
  int n = 0;
  for (const std::string& name : loadable_legacy_files()) {
    SCOPED_TRACE(name);
    const auto& want = legacy_manifest()["files"][name];
    auto r = run_command(shell_quote(kTool) + " pt dump --all-values " + shell_quote(golden_legacy(name)));
    ASSERT_EQ(r.status, 0) << r.output;
    const nlohmann::json got = nlohmann::json::parse(r.output);
    const nlohmann::json w = to_tool_style(want["object"]);
    EXPECT_EQ(got["object"], w) << json_diff(got["object"], w);
    EXPECT_EQ(got["num_distinct_storages"], want["num_distinct_storages"]);
    EXPECT_EQ(got["format"], "legacy");
    EXPECT_FALSE(got.contains("zip"));
    EXPECT_EQ(got["legacy"]["sys_info"], want["legacy"]["sys_info"]);
    ASSERT_EQ(got["legacy"]["records"].size(), want["legacy"]["records"].size());
    for (size_t i = 0; i < want["legacy"]["records"].size(); ++i)
      for (const char* k : {"key", "dtype", "numel", "data_offset"})
        EXPECT_EQ(got["legacy"]["records"][i][k], want["legacy"]["records"][i][k]) << k;
    ++n;
  }
  EXPECT_EQ(n, 31);
  // the legacy file of the zip golden set too
  auto r = run_command(shell_quote(kTool) + " pt dump --all-values " + shell_quote(golden_pt("legacy_nonzip_float32.pt")));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["object"], to_tool_style(pt_manifest()["files"]["legacy_nonzip_float32.pt"]["object"]));
}

TEST(PtCli, CopyWritesZipUnlessAskedForTheLegacyFormat) {
  REQUIRE_TOOL();
  TempDir dir;
  const std::string zip = dir.file("zip.pt"), legacy = dir.file("legacy.pt"), again = dir.file("again.pt");
  const nlohmann::json want = legacy_manifest()["files"]["state_dict.pt"]["object"];
  // a legacy input becomes a zip file
  auto r = run_command(shell_quote(kTool) + " pt copy " + shell_quote(golden_legacy("state_dict.pt")) + " " + shell_quote(zip) + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_file(zip).substr(0, 4), "PK\x03\x04");
  EXPECT_EQ(describe_manifest_style(pt::load_archive(zip)), want);
  // --legacy-format writes the legacy one, from either format
  r = run_command(shell_quote(kTool) + " pt copy --legacy-format " + shell_quote(zip) + " " + shell_quote(legacy) + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_file(legacy).substr(0, 4), std::string("\x80\x02\x8a\x0a", 4));
  pt::Archive a = pt::load_archive(legacy);
  EXPECT_EQ(a.format, pt::Format::Legacy);
  EXPECT_EQ(describe_manifest_style(a), want);
  r = run_command(shell_quote(kTool) + " pt copy " + shell_quote(golden_legacy("storage_views.pt")) + " " + shell_quote(again) +
                  " --legacy-format 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(describe_manifest_style(pt::load_archive(again)), legacy_manifest()["files"]["storage_views.pt"]["object"]);
}

TEST(PtCli, DumpWritesNonFiniteFloatsAsJsonStrings) {
  REQUIRE_TOOL();
  auto r = run_command(shell_quote(kTool) + " pt dump --all-values " + shell_quote(golden_pt("t_float32.pt")));
  ASSERT_EQ(r.status, 0);
  EXPECT_NE(r.output.find("\"Infinity\",\"-Infinity\",\"NaN\""), std::string::npos) << r.output;
}

TEST(PtCli, CopyRoundTripsAStateDict) {
  REQUIRE_TOOL();
  TempDir dir;
  const std::string out = dir.file("copy.pt");
  auto r = run_command(shell_quote(kTool) + " pt copy " + shell_quote(golden_pt("state_dict.pt")) + " " + shell_quote(out) + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  pt::Archive a = pt::load_archive(out);
  EXPECT_EQ(describe_manifest_style(a), pt_manifest()["files"]["state_dict.pt"]["object"]);
  // without the byteorder record and with torch 1.13's archive name: the same bytes
  r = run_command(shell_quote(kTool) + " pt copy --no-byteorder --archive-name state_dict " +
                  shell_quote(golden_pt("state_dict.pt")) + " " + shell_quote(out) + " 2>&1");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(read_file(out) == read_file(golden_pt("state_dict.pt")));
}

TEST(PtCli, BadFilesExitOneAndBadArgumentsExitTwo) {
  REQUIRE_TOOL();
  TempDir dir;
  auto r = run_command(shell_quote(kTool) + " pt dump " + shell_quote(golden_legacy("tar_format_float32.pt")) + " 2>&1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("tar-format"), std::string::npos) << r.output;
  r = run_command(shell_quote(kTool) + " pt dump " + shell_quote(golden_legacy("module_tiny.pt")) + " 2>&1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("torch.nn.Module"), std::string::npos) << r.output;
  write_file(dir.file("junk.pt"), "not a zip");
  r = run_command(shell_quote(kTool) + " pt dump " + shell_quote(dir.file("junk.pt")) + " 2>&1");
  EXPECT_EQ(r.status, 1) << r.output;
  r = run_command(shell_quote(kTool) + " pt dump " + shell_quote(dir.file("missing.pt")) + " 2>&1");
  EXPECT_EQ(r.status, 1) << r.output;
  r = run_command(shell_quote(kTool) + " pt dump 2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  r = run_command(shell_quote(kTool) + " pt copy onlyone.pt 2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
  r = run_command(shell_quote(kTool) + " pt dump --bogus 1 x.pt 2>&1");
  EXPECT_EQ(r.status, 2) << r.output;
}

}  // namespace
