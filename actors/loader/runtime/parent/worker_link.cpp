#include "loader/runtime/parent/worker_link.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <system_error>

#include "loader/error.h"
#include "loader/runtime/os/os_error.h"
#include "loader/runtime/child/worker_host.h"

namespace loader::runtime {

namespace {
/// Fault injection for the fault suite: LOADER_FAULT_INJECT=<point> makes that step
/// fail as it does when the thread or process limit is reached.
void inject_fault(const char* point) {
  const char* f = std::getenv("LOADER_FAULT_INJECT");
  if (f && std::strcmp(f, point) == 0)
    throw std::system_error(EAGAIN, std::generic_category(), std::string("fault injected at ") + point);
}
}  // namespace

WorkerLink::WorkerLink(const Spec& spec, LinkFrames* events)
    : spec_(spec), events_(events) {
  if (spec_.in_process) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
      throw RuntimeError("cannot create a socket for DataLoader worker " + std::to_string(spec_.worker_id) + ": " +
                         os_error_text(errno));
    pair_[0] = UniqueFd(sv[0]);
    pair_[1] = UniqueFd(sv[1]);
    sock_ = sv[0];
    try {
      worker_thread_ = std::thread([fd = sv[1]] { run_worker_loop(fd, /*parent=*/0); });
    } catch (const std::exception& e) {
      throw RuntimeError("cannot start the thread of in-process DataLoader worker " + std::to_string(spec_.worker_id) +
                         ": " + e.what());
    }
  } else {
    child_ = ChildProcess::spawn_worker(spec_.worker_id, spec_.executable);
    sock_ = child_.socket();
    pid_ = child_.pid();
    oom_ = oom_counter_of(pid_);
  }
  try {
    inject_fault("reader_thread");
    reader_ = std::thread([this] { read_loop(); });
  } catch (const std::exception& e) {
    stopping_ = true;
    if (sock_ >= 0) ::shutdown(sock_, SHUT_RDWR);
    if (worker_thread_.joinable()) worker_thread_.join();
    child_.terminate(0);
    const auto* sys = dynamic_cast<const std::system_error*>(&e);
    const bool limit = !sys || sys->code() == std::errc::resource_unavailable_try_again;
    throw RuntimeError("cannot start the reader thread of DataLoader worker " + std::to_string(spec_.worker_id) +
                       ": " + e.what() + (limit ? thread_limits_text() : std::string()));
  }
}

WorkerLink::~WorkerLink() { stop(); }

bool WorkerLink::send(FrameType type, const std::string& body, int fd) {
  std::lock_guard<std::mutex> lock(write_mu_);
  if (sock_ < 0 || stopping_.load(std::memory_order_relaxed)) return false;
  return write_frame(sock_, type, body, fd);
}

void WorkerLink::read_loop() {
  // Workers send no descriptors: frames are read through a buffer.
  FrameReader reader(sock_);
  Frame f;
  while (reader.next(f) == ReadStatus::Ok) {
    events_->on_frame(spec_.worker_id, spec_.generation, f);
    f.body.clear();
  }
  if (stopping_.load()) return;  // our own stop(): nothing to report
  WorkerExit how = reap_after_eof();
  if (stopping_.load()) return;
  how.pid = pid_;  // the down may come before the pool has recorded the pid
  events_->on_down(spec_.worker_id, spec_.generation, how);
}

WorkerExit WorkerLink::reap_after_eof() {
  {
    std::lock_guard<std::mutex> lock(reason_mu_);
    if (forced_) {
      child_.wait_exit(2000);
      return *forced_;
    }
  }
  if (spec_.in_process) return WorkerExit{WorkerExit::Kind::ClosedLink, 0, "the worker thread ended"};
  // The socket closes while the process exits: the exit status follows at once.
  if (auto st = child_.wait_exit(2000)) {
    if (st->collected_elsewhere) return WorkerExit{WorkerExit::Kind::StatusLost, 0, ""};
    if (st->signaled) return with_oom_evidence(WorkerExit{WorkerExit::Kind::Signal, st->code, ""});
    return WorkerExit{WorkerExit::Kind::ExitCode, st->code, ""};
  }
  child_.kill(SIGKILL);
  child_.wait_exit(2000);
  return WorkerExit{WorkerExit::Kind::ClosedLink, 0, "it was still running and was killed"};
}

void WorkerLink::kill_with_reason(const WorkerExit& how) {
  {
    std::lock_guard<std::mutex> lock(reason_mu_);
    if (!forced_) forced_ = std::make_unique<WorkerExit>(how);
  }
  if (pid_ > 0) ::kill(pid_, SIGKILL);
  // A grandchild may still hold the child's end: make sure the reader wakes.
  if (sock_ >= 0) ::shutdown(sock_, SHUT_RDWR);
}

char WorkerLink::process_state() const {
  if (pid_ <= 0) return '?';
  std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
  std::string stat;
  std::getline(in, stat);
  auto rp = stat.rfind(')');
  return rp == std::string::npos || rp + 2 >= stat.size() ? '?' : stat[rp + 2];
}

std::optional<WorkerExit> WorkerLink::exited_with_socket_open() const {
  if (pid_ <= 0) return std::nullopt;
  auto st = child_.exited_unreaped();
  if (!st) return std::nullopt;
  return with_oom_evidence(
      WorkerExit{st->signaled ? WorkerExit::Kind::Signal : WorkerExit::Kind::ExitCode, st->code, ""});
}

WorkerExit WorkerLink::with_oom_evidence(WorkerExit how) const {
  // SIGKILL from the OOM killer or from anyone else looks the same; the count of OOM
  // kills in the worker's memory cgroup tells them apart.
  if (how.kind != WorkerExit::Kind::Signal || how.code != SIGKILL || !oom_) return how;
  const auto now = read_oom_kills(oom_->file);
  if (!now || *now <= oom_->kills) return how;
  how.oom_killed = true;
  how.oom_evidence = "oom_kill in " + oom_->file + " went from " + std::to_string(oom_->kills) + " to " +
                     std::to_string(*now) + " while it ran";
  return how;
}

void WorkerLink::stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  stopping_ = true;
  {
    // No writer is in the middle of a frame once we hold the write lock.
    std::lock_guard<std::mutex> w(write_mu_);
    if (sock_ >= 0) ::shutdown(sock_, SHUT_RDWR);
  }
  if (reader_.joinable()) reader_.join();
  if (spec_.in_process) {
    if (worker_thread_.joinable()) worker_thread_.join();
    sock_ = -1;
    pair_[1].reset();  // the worker thread's end: it has ended
    pair_[0].reset();
  } else {
    child_.terminate();  // closes the socket, SIGTERM after a grace period, SIGKILL, reap
    sock_ = -1;
  }
}

}  // namespace loader::runtime
