#include "loader/runtime/os/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <cstring>
#include <thread>
#include <vector>

#include "loader/error.h"
#include "loader/runtime/os/os_error.h"

extern char** environ;

namespace loader::runtime {

std::string ExitStatus::describe() const {
  if (collected_elsewhere) return "exited, status collected elsewhere";
  if (!signaled) return "exited with status " + std::to_string(code);
  const char* name = strsignal(code);
  return "killed by signal: " + std::string(name ? name : "signal") + " (" + std::to_string(code) + ")";
}

namespace {

/// The thread every worker process is started from, alive as long as the process.
/// Each worker asks for PR_SET_PDEATHSIG (it dies with the main process), and Linux
/// sends that signal when the *thread* that started the worker ends, not the
/// process: workers started by an application thread that then exits (an epoch run
/// in a std::thread or a std::async task) were killed with it, and a persistent
/// pool's next epoch failed.  Any thread may call run(); jobs run one at a time.
/// The state is never destroyed (a detached thread may outlive static destructors);
/// a process forked after it existed makes its own.
class SpawnerThread {
 public:
  /// Runs `job` on the spawner thread and waits for it; runs it in the calling
  /// thread if the spawner cannot be started (the thread limit is reached).
  static void run(const std::function<void()>& job) {
    State* s = state();
    if (!s) {
      job();
      return;
    }
    Job j{&job};
    std::unique_lock<std::mutex> lock(s->mu);
    s->jobs.push_back(&j);
    s->wake.notify_one();
    s->done.wait(lock, [&] { return j.finished; });
  }

 private:
  struct Job {
    const std::function<void()>* fn;
    bool finished = false;
  };
  struct State {
    pid_t owner = -1;
    std::mutex mu;
    std::condition_variable wake, done;
    std::deque<Job*> jobs;
  };

  static State* state() {
    static std::mutex create_mu;
    static State* current = nullptr;
    std::lock_guard<std::mutex> lock(create_mu);
    if (current && current->owner == getpid()) return current;
    auto* s = new State();  // never freed: see above
    s->owner = getpid();
    try {
      std::thread([s] { serve(*s); }).detach();
    } catch (const std::exception&) {
      delete s;
      return nullptr;
    }
    current = s;
    return current;
  }

  static void serve(State& s) {
    std::unique_lock<std::mutex> lock(s.mu);
    while (true) {
      s.wake.wait(lock, [&] { return !s.jobs.empty(); });
      Job* j = s.jobs.front();
      s.jobs.pop_front();
      lock.unlock();
      (*j->fn)();  // posix_spawn: reports through its captures, never throws
      lock.lock();
      j->finished = true;
      s.done.notify_all();
    }
  }
};

}  // namespace

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
                       os_error_text(errno));
  // posix_spawn's dup2 clobbers a source that is itself fd 3: move it out of the way.
  int child_end = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
  close(sv[1]);
  if (child_end < 0) {
    // EINVAL: the open-file limit is at most 10, so no descriptor >= 10 exists.
    const int err = errno == EINVAL ? EMFILE : errno;
    close(sv[0]);
    throw RuntimeError("cannot duplicate the worker socket: " + os_error_text(err));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  // A standard stream the worker would not inherit (closed here, or close-on-exec,
  // e.g. another worker's socket that took the lowest free fd) gets /dev/null:
  // otherwise the worker's first descriptor (a slab) would take its number and
  // the dataset's prints would land in it.
  for (int std_fd = 0; std_fd <= 2; ++std_fd) {
    int flags = fcntl(std_fd, F_GETFD);
    if (flags < 0 || (flags & FD_CLOEXEC))
      posix_spawn_file_actions_addopen(&fa, std_fd, "/dev/null", std_fd == 0 ? O_RDONLY : O_WRONLY, 0);
  }
  posix_spawn_file_actions_adddup2(&fa, child_end, 3);  // dup2 clears CLOEXEC on fd 3
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 34)
  // Nothing else of this program's: a descriptor it inherited or opened without
  // O_CLOEXEC (a pipe to another program, a listening socket) must not stay open
  // for as long as its workers live.  Python's spawn start method does the same.
  posix_spawn_file_actions_addclosefrom_np(&fa, 4);
#endif
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
  int rc = 0;
  SpawnerThread::run([&] { rc = posix_spawn(&pid, exe.c_str(), &fa, &attr, argv, envp.data()); });
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(child_end);
  if (rc != 0) {
    close(sv[0]);
    throw RuntimeError("cannot start worker process " + std::to_string(worker_id) + ": posix_spawn: " +
                       os_error_text(rc));
  }
  ChildProcess c;
  c.pid_ = pid;
  c.sock_ = UniqueFd(sv[0]);
  return c;
}

ChildProcess::~ChildProcess() { terminate(); }

ChildProcess::ChildProcess(ChildProcess&& o) noexcept : pid_(o.pid_), sock_(std::move(o.sock_)), status_(o.status_) {
  o.pid_ = -1;
  o.status_.reset();
}

ChildProcess& ChildProcess::operator=(ChildProcess&& o) noexcept {
  if (this != &o) {
    terminate();
    pid_ = o.pid_;
    sock_ = std::move(o.sock_);
    status_ = o.status_;
    o.pid_ = -1;
    o.status_.reset();
  }
  return *this;
}

std::optional<ExitStatus> ChildProcess::poll_exit() {
  if (status_ || pid_ <= 0) return status_;
  int st = 0;
  pid_t r = waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    status_ = from_wait(st);
  } else if (r < 0 && errno == ECHILD) {
    // Not our child any more: reaped by the kernel (SIGCHLD set to SIG_IGN or
    // SA_NOCLDWAIT) or by another waitpid.  Waiting longer would only time out.
    ExitStatus gone;
    gone.collected_elsewhere = true;
    status_ = gone;
  }
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
  if (sock_) ::shutdown(sock_.get(), SHUT_RDWR);
}

void ChildProcess::terminate(int grace_ms) {
  sock_.reset();
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
    pid_t r;
    do r = waitpid(pid_, &st, 0); while (r < 0 && errno == EINTR);
    if (r == pid_) status_ = from_wait(st);
  }
  pid_ = -1;
}

}  // namespace loader::runtime
