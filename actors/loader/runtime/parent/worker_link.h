// Link: one incarnation of a worker as the pipeline sees it (an interface; the
// pipeline makes its links through a LinkFactory).  WorkerLink: the local one, a child
// process (or a thread for WorkerMode::InProcess), the socket to it and the thread that
// reads that socket.  Owned by exactly one ShmTransport (worker k's local transport, which the pipeline's SlotPlacement holds); move-free (held by unique_ptr).
//
// Threads and who calls what:
//   - the constructor (which starts the worker), stop(), kill_with_reason(): the owner
//     (the pipeline), never two at once: a restart and the watchdog's kill run on the
//     slot's actor, one message at a time; the first start and shutdown run on the
//     application thread, before the actors exist and after they are gone.
//   - send(): any thread; writes are serialised by the link's write mutex.
//   - the reader thread calls LinkFrames::on_frame for every frame, then
//     LinkFrames::on_down exactly once when the socket breaks (unless stop() was
//     called first): it reaps the process itself, so it can say how it ended.
//
// Teardown order (stop): shut the socket down (the worker sees EOF and exits; the
// reader wakes), join the reader, then end the process (SIGTERM after a grace
// period, SIGKILL, reap) or join the worker thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "loader/runtime/os/child_process.h"
#include "loader/runtime/os/oom.h"
#include "loader/runtime/wire.h"
#include "loader/runtime/worker_exit.h"

namespace loader::runtime {

/// What a local link's reader thread reports: every frame the worker wrote on its
/// socket, then how the incarnation ended.  Implemented by ShmTransport, which decodes
/// the frames into the pool's LinkEvents.  On the link's reader thread.
class LinkFrames {
 public:
  virtual ~LinkFrames() = default;
  virtual void on_frame(int worker, uint32_t gen, Frame& frame) = 0;
  virtual void on_down(int worker, uint32_t gen, const WorkerExit& how) = 0;
};

/// One incarnation of a worker as the pipeline sees it: frames out (`send`), frames in
/// (LinkFrames, on a thread of the link's own), teardown.  WorkerLink below is the
/// local one; the pipeline makes its links through a LinkFactory, so another kind plugs
/// in without a change to the pipeline: the scripted links of the pipeline's
/// deterministic tests (pipeline_test.cpp).
class Link {
 public:
  struct Spec {
    int worker_id = 0;
    uint32_t generation = 0;
    bool in_process = false;     ///< a thread of this process instead of a child process
    std::string executable;      ///< worker program; empty: this program (/proc/self/exe)
  };
  virtual ~Link() = default;

  /// Writes one frame (optionally passing `fd`).  False once the link is broken.
  virtual bool send(FrameType type, const std::string& body, int fd = -1) = 0;
  /// Ends the incarnation.  Idempotent.
  virtual void stop() = 0;
  /// For the watchdog: the process is frozen (or exited while a grandchild keeps
  /// the socket open, or never said hello): kill it; the link reports `how` (on_down).
  virtual void kill_with_reason(const WorkerExit& how) = 0;
  /// The process state letter from /proc ('R', 'S', 'T', ...; '?' for a thread).
  virtual char process_state() const = 0;
  /// How the process ended, when it exited but its socket is still open (a
  /// grandchild holds it); nullopt while it runs.  Does not reap.
  virtual std::optional<WorkerExit> exited_with_socket_open() const = 0;
  /// The worker's pid (-1: a thread, or no local process).
  virtual int pid() const = 0;
  virtual uint32_t generation() const = 0;
};

/// Makes the link of one incarnation; throws RuntimeError when the worker cannot start.
/// `frames` outlives the link.  Called by worker k's ShmTransport, on its owner (the
/// application thread or slot actor k).
using LinkFactory = std::function<std::unique_ptr<Link>(const Link::Spec& spec, LinkFrames* frames)>;

/// The local link: a child process (or a thread), its socket and its reader thread.
class WorkerLink final : public Link {
 public:
  using Spec = Link::Spec;

  /// Starts the worker and its reader.  Throws RuntimeError when it cannot start.
  /// `frames` must outlive the link (its transport owns it).
  WorkerLink(const Spec& spec, LinkFrames* frames);
  ~WorkerLink() override;
  WorkerLink(const WorkerLink&) = delete;
  WorkerLink& operator=(const WorkerLink&) = delete;

  bool send(FrameType type, const std::string& body, int fd = -1) override;
  /// Ends the incarnation (see the teardown order above).  Idempotent.
  void stop() override;
  void kill_with_reason(const WorkerExit& how) override;
  char process_state() const override;
  std::optional<WorkerExit> exited_with_socket_open() const override;

  int pid() const override { return pid_; }
  uint32_t generation() const override { return spec_.generation; }
  int worker_id() const { return spec_.worker_id; }

 private:
  void read_loop();
  WorkerExit reap_after_eof();
  /// `how` with the OOM killer named when the worker's memory cgroup counted an OOM kill
  /// since the worker started (a SIGKILL only).
  WorkerExit with_oom_evidence(WorkerExit how) const;

  Spec spec_;
  LinkFrames* events_;
  ChildProcess child_;           // process workers
  int sock_ = -1;                // our end (the child's socket, or pair_[0] for threads); not owned
  UniqueFd pair_[2];             // in-process: the socketpair (ours, the worker thread's)
  std::thread worker_thread_;    // in-process workers
  std::thread reader_;
  int pid_ = -1;
  std::optional<OomCounter> oom_;  // its memory cgroup's OOM-kill count at spawn (set once)
  std::mutex write_mu_;
  std::mutex stop_mu_;
  std::atomic<bool> stopping_{false};
  std::mutex reason_mu_;
  std::unique_ptr<WorkerExit> forced_;  // why the watchdog killed it
  bool stopped_ = false;
};

}  // namespace loader::runtime
