#include "loader/runtime/parent/sampler_stage.h"

#include <chrono>

#include "loader/error.h"

namespace loader::runtime {

void SamplerStage::begin(std::optional<TaskSource> source, bool iterable, TaskDispatcher dispatcher) {
  source_ = std::move(source);
  first_task_ = dispatcher.next_task();
  dispatcher_ = std::make_unique<TaskDispatcher>(std::move(dispatcher));
  iterable_ = iterable;
  halted_ = exhausted_ = false;
  sampler_ns_ = 0;
  total_.reset();
  failure_.reset();
}

std::optional<task_msg> SamplerStage::next(int& worker) {
  if (!dispatcher_ || halted_ || exhausted_ || failure_ || !dispatcher_->can_send()) return std::nullopt;
  auto a = dispatcher_->assign();
  if (!a) return std::nullopt;
  task_msg t;
  t.task_idx = a->first;
  worker = a->second;
  if (iterable_) return t;  // a worker's stream decides what the task holds
  std::optional<IndexBatch> indices;
  const auto start = std::chrono::steady_clock::now();
  try {
    indices = source_ ? source_->next() : std::nullopt;
    sampler_ns_ += static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  } catch (const Error& e) {
    dispatcher_->cancel(t.task_idx);
    failure_.emplace(e.python_type(), std::string("the sampler failed: ") + e.what());
    return std::nullopt;
  } catch (const std::exception& e) {
    dispatcher_->cancel(t.task_idx);
    failure_.emplace("RuntimeError", std::string("the sampler failed: ") + e.what());
    return std::nullopt;
  }
  if (!indices) {
    dispatcher_->cancel(t.task_idx);
    exhausted_ = true;
    total_ = dispatcher_->next_task() - first_task_;
    return std::nullopt;
  }
  t.indices = std::move(*indices);
  return t;
}

void SamplerStage::dry(int worker, uint64_t task) {
  if (!dispatcher_) return;
  dispatcher_->on_finished(task);
  dispatcher_->deactivate(worker);
  dispatcher_->on_delivered(worker);  // a skipped task returns its credit
  if (dispatcher_->active_workers() == 0 && !total_) total_ = dispatcher_->next_task() - first_task_;
}

}  // namespace loader::runtime
