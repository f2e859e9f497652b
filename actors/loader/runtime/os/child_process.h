// ChildProcess: one worker process, started by fork+exec of this program, owned
// by exactly one object.  Move-only; the destructor ends and reaps the child
// (SIGTERM, then SIGKILL after a grace period), so no zombie outlives its owner.
//
//   auto child = ChildProcess::spawn_worker();   // socket to the child on child.socket()
//   write_frame(child.socket(), FrameType::Init, ...);
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include "loader/runtime/os/unique_fd.h"

namespace loader::runtime {

/// How a process ended.
struct ExitStatus {
  bool signaled = false;
  int code = 0;  ///< exit code, or signal number when signaled
  /// The child is gone but its status went to someone else: the program ignores
  /// SIGCHLD (the kernel reaps children itself) or another thread's waitpid(-1)
  /// took it.  `signaled` and `code` are then unknown.
  bool collected_elsewhere = false;
  std::string describe() const;  ///< "killed by signal: Killed (9)" / "exited with status 3"
};

class ChildProcess {
 public:
  ChildProcess() = default;
  /// Starts `executable` (empty: /proc/self/exe, this very program) as a worker with
  /// a Unix stream socket at its fd 3.  Throws loader::RuntimeError on failure.
  static ChildProcess spawn_worker(int worker_id, const std::string& executable = "");
  ~ChildProcess();
  ChildProcess(ChildProcess&& o) noexcept;
  ChildProcess& operator=(ChildProcess&& o) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const noexcept { return pid_; }
  int socket() const noexcept { return sock_.get(); }
  bool running() const noexcept { return pid_ > 0 && !status_; }
  /// Non-blocking reap; returns the status once the child has exited (or once it is
  /// found gone with its status collected elsewhere: ExitStatus::collected_elsewhere).
  std::optional<ExitStatus> poll_exit();
  /// Waits up to `timeout_ms` for the child to exit.
  std::optional<ExitStatus> wait_exit(int timeout_ms);
  /// True when the child has exited (without reaping it: waitid WNOWAIT), so that
  /// a thread other than the reaper may look.
  std::optional<ExitStatus> exited_unreaped() const;
  /// Sends `sig` (no effect once reaped).
  void kill(int sig);
  /// Closes the socket, asks the child to exit (SIGTERM), waits `grace_ms`, then
  /// SIGKILLs and reaps.  Idempotent.
  void terminate(int grace_ms = 200);
  /// Shuts the socket down for both directions (wakes a reader blocked on it).
  void shutdown_socket();

 private:
  pid_t pid_ = -1;
  UniqueFd sock_;  ///< the main process's end of the worker's socket
  std::optional<ExitStatus> status_;
};

}  // namespace loader::runtime
