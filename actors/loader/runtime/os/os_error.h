// os_error_text: an errno in words, with what to do when it is a limit the user
// can raise (descriptors, processes, memory), for the runtime's error messages.
#pragma once

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace loader::runtime {

inline std::string limit_value(int resource) {
  struct rlimit r {};
  if (getrlimit(resource, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return "unlimited";
  return std::to_string(r.rlim_cur);
}

/// What may be reached when a process or thread cannot be created (EAGAIN): the
/// process/thread limit, or the address-space limit when there is one (every thread
/// maps a stack, and glibc an arena for it).
inline std::string thread_limits_text() {
  std::string text = "; the process or thread limit may be reached (RLIMIT_NPROC = " + limit_value(RLIMIT_NPROC) +
                     ", ulimit -u; or the cgroup's pids.max)";
  const std::string as = limit_value(RLIMIT_AS);
  if (as != "unlimited")
    text += ", or the address-space limit (RLIMIT_AS = " + as +
            " bytes, ulimit -v: each thread maps a stack): raise it, or use fewer workers";
  return text;
}

inline std::string os_error_text(int err) {
  std::string text = std::strerror(err);
  if (err == EMFILE) {
    struct rlimit r {};
    getrlimit(RLIMIT_NOFILE, &r);
    text += "; this process has reached its open-file limit (RLIMIT_NOFILE = " +
            (r.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : std::to_string(r.rlim_cur)) +
            "): raise it (ulimit -n), or use fewer workers or a lower prefetch_factor, since every slab and "
            "worker holds descriptors";
  } else if (err == ENFILE) {
    text += "; the system's open-file table is full (fs.file-max)";
  } else if (err == EAGAIN) {
    text += thread_limits_text();
  } else if (err == ENOMEM) {
    text += "; out of memory, or the limit on memory mappings (vm.max_map_count) is reached";
    const std::string as = limit_value(RLIMIT_AS);
    if (as != "unlimited")
      text += ", or the address-space limit (RLIMIT_AS = " + as +
              " bytes, ulimit -v): raise it, or use fewer workers or a lower prefetch_factor";
  }
  return text;
}

}  // namespace loader::runtime
