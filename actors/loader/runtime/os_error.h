// os_error_text: an errno in words, with what to do when it is a limit the user
// can raise (descriptors, processes, memory), for the runtime's error messages.
#pragma once

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace loader::runtime {

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
    text += "; the process or thread limit may be reached (ulimit -u)";
  } else if (err == ENOMEM) {
    text += "; out of memory, or the limit on memory mappings (vm.max_map_count) is reached";
  }
  return text;
}

}  // namespace loader::runtime
