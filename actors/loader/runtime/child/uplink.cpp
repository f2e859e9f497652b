#include "loader/runtime/child/uplink.h"

#include <poll.h>

#include "loader/runtime/frames.h"
#include "loader/runtime/worker_rings.h"

namespace loader::runtime {

// The main process closed the link (or died): EOF or a hang-up on the socket.
bool Uplink::peer_gone() const {
  pollfd p{sock_, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

bool Uplink::hello() {
  return write_frame(sock_, FrameType::Hello, PidFrame{pid_}.encode());
}

void Uplink::result(WorkerReply& r) {
  if (status_) return;
  auto [type, body] = encode_reply(r);
  if (ring_ && r.kind == WorkerReply::Kind::Result &&
      ring_->write_result(static_cast<FrameType>(type), body, [this] { return peer_gone(); }))
    return;
  if (!write_frame(sock_, static_cast<FrameType>(type), body)) broken();
}

void Uplink::ready() {
  if (status_) return;
  if (!write_frame(sock_, FrameType::Ready, PidFrame{pid_}.encode())) broken();
}

void Uplink::stream_start(uint64_t task, const StreamStart& start) {
  if (status_) return;
  if (!write_frame(sock_, FrameType::StreamStart, encode_stream_start(task, start))) broken();
}

void Uplink::fatal(const std::string& type, const std::string& message, const std::string& when, int status) {
  if (status_) return;
  write_error(sock_, type, message, when);
  status_ = status;
}

bool Uplink::write_error(int sock, const std::string& type, const std::string& message, const std::string& when) {
  return write_frame(sock, FrameType::InitError, InitErrorFrame{type, message, when}.encode());
}

}  // namespace loader::runtime
