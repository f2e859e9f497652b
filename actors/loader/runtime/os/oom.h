// Telling a worker the kernel's out-of-memory killer ended from one killed by someone
// else.  Both die of SIGKILL, and PyTorch says only "is killed by signal: Killed".  The
// memory cgroup a process is in counts the OOM kills in it (cgroup v2: `oom_kill` in
// memory.events; v1: `oom_kill` in memory.oom_control); the worker's link reads that
// count when the worker starts and again when it dies of SIGKILL.
//
//   auto c = oom_counter_of(pid);                     // at spawn: file and count, or nullopt
//   ...                                               // the worker dies of SIGKILL
//   if (c && read_oom_kills(c->file) > c->kills) ...  // the OOM killer struck in its cgroup
//
// Plain functions of files; any thread may call them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loader::runtime {

struct OomCounter {
  std::string file;    ///< memory.events (v2) or memory.oom_control (v1)
  uint64_t kills = 0;  ///< its oom_kill count when read
};

/// "oom_kill N" in the text of memory.events or memory.oom_control; nullopt without one.
std::optional<uint64_t> parse_oom_kills(const std::string& text);
/// The files that may hold the OOM-kill count of the memory cgroup a process is in,
/// from the text of its /proc/PID/cgroup: v2 ("0::<path>") <root>/<path>/memory.events,
/// v1 (a line whose controllers include "memory") <root>/memory/<path>/memory.oom_control.
std::vector<std::string> oom_files_for(const std::string& proc_cgroup_text, const std::string& root = "/sys/fs/cgroup");
/// The count in `file` now; nullopt when it cannot be read.
std::optional<uint64_t> read_oom_kills(const std::string& file);
/// The first readable counter of the memory cgroup `pid` is in; nullopt where there is
/// none (no memory controller, a container that hides /sys/fs/cgroup).
std::optional<OomCounter> oom_counter_of(pid_t pid);

}  // namespace loader::runtime
