// The uplink actor: the main process as a worker actor sees it.  A thin shell over an
// UplinkSink: in a child process the Uplink (uplink.h: a result_msg becomes a Result
// frame in the result ring, `ready` a Ready frame, `fatal` an InitError frame and the
// worker's exit status); on a worker host (`loader serve`) a RemoteSession
// (remote_session.h), which sends them over CAF's network layer.  The worker actor is
// the same in both.
#pragma once

#include <caf/all.hpp>

#include "loader/runtime/protocol.h"

#include "loader/runtime/epoch.h"

namespace loader::runtime {

/// Where the uplink actor hands what the worker actor tells the main process.  Called
/// on the uplink actor's thread (its host's).
class UplinkSink {
 public:
  virtual ~UplinkSink() = default;
  /// A task's outcome (result_msg).
  virtual void result(WorkerReply& r) = 0;
  /// The dataset was built and worker_init_fn ran.
  virtual void ready() = 0;
  /// How the iterable stream answering `task` began.
  virtual void stream_start(uint64_t task, const StreamStart& start) = 0;
  /// The worker cannot go on (type, message, `when` if not at start; its exit status).
  virtual void fatal(const std::string& type, const std::string& message, const std::string& when, int status) = 0;
};

/// Spawns the uplink actor over `sink`, which must outlive it.  Spawned lazily: it
/// runs on the thread of the first message sent to it (the worker host's).
uplink_actor spawn_uplink_actor(caf::actor_system& sys, UplinkSink* sink);

}  // namespace loader::runtime
