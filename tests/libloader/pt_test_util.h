// Helpers for the pt_*_test.cpp suites: temporary directories, running commands,
// finding PyTorch, the golden manifest, and describing values as the manifest does.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../../tools/pt_json.h"
#include "loader/serialization/pickle.h"
#include "loader/serialization/pt.h"
#include "loader/serialization/zip.h"
#include "test_util.h"

namespace loader::testing {

/// A fresh directory under $TMPDIR, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "loader_pt_test_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct CommandResult {
  int status = -1;  ///< exit status, or -1 when it did not exit normally
  std::string output;  ///< stdout (stderr too when merged by the command line)
};

/// Runs `cmd` with /bin/sh and captures its stdout.
inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}

/// The Python that has torch (LOADER_PYTHON, else /usr/bin/python3); "" when none.
inline const std::string& torch_python() {
  static const std::string py = [] {
    const char* env = std::getenv("LOADER_PYTHON");
    std::string cand = env && *env ? env : "/usr/bin/python3";
    auto r = run_command(shell_quote(cand) + " -c 'import torch' 2>/dev/null");
    return r.status == 0 ? cand : std::string();
  }();
  return py;
}

/// A Python 3 (without torch requirements) for zipfile checks; "" when none.
inline const std::string& plain_python() {
  static const std::string py = [] {
    for (const char* c : {"/usr/bin/python3", "python3"}) {
      if (run_command(std::string(c) + " -c 'import zipfile' 2>/dev/null").status == 0) return std::string(c);
    }
    return std::string();
  }();
  return py;
}

inline const nlohmann::json& pt_manifest() {
  static const nlohmann::json m = nlohmann::json::parse(read_file(golden_path("pt_manifest.json")));
  return m;
}

inline std::string golden_pt(const std::string& name) { return golden_path("pt/" + name); }

/// golden/pt_legacy/manifest.json: the legacy-format files (tests/golden/make_legacy.py).
inline const nlohmann::json& legacy_manifest() {
  static const nlohmann::json m = nlohmann::json::parse(read_file(golden_path("pt_legacy/manifest.json")));
  return m;
}

inline std::string golden_legacy(const std::string& name) { return golden_path("pt_legacy/" + name); }

/// The legacy golden files loader reads (the manifest marks the others "refused").
inline std::vector<std::string> loadable_legacy_files() {
  std::vector<std::string> names;
  for (const auto& [name, entry] : legacy_manifest()["files"].items())
    if (!entry.contains("refused")) names.push_back(name);
  return names;
}

/// Our description of a loaded archive in the manifest's style (Python reprs of NaN/inf).
inline nlohmann::json describe_manifest_style(const pt::Archive& a, int* num_storages = nullptr) {
  tool::JsonStyle style;
  style.python_repr = true;
  return tool::describe_value(a.value, &a, style, num_storages);
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// A short description of the first difference between two JSON documents.
inline std::string json_diff(const nlohmann::json& got, const nlohmann::json& want) {
  nlohmann::json patch = nlohmann::json::diff(want, got);
  std::string s = patch.dump();
  return s.size() > 1500 ? s.substr(0, 1500) + "..." : s;
}

// An archive "archive/..." holding `pickle` as data.pkl and the given storage records.
inline std::string archive_with(const std::string& pickle, const std::vector<std::pair<std::string, std::string>>& storages = {}) {
  std::string out;
  pt::ZipWriter w([&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); });
  w.write_record("archive/data.pkl", pickle.data(), pickle.size());
  for (const auto& [key, bytes] : storages) w.write_record("archive/data/" + key, bytes.data(), bytes.size());
  w.write_record("archive/version", "3\n", 2);
  w.finish();
  return out;
}

// The end of a _rebuild_tensor_v2 call, after its persistent id's tuple (zip or legacy):
// BINPERSID, storage offset, size and stride tuples, requires_grad=False, an empty
// OrderedDict of backward hooks, then the call itself.
inline void rebuild_tensor_tail(pt::Pickler& p, int64_t offset, const std::vector<int64_t>& sizes,
                                const std::vector<int64_t>& strides) {
  p.op(pt::op::BINPERSID);
  p.integer(offset);
  for (const auto* v : {&sizes, &strides}) {
    if (v->empty()) {
      p.empty_tuple();
      continue;
    }
    if (v->size() > 3) p.mark();
    for (int64_t x : *v) p.integer(x);
    p.tuple_end(v->size());
  }
  p.boolean(false);
  p.global("collections", "OrderedDict");
  p.empty_tuple();
  p.op(pt::op::REDUCE);
  p.tuple_end(6);
  p.op(pt::op::REDUCE);
}

// _rebuild_tensor_v2 of a FloatStorage with the given numbers (its storage is record
// "0"), via our own pickler: the opcodes, or a whole pickle.
inline void tensor_opcodes(pt::Pickler& p, int64_t numel, int64_t offset, std::vector<int64_t> sizes,
                           std::vector<int64_t> strides, const std::string& storage_class = "FloatStorage") {
  p.global("torch._utils", "_rebuild_tensor_v2");
  p.mark();
  p.mark();
  p.string("storage");
  p.global("torch", storage_class);
  p.string("0", 1);
  p.string("cpu");
  p.integer(numel);
  p.tuple_end(5);
  rebuild_tensor_tail(p, offset, sizes, strides);
}

inline std::string tensor_pickle(int64_t numel, int64_t offset, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                                 const std::string& storage_class = "FloatStorage") {
  pt::Pickler p;
  p.proto();
  tensor_opcodes(p, numel, offset, std::move(sizes), std::move(strides), storage_class);
  p.stop();
  return p.take();
}

}  // namespace loader::testing
