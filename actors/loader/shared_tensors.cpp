#include "loader/shared_tensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "loader/batch_copy.h"
#include "loader/datasets.h"
#include "loader/error.h"
#include "loader/runtime/os/shm.h"

namespace loader {

namespace {

constexpr uint64_t kAlign = 64;
uint64_t aligned(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// A read-only mapping of a whole file; unmapped with the last storage over it.
struct FileView {
  void* addr = nullptr;
  size_t length = 0;
  ~FileView() {
    if (addr) ::munmap(addr, length);
  }
};

std::string errno_text(int e) { return std::string(std::strerror(e)); }

/// A worker process keeps its latest mapping of a tensor file: a pool re-initialised for
/// the next epoch (persistent_workers=false) rebuilds its dataset from the same handle,
/// and mapping the file again faulted every page in again (W2 from Python: 14,000 minor
/// faults per epoch, half the speed of persistent workers).  Keyed by the file's identity
/// (device, inode, size), not its /proc path, whose fd number may be reused.  Only in
/// worker processes (LOADER_WORKER_FD set): they end with their pool, while the main
/// process must let the pages go with the user's last dataset.
struct MappingCache {
  std::mutex mu;
  dev_t dev = 0;
  ino_t ino = 0;
  uint64_t bytes = 0;
  std::shared_ptr<FileView> view;
};
// Decided during static initialisation: the worker loop unsets LOADER_WORKER_FD when it starts.
MappingCache* const g_worker_mapping_cache = std::getenv("LOADER_WORKER_FD") ? new MappingCache() : nullptr;  // never freed
MappingCache* worker_mapping_cache() { return g_worker_mapping_cache; }

std::shared_ptr<Dataset> make_shared_tensors(const Value& p) {
  if (!p.is_dict()) throw TypeError("shared_tensors parameters must be a dict, got " + p.python_type());
  const std::string path = p.at("path").to_string();
  const uint64_t bytes = static_cast<uint64_t>(p.at("bytes").to_int());
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw RuntimeError("shared_tensors: cannot open '" + path + "' (" + errno_text(errno) +
                       "): the tensors live in the shared memory of the process that made the loader; only its own "
                       "worker processes, on its machine, can open them");
  struct stat st {};
  const int rc = ::fstat(fd, &st);
  if (rc != 0 || static_cast<uint64_t>(st.st_size) < bytes) {
    ::close(fd);
    throw RuntimeError("shared_tensors: '" + path + "' holds " + std::to_string(rc == 0 ? st.st_size : 0) +
                       " bytes, the handle says " + std::to_string(bytes));
  }
  std::shared_ptr<FileView> view;
  if (MappingCache* cache = worker_mapping_cache()) {
    std::lock_guard<std::mutex> lock(cache->mu);
    if (cache->view && cache->dev == st.st_dev && cache->ino == st.st_ino && cache->bytes == bytes) view = cache->view;
  }
  if (view) {
    ::close(fd);
  } else if (bytes > 0) {
    view = std::make_shared<FileView>();
    void* a = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ, MAP_SHARED, fd, 0);
    const int e = errno;
    ::close(fd);
    if (a == MAP_FAILED) throw RuntimeError("shared_tensors: cannot map '" + path + "': " + errno_text(e));
    view->addr = a;
    view->length = static_cast<size_t>(bytes);
    if (MappingCache* cache = worker_mapping_cache()) {
      std::lock_guard<std::mutex> lock(cache->mu);
      cache->dev = st.st_dev;
      cache->ino = st.st_ino;
      cache->bytes = bytes;
      cache->view = view;
    }
  } else {
    view = std::make_shared<FileView>();
    ::close(fd);
  }
  std::vector<Tensor> tensors;
  for (const Value& t : p.at("tensors").items()) {
    const auto dtype = dtype_from_name(t.at("dtype").to_string());
    if (!dtype) throw ValueError("shared_tensors: unknown dtype '" + t.at("dtype").to_string() + "'");
    std::vector<int64_t> shape;
    for (const Value& d : t.at("shape").items()) shape.push_back(d.to_int());
    const Dims sizes(shape);
    const uint64_t offset = static_cast<uint64_t>(t.at("offset").to_int());
    const uint64_t n = static_cast<uint64_t>(numel_of(sizes)) * element_size(*dtype);
    if (offset + n > bytes) throw ValueError("shared_tensors: a tensor lies past the end of the file");
    auto storage = Storage::wrap(static_cast<uint8_t*>(view->addr) + offset, static_cast<size_t>(n), view,
                                 MemoryKind::FileMapping);
    tensors.emplace_back(std::move(storage), *dtype, sizes, contiguous_strides(sizes), 0);
  }
  return std::make_shared<TensorDataset>(std::move(tensors));
}

}  // namespace

void register_shared_tensors_dataset() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!is_registered_dataset("shared_tensors")) register_dataset("shared_tensors", make_shared_tensors);
  });
}

LOADER_REGISTER_DATASET("shared_tensors", make_shared_tensors);

struct SharedTensorFile::Impl {
  std::shared_ptr<runtime::ShmSegment> segment;
  Value params;
  std::vector<Tensor> tensors;
};

SharedTensorFile::SharedTensorFile(const std::vector<Tensor>& tensors) : impl_(std::make_unique<Impl>()) {
  register_shared_tensors_dataset();
  if (tensors.empty()) throw ValueError("SharedTensorFile: no tensors");
  const int64_t n = tensors[0].dim() > 0 ? tensors[0].size(0) : -1;
  uint64_t total = 0;
  std::vector<uint64_t> offsets;
  for (const Tensor& t : tensors) {
    if (!t.defined() || t.dim() == 0)
      throw ValueError("SharedTensorFile: every tensor needs a first dimension to index (got a 0-dim tensor)");
    if (t.size(0) != n) throw AssertionError("Size mismatch between tensors");
    offsets.push_back(total);
    total = aligned(total + t.nbytes());
  }
  try {
    const uint64_t want = total == 0 ? 1 : total;
    const auto place = runtime::shm_free_bytes(runtime::SlabPlace::ShmDir) >= want ? runtime::SlabPlace::ShmDir
                                                                                   : runtime::SlabPlace::Memory;
    impl_->segment = runtime::ShmSegment::create(static_cast<size_t>(want), place);
  } catch (const Error& e) {
    throw RuntimeError("cannot place the dataset's tensors (" + std::to_string(total) +
                       " bytes) in shared memory: " + e.what());
  }
  auto* base = static_cast<uint8_t*>(impl_->segment->data());
  std::vector<Value> described;
  auto seg = impl_->segment;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = tensors[k];
    uint8_t* dst = base + offsets[k];
    if (t.is_contiguous()) std::memcpy(dst, t.data_ptr(), t.nbytes());
    else copy_to_contiguous(t, dst);
    std::vector<Value> shape;
    for (int64_t d : t.sizes()) shape.emplace_back(d);
    described.push_back(Value::dict({{"dtype", dtype_name(t.dtype())},
                                     {"shape", Value::list(std::move(shape))},
                                     {"offset", static_cast<int64_t>(offsets[k])}}));
    auto storage = Storage::wrap(dst, t.nbytes(), seg, MemoryKind::SharedMemory);
    impl_->tensors.emplace_back(std::move(storage), t.dtype(), t.sizes(), contiguous_strides(t.sizes()), 0);
  }
  const std::string path = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(impl_->segment->fd());
  impl_->params = Value::dict({{"path", path},
                               {"bytes", static_cast<int64_t>(total)},
                               {"tensors", Value::list(std::move(described))}});
}

SharedTensorFile::~SharedTensorFile() = default;

DatasetHandle SharedTensorFile::handle() const { return {"shared_tensors", impl_->params}; }
uint64_t SharedTensorFile::bytes() const noexcept { return static_cast<uint64_t>(impl_->params.at("bytes").to_int()); }
std::vector<Tensor> SharedTensorFile::tensors() const { return impl_->tensors; }

}  // namespace loader
