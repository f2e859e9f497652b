#include "loader/runtime/child/bulk_listener.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "loader/error.h"
#include "loader/runtime/remote_protocol.h"

namespace loader::runtime {

// ------------------------------------------------------------------ BulkSink

BulkSink::~BulkSink() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (writer_.joinable()) writer_.join();
}

BulkSink::Sent BulkSink::queue(Out out) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (broken_) return Sent::Broken;
    if (!fd_) return Sent::NotAttached;
    out_.push_back(std::move(out));
  }
  wake_.notify_one();
  return Sent::Sent;
}

BulkSink::Sent BulkSink::send(FrameType type, std::string body) { return queue(Out{type, std::move(body), {}}); }

BulkSink::Sent BulkSink::send_reply(RemoteReplyFrame frame) {
  return queue(Out{FrameType::RemoteReply, std::move(frame.front), std::move(frame.tensors)});
}

void BulkSink::write_loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    wake_.wait(l, [&] { return stopping_ || !out_.empty(); });
    if (stopping_) return;
    Out o = std::move(out_.front());
    out_.pop_front();
    const int fd = fd_.get();
    l.unlock();  // fd_ is only reset on this thread, below, or by the destructor after the join
    std::vector<std::string_view> parts;
    parts.reserve(1 + o.tensors.size());
    parts.emplace_back(o.front);
    for (const Tensor& t : o.tensors) parts.emplace_back(static_cast<const char*>(t.data_ptr()), t.nbytes());
    const bool ok = write_frame_parts(fd, o.type, parts);
    l.lock();
    if (!ok) {
      broken_ = true;  // the client is gone, frozen or cut off: the session ends
      out_.clear();
      fd_.reset();
      return;
    }
  }
}

bool BulkSink::attached() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<bool>(fd_);
}

bool BulkSink::attach(UniqueFd fd) {
  std::lock_guard<std::mutex> l(mu_);
  if (fd_ || broken_ || stopping_) return false;
  // Blocking from here, each frame bounded by the send timeout.
  const int flags = fcntl(fd.get(), F_GETFL);
  if (flags >= 0) fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(send_timeout_.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((send_timeout_.count() % 1000) * 1000);
  setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  const int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const char ack = kBulkAck;
  if (::send(fd.get(), &ack, 1, MSG_NOSIGNAL) != 1) return false;
  fd_ = std::move(fd);
  writer_ = std::thread([this] { write_loop(); });
  return true;
}

// ------------------------------------------------------------------ BulkListener

BulkListener::BulkListener(const std::string& host, uint16_t port, std::chrono::milliseconds hello_timeout,
                           std::chrono::milliseconds send_timeout)
    : hello_timeout_(hello_timeout), send_timeout_(send_timeout) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string where = host + ":" + std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    throw RuntimeError("the bulk port: cannot resolve " + host + ": " + gai_strerror(rc));
  std::string why = "no address";
  for (addrinfo* p = res; p && !listen_; p = p->ai_next) {
    UniqueFd fd(socket(p->ai_family, p->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, p->ai_protocol));
    if (!fd) {
      why = std::strerror(errno);
      continue;
    }
    const int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd.get(), p->ai_addr, p->ai_addrlen) != 0 || listen(fd.get(), 64) != 0) {
      why = std::strerror(errno);
      continue;
    }
    listen_ = std::move(fd);
  }
  freeaddrinfo(res);
  if (!listen_) throw RuntimeError("the bulk port: cannot listen on " + where + ": " + why);
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  getsockname(listen_.get(), reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&a)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&a)->sin_port);
  wake_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_) throw RuntimeError(std::string("the bulk port: eventfd: ") + std::strerror(errno));
  thread_ = std::thread([this] { loop(); });
}

BulkListener::~BulkListener() {
  const uint64_t one = 1;
  if (::write(wake_.get(), &one, sizeof one) < 0) {
  }
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<BulkSink> BulkListener::open(const std::string& key) {
  auto sink = std::make_shared<BulkSink>(send_timeout_);
  std::lock_guard<std::mutex> l(mu_);
  sinks_[key] = sink;
  return sink;
}

void BulkListener::close(const std::string& key) {
  std::lock_guard<std::mutex> l(mu_);
  sinks_.erase(key);
}

int64_t BulkListener::refused() const {
  std::lock_guard<std::mutex> l(mu_);
  return refused_;
}

void BulkListener::loop() {
  struct Pending {
    UniqueFd fd;
    std::chrono::steady_clock::time_point deadline;
    std::string hello;
  };
  constexpr size_t kMaxPending = 64;
  std::vector<Pending> pending;
  auto refuse = [&](size_t i) {
    pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
    std::lock_guard<std::mutex> l(mu_);
    ++refused_;
  };
  while (true) {
    std::vector<pollfd> fds{{wake_.get(), POLLIN, 0}, {listen_.get(), POLLIN, 0}};
    for (const Pending& p : pending) fds.push_back({p.fd.get(), POLLIN, 0});
    int wait_ms = -1;  // until the next greeting's deadline
    const auto now = std::chrono::steady_clock::now();
    for (const Pending& p : pending) {
      const auto left = std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(p.deadline - now).count() + 1);
      if (wait_ms < 0 || left < wait_ms) wait_ms = static_cast<int>(left);
    }
    const int n = poll(fds.data(), fds.size(), wait_ms);
    if (n < 0 && errno != EINTR) return;
    if (fds[0].revents) return;  // the destructor
    // Greetings first (their indices follow `pending` as polled).
    for (size_t i = pending.size(); i-- > 0;) {
      const short ev = fds[2 + i].revents;
      Pending& p = pending[i];
      if (ev & POLLIN) {
        char buf[kBulkHelloBytes];
        const ssize_t got = recv(p.fd.get(), buf, kBulkHelloBytes - p.hello.size(), 0);
        if (got <= 0) {
          if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
          refuse(i);
          continue;
        }
        p.hello.append(buf, static_cast<size_t>(got));
        if (p.hello.size() < kBulkHelloBytes) continue;
        std::shared_ptr<BulkSink> sink;
        if (auto key = parse_bulk_hello(p.hello.data(), p.hello.size())) {
          std::lock_guard<std::mutex> l(mu_);
          auto it = sinks_.find(*key);
          if (it != sinks_.end()) sink = it->second;
        }
        if (sink && sink->attach(std::move(p.fd))) {
          pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
          continue;
        }
        refuse(i);  // not a greeting, or no session has that key
      } else if (ev & (POLLERR | POLLHUP | POLLNVAL)) {
        refuse(i);
      } else if (std::chrono::steady_clock::now() >= p.deadline) {
        refuse(i);  // nothing, or not enough, in time
      }
    }
    if (fds[1].revents & POLLIN) {
      while (true) {
        UniqueFd c(accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!c) break;
        if (pending.size() >= kMaxPending) {  // the oldest greeting waits no longer
          refuse(0);
        }
        pending.push_back({std::move(c), std::chrono::steady_clock::now() + hello_timeout_, std::string()});
      }
    }
  }
}

}  // namespace loader::runtime
