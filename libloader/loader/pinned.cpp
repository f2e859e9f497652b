#include "loader/pinned.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "loader/detail/block_cache.h"
#include "loader/detail/cuda.h"

namespace loader {

const char* pin_backend_name(PinBackend b) {
  switch (b) {
    case PinBackend::Cuda: return "cuda";
    case PinBackend::Mlock: return "mlock";
    case PinBackend::None: return "none";
  }
  return "none";
}

namespace {
int backend_rank(PinBackend b) {
  switch (b) {
    case PinBackend::Cuda: return 2;
    case PinBackend::Mlock: return 1;
    case PinBackend::None: return 0;
  }
  return 0;
}

}  // namespace

void merge_pin_result(PinResult& into, const PinResult& r) {
  if (backend_rank(r.backend) < backend_rank(into.backend)) {
    into.backend = r.backend;
    into.reason = r.reason;
  }
  into.pinned = into.pinned && r.pinned;
}

bool cuda_pinning_available(std::string* reason) {
  static std::once_flag once;
  static bool ok = false;
  static std::string why;
  std::call_once(once, [] { ok = detail::cuda_probe(&why); });
  if (reason) *reason = why;
  return ok;
}

PinResult pin_region(void* data, size_t bytes) {
  PinResult r;
  std::string why;
  if (cuda_pinning_available(&why)) {
    why = detail::cuda_host_register(data, bytes);
    if (why.empty()) {
      r.backend = PinBackend::Cuda;
      r.pinned = true;
      return r;
    }
  }
  // The system call itself: sanitizers intercept mlock() and make it a no-op that
  // reports success, which would make this report memory as locked that is not.
  if (syscall(SYS_mlock, data, bytes) == 0) {
    r.backend = PinBackend::Mlock;
    r.reason = why + "; page-locked with mlock instead (not CUDA-pinned)";
    return r;
  }
  const int err = errno;
  r.reason = why + "; mlock failed too (" + std::strerror(err) +
             ": raise `ulimit -l` or grant CAP_IPC_LOCK), so batches are not pinned";
  return r;
}

void unpin_region(void* data, size_t bytes, PinBackend backend) {
  switch (backend) {
    case PinBackend::Cuda: detail::cuda_host_unregister(data); break;
    case PinBackend::Mlock: (void)syscall(SYS_munlock, data, bytes); break;
    case PinBackend::None: break;
  }
}

// ------------------------------------------------------------------ pinned tensors
namespace {
// Page-locked blocks kept for reuse (see block_cache.h): at most this many bytes.
constexpr uint64_t kMaxCachedPinnedBytes = uint64_t{1} << 30;

detail::BlockCache& pinned_cache() {
  // Never destroyed: storages may be released by static destructors at exit.
  static auto* cache = new detail::BlockCache(
      [](size_t bytes, std::string* error) { return detail::cuda_host_alloc(bytes, error); },
      [](void* p) { detail::cuda_host_free(p); }, kMaxCachedPinnedBytes);
  return *cache;
}
}  // namespace

std::shared_ptr<Storage> allocate_pinned(size_t nbytes, PinResult* how) {
  std::string why;
  if (cuda_pinning_available(&why)) {
    size_t block = 0;
    if (void* p = pinned_cache().get(nbytes ? nbytes : 1, &block, &why)) {
      std::shared_ptr<void> owner(p, [block](void* q) { pinned_cache().put(q, block); });
      if (how) *how = PinResult{PinBackend::Cuda, true, ""};
      return Storage::wrap(p, nbytes, std::move(owner), MemoryKind::Heap, Placement{}, true);
    }
    why += " for " + std::to_string(nbytes) + " bytes";
  }
  if (how) *how = PinResult{PinBackend::None, false, why + "; the tensor stays in ordinary memory"};
  return nullptr;
}

PinnedCacheStats pinned_cache_stats() {
  const auto st = pinned_cache().stats();
  return PinnedCacheStats{st.hits, st.misses, st.cached_bytes, st.cached_blocks};
}

void empty_pinned_cache() { pinned_cache().release_all(); }

std::shared_ptr<Storage> PinnedHostAllocator::allocate(size_t nbytes) {
  PinResult r;
  auto s = allocate_pinned(nbytes, &r);
  {
    std::lock_guard<std::mutex> lock(mu_);
    merge_pin_result(result_, r);
  }
  return s ? s : Storage::allocate(nbytes);
}

PinResult PinnedHostAllocator::result() const {
  std::lock_guard<std::mutex> lock(mu_);
  return result_;
}

Tensor pin_memory(const Tensor& t, PinResult* how) {
  if (!t.defined() || t.is_pinned()) {
    if (how) *how = PinResult{PinBackend::Cuda, true, ""};
    return t;
  }
  std::string why;
  if (!cuda_pinning_available(&why)) {
    if (how) *how = PinResult{PinBackend::None, false, why + "; tensors stay in ordinary memory"};
    return t;
  }
  PinnedHostAllocator alloc;
  Tensor copy = t.clone(&alloc);
  if (how) *how = alloc.result();
  return copy.is_pinned() ? copy : t;  // a failed pinned allocation: no point in the copy
}

namespace {
Value pin_value(const Value& v, PinResult& how) {
  switch (v.kind()) {
    case Value::Kind::Tensor: {
      PinResult r;
      Tensor t = pin_memory(v.to_tensor(), &r);
      merge_pin_result(how, r);
      return Value(std::move(t));
    }
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      std::vector<Value> items;
      items.reserve(v.items().size());
      for (const auto& x : v.items()) items.push_back(pin_value(x, how));
      if (v.is_list()) return Value::list(std::move(items), v.type_name());
      if (!v.field_names().empty()) return Value::namedtuple(v.type_name(), v.field_names(), std::move(items));
      return Value::tuple(std::move(items), v.type_name());
    }
    case Value::Kind::Dict: {
      std::vector<std::pair<Value, Value>> items;
      items.reserve(v.dict_items().size());
      for (const auto& [k, x] : v.dict_items()) items.emplace_back(k, pin_value(x, how));
      return Value::dict(std::move(items), v.type_name());
    }
    case Value::Kind::Object: {
      const auto& obj = v.to_object();
      auto pinned = obj->pin_memory();
      Value out = pinned ? Value::object(std::move(pinned)) : v;
      // The hook decides how to pin; report what it achieved.
      for (const Tensor& t : out.to_object()->tensors()) {
        if (!t.defined() || t.is_pinned()) continue;
        std::string why;
        if (cuda_pinning_available(&why)) {
          why = "the pin_memory() hook of " + out.to_object()->type_name() + " left a tensor unpinned";
        } else {
          why += "; tensors stay in ordinary memory";
        }
        merge_pin_result(how, PinResult{PinBackend::None, false, why});
        break;
      }
      return out;
    }
    default: return v;
  }
}
}  // namespace

Value pin_memory(const Value& batch, PinResult* how) {
  PinResult r;
  std::string why;
  if (cuda_pinning_available(&why)) {
    r = PinResult{PinBackend::Cuda, true, ""};
  } else {
    r = PinResult{PinBackend::None, false, why + "; tensors stay in ordinary memory"};
  }
  Value out = pin_value(batch, r);
  if (how) *how = std::move(r);
  return out;
}

// ------------------------------------------------------------------ per-loader status
PinTracker::PinTracker(bool requested) {
  status_.requested = requested;
  status_.reason = requested ? "nothing pinned yet (no batch has been loaded)" : "pin_memory is false";
}

bool PinTracker::record(const PinResult& r) {
  std::lock_guard<std::mutex> lock(mu_);
  if (status_.regions == 0) {
    status_.backend = r.backend;
    status_.pinned = r.pinned;
    status_.reason = r.reason;
  } else {
    PinResult merged{status_.backend, status_.pinned, status_.reason};
    merge_pin_result(merged, r);
    status_.backend = merged.backend;
    status_.pinned = merged.pinned;
    status_.reason = merged.reason;
  }
  ++status_.regions;
  if (!r.pinned && !warned_) {
    warned_ = true;
    return true;
  }
  return false;
}

PinStatus PinTracker::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

}  // namespace loader
