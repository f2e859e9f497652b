// PoolTuning: num_workers = auto in one worker pool: which slots the autotuner wants
// running, the prefetch depth in effect, the epoch's decisions (EpochStats::autotune),
// and the tuner itself (WorkerTuner).  A plain class: the pipeline feeds it the pool's
// figures and the slots' states and carries out what it answers (tasks to the sampler,
// park/unpark to the slot actors); tests drive it directly (pool_tuning_test.cpp).
//
// Thread use: observe() on the pool actor's thread only (the tuner's window is its
// own); every other method on the pool's strand.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "loader/epoch_stats.h"
#include "loader/runtime/parent/autotuner.h"

namespace loader::runtime {

class PoolTuning {
 public:
  /// `workers` slots, of which the first `workers_now` run as the pool starts, with
  /// `prefetch_now` tasks per worker; the depth never goes above `deepest`.
  PoolTuning(int workers, const WorkerTuner::Limits& limits, int workers_now, int prefetch_now, int deepest);

  /// What the tuning needs to know of slot k (WorkerSlots).
  struct Slot {
    bool accepting = false;  ///< running (starting or ready): it can take tasks
    bool dead = false;       ///< failed for good
    bool holds_tasks = false;
  };

  bool wanted(int worker) const { return wanted_[static_cast<size_t>(worker)] != 0; }
  int wanted_count() const;
  int prefetch() const { return prefetch_now_; }
  /// The tasks that may be out: prefetch x wanted workers.
  uint64_t max_in_flight() const;

  /// Retired slots that hold nothing any more: their processes are to go (park).
  std::vector<int> finished_retirements(const std::vector<Slot>& slots) const;

  /// Pool actor's thread: the figures of epoch `epoch` now; the step to take, if any.
  std::optional<TuneStep> observe(uint64_t epoch, const TuneSample& sample);

  /// What applying a step means for the pool.
  struct Applied {
    std::vector<std::pair<int, bool>> told;  ///< to the sampler: (worker, gets tasks); (-1, false): the depth only
    std::vector<std::pair<int, bool>> acts;  ///< to the slot actors: retire (false) or start (true) worker k
  };
  /// Applies `step` at `t_s` seconds into the epoch: the wanted slots and the depth
  /// change (workers from the lowest free slot up, retired from the highest down; dead
  /// slots are never wanted), the decision is recorded.
  Applied apply(const TuneStep& step, const std::vector<Slot>& slots, double t_s);

  /// An epoch begins: its decisions start empty.
  void begin_epoch() { decisions_.clear(); }
  const std::vector<EpochStats::TuneDecision>& decisions() const { return decisions_; }

 private:
  std::vector<char> wanted_;
  int prefetch_now_ = 1;
  int deepest_ = 1;
  std::vector<EpochStats::TuneDecision> decisions_;
  std::unique_ptr<WorkerTuner> tuner_;  ///< pool actor's thread
  uint64_t tuned_epoch_ = 0;            ///< the epoch the tuner's window belongs to (pool actor)
};

}  // namespace loader::runtime
