// Shared-memory segments for batch slabs.
//
// The parent creates each segment without a name: open(shm_dir(), O_TMPFILE) (a file
// in the shared-memory mount that never has a directory entry), or memfd_create where
// the mount cannot make one or is too small for the loader's slab pool (SlabPlace).  No instant exists in which a crash could leave a
// segment behind: the pages go when the last descriptor and mapping go.  It reserves
// every page (posix_fallocate: a full /dev/shm is a clean error here, never a SIGBUS
// later) and maps the file with Boost.Interprocess (file_mapping of /proc/self/fd/N +
// mapped_region).  Children receive the descriptor over their socket (SCM_RIGHTS) and
// map it with ShmMapping.
//
//   auto seg = ShmSegment::create(8 << 20);   // 8 MiB, mapped, never named
//   std::memset(seg->data(), 0, seg->size());
//   send_fd(sock, seg->fd());
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "loader/error.h"
#include "loader/runtime/os/unique_fd.h"

namespace loader::runtime {

/// Not enough shared memory: says how much was needed and how much is free.
class ShmError : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

/// Directory of POSIX shared memory ("/dev/shm"), overridable with LOADER_SHM_DIR for tests.
std::string shm_dir();

/// Where a slab takes its pages.  ShmDir: a name-less file of shm_dir() (its pages count
/// against that mount, which `df` shows), or a memfd where the directory is not a writable
/// file system.  Memory: always a memfd, whose pages count against memory only (the
/// kernel's internal tmpfs: no size option, so a small /dev/shm, such as Docker's 64 MB
/// default, does not limit it; a memory cgroup does, as it does /dev/shm's pages).  A
/// loader uses Memory when its slab pool does not fit in shm_dir() (WorkerSlabs).
enum class SlabPlace { ShmDir, Memory };

/// Bytes free for unprivileged use where slabs of `place` take their pages: shm_dir()'s
/// free space, or the memory available (MemAvailable) for Memory and where shm_dir() is
/// not a writable file system.
uint64_t shm_free_bytes(SlabPlace place = SlabPlace::ShmDir);
/// Where slabs of `place` take their pages, for messages: shm_dir(), "memory (memfd)",
/// or "memory (memfd_create: <dir> is not usable: <why>)".
std::string shm_where(SlabPlace place = SlabPlace::ShmDir);
/// The memory available to new pages (/proc/meminfo's MemAvailable), 0 when unknown.
uint64_t mem_available_bytes();
/// True when `path` (a /proc/PID/maps or /proc/PID/fd target) is a slab file:
/// an O_TMPFILE file of shm_dir() ("<dir>/#123 (deleted)") or "/memfd:loader-slab".
bool is_slab_path(const std::string& path);

class ShmSegment {
 public:
  /// Creates, reserves and maps `size` bytes where `place` says; throws ShmError when
  /// that place is too small.  Thread-safe (any thread may create segments).
  static std::shared_ptr<ShmSegment> create(size_t size, SlabPlace place = SlabPlace::ShmDir);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  void* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  int fd() const noexcept { return fd_.get(); }

 private:
  ShmSegment() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  void* data_ = nullptr;
  size_t size_ = 0;
  UniqueFd fd_;
};

/// A child's mapping of a segment received as a descriptor.  Move-only.
class ShmMapping {
 public:
  ShmMapping() = default;
  /// Maps `size` bytes of `fd` read-write and closes `fd`.
  ShmMapping(UniqueFd fd, size_t size);
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
