// What a multi-process test must not leave behind: shared-memory segments named
// with this process's prefix, and child processes (running or zombie).
//
//   LeakCheck before;                       // children that already existed
//   ... run loaders ...
//   EXPECT_EQ(before.new_segments(), "");   // names, comma-separated
//   EXPECT_EQ(before.new_children(), "");   // "pid (state)" of each new child
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "loader/runtime/shm.h"

namespace loader::testing {

/// Segments in shm_dir() whose names start with this process's prefix.
inline std::set<std::string> shm_segments_of_this_process() {
  std::set<std::string> out;
  const std::string prefix = runtime::shm_name_prefix();
  if (DIR* d = opendir(runtime::shm_dir().c_str())) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) out.insert(e->d_name);
    closedir(d);
  }
  return out;
}

/// Children of this process (any state, zombies included) as "pid (state)", from /proc.
inline std::set<std::string> child_processes() {
  std::set<std::string> out;
  const std::string me = std::to_string(getpid());
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream in("/proc/" + name + "/stat");
      std::string stat;
      std::getline(in, stat);
      auto rp = stat.rfind(')');
      if (rp == std::string::npos) continue;
      std::istringstream rest(stat.substr(rp + 2));
      std::string state, ppid;
      rest >> state >> ppid;
      if (ppid == me) out.insert(name + " (" + state + ")");
    }
    closedir(d);
  }
  return out;
}

inline std::string join(const std::set<std::string>& s) {
  std::string out;
  for (const auto& x : s) out += (out.empty() ? "" : ", ") + x;
  return out;
}

/// Remembers what existed when it was made, so a test reports only its own leftovers.
class LeakCheck {
 public:
  LeakCheck() : segments_(shm_segments_of_this_process()), children_(child_processes()) {}
  std::string new_segments() const { return join(minus(shm_segments_of_this_process(), segments_)); }
  std::string new_children() const {
    // A pid can be reused, so compare "pid (state)" entries by pid only.
    std::set<std::string> now = child_processes(), out;
    for (const auto& c : now) {
      std::string pid = c.substr(0, c.find(' '));
      bool old = false;
      for (const auto& o : children_) old = old || o.substr(0, o.find(' ')) == pid;
      if (!old) out.insert(c);
    }
    return join(out);
  }

 private:
  static std::set<std::string> minus(const std::set<std::string>& a, const std::set<std::string>& b) {
    std::set<std::string> out;
    for (const auto& x : a)
      if (!b.count(x)) out.insert(x);
    return out;
  }
  std::set<std::string> segments_;
  std::set<std::string> children_;
};

}  // namespace loader::testing
