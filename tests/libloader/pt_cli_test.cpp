// `loader pt dump` and `loader pt copy` (the tool built beside the tests).
#include <gtest/gtest.h>

#include <filesystem>

#include "loader/serialization/pt.h"
#include "pt_test_util.h"

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
    auto r = run_command(shell_quote(kTool) + " pt dump " + shell_quote(golden_pt(name)));
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

TEST(PtCli, DumpReadsLegacyFiles) {
  REQUIRE_TOOL();
  int n = 0;
  for (const std::string& name : loadable_legacy_files()) {
    SCOPED_TRACE(name);
    const auto& want = legacy_manifest()["files"][name];
    auto r = run_command(shell_quote(kTool) + " pt dump " + shell_quote(golden_legacy(name)));
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
  auto r = run_command(shell_quote(kTool) + " pt dump " + shell_quote(golden_pt("legacy_nonzip_float32.pt")));
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
  auto r = run_command(shell_quote(kTool) + " pt dump " + shell_quote(golden_pt("t_float32.pt")));
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
