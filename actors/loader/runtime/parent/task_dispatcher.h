// TaskDispatcher: the sampler's bookkeeping, exactly PyTorch's _try_put_index.
//
//   TaskDispatcher d(/*num_workers=*/2, /*prefetch_factor=*/2, /*first_task=*/0);
//   while (d.can_send()) { auto [task, worker] = *d.assign(); send(worker, task, indices); }
//   d.on_delivered();          // the application took a batch: one credit back
//
// Invariant: tasks sent but not yet delivered to the application (or skipped) never
// exceed prefetch_factor * num_workers.  Workers are picked round-robin over the
// active ones, continuing the cycle where it stopped, so while all are active task
// i goes to worker i mod W.  With in_order = false (PyTorch 2.6+), a worker gets a
// task only while it has fewer than max_in_flight / active_workers tasks not yet
// delivered, so a worker stalled on a slow sample is skipped instead of piling up
// tasks that the others could have done.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace loader::runtime {

class TaskDispatcher {
 public:
  /// `first_worker`: where the round robin starts (a resumed epoch continues the
  /// cycle where the checkpointed one stood: task i of the epoch to worker i mod W).
  TaskDispatcher(int num_workers, int prefetch_factor, uint64_t first_task = 0, bool in_order = true,
                 int first_worker = 0);

  /// True while another task may be sent (credits left and a worker is active).
  bool can_send() const;
  /// Assigns the next task index to the next active worker; nullopt when none is
  /// active (or, with in_order = false, none has spare capacity).
  std::optional<std::pair<uint64_t, int>> assign();
  /// Takes back the task assign() just gave (the sampler turned out to be exhausted).
  void cancel(uint64_t task);
  /// The application received a batch (or a task was skipped): returns a credit.
  /// `worker`: the worker it came from (its capacity with in_order = false).
  void on_delivered(int worker = -1);
  /// `worker` will get no more tasks (its iterable ran dry, or it died for good).
  void deactivate(int worker);
  /// `worker` gets tasks again, from the round robin's next turn on (the autotuner
  /// started it, or one it retired, again).
  void activate(int worker);
  /// At most `n` tasks in flight from now on (the autotuner's workers x prefetch; tasks
  /// already out above it stay and are answered, no new one goes out until below).
  void set_max_in_flight(uint64_t n);
  /// A task is done: its result was taken by the application (or it produced none).
  void on_finished(uint64_t task);

  int active_workers() const { return static_cast<int>(active_.size()); }
  bool is_active(int worker) const { return active_.count(worker) > 0; }
  uint64_t in_flight() const { return sent_ - delivered_; }
  uint64_t max_in_flight() const { return max_in_flight_; }
  uint64_t next_task() const { return next_task_; }
  /// Tasks sent to `worker` and not done yet (computing, or their results waiting to
  /// be taken), in task order.
  std::vector<uint64_t> unfinished_tasks_of(int worker) const;
  /// The worker task `task` was assigned to, or -1.
  int worker_of(uint64_t task) const;

 private:
  int num_workers_;
  uint64_t max_in_flight_;
  uint64_t next_task_;
  uint64_t sent_ = 0;
  uint64_t delivered_ = 0;
  bool in_order_;
  int cursor_ = 0;  // next worker to try
  std::map<int, uint64_t> outstanding_;  // worker -> tasks sent, not yet delivered
  std::set<int> active_;
  std::map<uint64_t, int> unfinished_;  // task -> worker
};

}  // namespace loader::runtime
