#include "loader/runtime/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "loader/error.h"

extern char** environ;

namespace loader::runtime {

std::string ExitStatus::describe() const {
  if (!signaled) return "exited with status " + std::to_string(code);
  const char* name = strsignal(code);
  const char* abbrev = "";
  switch (code) {
    case SIGKILL: abbrev = "SIGKILL"; break;
    case SIGSEGV: abbrev = "SIGSEGV"; break;
    case SIGBUS: abbrev = "SIGBUS"; break;
    case SIGABRT: abbrev = "SIGABRT"; break;
    case SIGTERM: abbrev = "SIGTERM"; break;
    case SIGINT: abbrev = "SIGINT"; break;
    case SIGFPE: abbrev = "SIGFPE"; break;
    case SIGILL: abbrev = "SIGILL"; break;
    default: break;
  }
  return std::string("killed by signal: ") + (name ? name : "?") + " (" + (*abbrev ? std::string(abbrev) + ", " : "") +
         std::to_string(code) + ")";
}

static ExitStatus from_wait(int st) {
  ExitStatus s;
  if (WIFSIGNALED(st)) {
    s.signaled = true;
    s.code = WTERMSIG(st);
  } else {
    s.code = WEXITSTATUS(st);
  }
  return s;
}

ChildProcess ChildProcess::spawn_worker(int worker_id, const std::string& executable) {
  const std::string exe = executable.empty() ? std::string("/proc/self/exe") : executable;
  if (!executable.empty() && access(exe.c_str(), X_OK) != 0)
    throw RuntimeError("DataLoaderOptions::worker_executable '" + exe + "' is not an executable file (" +
                       std::strerror(errno) + "); it must be a program whose main() calls "
                       "loader::runtime::run_worker_if_requested first");
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw RuntimeError(std::string("cannot create a socket for worker ") + std::to_string(worker_id) + ": " +
                       std::strerror(errno));
  // posix_spawn's dup2 clobbers a source that is itself fd 3: move it out of the way.
  int child_end = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
  close(sv[1]);
  if (child_end < 0) {
    close(sv[0]);
    throw RuntimeError("cannot duplicate the worker socket: " + std::string(std::strerror(errno)));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, child_end, 3);  // dup2 clears CLOEXEC on fd 3
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Workers start with default signal dispositions and an empty mask.
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

  std::vector<std::string> env_store;
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, "LOADER_WORKER_", 14) == 0 || std::strncmp(*e, "LOADER_PARENT_PID=", 18) == 0) continue;
    env_store.emplace_back(*e);
  }
  env_store.push_back("LOADER_WORKER_FD=3");
  env_store.push_back("LOADER_WORKER_ID=" + std::to_string(worker_id));
  env_store.push_back("LOADER_PARENT_PID=" + std::to_string(getpid()));
  std::vector<char*> envp;
  for (auto& s : env_store) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string arg0 = "loader-worker-" + std::to_string(worker_id);
  char* argv[] = {arg0.data(), nullptr};

  pid_t pid = -1;
  int rc = posix_spawn(&pid, exe.c_str(), &fa, &attr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(child_end);
  if (rc != 0) {
    close(sv[0]);
    throw RuntimeError("cannot start worker process " + std::to_string(worker_id) + ": posix_spawn: " +
                       std::strerror(rc));
  }
  ChildProcess c;
  c.pid_ = pid;
  c.sock_ = sv[0];
  return c;
}

ChildProcess::~ChildProcess() { terminate(); }

ChildProcess::ChildProcess(ChildProcess&& o) noexcept : pid_(o.pid_), sock_(o.sock_), status_(o.status_) {
  o.pid_ = -1;
  o.sock_ = -1;
  o.status_.reset();
}

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    terminate();
    pid_ = o.pid_;
    sock_ = o.sock_;
    status_ = o.status_;
    o.pid_ = -1;
    o.sock_ = -1;
    o.status_.reset();
  }
  return *this;
}

std::optional<ExitStatus> ChildProcess::poll_exit() {
  if (status_ || pid_ <= 0) return status_;
  int st = 0;
  pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) status_ = from_wait(st);
  return status_;
}

std::optional<ExitStatus> ChildProcess::wait_exit(int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto pause = std::chrono::microseconds(100);
  while (!poll_exit()) {
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::milliseconds(5)) pause *= 2;
  }
  return status_;
}

std::optional<ExitStatus> ChildProcess::exited_unreaped() const {
  // Reads no member the reaper writes: only waitid, which fails once reaped.
  if (pid_ <= 0) return std::nullopt;
  siginfo_t info{};
  if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) return std::nullopt;
  if (info.si_pid != pid_) return std::nullopt;
  ExitStatus s;
  s.signaled = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
  s.code = info.si_status;
  return s;
}

void ChildProcess::kill(int sig) {
  if (pid_ > 0 && !poll_exit()) ::kill(pid_, sig);
}

void ChildProcess::shutdown_socket() {
  if (sock_ >= 0) ::shutdown(sock_, SHUT_RDWR);
}

void ChildProcess::terminate(int grace_ms) {
  if (sock_ >= 0) {
    close(sock_);
    sock_ = -1;
  }
  if (pid_ <= 0) return;
  // The child exits by itself on EOF of its socket; give it a moment first.
  if (!wait_exit(grace_ms / 2)) {
    kill(SIGTERM);
    if (!wait_exit(grace_ms / 2)) {
      kill(SIGKILL);
      wait_exit(5000);
    }
  }
  if (!status_) {
    int st = 0;
    if (waitpid(pid_, &st, 0) == pid_) status_ = from_wait(st);
  }
  pid_ = -1;
}

}  // namespace loader::runtime
