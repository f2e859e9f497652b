#include "loader/runtime/os/oom.h"

#include <fstream>
#include <sstream>

namespace loader::runtime {

std::optional<uint64_t> parse_oom_kills(const std::string& text) {
  std::istringstream in(text);
  std::string key;
  uint64_t value = 0;
  while (in >> key >> value)
    if (key == "oom_kill") return value;
  return std::nullopt;
}

std::vector<std::string> oom_files_for(const std::string& proc_cgroup_text, const std::string& root) {
  std::vector<std::string> v2, v1;
  std::istringstream in(proc_cgroup_text);
  std::string line;
  while (std::getline(in, line)) {
    // hierarchy-ID:controller-list:cgroup-path
    const auto a = line.find(':');
    const auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    if (path.empty() || path == "/") path.clear();
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      v2.push_back(root + path + "/memory.events");
      continue;
    }
    std::istringstream cs(controllers);
    std::string c;
    while (std::getline(cs, c, ','))
      if (c == "memory") v1.push_back(root + "/memory" + path + "/memory.oom_control");
  }
  v2.insert(v2.end(), v1.begin(), v1.end());
  return v2;
}

std::optional<uint64_t> read_oom_kills(const std::string& file) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return parse_oom_kills(text.str());
}

std::optional<OomCounter> oom_counter_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  for (const auto& file : oom_files_for(text.str()))
    if (auto kills = read_oom_kills(file)) return OomCounter{file, *kills};
  return std::nullopt;
}

}  // namespace loader::runtime
