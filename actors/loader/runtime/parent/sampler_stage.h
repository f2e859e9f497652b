// SamplerStage: the sampler stage's logic, a plain class the sampler actor is a shell
// over (sampler_actor.h) and tests drive directly.
//
//   SamplerStage s;
//   s.begin(TaskSource(...), /*iterable=*/false, TaskDispatcher(2, 2, 0));
//   int worker;
//   while (auto t = s.next(worker)) send(worker, *t);   // stops at the credits
//   s.dispatcher().on_delivered(worker);                // a credit back: one more
//
// It pulls index batches from the TaskSource only against a credit (TaskDispatcher:
// at most prefetch_factor * num_workers tasks not yet delivered, counted here and
// nowhere else), so the sampler never draws ahead of what the pipeline may hold.
// When the source runs out, or every worker of an iterable ran dry, the epoch's task
// count is known (total()).  A sampler that throws halts the stage and reports the
// error once (failure()).
//
// Thread use: the strand of its pool: only the sampler actor's handlers change it (an
// epoch's begin and halt come as messages too); the pipeline reads it (const) between
// two activations of the strand (position, stats), under the strand's lock.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "loader/fetch.h"
#include "loader/runtime/parent/task_dispatcher.h"
#include "loader/runtime/protocol.h"

namespace loader::runtime {

/// An epoch's start as the sampler actor receives it (begin_atom): SamplerStage::begin's
/// arguments.
struct SamplerBegin {
  std::optional<TaskSource> source;
  bool iterable = false;
  TaskDispatcher dispatcher;
};

class SamplerStage {
 public:
  /// Starts an epoch: its index stream (nullopt for an iterable dataset: tasks carry
  /// no indices) and its credits.  Whatever the previous epoch left is dropped.
  void begin(std::optional<TaskSource> source, bool iterable, TaskDispatcher dispatcher);
  /// Stops handing out tasks for good (the epoch ended or failed, the pool closed).
  void halt() { halted_ = true; }

  /// The next task and the worker it goes to, or nullopt: no credit, no worker with
  /// capacity, the source ran out (total() is set), the sampler failed (failure() is
  /// set), or the stage is halted.
  std::optional<task_msg> next(int& worker);
  /// Worker `worker`'s iterable ran dry at `task`: no result comes for it, its credit
  /// returns, the worker gets no more tasks; the last one to run dry ends the epoch.
  void dry(int worker, uint64_t task);

  bool active() const { return dispatcher_ != nullptr; }
  TaskDispatcher& dispatcher() { return *dispatcher_; }
  const TaskDispatcher& dispatcher() const { return *dispatcher_; }
  /// The epoch's number of tasks, once known.
  const std::optional<uint64_t>& total() const { return total_; }
  /// The sampler ran out (it was asked for a task after its last one).
  bool exhausted() const { return exhausted_; }
  /// The sampler's error (type, message), once it failed.
  const std::optional<std::pair<std::string, std::string>>& failure() const { return failure_; }
  /// Time spent in the sampler (TaskSource::next) this epoch.
  uint64_t sampler_ns() const { return sampler_ns_; }

 private:
  std::optional<TaskSource> source_;
  std::unique_ptr<TaskDispatcher> dispatcher_;
  bool iterable_ = false;
  bool halted_ = false;
  bool exhausted_ = false;
  uint64_t first_task_ = 0;
  uint64_t sampler_ns_ = 0;
  std::optional<uint64_t> total_;
  std::optional<std::pair<std::string, std::string>> failure_;
};

}  // namespace loader::runtime
