#include "loader/runtime/os/shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <boost/interprocess/file_mapping.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "loader/runtime/os/os_error.h"

namespace bip = boost::interprocess;

namespace loader::runtime {

std::string shm_dir() {
  const char* d = std::getenv("LOADER_SHM_DIR");
  return d && *d ? d : "/dev/shm";
}

namespace {
/// The shm directory's file system, when slabs can be files in it (else errno).
bool shm_dir_usable(struct statvfs& st, int& err) {
  if (statvfs(shm_dir().c_str(), &st) != 0) {
    err = errno;
    return false;
  }
  if (st.f_flag & ST_RDONLY) {
    err = EROFS;
    return false;
  }
  return true;
}

}  // namespace

uint64_t mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

uint64_t shm_free_bytes(SlabPlace place) {
  if (place == SlabPlace::Memory) return mem_available_bytes();
  struct statvfs st {};
  int err = 0;
  if (!shm_dir_usable(st, err)) return mem_available_bytes();  // slabs are memfds
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

std::string shm_where(SlabPlace place) {
  if (place == SlabPlace::Memory) return "memory (memfd)";
  struct statvfs st {};
  int err = 0;
  if (shm_dir_usable(st, err)) return shm_dir();
  return "memory (memfd_create: " + shm_dir() + " is not usable: " + std::strerror(err) + ")";
}

bool is_slab_path(const std::string& path) {
  if (path.rfind("/memfd:loader-slab", 0) == 0) return true;
  const std::string dir = shm_dir() + "/#";
  return path.rfind(dir, 0) == 0;
}

namespace {

std::string human(uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return std::to_string(bytes) + " bytes (" + buf + ")";
}


/// A name-less file in the shared-memory mount (its pages count against that
/// mount, so the statvfs budget check keeps its meaning), else a memfd; only a memfd
/// for SlabPlace::Memory.
int open_nameless(SlabPlace place) {
  int fd = -1;
  int tmpfile_err = 0;
  if (place == SlabPlace::ShmDir) {
    fd = ::open(shm_dir().c_str(), O_TMPFILE | O_RDWR | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) return fd;
    tmpfile_err = errno;
  }
  fd = memfd_create("loader-slab", MFD_CLOEXEC);
  if (fd >= 0) return fd;
  const int memfd_err = errno;
  if (tmpfile_err == EMFILE || memfd_err == EMFILE)
    throw ShmError("cannot create a shared-memory slab: " + os_error_text(EMFILE));
  if (place == SlabPlace::Memory)
    throw ShmError(std::string("cannot create a shared-memory slab: memfd_create failed (") +
                   std::strerror(memfd_err) + ")");
  throw ShmError("cannot create a shared-memory slab: open(" + shm_dir() + ", O_TMPFILE) failed (" +
                 std::strerror(tmpfile_err) + ") and memfd_create failed (" + std::strerror(memfd_err) +
                 "); check that " + shm_dir() + " is a writable tmpfs (or set LOADER_SHM_DIR)");
}

}  // namespace

struct ShmSegment::Impl {
  bip::file_mapping file;
  bip::mapped_region region;
};

std::shared_ptr<ShmSegment> ShmSegment::create(size_t size, SlabPlace place) {
  if (size == 0) size = 1;
  UniqueFd fd(open_nameless(place));
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0)
    throw ShmError("cannot size a shared-memory slab to " + human(size) + ": " + std::strerror(errno));
  int rc = posix_fallocate(fd.get(), 0, static_cast<off_t>(size));
  if (rc != 0) {
    const std::string where = shm_where(place);
    throw ShmError("shared memory is full: a batch slab needs " + human(size) + " but " + where + " has " +
                   human(shm_free_bytes(place)) + " free (posix_fallocate: " + std::strerror(rc) + "). " +
                   (place == SlabPlace::Memory ? std::string("Free memory")
                                               : "Enlarge " + shm_dir() + " (e.g. docker run --shm-size=2g)") +
                   ", or lower batch_size, prefetch_factor or num_workers.");
  }
  std::shared_ptr<ShmSegment> seg(new ShmSegment());
  auto impl = std::make_unique<Impl>();
  try {
    // Boost.Interprocess maps the name-less file through its /proc/self/fd entry.
    const std::string path = "/proc/self/fd/" + std::to_string(fd.get());
    impl->file = bip::file_mapping(path.c_str(), bip::read_write);
    impl->region = bip::mapped_region(impl->file, bip::read_write, 0, size);
  } catch (const bip::interprocess_exception& e) {
    throw ShmError("cannot map a shared-memory slab of " + human(size) + ": " +
                   (e.get_native_error() ? os_error_text(e.get_native_error()) : std::string(e.what())));
  }
  // The mapping holds the pages; the file_mapping's own descriptor is not needed.
  impl->file = bip::file_mapping();
  seg->data_ = impl->region.get_address();
  seg->size_ = size;
  seg->fd_ = std::move(fd);
  seg->impl_ = std::move(impl);
  return seg;
}

ShmSegment::~ShmSegment() {
  impl_.reset();  // unmaps; fd_ closes after
}

ShmMapping::ShmMapping(UniqueFd fd, size_t size) : size_(size) {
  // MAP_POPULATE: the worker writes every page of a slab it is given, batch after batch;
  // one call sets up the page tables instead of a write fault per 4 KiB page.
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd.get(), 0);
  int err = errno;
  fd.reset();  // the mapping keeps the pages
  if (p == MAP_FAILED)
    throw RuntimeError(std::string("worker cannot map a shared-memory slab of ") + std::to_string(size) +
                       " bytes: " + os_error_text(err));
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
