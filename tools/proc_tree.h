// Memory of a process tree (this process and all its descendants), sampled from
// /proc on a background thread, as WORKLOADS.md measures it.
//
//   loader::bench::ProcessTreeSampler mem;            // samples every 20 ms
//   mem.start();
//   ... run an epoch ...
//   mem.sample_now();
//   auto peak = mem.window_peak();                    // since the last new_window()
//   std::cout << peak.rss_mb << " MB\n";
//
// Figures (MB = 1e6 bytes):
//   rss_mb     sum of VmRSS over the tree: over-counts pages that several processes
//              map (shared memory, a memory-mapped dataset, the executable's text);
//              the figure WORKLOADS.md and peer_torch.py call "tree RSS".
//   anon_mb    sum of RssAnon: private memory of every process.
//   file_mb    sum of RssFile: mapped files (mostly executable and library text).
//   shm_mb     the shared-memory segments and memory files the tree maps
//              (/dev/shm/..., memfd:...), each counted once at its allocated size.
//   mem_mb     anon_mb + file_mb + shm_mb: every page counted about once (library
//              text still once per process): the figure to compare with
//              "dataset + slab pool + overhead".
//   sys_mb     rise of the system-wide AnonPages + Shmem (/proc/meminfo) over its
//              value when the sampler was made: counts shared pages once, but also
//              counts whatever else the machine is doing.
// Children are found by scanning /proc/*/stat for parent ids (the kernel here has
// no /proc/PID/task/TID/children), every 5th sample; shared segments likewise.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace loader::bench {

struct TreeMemory {
  double rss_mb = 0, anon_mb = 0, file_mb = 0, shm_mb = 0, mem_mb = 0, sys_mb = 0;
  double root_anon_mb = 0;  ///< RssAnon of the root process alone (the rest is its descendants')
  int processes = 0;
  /// Element-wise maximum.
  void max_with(const TreeMemory& o);
};

/// `root` and all its descendants (scanning /proc; `root` first).
std::vector<pid_t> process_tree(pid_t root);

class ProcessTreeSampler {
 public:
  explicit ProcessTreeSampler(pid_t root = 0 /* this process */,
                              std::chrono::milliseconds period = std::chrono::milliseconds(20));
  ~ProcessTreeSampler();
  ProcessTreeSampler(const ProcessTreeSampler&) = delete;
  ProcessTreeSampler& operator=(const ProcessTreeSampler&) = delete;

  /// Starts the sampling thread (idempotent).
  void start();
  void stop();
  /// Takes one sample now (also refreshing the tree), in the calling thread.
  void sample_now();
  /// Starts a new window for window_peak() (the run peak is kept).
  void new_window();
  TreeMemory window_peak() const;
  TreeMemory run_peak() const;
  /// CPU seconds the sampling thread has used (it runs in this process).
  double thread_cpu_s() const { return thread_cpu_s_.load(); }

 private:
  void sample(bool refresh_tree);
  pid_t root_;
  std::chrono::milliseconds period_;
  int64_t sys_base_ = 0;
  mutable std::mutex mu_;
  std::vector<pid_t> tree_;
  double shm_mb_ = 0;
  TreeMemory window_, run_;
  std::atomic<double> thread_cpu_s_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

/// System-wide AnonPages + Shmem from /proc/meminfo, in bytes.
int64_t system_anon_shmem_bytes();

/// CPU time (user + system, seconds) of this process and of its descendants, for
/// attributing an epoch's work: main process vs worker processes.
///
///   CpuClock clock;                 // snapshot
///   ... epoch ...
///   CpuUse used = clock.since();    // what each side used since the snapshot
struct CpuUse {
  double main_s = 0;          ///< this process (all threads, including the sampler's)
  double descendants_s = 0;   ///< worker processes (live ones from /proc, reaped ones from rusage)
  int64_t main_voluntary_switches = 0;  ///< context switches of this process (waits)
};
class CpuClock {
 public:
  CpuClock();
  CpuUse since() const;

 private:
  double self_s_ = 0, reaped_s_ = 0;
  int64_t nvcsw_ = 0;
  std::vector<std::pair<pid_t, double>> live_;
};

}  // namespace loader::bench
