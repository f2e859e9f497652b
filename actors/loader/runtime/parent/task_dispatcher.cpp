#include "loader/runtime/parent/task_dispatcher.h"

namespace loader::runtime {

TaskDispatcher::TaskDispatcher(int num_workers, int prefetch_factor, uint64_t first_task, bool in_order,
                               int first_worker)
    : num_workers_(num_workers),
      max_in_flight_(static_cast<uint64_t>(prefetch_factor) * static_cast<uint64_t>(num_workers)),
      next_task_(first_task),
      in_order_(in_order),
      cursor_(num_workers > 0 && first_worker > 0 ? first_worker % num_workers : 0) {
  for (int w = 0; w < num_workers; ++w) active_.insert(w);
}

bool TaskDispatcher::can_send() const { return !active_.empty() && in_flight() < max_in_flight_; }

std::optional<std::pair<uint64_t, int>> TaskDispatcher::assign() {
  if (!can_send()) return std::nullopt;
  for (int tries = 0; tries < num_workers_; ++tries) {
    int w = cursor_;
    cursor_ = (cursor_ + 1) % num_workers_;
    if (!active_.count(w)) continue;
    if (!in_order_ && outstanding_[w] >= max_in_flight_ / active_.size()) continue;
    uint64_t task = next_task_++;
    ++sent_;
    ++outstanding_[w];
    unfinished_[task] = w;
    return std::make_pair(task, w);
  }
  return std::nullopt;
}

void TaskDispatcher::cancel(uint64_t task) {
  auto it = unfinished_.find(task);
  if (it == unfinished_.end() || task + 1 != next_task_) return;
  if (outstanding_[it->second] > 0) --outstanding_[it->second];
  unfinished_.erase(it);
  --next_task_;
  --sent_;
}

void TaskDispatcher::on_delivered(int worker) {
  if (delivered_ < sent_) ++delivered_;
  if (worker >= 0 && outstanding_[worker] > 0) --outstanding_[worker];
}

void TaskDispatcher::deactivate(int worker) { active_.erase(worker); }

void TaskDispatcher::activate(int worker) {
  if (worker >= 0 && worker < num_workers_) active_.insert(worker);
}

void TaskDispatcher::set_max_in_flight(uint64_t n) { max_in_flight_ = n > 0 ? n : 1; }

void TaskDispatcher::on_finished(uint64_t task) { unfinished_.erase(task); }

std::vector<uint64_t> TaskDispatcher::unfinished_tasks_of(int worker) const {
  std::vector<uint64_t> out;
  for (const auto& [task, w] : unfinished_)
    if (w == worker) out.push_back(task);
  return out;
}

int TaskDispatcher::worker_of(uint64_t task) const {
  auto it = unfinished_.find(task);
  return it == unfinished_.end() ? -1 : it->second;
}

}  // namespace loader::runtime
