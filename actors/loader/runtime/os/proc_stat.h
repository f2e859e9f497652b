// A process's CPU time and minor page faults from /proc/<pid>/stat (EpochStats::Worker
// cpu_user_s, cpu_system_s, minor_faults).  Plain functions; any thread may call them.
// Read when stats are taken and once per worker as an epoch begins, never per batch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace loader::runtime {

struct ProcStat {
  double user_s = 0;         ///< utime (field 14), seconds
  double system_s = 0;       ///< stime (field 15), seconds
  int64_t minor_faults = 0;  ///< minflt (field 10)
};

/// The figures in the text of a /proc/<pid>/stat (the command name in parentheses may
/// hold spaces and parentheses: fields are counted after its last ')'); nullopt when
/// the text is not one.
std::optional<ProcStat> parse_proc_stat(const std::string& text);
/// /proc/<pid>/stat now; nullopt when the process is gone or the file cannot be read.
std::optional<ProcStat> read_proc_stat(int pid);

}  // namespace loader::runtime
