#include "loader/runtime/parent/worker_slabs.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "loader/warnings.h"

namespace loader::runtime {

uint64_t next_slab_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

void SlabDirectory::add(uint64_t id, std::shared_ptr<ShmSegment> seg) {
  std::lock_guard<std::mutex> lock(mu_);
  slabs_[id] = {std::move(seg), false};
}

void SlabDirectory::remove(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  slabs_.erase(id);
}

std::shared_ptr<ShmSegment> SlabDirectory::find(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slabs_.find(id);
  return it == slabs_.end() ? nullptr : it->second.first;
}

void SlabDirectory::set_pinned(uint64_t id, bool pinned) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slabs_.find(id);
  if (it != slabs_.end()) it->second.second = pinned;
}

bool SlabDirectory::pinned(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slabs_.find(id);
  return it != slabs_.end() && it->second.second;
}

WorkerSlabs::WorkerSlabs(int worker_id, SlabPolicy policy, std::shared_ptr<SlabDirectory> directory)
    : worker_id_(worker_id), policy_(std::move(policy)), directory_(std::move(directory)) {
  if (!policy_.budget) policy_.budget = std::make_shared<SlabBudget>();
}

WorkerSlabs::~WorkerSlabs() {
  for (const auto& kv : slabs_) {
    directory_->remove(kv.first);
    policy_.budget->bytes -= kv.second->size();
  }
}

static uint64_t slab_size_for(uint64_t bytes, double headroom) {
  auto want = static_cast<uint64_t>(std::ceil(static_cast<double>(bytes) * headroom));
  const uint64_t gran = 64 * 1024;
  return (want + gran - 1) / gran * gran;
}

void WorkerSlabs::size_for(uint64_t bytes) {
  if (slab_size_ != 0 || bytes == 0) return;
  // The sample_spec's batch is exact (its last, shorter batch is smaller): no headroom,
  // whose pages every slab would make, reserve and map for nothing.  A batch larger than
  // its spec is still taken: Need, and a larger slab (acquire_at_least).
  uint64_t want = slab_size_for(bytes, 1.0);
  check_budget(want);
  slab_size_ = want;
}

uint64_t WorkerSlabs::bytes() const {
  uint64_t b = 0;
  for (const auto& kv : slabs_) b += kv.second->size();
  return b;
}

static std::string mib(uint64_t b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%llu bytes (%.1f MiB)", static_cast<unsigned long long>(b),
                static_cast<double>(b) / (1024.0 * 1024.0));
  return buf;
}

void WorkerSlabs::check_budget(uint64_t new_slab_size) const {
  // Once per pool and slab size: the first worker to need this size checks for all.
  if (new_slab_size <= policy_.budget->checked_size.load()) return;
  // The pool every worker will have at this slab size, less what the loader's
  // workers already hold (counted once, whichever worker holds it).
  uint64_t per_worker = static_cast<uint64_t>(policy_.slabs_per_worker) * new_slab_size;
  uint64_t pool = per_worker * static_cast<uint64_t>(policy_.num_workers);
  uint64_t have = policy_.budget->bytes.load();
  uint64_t more = pool > have ? pool - have : 0;
  const SlabPlace place = policy_.budget->place.load();
  uint64_t free = shm_free_bytes(place);
  std::string what = std::to_string(policy_.num_workers) + " workers x " +
                     std::to_string(policy_.slabs_per_worker) + " slabs x " + mib(new_slab_size);
  if (policy_.shm_limit_bytes && pool > policy_.shm_limit_bytes)
    throw ShmError("shared memory: the batch slab pool needs " + mib(pool) + " (" + what +
                   ") but shm_limit_bytes is " + mib(policy_.shm_limit_bytes) +
                   "; raise shm_limit_bytes or lower batch_size, prefetch_factor or num_workers");
  if (more > free) {
    // A /dev/shm too small for the pool (Docker's default is 64 MB) is not the end: the
    // slabs can be memfds, whose pages count against memory, not against that mount.
    const bool dir = place == SlabPlace::ShmDir && shm_where(SlabPlace::ShmDir) == shm_dir();
    const uint64_t memory = dir ? mem_available_bytes() : 0;
    if (dir && more <= memory) {
      policy_.budget->place = SlabPlace::Memory;
      policy_.budget->checked_size = new_slab_size;
      warn("the batch slab pool needs " + mib(pool) + " (" + what + ") but " + shm_dir() + " has only " + mib(free) +
           " free: the slabs are taken from memory instead (memfd_create; " + mib(memory) +
           " available), where " + shm_dir() + "'s size does not limit them. Enlarge " + shm_dir() +
           " (e.g. docker run --shm-size=...) to keep them there.");
      return;
    }
    throw ShmError("shared memory: the batch slab pool needs " + mib(pool) + " (" + what + ") but " +
                   shm_where(place) + " has only " + mib(free) + " free" +
                   (dir ? " and memory only " + mib(memory) + " available" : std::string()) + ". " +
                   (place == SlabPlace::Memory ? std::string("Free memory")
                                               : "Enlarge " + shm_where(place) + " (e.g. docker run --shm-size=...)") +
                   ", or lower batch_size, prefetch_factor or num_workers");
  }
  policy_.budget->checked_size = new_slab_size;
}

uint64_t WorkerSlabs::create(uint64_t size) {
  auto seg = ShmSegment::create(size, policy_.budget->place.load());
  uint64_t id = next_slab_id();
  slabs_[id] = seg;
  policy_.budget->bytes += seg->size();
  directory_->add(id, seg);
  new_.push_back(id);
  return id;
}

std::optional<uint64_t> WorkerSlabs::acquire() {
  if (slab_size_ == 0) return uint64_t{0};
  if (!free_.empty()) {
    uint64_t id = free_.back();
    free_.pop_back();
    return id;
  }
  // Grow past the expected pool only while /dev/shm (and the limit) allow it.
  uint64_t limit = policy_.shm_limit_bytes ? policy_.shm_limit_bytes / static_cast<uint64_t>(policy_.num_workers)
                                           : UINT64_MAX;
  if (bytes() + slab_size_ > limit) return std::nullopt;
  if (slabs_.size() >= static_cast<size_t>(policy_.slabs_per_worker) &&
      shm_free_bytes(policy_.budget->place.load()) < 2 * slab_size_)
    return std::nullopt;
  try {
    return create(slab_size_);
  } catch (const ShmError&) {
    if (slabs_.empty()) throw;
    return std::nullopt;  // wait for a release
  }
}

uint64_t WorkerSlabs::acquire_at_least(uint64_t bytes) {
  if (bytes > slab_size_) {
    uint64_t want = slab_size_for(bytes, policy_.headroom);
    check_budget(want);
    slab_size_ = want;
    // Free slabs that are now too small are dropped as they come back.
    std::vector<uint64_t> keep;
    for (uint64_t id : free_) {
      if (slabs_[id]->size() >= slab_size_) keep.push_back(id);
      else {
        directory_->remove(id);
        policy_.budget->bytes -= slabs_[id]->size();
        slabs_.erase(id);
        dropped_.push_back(id);
      }
    }
    free_ = keep;
  }
  for (size_t i = 0; i < free_.size(); ++i) {
    uint64_t id = free_[i];
    if (slabs_[id]->size() >= bytes) {
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
      return id;
    }
  }
  return create(slab_size_);
}

bool WorkerSlabs::release(uint64_t id) {
  auto it = slabs_.find(id);
  if (it == slabs_.end()) return false;
  if (it->second->size() < slab_size_) {
    directory_->remove(id);
    policy_.budget->bytes -= it->second->size();
    slabs_.erase(it);
    dropped_.push_back(id);
    return true;
  }
  free_.push_back(id);
  return false;
}

std::vector<uint64_t> WorkerSlabs::take_new() {
  std::vector<uint64_t> out;
  out.swap(new_);
  return out;
}

std::vector<uint64_t> WorkerSlabs::take_dropped() {
  std::vector<uint64_t> out;
  out.swap(dropped_);
  return out;
}

std::shared_ptr<ShmSegment> WorkerSlabs::segment(uint64_t id) const {
  auto it = slabs_.find(id);
  return it == slabs_.end() ? nullptr : it->second;
}

}  // namespace loader::runtime
