// SHA-256 and the load_state_dict_from_url-style checkpoint cache.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "loader/serialization/checkpoint_cache.h"
#include "loader/serialization/sha256.h"
#include "pt_test_util.h"

namespace {

using loader::Value;
namespace pt = loader::pt;
using namespace loader::testing;

TEST(PtSha256, MatchesKnownDigests) {
  EXPECT_EQ(pt::sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(pt::sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(pt::sha256_hex(two_blocks.data(), two_blocks.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  pt::Sha256 h;  // one million 'a', fed in uneven pieces
  const std::string chunk(997, 'a');
  size_t left = 1000000;
  while (left) {
    size_t n = std::min(left, chunk.size());
    h.update(chunk.data(), n);
    left -= n;
  }
  EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(PtSha256, MatchesTheManifestForEveryGoldenFile) {
  int n = 0;
  for (const auto& [name, entry] : pt_manifest()["files"].items()) {
    if (!entry.contains("sha256")) continue;  // the legacy file embeds an address: no digest recorded
    EXPECT_EQ(pt::sha256_file_hex(golden_pt(name)), entry["sha256"].get<std::string>()) << name;
    ++n;
  }
  EXPECT_EQ(n, 26);
}

TEST(PtCheckpoint, HashPrefixFollowsTorchHubsRegex) {
  EXPECT_EQ(pt::hash_prefix_of("resnet18-f37072fd.pth"), "f37072fd");
  EXPECT_EQ(pt::hash_prefix_of("model-v2-abc123.pt"), "abc123");  // "-v2-" is not hex: skipped
  EXPECT_EQ(pt::hash_prefix_of("model.pt"), "");
  EXPECT_EQ(pt::hash_prefix_of("a-DEAD.pt"), "");  // upper case is not matched
}

TEST(PtCheckpoint, UrlsMapToLocalPathsAndNetworkSchemesAreRefused) {
  EXPECT_EQ(pt::local_path_of_url("file:///data/m.pt"), "/data/m.pt");
  EXPECT_EQ(pt::local_path_of_url("file://localhost/data/m.pt"), "/data/m.pt");
  EXPECT_EQ(pt::local_path_of_url("file:///data/my%20model.pt?x=1#frag"), "/data/my model.pt");
  EXPECT_EQ(pt::local_path_of_url("rel/path.pt"), "rel/path.pt");
  for (const char* url : {"https://download.pytorch.org/models/resnet18-f37072fd.pth", "ftp://h/x.pt", "s3://b/k.pt"}) {
    try {
      pt::local_path_of_url(url);
      ADD_FAILURE() << url;
    } catch (const loader::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("no network access"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(pt::local_path_of_url("file://otherhost/x.pt"), loader::ValueError);
}

TEST(PtCheckpoint, CopiesIntoTheCacheOnceAndChecksTheHash) {
  TempDir dir;
  const std::string src_dir = dir.file("src");
  std::filesystem::create_directories(src_dir);
  const std::string golden = read_file(golden_pt("state_dict.pt"));
  const std::string digest = pt::sha256_hex(golden.data(), golden.size());
  const std::string good = src_dir + "/net-" + digest.substr(0, 10) + ".pt";
  const std::string bad = src_dir + "/net-0123456789.pt";
  write_file(good, golden);
  write_file(bad, golden);

  pt::CheckpointOptions o;
  o.model_dir = dir.file("cache");
  o.check_hash = true;
  Value sd = pt::load_state_dict_from_url("file://" + good, o);
  EXPECT_EQ(sd.size(), 7u);
  const std::string cached = o.model_dir + "/" + std::filesystem::path(good).filename().string();
  EXPECT_EQ(read_file(cached), golden);
  pt::Archive a = pt::load_archive_from_url("file://" + good, o);
  EXPECT_TRUE(a.metadata_of(a.value).is_dict());

  // once cached, the cache is used (the source may change or vanish)
  std::filesystem::remove(good);
  EXPECT_EQ(pt::load_state_dict_from_url(good, o).size(), 7u);

  try {
    pt::load_state_dict_from_url(bad, o);
    FAIL() << "hash mismatch accepted";
  } catch (const loader::RuntimeError& e) {
    EXPECT_EQ(std::string(e.what()), "invalid hash value (expected \"0123456789\", got \"" + digest + "\")");
  }
  for (const auto& ent : std::filesystem::directory_iterator(o.model_dir))  // nothing partial left behind
    EXPECT_EQ(ent.path().filename().string().find("net-0123456789"), std::string::npos) << ent.path();
  o.check_hash = false;
  EXPECT_EQ(pt::load_state_dict_from_url(bad, o).size(), 7u);
}

TEST(PtCheckpoint, DefaultDirectoryFollowsLoaderHome) {
  const char* old = std::getenv("LOADER_HOME");
  const std::string saved = old ? old : "";
  ::setenv("LOADER_HOME", "/tmp/lh", 1);
  EXPECT_EQ(pt::checkpoint_dir(), "/tmp/lh/checkpoints");
  ::unsetenv("LOADER_HOME");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (!xdg) {
    EXPECT_NE(pt::checkpoint_dir().find("/.cache/loader/checkpoints"), std::string::npos);
  }
  if (old) ::setenv("LOADER_HOME", saved.c_str(), 1);
}

}  // namespace
