#include "proc_tree.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>

namespace loader::bench {

void TreeMemory::max_with(const TreeMemory& o) {
  rss_mb = std::max(rss_mb, o.rss_mb);
  anon_mb = std::max(anon_mb, o.anon_mb);
  file_mb = std::max(file_mb, o.file_mb);
  shm_mb = std::max(shm_mb, o.shm_mb);
  mem_mb = std::max(mem_mb, o.mem_mb);
  sys_mb = std::max(sys_mb, o.sys_mb);
  root_anon_mb = std::max(root_anon_mb, o.root_anon_mb);
  processes = std::max(processes, o.processes);
}

namespace {
bool read_small_file(const std::string& path, std::string& out) {
  FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return false;
  char buf[4096];
  out.clear();
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, got);
  std::fclose(f);
  return true;
}

// Parent pid from /proc/PID/stat ("pid (comm) state ppid ..."; comm may hold spaces).
pid_t parent_of(pid_t pid) {
  std::string s;
  if (!read_small_file("/proc/" + std::to_string(pid) + "/stat", s)) return -1;
  auto close = s.rfind(')');
  if (close == std::string::npos || close + 4 >= s.size()) return -1;
  return static_cast<pid_t>(std::strtol(s.c_str() + close + 4, nullptr, 10));
}

struct ProcMem {
  int64_t rss_kb = 0, anon_kb = 0, file_kb = 0;
};

bool read_proc_mem(pid_t pid, ProcMem& m) {
  std::string s;
  if (!read_small_file("/proc/" + std::to_string(pid) + "/status", s)) return false;
  auto field = [&](const char* key) -> int64_t {
    auto at = s.find(key);
    if (at == std::string::npos) return 0;
    return std::strtoll(s.c_str() + at + std::strlen(key), nullptr, 10);
  };
  m.rss_kb = field("\nVmRSS:");
  m.anon_kb = field("\nRssAnon:");
  m.file_kb = field("\nRssFile:");
  return true;
}

// Shared segments mapped by `pid`: key (dev:inode) -> allocated bytes.
void collect_shared_segments(pid_t pid, std::map<std::string, int64_t>& seg) {
  const std::string dir = "/proc/" + std::to_string(pid);
  std::ifstream maps(dir + "/maps");
  std::string line;
  while (std::getline(maps, line)) {
    auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const char* path = line.c_str() + slash;
    bool shared = std::strncmp(path, "/dev/shm/", 9) == 0 || std::strncmp(path, "/memfd:", 7) == 0 ||
                  std::strncmp(path, "/SYSV", 5) == 0;
    if (!shared) continue;
    std::istringstream in(line);
    std::string range, perms, offset, dev, inode;
    in >> range >> perms >> offset >> dev >> inode;
    const std::string key = dev + ":" + inode;
    auto dash = range.find('-');
    int64_t len = static_cast<int64_t>(std::strtoull(range.c_str() + dash + 1, nullptr, 16) -
                                       std::strtoull(range.c_str(), nullptr, 16));
    int64_t bytes = len;
    struct stat st {};
    if (::stat((dir + "/map_files/" + range).c_str(), &st) == 0) bytes = static_cast<int64_t>(st.st_blocks) * 512;
    auto& slot = seg[key];
    slot = std::max(slot, bytes);
  }
}
}  // namespace

std::vector<pid_t> process_tree(pid_t root) {
  // A process's parent does not change while it lives (orphans are re-parented, and
  // then they are no longer in our tree anyway), so parent ids are cached and only
  // processes not seen before have their /proc/PID/stat read: a scan costs one
  // directory listing on a machine with hundreds of processes.
  static std::mutex mu;
  static std::map<pid_t, pid_t> parent_cache;
  std::lock_guard<std::mutex> lock(mu);
  std::map<pid_t, pid_t> seen;
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
      pid_t pid = static_cast<pid_t>(std::strtol(e->d_name, nullptr, 10));
      auto it = parent_cache.find(pid);
      seen[pid] = it != parent_cache.end() ? it->second : parent_of(pid);
    }
    ::closedir(d);
  }
  parent_cache.swap(seen);  // forget processes that are gone (their pid may be reused)
  std::multimap<pid_t, pid_t> children;
  for (const auto& [pid, ppid] : parent_cache)
    if (ppid > 0) children.emplace(ppid, pid);
  std::vector<pid_t> out{root};
  for (size_t k = 0; k < out.size(); ++k) {
    auto range = children.equal_range(out[k]);
    for (auto it = range.first; it != range.second; ++it) out.push_back(it->second);
  }
  return out;
}

int64_t system_anon_shmem_bytes() {
  std::string s;
  if (!read_small_file("/proc/meminfo", s)) return 0;
  auto field = [&](const char* key) -> int64_t {
    auto at = s.find(key);
    if (at == std::string::npos) return 0;
    return std::strtoll(s.c_str() + at + std::strlen(key), nullptr, 10) * 1024;
  };
  return field("AnonPages:") + field("\nShmem:");
}

ProcessTreeSampler::ProcessTreeSampler(pid_t root, std::chrono::milliseconds period)
    : root_(root > 0 ? root : ::getpid()), period_(period), sys_base_(system_anon_shmem_bytes()) {
  tree_ = {root_};
}

ProcessTreeSampler::~ProcessTreeSampler() { stop(); }

void ProcessTreeSampler::start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] {
    for (uint64_t k = 0; !stop_.load(); ++k) {
      sample(k % 5 == 0);
      timespec ts{};
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      thread_cpu_s_ = static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
      std::this_thread::sleep_for(period_);
    }
  });
}

void ProcessTreeSampler::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void ProcessTreeSampler::sample_now() { sample(true); }

void ProcessTreeSampler::sample(bool refresh_tree) {
  std::vector<pid_t> tree;
  double shm_mb;
  {
    std::lock_guard<std::mutex> lock(mu_);
    tree = tree_;
    shm_mb = shm_mb_;
  }
  if (refresh_tree) {
    tree = process_tree(root_);
    std::map<std::string, int64_t> seg;
    for (pid_t p : tree) collect_shared_segments(p, seg);
    int64_t bytes = 0;
    for (const auto& kv : seg) bytes += kv.second;
    shm_mb = static_cast<double>(bytes) / 1e6;
  }
  TreeMemory m;
  for (pid_t p : tree) {
    ProcMem pm;
    if (!read_proc_mem(p, pm)) continue;
    m.rss_mb += static_cast<double>(pm.rss_kb) * 1024 / 1e6;
    m.anon_mb += static_cast<double>(pm.anon_kb) * 1024 / 1e6;
    if (p == root_) m.root_anon_mb = static_cast<double>(pm.anon_kb) * 1024 / 1e6;
    m.file_mb += static_cast<double>(pm.file_kb) * 1024 / 1e6;
    ++m.processes;
  }
  m.shm_mb = shm_mb;
  m.mem_mb = m.anon_mb + m.file_mb + m.shm_mb;
  m.sys_mb = static_cast<double>(system_anon_shmem_bytes() - sys_base_) / 1e6;
  std::lock_guard<std::mutex> lock(mu_);
  if (refresh_tree) {
    tree_ = std::move(tree);
    shm_mb_ = shm_mb;
  }
  window_.max_with(m);
  run_.max_with(m);
}

void ProcessTreeSampler::new_window() {
  std::lock_guard<std::mutex> lock(mu_);
  window_ = TreeMemory{};
}

TreeMemory ProcessTreeSampler::window_peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return window_;
}

TreeMemory ProcessTreeSampler::run_peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return run_;
}

namespace {
double tv_seconds(const timeval& tv) { return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6; }

// utime + stime of `pid` from /proc/PID/stat, seconds; -1 when it is gone.
double proc_cpu_seconds(pid_t pid) {
  std::string s;
  if (!read_small_file("/proc/" + std::to_string(pid) + "/stat", s)) return -1;
  auto close = s.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream in(s.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int k = 0; k < 13 && in >> field; ++k) {
    if (k == 11 || k == 12) ticks += std::strtod(field.c_str(), nullptr);  // utime, stime
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

std::vector<std::pair<pid_t, double>> live_descendants_cpu() {
  std::vector<std::pair<pid_t, double>> out;
  auto tree = process_tree(::getpid());
  for (size_t k = 1; k < tree.size(); ++k) {
    double c = proc_cpu_seconds(tree[k]);
    if (c >= 0) out.emplace_back(tree[k], c);
  }
  return out;
}
}  // namespace

CpuClock::CpuClock() {
  live_ = live_descendants_cpu();  // first: the /proc scan must not count as the epoch's
  rusage self{}, kids{};
  ::getrusage(RUSAGE_SELF, &self);
  ::getrusage(RUSAGE_CHILDREN, &kids);
  self_s_ = tv_seconds(self.ru_utime) + tv_seconds(self.ru_stime);
  reaped_s_ = tv_seconds(kids.ru_utime) + tv_seconds(kids.ru_stime);
  nvcsw_ = self.ru_nvcsw;
}

CpuUse CpuClock::since() const {
  rusage self{}, kids{};
  ::getrusage(RUSAGE_SELF, &self);
  ::getrusage(RUSAGE_CHILDREN, &kids);
  CpuUse u;
  u.main_s = tv_seconds(self.ru_utime) + tv_seconds(self.ru_stime) - self_s_;
  u.main_voluntary_switches = self.ru_nvcsw - nvcsw_;
  // Reaped since the snapshot: their whole life is in RUSAGE_CHILDREN, so take off
  // what they had already used at the snapshot.  Live now: their use since then.
  double d = tv_seconds(kids.ru_utime) + tv_seconds(kids.ru_stime) - reaped_s_;
  auto now = live_descendants_cpu();
  for (const auto& [pid, before] : live_) {
    bool alive = false;
    for (const auto& [p2, c2] : now)
      if (p2 == pid) alive = true;
    if (!alive) d -= before;
  }
  for (const auto& [pid, c] : now) {
    double before = 0;
    for (const auto& [p1, c1] : live_)
      if (p1 == pid) before = c1;
    d += c - before;
  }
  u.descendants_s = std::max(0.0, d);
  return u;
}

}  // namespace loader::bench
