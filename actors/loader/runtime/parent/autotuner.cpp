#include "loader/runtime/parent/autotuner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace loader::runtime {

namespace {
std::string pct(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * share);
  return buf;
}
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}
}  // namespace

WorkerTuner::WorkerTuner(Limits limits) : limits_(limits) {
  limits_.min_workers = std::max(1, limits_.min_workers);
  limits_.max_workers = std::max(limits_.min_workers, limits_.max_workers);
  limits_.min_prefetch = std::max(1, limits_.min_prefetch);
  limits_.max_prefetch = std::max(limits_.min_prefetch, limits_.max_prefetch);
}

void WorkerTuner::begin_epoch() {
  base_.reset();
  trial_.reset();  // judged against an older epoch's rate it would mislead
}

uint64_t WorkerTuner::memory_of(int workers, int prefetch, uint64_t batch_bytes, uint64_t worker_rss) {
  const uint64_t per_worker = static_cast<uint64_t>(prefetch + 2) * batch_bytes + worker_rss;
  return static_cast<uint64_t>(std::max(0, workers)) * per_worker;
}

bool WorkerTuner::fits(int workers, int prefetch, const TuneSample& s) const {
  if (limits_.memory_budget == 0) return true;
  return memory_of(workers, prefetch, s.batch_bytes, s.worker_rss) <= limits_.memory_budget;
}

void WorkerTuner::start_trial(Trial::Kind kind, const TuneSample& s, double rate) {
  trial_ = Trial{kind, rate, s.active, s.prefetch, kSettleWindows};
}

std::optional<TuneStep> WorkerTuner::observe(const TuneSample& s) {
  if (!start_prefetch_) start_prefetch_ = s.prefetch;
  // A worker still starting is not the steady state: the window starts once it runs.
  if (!base_ || s.starting > 0 || s.batches < base_->batches || s.t_s < base_->t_s) {
    base_ = s;
    return std::nullopt;
  }
  const double dt = s.t_s - base_->t_s;
  const uint64_t db = s.batches - base_->batches;
  if (dt < kWindowS || (db < kWindowBatches && dt < kMaxWindowS)) return std::nullopt;
  const double rate = static_cast<double>(db) / dt;
  const double wait_share = std::clamp((s.wait_s - base_->wait_s) / dt, 0.0, 1.0);
  const double busy_share =
      std::clamp((s.busy_s - base_->busy_s) / (dt * static_cast<double>(std::max(1, s.active))), 0.0, 1.0);
  base_ = s;
  ++windows_;
  std::optional<TuneStep> step;
  if (trial_) {
    if (trial_->settle > 0) {
      --trial_->settle;
      return std::nullopt;
    }
    step = judge(s, rate, wait_share);
  } else {
    step = decide(s, rate, wait_share, busy_share);
  }
  if (step) base_.reset();  // the next window begins under the new setting
  return step;
}

std::optional<TuneStep> WorkerTuner::judge(const TuneSample& s, double rate, double wait_share) {
  const Trial t = *trial_;
  trial_.reset();
  const std::string rates = "batches/s " + num(t.rate_before) + " -> " + num(rate);
  switch (t.kind) {
    case Trial::Kind::AddWorker:
    case Trial::Kind::AddPrefetch: {
      if (rate >= t.rate_before * (1 + kMinGain)) return std::nullopt;  // it helped: kept
      const bool worker = t.kind == Trial::Kind::AddWorker;
      (worker ? grow_blocked_until_ : prefetch_blocked_until_) = windows_ + kBlockWindows;
      return TuneStep{t.workers_before, t.prefetch_before,
                      std::string("undone: ") + (worker ? "the added worker" : "the deeper prefetch") +
                          " did not raise the rate by " + pct(kMinGain) + " (" + rates + ")"};
    }
    case Trial::Kind::RetireWorker:
    case Trial::Kind::LowerPrefetch: {
      // The consumer sets the rate here (it is noise to within a batch a window): what
      // counts is whether the application now waits.
      if (wait_share < kUndoWaitShare) return std::nullopt;
      retire_blocked_until_ = windows_ + kBlockWindows;
      if (t.kind == Trial::Kind::LowerPrefetch) prefetch_lowering_blocked_ = true;
      return TuneStep{std::max(t.workers_before, s.active), std::max(t.prefetch_before, s.prefetch),
                      "undone: with less the application waited " + pct(wait_share) + " (" + rates + ")"};
    }
  }
  return std::nullopt;
}

std::optional<TuneStep> WorkerTuner::decide(const TuneSample& s, double rate, double wait_share, double busy_share) {
  const Limits& L = limits_;
  const std::string figures = "waited " + pct(wait_share) + ", workers " + pct(busy_share) + " busy, " +
                              num(rate) + " batches/s";
  if (!fits(s.active, s.prefetch, s)) {
    if (L.tune_prefetch && s.prefetch > L.min_prefetch)
      return TuneStep{s.active, s.prefetch - 1, "over the memory budget: a shallower prefetch (" + figures + ")"};
    if (!L.fixed_workers && s.active > L.min_workers)
      return TuneStep{s.active - 1, s.prefetch, "over the memory budget: one worker fewer (" + figures + ")"};
    return std::nullopt;
  }
  if (wait_share >= kWaitShare) {
    if (busy_share >= kBusyShare && !L.fixed_workers && s.active < L.max_workers && windows_ >= grow_blocked_until_ &&
        fits(s.active + 1, s.prefetch, s)) {
      start_trial(Trial::Kind::AddWorker, s, rate);
      return TuneStep{s.active + 1, s.prefetch, "input-bound: " + figures + ": one more worker"};
    }
    // Idle workers behind the transport's latency, or no worker can be added: a deeper
    // prefetch, on trial like a worker.
    if (L.tune_prefetch && s.prefetch < L.max_prefetch &&
        windows_ >= prefetch_blocked_until_ && fits(s.active, s.prefetch + 1, s)) {
      start_trial(Trial::Kind::AddPrefetch, s, rate);
      return TuneStep{s.active, s.prefetch + 1,
                      std::string(busy_share < kBusyShare ? "input-bound with idle workers: " : "input-bound: ") +
                          figures + ": a deeper prefetch"};
    }
    return std::nullopt;
  }
  if (wait_share < kIdleWaitShare) {
    const double busy_with_one_fewer =
        s.active > 1 ? busy_share * s.active / static_cast<double>(s.active - 1) : 1.0;
    if (!L.fixed_workers && s.active > L.min_workers && windows_ >= retire_blocked_until_ &&
        busy_with_one_fewer < kBusyShare) {
      start_trial(Trial::Kind::RetireWorker, s, rate);
      return TuneStep{s.active - 1, s.prefetch, "consumer-bound: " + figures + ": one worker retired"};
    }
    const double allowed = static_cast<double>(s.prefetch) * std::max(1, s.active);
    if (L.tune_prefetch && !prefetch_lowering_blocked_ && s.prefetch > std::max(L.min_prefetch, *start_prefetch_) &&
        windows_ >= retire_blocked_until_ && static_cast<double>(s.ready) >= allowed / 2) {
      start_trial(Trial::Kind::LowerPrefetch, s, rate);
      return TuneStep{s.active, s.prefetch - 1,
                      "consumer-bound, " + std::to_string(s.ready) + " results waiting: " + figures +
                          ": a shallower prefetch"};
    }
  }
  return std::nullopt;
}

// ------------------------------------------------------------------ EpochMode

bool EpochMode::next_inline(std::string* why) const {
  auto say = [&](const std::string& w) {
    if (why) *why = w;
  };
  if (!allow_inline_) return false;
  if (pool_cost_ < 0 || inline_cost_ < 0) {
    say("no epoch measured yet: the pool");
    return false;
  }
  const std::string costs = "a batch took " + num(pool_cost_ * 1e6) + " us with the pool, " +
                            num(inline_cost_ * 1e6) + " us in this thread" + (inline_measured_ ? "" : " (estimated)");
  if (last_inline_) {
    const bool back = pool_cost_ < inline_cost_ * (1 - kSwitchGain);
    say(costs + (back ? ": back to the pool" : ": loading in this thread again"));
    return !back;
  }
  const bool go = inline_cost_ < pool_cost_ * (1 - kSwitchGain);
  say(costs + (go ? ": loading in this thread (0 workers)" : ": the pool again"));
  return go;
}

void EpochMode::ended(bool inline_epoch, uint64_t batches, double steady_s, double busy_s, double app_s,
                      double sampler_s) {
  if (batches < 2 || steady_s <= 0) return;  // too short to say anything
  const double per = steady_s / static_cast<double>(batches - 1);
  last_inline_ = inline_epoch;
  if (inline_epoch) {
    inline_cost_ = per;
    inline_measured_ = true;
    return;
  }
  pool_cost_ = per;
  if (!inline_measured_)
    inline_cost_ = std::max(0.0, busy_s + app_s + sampler_s) / static_cast<double>(batches);
}

}  // namespace loader::runtime
