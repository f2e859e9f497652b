#include "loader/runtime/parent/slab_store.h"

#include <algorithm>

#include "loader/warnings.h"

namespace loader::runtime {

SlabStore::SlabStore(int num_workers, SlabPolicy policy, bool pin, std::shared_ptr<PinTracker> tracker)
    : directory_(std::make_shared<SlabDirectory>()), pin_(pin), tracker_(std::move(tracker)) {
  if (!policy.budget) policy.budget = std::make_shared<SlabBudget>();
  if (!tracker_) tracker_ = std::make_shared<PinTracker>(pin);
  for (int w = 0; w < num_workers; ++w) workers_.push_back(std::make_unique<WorkerSlabs>(w, policy, directory_));
}

SlabStore::~SlabStore() = default;  // pins_ unpins every slab before it lets it go

void SlabStore::settle_locked(int worker) {
  auto& ws = *workers_[static_cast<size_t>(worker)];
  for (uint64_t id : ws.take_dropped()) {
    dropped_.push_back(id);
    pins_.erase(id);  // unpinned before the slab is unmapped
  }
  for (uint64_t id : ws.take_new()) {
    ++grown_;
    if (!pin_) continue;
    auto seg = ws.segment(id);
    PinResult r;
    pins_[id] = PinnedRegion::pin(seg, r);
    directory_->set_pinned(id, r.pinned);
    if (tracker_->record(r)) warn(std::string("pin_memory=true but batches are not CUDA-pinned: ") + r.reason);
  }
}

void SlabStore::took_locked(int worker, uint64_t slab) {
  if (slab == 0) return;
  if (auto seg = workers_[static_cast<size_t>(worker)]->segment(slab)) {
    in_use_ += seg->size();
    if (in_use_ > peak_) peak_ = in_use_;
  }
}

std::optional<uint64_t> SlabStore::acquire(int worker) {
  std::lock_guard<std::mutex> lock(mu_);
  auto r = workers_[static_cast<size_t>(worker)]->acquire();
  if (r) took_locked(worker, *r);
  settle_locked(worker);
  return r;
}

uint64_t SlabStore::acquire_at_least(int worker, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t r = workers_[static_cast<size_t>(worker)]->acquire_at_least(bytes);
  took_locked(worker, r);
  settle_locked(worker);
  return r;
}

void SlabStore::release(int worker, uint64_t slab) {
  std::lock_guard<std::mutex> lock(mu_);
  if (worker < 0 || static_cast<size_t>(worker) >= workers_.size()) return;
  auto& ws = *workers_[static_cast<size_t>(worker)];
  if (auto seg = ws.segment(slab)) in_use_ -= std::min<uint64_t>(in_use_, seg->size());
  ws.release(slab);
  settle_locked(worker);
}

SlabStore::Stats SlabStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s;
  for (const auto& w : workers_) s.mapped += w->bytes();
  s.in_use = in_use_;
  s.peak = peak_;
  s.grown = grown_;
  return s;
}

void SlabStore::new_window() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = in_use_;
}

void SlabStore::size_for(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& w : workers_) w->size_for(bytes);
}

std::vector<uint64_t> SlabStore::dropped_since(size_t& cursor) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> out(dropped_.begin() + static_cast<std::ptrdiff_t>(std::min(cursor, dropped_.size())),
                            dropped_.end());
  cursor = dropped_.size();
  return out;
}

}  // namespace loader::runtime
