#include "loader/runtime/os/proc_stat.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace loader::runtime {

std::optional<ProcStat> parse_proc_stat(const std::string& text) {
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  // After ") ": field 3 (state) onwards.
  const char* p = text.c_str() + close + 1;
  long long fields[16] = {};
  int field = 2;  // the last field read (2: the command)
  while (*p && field < 15) {
    while (*p == ' ') ++p;
    if (!*p) break;
    ++field;
    if (field == 3) {  // the state letter
      while (*p && *p != ' ') ++p;
      continue;
    }
    char* end = nullptr;
    const long long v = std::strtoll(p, &end, 10);
    if (end == p) return std::nullopt;
    if (field < 16) fields[field] = v;
    p = end;
  }
  if (field < 15) return std::nullopt;
  static const double tick = [] {
    const long hz = ::sysconf(_SC_CLK_TCK);
    return hz > 0 ? 1.0 / static_cast<double>(hz) : 0.01;
  }();
  ProcStat s;
  s.minor_faults = fields[10];
  s.user_s = static_cast<double>(fields[14]) * tick;
  s.system_s = static_cast<double>(fields[15]) * tick;
  return s;
}

std::optional<ProcStat> read_proc_stat(int pid) {
  if (pid <= 0) return std::nullopt;
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  return parse_proc_stat(std::string(buf, static_cast<size_t>(n)));
}

}  // namespace loader::runtime
