#include "loader/runtime/buffer_pool.h"

#include <cstdlib>
#include <deque>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace loader::runtime {

namespace {
constexpr size_t kAlignment = 64;  // as Storage::allocate
}  // namespace

struct BufferPool::State {
  explicit State(size_t max) : max_free(max) {}
  ~State() {
    for (auto& [size, p] : free) std::free(p);
  }
  /// A free buffer of exactly `rounded` bytes (the most recent), or null.
  void* take(size_t rounded) {
    std::lock_guard<std::mutex> l(mu);
    for (auto it = free.rbegin(); it != free.rend(); ++it) {
      if (it->first != rounded) continue;
      void* p = it->second;
      free.erase(std::next(it).base());
      ++reused;
      return p;
    }
    return nullptr;
  }
  void give_back(size_t rounded, void* p) {
    void* dropped = nullptr;
    {
      std::lock_guard<std::mutex> l(mu);
      free.emplace_back(rounded, p);
      if (free.size() > max_free) {
        dropped = free.front().second;
        free.pop_front();
      }
    }
    std::free(dropped);
  }

  const size_t max_free;
  mutable std::mutex mu;
  std::deque<std::pair<size_t, void*>> free;  ///< (rounded size, buffer), oldest first
  uint64_t reused = 0;
};

BufferPool::BufferPool(size_t max_free, size_t min_bytes)
    : state_(std::make_shared<State>(max_free)), min_bytes_(min_bytes) {}

std::shared_ptr<Storage> BufferPool::allocate(size_t nbytes) {
  if (nbytes < min_bytes_ || nbytes == 0) return Storage::allocate(nbytes);
  const size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = state_->take(rounded);
  if (!p) p = std::aligned_alloc(kAlignment, rounded);
  if (!p) throw std::bad_alloc();
  // The storage's last reference gives the buffer back (so does a failed constructor
  // here); the state lives as long as any such buffer.
  std::shared_ptr<void> owner(p, [state = state_, rounded](void* q) { state->give_back(rounded, q); });
  return Storage::wrap(p, nbytes, std::move(owner), MemoryKind::Heap);
}

size_t BufferPool::free_buffers() const {
  std::lock_guard<std::mutex> l(state_->mu);
  return state_->free.size();
}

uint64_t BufferPool::reused() const {
  std::lock_guard<std::mutex> l(state_->mu);
  return state_->reused;
}

}  // namespace loader::runtime
