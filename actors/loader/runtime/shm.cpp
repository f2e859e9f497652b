#include "loader/runtime/shm.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace bip = boost::interprocess;

namespace loader::runtime {

std::string shm_dir() {
  const char* d = std::getenv("LOADER_SHM_DIR");
  return d && *d ? d : "/dev/shm";
}

uint64_t shm_free_bytes() {
  struct statvfs st {};
  if (statvfs(shm_dir().c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

std::string shm_name_prefix() { return "loader_" + std::to_string(getpid()) + "_"; }

int sweep_dead_segments() {
  int removed = 0;
  DIR* dir = opendir(shm_dir().c_str());
  if (!dir) return 0;
  while (dirent* e = readdir(dir)) {
    std::string name = e->d_name;
    if (name.rfind("loader_", 0) != 0) continue;
    char* end = nullptr;
    long pid = std::strtol(name.c_str() + 7, &end, 10);
    if (pid <= 0 || !end || *end != '_') continue;
    if (kill(static_cast<pid_t>(pid), 0) == -1 && errno == ESRCH) {
      if (bip::shared_memory_object::remove(name.c_str())) ++removed;
    }
  }
  closedir(dir);
  return removed;
}

struct ShmSegment::Impl {
  bip::shared_memory_object shm;
  bip::mapped_region region;
};

static std::string human(uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return std::to_string(bytes) + " bytes (" + buf + ")";
}

std::shared_ptr<ShmSegment> ShmSegment::create(size_t size) {
  static std::atomic<uint64_t> counter{0};
  if (size == 0) size = 1;
  std::string name = shm_name_prefix() + std::to_string(counter.fetch_add(1));
  std::shared_ptr<ShmSegment> seg(new ShmSegment());
  auto impl = std::make_unique<Impl>();
  try {
    impl->shm = bip::shared_memory_object(bip::create_only, name.c_str(), bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    throw ShmError("cannot create shared-memory segment " + name + " in " + shm_dir() + ": " + e.what());
  }
  // From here on the name must go, whatever happens.
  struct Unlink {
    std::string n;
    ~Unlink() { bip::shared_memory_object::remove(n.c_str()); }
  } unlink{name};
  int fd = impl->shm.get_mapping_handle().handle;
  fcntl(fd, F_SETFD, FD_CLOEXEC);  // Boost opens without O_CLOEXEC
  try {
    impl->shm.truncate(static_cast<bip::offset_t>(size));
  } catch (const bip::interprocess_exception& e) {
    throw ShmError("cannot size shared-memory segment " + name + " to " + human(size) + ": " + e.what());
  }
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(size));
  if (rc != 0) {
    throw ShmError("shared memory is full: a batch slab needs " + human(size) + " but " + shm_dir() +
                   " has " + human(shm_free_bytes()) +
                   " free (posix_fallocate: " + std::strerror(rc) +
                   "). Enlarge " + shm_dir() + " (e.g. docker run --shm-size=2g), or lower batch_size, "
                   "prefetch_factor or num_workers.");
  }
  try {
    impl->region = bip::mapped_region(impl->shm, bip::read_write);
  } catch (const bip::interprocess_exception& e) {
    throw ShmError("cannot map shared-memory segment " + name + ": " + e.what());
  }
  seg->data_ = impl->region.get_address();
  seg->size_ = size;
  seg->fd_ = fd;
  seg->impl_ = std::move(impl);
  return seg;
}

ShmSegment::~ShmSegment() = default;  // Boost unmaps and closes the descriptor

ShmMapping::ShmMapping(int fd, size_t size) : size_(size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED)
    throw RuntimeError(std::string("worker cannot map a shared-memory slab of ") + std::to_string(size) +
                       " bytes: " + std::strerror(err));
  data_ = p;
}

ShmMapping::~ShmMapping() {
  if (data_) munmap(data_, size_);
}

ShmMapping::ShmMapping(ShmMapping&& o) noexcept : data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

ShmMapping& ShmMapping::operator=(ShmMapping&& o) noexcept {
  if (this != &o) {
    if (data_) munmap(data_, size_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

}  // namespace loader::runtime
