#include "loader/runtime/wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <iterator>
#include <cerrno>
#include <cstring>

#include "loader/error.h"
#include "loader/value.h"

namespace loader::runtime {

const char* frame_type_name(FrameType t) {
  switch (t) {
    case FrameType::Init: return "Init";
    case FrameType::AddSlab: return "AddSlab";
    case FrameType::DropSlab: return "DropSlab";
    case FrameType::Task: return "Task";
    case FrameType::Rings: return "Rings";
    case FrameType::UseSlab: return "UseSlab";
    case FrameType::Epoch: return "Epoch";
    case FrameType::Shutdown: return "Shutdown";
    case FrameType::StatePage: return "StatePage";
    case FrameType::SetRng: return "SetRng";
    case FrameType::ResumeStream: return "ResumeStream";
    case FrameType::TaskSeeds: return "TaskSeeds";
    case FrameType::StreamStart: return "StreamStart";
    case FrameType::RemoteReply: return "RemoteReply";
    case FrameType::Hello: return "Hello";
    case FrameType::Ready: return "Ready";
    case FrameType::InitError: return "InitError";
    case FrameType::Result: return "Result";
    case FrameType::Need: return "Need";
    case FrameType::TaskError: return "TaskError";
    case FrameType::IterEnd: return "IterEnd";
  }
  return "?";
}

void put_u64(std::string& out, uint64_t v) { loader::put_u64(out, v); }

void put_string(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out.append(s);
}

uint64_t Reader::u64() { return loader::get_u64(p_, end_); }

std::string Reader::string() {
  uint64_t n = u64();
  if (n > remaining()) throw ValueError("frame: string of " + std::to_string(n) + " bytes overruns the frame");
  std::string s(p_, n);
  p_ += n;
  return s;
}

std::string Reader::rest() {
  std::string s(p_, remaining());
  p_ = end_;
  return s;
}

FrameHeader parse_frame_header(const char* h) {
  uint32_t len;
  std::memcpy(&len, h, 4);
  const auto type = static_cast<FrameType>(static_cast<uint8_t>(h[4]));
  if (len == 0) throw RuntimeError("a frame of length 0 (a frame holds at least its type)");
  if (len - 1 > kMaxFrameBody)
    throw RuntimeError(std::string("a ") + frame_type_name(type) + " frame claims a body of " + std::to_string(len - 1) +
                       " bytes, more than a frame may have (" + std::to_string(kMaxFrameBody >> 20) + " MiB)");
  return FrameHeader{type, len - 1};
}

bool write_frame(int sock, FrameType type, const std::string& body, int fd) {
  return write_frame_parts(sock, type, {body}, fd);
}

namespace {
bool write_parts(int sock, FrameType type, const std::string_view* parts, size_t nparts, int fd) {
  uint64_t body = 0;
  for (size_t i = 0; i < nparts; ++i) body += parts[i].size();
  if (body > kMaxFrameBody)
    throw RuntimeError(std::string("a ") + frame_type_name(type) + " frame of " + std::to_string(body) +
                       " bytes is larger than a frame can be (" + std::to_string(kMaxFrameBody >> 20) +
                       " MiB): use a smaller batch_size");
  const auto len = static_cast<uint32_t>(body + 1);
  char header[kFrameHeaderBytes];
  std::memcpy(header, &len, 4);
  header[4] = static_cast<char>(type);
  iovec stack[16];
  std::vector<iovec> heap;
  iovec* iov = stack;
  if (nparts + 1 > std::size(stack)) {
    heap.resize(nparts + 1);
    iov = heap.data();
  }
  size_t count = 0;
  iov[count++] = {header, kFrameHeaderBytes};
  for (size_t i = 0; i < nparts; ++i)
    if (!parts[i].empty()) iov[count++] = {const_cast<char*>(parts[i].data()), parts[i].size()};
  // The descriptor goes with the first sendmsg (its first byte); a partial write goes
  // on from where it stopped.  At most IOV_MAX parts a call.
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  bool with_fd = fd >= 0;
  size_t first = 0;  // iov[first..count) is what is left to write
  while (first < count) {
    msghdr msg{};
    msg.msg_iov = iov + first;
    msg.msg_iovlen = std::min<size_t>(count - first, IOV_MAX);
    if (with_fd) {
      std::memset(control, 0, sizeof control);
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    const ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    with_fd = false;
    auto left = static_cast<size_t>(n);
    while (first < count && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (left) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return true;
}
}  // namespace

bool write_frame_parts(int sock, FrameType type, std::initializer_list<std::string_view> parts, int fd) {
  return write_parts(sock, type, parts.begin(), parts.size(), fd);
}

bool write_frame_parts(int sock, FrameType type, const std::vector<std::string_view>& parts, int fd) {
  return write_parts(sock, type, parts.data(), parts.size(), fd);
}

static ReadStatus read_exact(int sock, char* buf, size_t n, int* fd_out) {
  size_t got = 0;
  while (got < n) {
    iovec iov{buf + got, n - got};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    if (fd_out) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof control;
    }
    // Without a descriptor to take, the kernel fills the whole buffer before it returns
    // (one call per tensor of a bulk stream's batch, not one per segment that arrived).
    ssize_t r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | (fd_out ? 0 : MSG_WAITALL));
    if (r < 0) {
      if (errno == EINTR) continue;
      return ReadStatus::Error;
    }
    if (r == 0) return ReadStatus::Eof;
    if (fd_out) {
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
          if (*fd_out >= 0) close(*fd_out);
          *fd_out = fd;
        }
      }
    }
    got += static_cast<size_t>(r);
  }
  return ReadStatus::Ok;
}

ReadStatus read_bytes(int sock, char* buf, size_t n) { return read_exact(sock, buf, n, nullptr); }

ReadStatus FrameReader::next(Frame& out) {
  out.fd.reset();
  while (true) {
    size_t have = end_ - begin_;
    if (have >= kFrameHeaderBytes) {
      FrameHeader h;
      try {
        h = parse_frame_header(buf_.data() + begin_);
      } catch (const Error&) {
        return ReadStatus::Error;
      }
      const size_t whole = kFrameHeaderBytes + static_cast<size_t>(h.body);
      if (have >= whole) {
        out.type = h.type;
        out.body.assign(buf_.data() + begin_ + kFrameHeaderBytes, static_cast<size_t>(h.body));
        begin_ += whole;
        return ReadStatus::Ok;
      }
      if (whole > buf_.size()) buf_.resize(whole);
    }
    // Compact, then read whatever has arrived (at least one byte, blocking).
    if (begin_ > 0) {
      std::memmove(buf_.data(), buf_.data() + begin_, have);
      begin_ = 0;
      end_ = have;
    }
    ssize_t r = ::recv(sock_, buf_.data() + end_, buf_.size() - end_, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return ReadStatus::Error;
    }
    if (r == 0) return have == 0 ? ReadStatus::Eof : ReadStatus::Error;
    end_ += static_cast<size_t>(r);
  }
}

ReadStatus read_frame(int sock, Frame& out, int timeout_ms) {
  pollfd p{sock, POLLIN, 0};
  while (timeout_ms >= 0) {  // a blocking read needs no poll
    int r = poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ReadStatus::Error;
    if (r == 0) return ReadStatus::Timeout;
    break;
  }
  char header[kFrameHeaderBytes];
  int fd = -1;
  ReadStatus st = read_exact(sock, header, kFrameHeaderBytes, &fd);
  if (st != ReadStatus::Ok) {
    if (fd >= 0) close(fd);
    return st;
  }
  FrameHeader h;
  try {
    h = parse_frame_header(header);
  } catch (const Error&) {
    if (fd >= 0) close(fd);
    return ReadStatus::Error;
  }
  out.type = h.type;
  out.body.resize(static_cast<size_t>(h.body));
  if (h.body > 0) {
    st = read_exact(sock, out.body.data(), static_cast<size_t>(h.body), nullptr);
    if (st != ReadStatus::Ok) {
      if (fd >= 0) close(fd);
      return st == ReadStatus::Eof ? ReadStatus::Error : st;
    }
  }
  out.fd = UniqueFd(fd);
  return ReadStatus::Ok;
}

}  // namespace loader::runtime
