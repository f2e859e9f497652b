// RemoteSession: one remote worker slot on a worker host (`loader serve`): the same
// worker actor a child process hosts (worker_actor.h), its uplink actor, and a private
// generator state page, driven one message at a time on the session actor's thread
// (an InlineExecutor, as the child's WorkerHost drives them).  What the worker tells
// its uplink goes to the client's link actor over CAF's network layer
// (remote_protocol.h): each reply with its batch and the generator states its task
// started from and ended with, read from the page between two tasks (nothing runs then,
// so the latest After record is the task's own).  Once the client attached its bulk
// stream (`bulk`, child/bulk_listener.h), replies and events go there as frames; before
// that, and without one, as BASP messages.
//
// Thread use: the session actor's (deliver, and the UplinkSink calls it causes).
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "loader/runtime/child/bulk_listener.h"
#include "loader/runtime/child/uplink_actor.h"
#include "loader/runtime/inline_executor.h"
#include "loader/runtime/protocol.h"

namespace loader::runtime {

/// What a worker host counts (its stats lines).  Any thread.
struct ServeCounters {
  std::atomic<int64_t> clients{0};       ///< sessions open now
  std::atomic<int64_t> sessions{0};      ///< sessions opened since the start
  std::atomic<int64_t> refused{0};       ///< clients refused (authentication, version)
  std::atomic<int64_t> tasks_done{0};
  std::atomic<int64_t> bytes_sent{0};    ///< batches sent: their encoded bytes, or on a bulk stream their tensors' bytes
  std::atomic<int64_t> bytes_bulk{0};    ///< ... of them on bulk streams
};

class RemoteSession final : public UplinkSink {
 public:
  /// `client`: the main process's link actor of this slot (a proxy of CAF's network
  /// layer); `counters` outlives the session; `bulk`: its bulk stream's sink, or null.
  RemoteSession(caf::actor_system& sys, caf::actor client, ServeCounters& counters,
                std::shared_ptr<BulkSink> bulk = nullptr);
  ~RemoteSession() override;
  RemoteSession(const RemoteSession&) = delete;
  RemoteSession& operator=(const RemoteSession&) = delete;

  /// Hands one message to the worker actor and runs it and its uplink until both are idle.
  template <class... Ts>
  void deliver(Ts&&... xs) {
    exec_.send(worker_, std::forward<Ts>(xs)...);
    exec_.run();
  }
  /// The worker said it cannot go on (its actor has quit), or the bulk stream broke.
  bool ended() const { return ended_; }

  void result(WorkerReply& r) override;
  void ready() override;
  void stream_start(uint64_t task, const StreamStart& start) override;
  void fatal(const std::string& type, const std::string& message, const std::string& when, int status) override;

 private:
  /// One event on the bulk stream: true when it went there (false: not attached, send
  /// it over BASP); a broken stream ends the session.
  bool bulk_sent(BulkSink::Sent s);

  caf::actor client_;
  ServeCounters& counters_;
  std::shared_ptr<BulkSink> bulk_;
  std::unique_ptr<uint64_t[]> page_;  ///< the generator state page (aligned words)
  size_t page_bytes_ = 0;
  InlineExecutor exec_;
  uplink_actor uplink_;
  worker_actor worker_;
  bool ended_ = false;
};

}  // namespace loader::runtime
