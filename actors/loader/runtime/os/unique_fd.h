// UniqueFd: the one owner of a file descriptor (a socket, a descriptor received with
// SCM_RIGHTS, a shared-memory file).  Move-only; an empty one holds -1; the destructor
// closes what it holds and never throws.
//
//   UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
//   if (!fd) throw ...;
//   ShmMapping m(std::move(fd), size);   // the mapping takes it over (and closes it)
//
// Thread use: as an int: one owner; get() may be read by any thread while the owner
// keeps it.
#pragma once

#include <unistd.h>

#include <utility>

namespace loader::runtime {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  /// Gives up ownership: the caller closes the descriptor.
  int release() noexcept { return std::exchange(fd_, -1); }
  /// Closes what it holds, then holds `fd`.
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0 && fd_ != fd) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace loader::runtime
