#include "loader/serialization/checkpoint_cache.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "loader/error.h"
#include "loader/serialization/sha256.h"

namespace loader::pt {

namespace fs = std::filesystem;

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(const std::string& s, const std::string& url) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      int hi = i + 2 < s.size() ? hex_value(s[i + 1]) : -1;
      int lo = i + 2 < s.size() ? hex_value(s[i + 2]) : -1;
      if (hi < 0 || lo < 0) throw ValueError("load_state_dict_from_url: bad %-escape in '" + url + "'");
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Copies `src` to `dst` while hashing it.
std::string copy_hashing(const std::string& src, const std::string& dst) {
  FILE* in = std::fopen(src.c_str(), "rb");
  if (!in) throw RuntimeError("load_state_dict_from_url: cannot open '" + src + "': " + std::strerror(errno));
  FILE* out = std::fopen(dst.c_str(), "wb");
  if (!out) {
    int e = errno;
    std::fclose(in);
    throw RuntimeError("load_state_dict_from_url: cannot create '" + dst + "': " + std::strerror(e));
  }
  Sha256 h;
  std::vector<char> buf(1 << 20);
  bool ok = true;
  std::string what;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), in)) > 0) {
    h.update(buf.data(), n);
    if (std::fwrite(buf.data(), 1, n, out) != n) {
      ok = false;
      what = "writing '" + dst + "' failed: " + std::strerror(errno);
      break;
    }
  }
  if (ok && std::ferror(in)) {
    ok = false;
    what = "reading '" + src + "' failed";
  }
  std::fclose(in);
  if (std::fclose(out) != 0 && ok) {
    ok = false;
    what = "closing '" + dst + "' failed: " + std::strerror(errno);
  }
  if (!ok) {
    std::remove(dst.c_str());
    throw RuntimeError("load_state_dict_from_url: " + what);
  }
  return h.hex_digest();
}

}  // namespace

std::string checkpoint_dir() {
  if (const char* home = std::getenv("LOADER_HOME"); home && *home) return std::string(home) + "/checkpoints";
  std::string cache;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) cache = xdg;
  else if (const char* h = std::getenv("HOME"); h && *h) cache = std::string(h) + "/.cache";
  else cache = ".cache";
  return cache + "/loader/checkpoints";
}

std::string hash_prefix_of(const std::string& name) {
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] != '-') continue;
    size_t j = i + 1;
    while (j < name.size() && ((name[j] >= '0' && name[j] <= '9') || (name[j] >= 'a' && name[j] <= 'f'))) ++j;
    if (j < name.size() && name[j] == '.') return name.substr(i + 1, j - i - 1);
  }
  return "";
}

std::string local_path_of_url(const std::string& url) {
  const auto sep = url.find("://");
  if (sep == std::string::npos) {
    if (url.empty()) throw ValueError("load_state_dict_from_url: empty URL");
    return url;  // a plain local path
  }
  const std::string scheme = url.substr(0, sep);
  if (scheme != "file")
    throw ValueError("load_state_dict_from_url: '" + url + "' needs a '" + scheme +
                     "' download, and loader has no network access; download the file yourself "
                     "(e.g. curl -LO) and pass its local path or a file:// URL");
  std::string rest = url.substr(sep + 3);
  rest = rest.substr(0, rest.find('#'));
  rest = rest.substr(0, rest.find('?'));
  if (rest.rfind("localhost/", 0) == 0) rest = rest.substr(9);
  if (rest.empty() || rest[0] != '/')
    throw ValueError("load_state_dict_from_url: '" + url +
                     "' names a remote host; only file:///absolute/path (or file://localhost/...) is supported");
  return percent_decode(rest, url);
}

std::string cache_checkpoint(const std::string& url, const CheckpointOptions& options) {
  const std::string src = local_path_of_url(url);
  std::string name = options.file_name;
  if (name.empty()) name = fs::path(src).filename().string();
  if (name.empty() || name == "." || name == "..")
    throw ValueError("load_state_dict_from_url: cannot take a file name from '" + url + "'; pass CheckpointOptions::file_name");
  if (name.find('/') != std::string::npos)
    throw ValueError("load_state_dict_from_url: file_name '" + name + "' must not contain '/'");
  const std::string dir = options.model_dir.empty() ? checkpoint_dir() : options.model_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw RuntimeError("load_state_dict_from_url: cannot create '" + dir + "': " + ec.message());
  const std::string cached = dir + "/" + name;
  if (fs::exists(cached)) return cached;
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = cached + ".partial-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  const std::string digest = copy_hashing(src, tmp);
  if (options.check_hash) {
    const std::string prefix = hash_prefix_of(name);
    if (digest.compare(0, prefix.size(), prefix) != 0) {
      std::remove(tmp.c_str());
      throw RuntimeError("invalid hash value (expected \"" + prefix + "\", got \"" + digest + "\")");
    }
  }
  if (std::rename(tmp.c_str(), cached.c_str()) != 0) {
    int e = errno;
    std::remove(tmp.c_str());
    throw RuntimeError("load_state_dict_from_url: cannot move '" + tmp + "' to '" + cached + "': " + std::strerror(e));
  }
  return cached;
}

Value load_state_dict_from_url(const std::string& url, const CheckpointOptions& options) {
  return load(cache_checkpoint(url, options), options.load);
}

Archive load_archive_from_url(const std::string& url, const CheckpointOptions& options) {
  return load_archive(cache_checkpoint(url, options), options.load);
}

}  // namespace loader::pt
