// Uplink: how a worker's results and events reach the main process, without any actor.
//
// A Result goes into the worker's result ring (read by the main process without a
// reader-thread hop, worker_rings.h); everything else, and a Result too large for the
// ring, goes on the worker's socket.  The uplink actor (uplink_actor.h) is its shell;
// the worker host writes the start-up handshake (Hello) through it directly.
//
// Thread use: the worker host's thread only (the uplink actor runs there:
// InlineExecutor).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "loader/runtime/child/uplink_actor.h"
#include "loader/runtime/epoch.h"
#include "loader/runtime/protocol.h"

namespace loader::runtime {

class WorkerRingEnd;

class Uplink final : public UplinkSink {
 public:
  /// `sock`: the worker's socket (not owned); `pid`: what Hello and Ready report (0 in
  /// a thread of the main process).
  Uplink(int sock, pid_t pid) : sock_(sock), pid_(pid) {}

  /// The result ring, once the Rings frame was mapped (nullptr: the socket only).
  void set_ring(WorkerRingEnd* ring) { ring_ = ring; }

  /// The start-up handshake; false when the socket is broken.
  bool hello();
  /// A task's outcome (result_msg); a broken link ends the worker (status 0).
  void result(WorkerReply& r) override;
  /// The dataset was built and worker_init_fn ran (Ready).
  void ready() override;
  /// How the iterable stream answering `task` began (StreamStart, on the socket).
  void stream_start(uint64_t task, const StreamStart& start) override;
  /// The worker cannot go on: an InitError frame (type, message, `when` if not at
  /// start), and the worker ends with `status`.
  void fatal(const std::string& type, const std::string& message, const std::string& when, int status) override;

  /// The worker's exit status once it must end (the link broke, or fatal()).
  std::optional<int> status() const { return status_; }
  /// The main process closed the link (or died): EOF or a hang-up on the socket.
  bool peer_gone() const;

  /// An InitError frame on `sock` (also for a process that is no proper worker).
  static bool write_error(int sock, const std::string& type, const std::string& message,
                          const std::string& when = "");

 private:
  void broken() {
    if (!status_) status_ = 0;
  }

  int sock_;
  pid_t pid_;
  WorkerRingEnd* ring_ = nullptr;
  std::optional<int> status_;
};

}  // namespace loader::runtime
