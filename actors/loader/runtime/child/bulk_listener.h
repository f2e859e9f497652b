// The bulk stream of a worker host (`loader serve`, remote_protocol.h): a TCP listener
// beside CAF's published port, and per session a BulkSink, the connection its client
// attached with the session's key.
//
// BulkListener owns the listening socket, the connections not yet greeted and its
// thread.  The thread accepts, reads each connection's greeting (kBulkHelloBytes within
// `hello_timeout`; a connection that says anything else, or nothing in time, is closed
// and counted), and hands a good one to the sink its key names, answering kBulkAck.
// The gate opens a sink per session (open()), the session's end closes it (close()).
//
// BulkSink owns its session's connection and the thread that writes to it: send() and
// send_reply() (the session's thread) queue a frame and return, so the worker computes
// its next task while the last batch goes out (as CAF's multiplexer thread sends a BASP
// message); the client's credits bound the queue.  attach() runs on the listener's
// thread.  A write that fails (the client went away, or its socket did not take the
// frame within the send timeout: a client frozen or cut off) marks the sink broken:
// later sends say so, and the session ends.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loader/runtime/os/unique_fd.h"
#include "loader/runtime/frames.h"
#include "loader/runtime/wire.h"

namespace loader::runtime {

class BulkSink {
 public:
  enum class Sent { NotAttached, Sent, Broken };
  /// `send_timeout`: how long one frame may wait for the client's socket.
  explicit BulkSink(std::chrono::milliseconds send_timeout) : send_timeout_(send_timeout) {}
  ~BulkSink();  // stops and joins the writer (a frame being written ends within the send timeout)
  BulkSink(const BulkSink&) = delete;
  BulkSink& operator=(const BulkSink&) = delete;
  /// One frame to the client, if it attached (queued).
  Sent send(FrameType type, std::string body);
  /// A RemoteReply: its front, then its tensors' bytes from where they are (the sink
  /// holds the tensors until they are written).
  Sent send_reply(RemoteReplyFrame frame);
  bool attached() const;
  /// The listener's thread: the client greeted with this sink's key.  False when the
  /// sink has a connection already (a second greeting with one key is refused).
  bool attach(UniqueFd fd);

 private:
  struct Out {
    FrameType type;
    std::string front;            ///< the body, or a RemoteReply's front
    std::vector<Tensor> tensors;  ///< a RemoteReply's tensors: their bytes follow
  };
  Sent queue(Out out);
  void write_loop();

  const std::chrono::milliseconds send_timeout_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Out> out_;
  UniqueFd fd_;
  bool broken_ = false;
  bool stopping_ = false;
  std::thread writer_;
};

class BulkListener {
 public:
  /// Listens on `host`:`port` (0: a free port).  Throws RuntimeError saying why not.
  BulkListener(const std::string& host, uint16_t port, std::chrono::milliseconds hello_timeout,
               std::chrono::milliseconds send_timeout);
  ~BulkListener();  // stops and joins its thread; closes every connection it holds
  BulkListener(const BulkListener&) = delete;
  BulkListener& operator=(const BulkListener&) = delete;

  uint16_t port() const { return port_; }
  /// A new session's sink, found by the greeting with `key` until close(key).  Any thread.
  std::shared_ptr<BulkSink> open(const std::string& key);
  void close(const std::string& key);
  /// Connections closed without a good greeting so far.  Any thread.
  int64_t refused() const;

 private:
  void loop();

  const std::chrono::milliseconds hello_timeout_;
  const std::chrono::milliseconds send_timeout_;
  UniqueFd listen_;
  UniqueFd wake_;  ///< an eventfd: the destructor stops the loop
  uint16_t port_ = 0;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<BulkSink>> sinks_;
  int64_t refused_ = 0;
  std::thread thread_;
};

}  // namespace loader::runtime
