// Small helpers shared by the benchmark programs of bench/.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace loader::bench_util {

/// CPU time (user + system) of process `pid` so far, in microseconds: fields 14 and 15 of
/// /proc/<pid>/stat, in clock ticks (10 ms here).  0 when it cannot be read.
inline double process_cpu_us(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  auto rp = stat.rfind(')');
  if (rp == std::string::npos) return 0;
  std::istringstream rest(stat.substr(rp + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i)
    if (i >= 14) ticks += std::stod(field);
  return ticks * 1e6 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

/// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string x; std::getline(in, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}

}  // namespace loader::bench_util
