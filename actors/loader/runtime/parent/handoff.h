// Handoff: the pin-memory stage's logic, a plain class the pin actor is a shell over
// (pin_actor.h): the results handed over to the application, in the order the
// reorder stage released them, each marked page-locked or not (its slab's pinning,
// made once when the slab was: SlabStore).  The application thread takes them
// (BatchDelivery::next), and each one taken returns a credit to the sampler.
//
// Thread use: the strand of its pool (the pin actor pushes); the application thread
// takes and reads between two activations of the strand, under the strand's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <utility>

#include "loader/runtime/protocol.h"

namespace loader::runtime {

struct HandedOver {
  result_msg result;
  bool pinned = false;  ///< its slab is page-locked (pin_memory)
};

class Handoff {
 public:
  /// A new epoch whose first task is `first_task`: nothing held, nothing taken.
  void restart(uint64_t first_task) {
    ready_.clear();
    taken_ = 0;
    low_ = first_task;
    above_.clear();
  }
  void push(result_msg r, bool pinned) { ready_.push_back(HandedOver{std::move(r), pinned}); }
  std::optional<HandedOver> take() {
    if (ready_.empty()) return std::nullopt;
    HandedOver h = std::move(ready_.front());
    ready_.pop_front();
    ++taken_;
    // Which tasks the application has (the checkpoint of an in_order=false epoch).
    if (h.result.task_idx == low_) {
      ++low_;
      while (!above_.empty() && *above_.begin() == low_) {
        above_.erase(above_.begin());
        ++low_;
      }
    } else if (h.result.task_idx > low_) {
      above_.insert(h.result.task_idx);
    }
    return h;
  }
  /// The first task the application has not taken (in_order=false: tasks come in any
  /// order; a task that produced nothing is not counted).
  uint64_t lowest_not_taken() const { return low_; }
  /// The tasks above lowest_not_taken() the application has taken, ascending.
  const std::set<uint64_t>& taken_above() const { return above_; }
  bool empty() const { return ready_.empty(); }
  size_t size() const { return ready_.size(); }
  /// The task of the oldest result not yet taken.  REQUIRES: !empty().
  uint64_t front_task() const { return ready_.front().result.task_idx; }
  /// Results taken by the application since the last restart().
  uint64_t taken() const { return taken_; }
  template <class F>
  void for_each(F f) const {
    for (const auto& h : ready_) f(h);
  }
  /// Forgets every result not taken (an epoch ended): returns them, so that their slabs
  /// go back.  What was taken stays counted until restart().
  std::deque<HandedOver> clear() { return std::exchange(ready_, {}); }

 private:
  std::deque<HandedOver> ready_;
  uint64_t taken_ = 0;
  uint64_t low_ = 0;
  std::set<uint64_t> above_;
};

}  // namespace loader::runtime
