// ReorderBuffer: results of tasks arrive in any order; the application receives
// them in task order (in_order = true) or as they complete (in_order = false).
//
//   ReorderBuffer<std::string> rb(/*first_task=*/0, /*in_order=*/true);
//   rb.push(1, "b");          // nothing releasable: task 0 is missing
//   rb.push(0, "a");
//   rb.pop();                 // "a"
//   rb.pop();                 // "b"
//
// Tasks that produce nothing (an iterable worker that ran dry) are skip()ped, so
// the order moves past them.  Why the buffer cannot grow without bound: the sampler
// sends a task only against a credit, and a credit returns only when pop() hands a
// result to the application, so at most prefetch_factor * num_workers results are
// ever buffered (TaskDispatcher holds that bound).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <utility>

namespace loader::runtime {

template <class T>
class ReorderBuffer {
 public:
  explicit ReorderBuffer(uint64_t first_task = 0, bool in_order = true)
      : next_(first_task), in_order_(in_order) {}

  /// Starts over (a new epoch): nothing held, `first_task` expected next.
  void reset(uint64_t first_task, bool in_order) { *this = ReorderBuffer(first_task, in_order); }

  /// Records the result of `task`.  Results of tasks already released are ignored.
  void push(uint64_t task, T item) {
    if (task < next_ && in_order_) return;
    if (in_order_) pending_.emplace(task, std::optional<T>(std::move(item)));
    else ready_.emplace_back(task, std::move(item));
  }

  /// Marks `task` as producing no result.
  void skip(uint64_t task) {
    if (in_order_) {
      if (task >= next_) pending_.emplace(task, std::nullopt);
    } else {
      ++skipped_;
    }
  }

  /// The next result that may be released, with its task index.
  std::optional<std::pair<uint64_t, T>> pop() {
    if (!in_order_) {
      if (ready_.empty()) return std::nullopt;
      auto r = std::move(ready_.front());
      ready_.pop_front();
      ++released_;
      return r;
    }
    while (!pending_.empty() && pending_.begin()->first == next_) {
      auto node = pending_.extract(pending_.begin());
      ++next_;
      if (node.mapped()) {
        ++released_;
        return std::make_pair(node.key(), std::move(*node.mapped()));
      }
      ++skipped_;
    }
    return std::nullopt;
  }

  /// True when pop() may have something to release (a hint for waking the consumer).
  bool ready() const {
    if (!in_order_) return !ready_.empty();
    return !pending_.empty() && pending_.begin()->first == next_;
  }

  /// True when every task below `total_tasks` has been released or skipped.
  bool done(uint64_t first_task, uint64_t total_tasks) const {
    if (in_order_) return next_ >= first_task + total_tasks;
    return released_ + skipped_ >= total_tasks && ready_.empty();
  }

  size_t buffered() const { return in_order_ ? pending_.size() : ready_.size(); }
  /// Calls f(task, item) for every result held and not yet released.
  template <class F>
  void for_each_buffered(F f) const {
    for (const auto& [task, item] : pending_)
      if (item) f(task, *item);
    for (const auto& [task, item] : ready_) f(task, item);
  }
  uint64_t next_expected() const { return next_; }
  bool in_order() const { return in_order_; }

 private:
  uint64_t next_;
  bool in_order_;
  std::map<uint64_t, std::optional<T>> pending_;     // in order: by task index
  std::deque<std::pair<uint64_t, T>> ready_;          // completion order
  uint64_t released_ = 0;
  uint64_t skipped_ = 0;
};

}  // namespace loader::runtime
