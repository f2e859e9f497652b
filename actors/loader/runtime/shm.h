// Shared-memory segments for batch slabs.
//
// The parent creates each segment with Boost.Interprocess, reserves its pages
// (posix_fallocate: a full /dev/shm is a clean error here, never a SIGBUS later),
// maps it, and unlinks the name at once: from then on the segment lives only as
// long as a mapping or a file descriptor does, so nothing can be left behind in
// /dev/shm, even when the process is killed.  Children receive the descriptor over
// their socket (SCM_RIGHTS) and map it with ShmMapping.
//
//   auto seg = ShmSegment::create(8 << 20);   // 8 MiB, mapped, name already unlinked
//   std::memset(seg->data(), 0, seg->size());
//   send_fd(sock, seg->fd());
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "loader/error.h"

namespace loader::runtime {

/// Not enough shared memory: says how much was needed and how much is free.
class ShmError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

/// Directory of POSIX shared memory ("/dev/shm"), overridable with LOADER_SHM_DIR for tests.
std::string shm_dir();
/// Bytes free for unprivileged use in shm_dir().
uint64_t shm_free_bytes();
/// Prefix of every segment name this process creates: "loader_<pid>_".
std::string shm_name_prefix();
/// Removes segments named loader_<pid>_* whose owner process is gone (left by a
/// killed program during the instant between create and unlink).  Returns the count.
int sweep_dead_segments();

class ShmSegment {
 public:
  /// Creates, reserves and maps `size` bytes; throws ShmError when /dev/shm is too small.
  static std::shared_ptr<ShmSegment> create(size_t size);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  void* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  int fd() const noexcept { return fd_; }

 private:
  ShmSegment() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  void* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
};

/// A child's mapping of a segment received as a descriptor.  Move-only.
class ShmMapping {
 public:
  ShmMapping() = default;
  /// Maps `size` bytes of `fd` read-write and closes `fd`.
  ShmMapping(int fd, size_t size);
  ~ShmMapping();
  ShmMapping(ShmMapping&& o) noexcept;
  ShmMapping& operator=(ShmMapping&& o) noexcept;
  ShmMapping(const ShmMapping&) = delete;
  ShmMapping& operator=(const ShmMapping&) = delete;
  void* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace loader::runtime
