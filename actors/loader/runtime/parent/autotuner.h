// The autotuner of num_workers = kAutoWorkers (DataLoaderOptions::autotune): plain
// classes with no thread, process or actor in them.  Tests feed them scripted figures.
//
//   WorkerTuner  within an epoch: from the stage figures sampled every 100 ms on the
//                pool actor's clock (the pipeline's counters: batches handed over, the
//                application's time waiting in next(), the workers' busy time), says
//                when to start or retire a worker process and when to raise or lower
//                the prefetch depth.  Called on the pool actor's thread only.
//   EpochMode    between epochs of a map-style dataset: load the next epoch in the
//                application's thread (0 workers) or with the pool, from what each way
//                cost per batch (measured, or estimated from the other way's figures).
//                Called on the application thread (DataLoader::iter) only.
//
// WorkerTuner's rules, one step at a time, each judged before the next:
//   input-bound   the application waited >= kWaitShare of the window:
//                   workers busy >= kBusyShare: one more worker (below max_workers and the
//                   memory budget); else, or when no worker can be added, a deeper
//                   prefetch (tune_prefetch, below its max).
//   idle workers  the application waited < kIdleWaitShare and the workers would still be
//                 under kBusyShare with one fewer: one worker retired (above min_workers);
//                 else, results piling up (ready >= half the tasks allowed in flight) and
//                 a prefetch above where it started: a shallower prefetch.
//   over budget   the estimated memory (slab bytes per batch x (prefetch + 2) per worker,
//                 plus each worker's resident memory) above memory_budget_bytes: a
//                 shallower prefetch, else one worker fewer.
// A step that adds (a worker, prefetch) is a trial: after it settled (the new worker
// runs, kSettleWindows windows passed), the batch rate must have risen by kMinGain, else
// the step is undone and that direction is closed for kBlockWindows windows.  A step that
// removes is undone when the application waits again (>= kUndoWaitShare of the window;
// the rate is the consumer's then, noise to judge by); retiring is then closed for
// kBlockWindows windows.  So the tuner never swings
// between two settings: each one it leaves for a reason it measured.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loader/epoch_stats.h"

namespace loader::runtime {

/// The pool's figures at one instant of an epoch (cumulative since the epoch began).
struct TuneSample {
  double t_s = 0;           ///< seconds since the epoch began
  uint64_t batches = 0;     ///< batches handed to the application
  double wait_s = 0;        ///< the application's time waiting in next() for a batch
  double busy_s = 0;        ///< the workers' time on tasks (all workers), replies received
  int active = 0;           ///< workers that get tasks (running, or starting for the tuner)
  int starting = 0;         ///< of those, started by the tuner and not ready yet
  int prefetch = 0;         ///< the prefetch depth in effect
  uint64_t ready = 0;       ///< results waiting for the application now
  uint64_t batch_bytes = 0; ///< shared memory per batch (0: not known yet)
  uint64_t worker_rss = 0;  ///< resident memory of one worker process (0: not known)
};

/// A change the tuner asks for.
struct TuneStep {
  int workers = 0;       ///< workers to have (the current number: unchanged)
  int prefetch = 0;      ///< prefetch depth to have
  std::string reason;    ///< why, with the figures ("input-bound: waited 61% ...")
};

class WorkerTuner {
 public:
  struct Limits {
    int min_workers = 1;       ///< at least 1 (0 workers is EpochMode's, between epochs)
    int max_workers = 1;
    int min_prefetch = 1;
    int max_prefetch = 8;
    bool tune_prefetch = true;
    bool fixed_workers = false;  ///< an IterableDataset: every worker's stream is needed
    uint64_t memory_budget = 0;  ///< 0: none
  };
  static constexpr double kWindowS = 0.25;       ///< a window lasts at least this long ...
  static constexpr uint64_t kWindowBatches = 6;  ///< ... and holds this many batches,
  static constexpr double kMaxWindowS = 2.0;     ///< or lasts this long
  /// input-bound and busy as EpochStats::diagnosis() says them.
  static constexpr double kWaitShare = EpochStats::kWaitShare;
  static constexpr double kIdleWaitShare = 0.05;
  static constexpr double kBusyShare = EpochStats::kBusyShare;
  static constexpr double kMinGain = 0.05;
  static constexpr double kUndoWaitShare = 0.1;
  static constexpr int kSettleWindows = 1;
  static constexpr int kBlockWindows = 40;

  explicit WorkerTuner(Limits limits);

  /// An epoch begins (its counters start from 0): the window starts again; trials and
  /// closed directions carry over (the data did not change).
  void begin_epoch();
  /// The figures now.  Returns the step to take, if any (the caller applies it and the
  /// next samples show it).
  std::optional<TuneStep> observe(const TuneSample& s);

  /// The memory a setting is estimated to take (see the rules above).
  static uint64_t memory_of(int workers, int prefetch, uint64_t batch_bytes, uint64_t worker_rss);

 private:
  struct Trial {
    enum class Kind { AddWorker, AddPrefetch, RetireWorker, LowerPrefetch } kind;
    double rate_before = 0;
    int workers_before = 0, prefetch_before = 0;
    int settle = 0;  ///< windows still to pass before it is judged
  };
  bool fits(int workers, int prefetch, const TuneSample& s) const;
  std::optional<TuneStep> judge(const TuneSample& s, double rate, double wait_share);
  std::optional<TuneStep> decide(const TuneSample& s, double rate, double wait_share, double busy_share);
  void start_trial(Trial::Kind kind, const TuneSample& s, double rate);

  Limits limits_;
  std::optional<TuneSample> base_;  ///< the window's start
  std::optional<Trial> trial_;
  int windows_ = 0;                 ///< windows judged so far (the clock of the blocks)
  int grow_blocked_until_ = 0, prefetch_blocked_until_ = 0, retire_blocked_until_ = 0;
  bool prefetch_lowering_blocked_ = false;  ///< a lower prefetch was undone: not tried again
  std::optional<int> start_prefetch_;       ///< the prefetch the first sample had (never lowered below it)
};

/// Between epochs: the pool or this thread.
class EpochMode {
 public:
  static constexpr double kSwitchGain = 0.15;  ///< the other way must be this much cheaper

  /// `allow_inline`: min_workers is 0 and the dataset is map-style.
  explicit EpochMode(bool allow_inline) : allow_inline_(allow_inline) {}
  /// Whether the next epoch loads in this thread, and why (for the decision log).
  bool next_inline(std::string* why) const;
  /// An epoch ended that ran `inline_epoch` with these figures: `batches`, its wall time
  /// after the first batch (`steady_s`), and for a pool epoch the workers' busy time,
  /// the application's time outside next() (its own work) and the sampler's.
  void ended(bool inline_epoch, uint64_t batches, double steady_s, double busy_s, double app_s, double sampler_s);

 private:
  bool allow_inline_;
  bool last_inline_ = false;
  double pool_cost_ = -1;    ///< seconds per batch with the pool, measured (-1: none)
  double inline_cost_ = -1;  ///< ... in this thread, measured or estimated (-1: none)
  bool inline_measured_ = false;
};

}  // namespace loader::runtime
