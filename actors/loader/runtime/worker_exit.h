// WorkerExit: how a worker incarnation ended (or why it is considered gone), in
// PyTorch's words.  Said by whatever carries the worker (a local link reaps its
// process; a remote link loses its host) and judged by the worker's lifecycle
// (parent/worker_lifecycle.h); it travels in link k's `down` message (protocol.h).
#pragma once

#include <string>

namespace loader::runtime {

/// How a worker process ended (or why it is considered dead), in PyTorch's words.
struct WorkerExit {
  /// StatusLost: the process is gone but its exit status went elsewhere (the
  /// program ignores SIGCHLD or reaps with waitpid(-1)).  HostLost: a worker on
  /// another host is gone (`detail`: "host:port: what happened").
  enum class Kind { Signal, ExitCode, Frozen, ClosedLink, StartFailed, StatusLost, HostLost } kind = Kind::ClosedLink;
  int code = 0;            ///< signal number or exit status
  std::string detail;      ///< extra words (e.g. why a start failed)
  int pid = -1;            ///< the process that went down, when its link knows it
  /// A SIGKILL while its memory cgroup counted an OOM kill (WorkerLink, oom.h), and the
  /// counts that say so.
  bool oom_killed = false;
  std::string oom_evidence = {};
  /// PyTorch's sentence: "DataLoader worker (pid 12) is killed by signal: Killed."
  std::string pytorch_sentence(int pid) const;
  /// Short form for warnings: "killed by signal: Killed (SIGKILL, 9)".
  std::string describe() const;
};

}  // namespace loader::runtime
