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

#include "loader/runtime/os/shm.h"

namespace loader::testing {

/// Entries of shm_dir() that look like this project's (slabs never have a name:
/// any such entry is a leak; other programs' entries are not looked at).
inline std::set<std::string> shm_dir_entries() {
  std::set<std::string> out;
  if (DIR* d = opendir(runtime::shm_dir().c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.find("loader") != std::string::npos) out.insert(n);
    }
    closedir(d);
  }
  return out;
}

/// Slab files this process still maps or holds open ("map <path>" / "fd <n> <path>"),
/// plus the names in shm_dir() that look like this project's.  Empty when every
/// loader (and every batch) is gone.
inline std::set<std::string> shm_segments_of_this_process() {
  std::set<std::string> out;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    std::string path = line.substr(slash);
    if (runtime::is_slab_path(path)) out.insert("map " + path);
  }
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      char target[512];
      std::string link = std::string("/proc/self/fd/") + e->d_name;
      ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = 0;
      if (runtime::is_slab_path(target)) out.insert(std::string("fd ") + e->d_name + " " + target);
    }
    closedir(d);
  }
  for (const auto& n : shm_dir_entries()) out.insert("name " + n);
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
