#include "loader/runtime/remote_protocol.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <random>

#include "loader/error.h"

namespace loader::runtime {

void add_remote_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<std::vector<int64_t>>("std::vector<int64_t>");
  cfg.add_message_type<task_msg>("loader.task_msg");
  cfg.add_message_type<WorkerReply>("loader.WorkerReply");
  cfg.add_message_type<result_msg>("loader.result_msg");
}

namespace {
constexpr char kBulkMagic[8] = {'L', 'D', 'R', 'B', 'U', 'L', 'K', '1'};
}  // namespace

std::string new_bulk_key() {
  std::random_device rd;
  std::string key(kBulkKeyBytes, '\0');
  for (size_t i = 0; i < kBulkKeyBytes; i += 4) {
    const uint32_t r = rd();
    std::memcpy(&key[i], &r, std::min<size_t>(4, kBulkKeyBytes - i));
  }
  return key;
}

std::string bulk_hello(const std::string& key) { return std::string(kBulkMagic, sizeof kBulkMagic) + key; }

std::optional<std::string> parse_bulk_hello(const char* data, size_t size) {
  if (size != kBulkHelloBytes || std::memcmp(data, kBulkMagic, sizeof kBulkMagic) != 0) return std::nullopt;
  return std::string(data + sizeof kBulkMagic, kBulkKeyBytes);
}

namespace {
bool names_local_resource(const std::string& s) {
  return s.rfind("/proc/", 0) == 0 || s.rfind("/dev/fd/", 0) == 0 || s.rfind("/dev/shm/", 0) == 0;
}

std::optional<std::string> find_local(const Value& v, const std::string& where) {
  if (v.is_string() && names_local_resource(v.to_string()))
    return "the dataset parameter " + where + " = \"" + v.to_string() +
           "\" names a resource of the main process's machine, which a worker on another host cannot open: give "
           "it a path that exists on the worker's host";
  if (v.is_list() || v.is_tuple()) {
    const auto& items = v.items();
    for (size_t i = 0; i < items.size(); ++i)
      if (auto e = find_local(items[i], where + "[" + std::to_string(i) + "]")) return e;
  }
  if (v.is_dict()) {
    for (const auto& [k, x] : v.dict_items()) {
      const std::string key = k.is_string() ? k.to_string() : "?";
      if (auto e = find_local(x, where.empty() ? "'" + key + "'" : where + "['" + key + "']")) return e;
    }
  }
  return std::nullopt;
}
}  // namespace

std::optional<std::string> remote_resource_error(const Value& params) { return find_local(params, ""); }

HostPort parse_host_port(const std::string& s, const std::string& what) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
    throw ValueError(what + ": '" + s + "' is not HOST:PORT");
  HostPort hp;
  hp.host = s.substr(0, colon);
  if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']') hp.host = hp.host.substr(1, hp.host.size() - 2);
  const std::string port = s.substr(colon + 1);
  unsigned long p = 0;
  for (char c : port) {
    if (!std::isdigit(static_cast<unsigned char>(c))) throw ValueError(what + ": '" + s + "' has no port number");
    p = p * 10 + static_cast<unsigned long>(c - '0');
    if (p > 65535) throw ValueError(what + ": port " + port + " is above 65535");
  }
  hp.port = static_cast<uint16_t>(p);
  return hp;
}

std::string read_token_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ValueError("cannot read the token file '" + path + "': give a file with the shared secret on its first line");
  std::string line;
  std::getline(in, line);
  const auto b = line.find_first_not_of(" \t\r\n");
  const auto e = line.find_last_not_of(" \t\r\n");
  if (b == std::string::npos) throw ValueError("the token file '" + path + "' is empty: put the shared secret on its first line");
  return line.substr(b, e - b + 1);
}

bool tokens_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace loader::runtime
