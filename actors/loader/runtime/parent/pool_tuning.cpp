#include "loader/runtime/parent/pool_tuning.h"

#include <algorithm>

namespace loader::runtime {

PoolTuning::PoolTuning(int workers, const WorkerTuner::Limits& limits, int workers_now, int prefetch_now, int deepest)
    : wanted_(static_cast<size_t>(std::max(0, workers)), 0),
      prefetch_now_(std::max(1, prefetch_now)),
      deepest_(std::max(1, deepest)),
      tuner_(std::make_unique<WorkerTuner>(limits)) {
  const int now = std::clamp(workers_now, 1, std::max(1, workers));
  for (int w = 0; w < now && w < workers; ++w) wanted_[static_cast<size_t>(w)] = 1;
}

int PoolTuning::wanted_count() const {
  int n = 0;
  for (char w : wanted_) n += w ? 1 : 0;
  return n;
}

uint64_t PoolTuning::max_in_flight() const {
  return static_cast<uint64_t>(std::max(1, prefetch_now_)) * static_cast<uint64_t>(std::max(1, wanted_count()));
}

std::vector<int> PoolTuning::finished_retirements(const std::vector<Slot>& slots) const {
  std::vector<int> out;
  for (size_t w = 0; w < wanted_.size() && w < slots.size(); ++w)
    if (!wanted_[w] && slots[w].accepting && !slots[w].holds_tasks) out.push_back(static_cast<int>(w));
  return out;
}

std::optional<TuneStep> PoolTuning::observe(uint64_t epoch, const TuneSample& sample) {
  if (tuned_epoch_ != epoch) {
    tuner_->begin_epoch();
    tuned_epoch_ = epoch;
  }
  return tuner_->observe(sample);
}

PoolTuning::Applied PoolTuning::apply(const TuneStep& step, const std::vector<Slot>& slots, double t_s) {
  Applied out;
  const int n = static_cast<int>(std::min(wanted_.size(), slots.size()));
  const int from_workers = wanted_count();
  const int from_prefetch = prefetch_now_;
  const int target = std::clamp(step.workers, 1, std::max(1, n));
  prefetch_now_ = std::clamp(step.prefetch, 1, deepest_);
  for (int w = 0; w < n && wanted_count() < target; ++w) {
    const Slot& s = slots[static_cast<size_t>(w)];
    if (wanted_[static_cast<size_t>(w)] || s.dead) continue;
    wanted_[static_cast<size_t>(w)] = 1;
    if (s.accepting) out.told.emplace_back(w, true);  // retired but still running: back at once
    else out.acts.emplace_back(w, true);              // started by its slot actor; tasks once ready
  }
  for (int w = n - 1; w >= 0 && wanted_count() > target; --w) {
    if (!wanted_[static_cast<size_t>(w)]) continue;
    wanted_[static_cast<size_t>(w)] = 0;
    out.told.emplace_back(w, false);
    const Slot& s = slots[static_cast<size_t>(w)];
    if (s.accepting && !s.holds_tasks) out.acts.emplace_back(w, false);
  }
  if (out.told.empty()) out.told.emplace_back(-1, false);
  decisions_.push_back(
      EpochStats::TuneDecision{t_s, from_workers, wanted_count(), from_prefetch, prefetch_now_, step.reason});
  return out;
}

}  // namespace loader::runtime
