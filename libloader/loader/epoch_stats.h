// EpochStats: what the stages of one epoch did so far, for a dashboard, a log line or
// an autotuner (DataLoader::Iterator::stats()); LoaderStats: every epoch of a loader so
// far and their totals (DataLoader::stats()).  A snapshot: taking it costs a lock, a
// copy and a read of /proc/<pid>/stat per worker, never a message to a worker.
//
// Always on.  On the batch path the figures cost, per batch: two clock reads in the
// worker around its collate (besides the two around the task), one clock read on the
// strand when next() hands a batch over (the time-weighted in-flight and ready
// figures), and one histogram increment on the application thread (next()'s time, read
// already).  LOADER_STATS=0 in the environment turns that per-batch recording off
// (wait_*, in_flight_mean/max, ready_mean/max, worker collate_s stay 0), to measure
// what it costs (bench/analysis.md, "What the metrics cost").
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace loader {

/// Durations counted in fixed log-spaced buckets: nothing is allocated per sample.
/// Bucket 0 holds durations under 256 ns; above, each doubling is split in 8 equal
/// buckets (each 1/8 of the doubling's start wide), up to about 9 minutes (the last
/// bucket holds anything longer).  Quantiles are the middle of their bucket (at most
/// 6% off) capped at the exact max.
class DurationHistogram {
 public:
  static constexpr int kSubBits = 3;
  static constexpr int kBuckets = 256;
  void add(uint64_t ns) noexcept {
    counts_[static_cast<size_t>(bucket(ns))] += 1;
    ++count_;
    sum_ns_ += ns;
    if (ns > max_ns_) max_ns_ = ns;
  }
  void merge(const DurationHistogram& o) noexcept;
  int64_t count() const noexcept { return static_cast<int64_t>(count_); }
  double sum_s() const noexcept { return static_cast<double>(sum_ns_) * 1e-9; }
  double max_s() const noexcept { return static_cast<double>(max_ns_) * 1e-9; }
  /// The q-quantile (0 <= q <= 1) in seconds; 0 when empty.
  double quantile_s(double q) const noexcept;
  static int bucket(uint64_t ns) noexcept {
    if (ns < 256) return 0;
    const int msb = 63 - __builtin_clzll(ns);  // >= 8
    const int sub = static_cast<int>((ns >> (msb - kSubBits)) & ((1u << kSubBits) - 1));
    const int b = 1 + ((msb - 8) << kSubBits) + sub;
    return b < kBuckets ? b : kBuckets - 1;
  }
  /// The durations bucket `b` holds: [lower_ns(b), lower_ns(b + 1)).
  static double lower_ns(int b) noexcept;

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  uint64_t sum_ns_ = 0;
  uint64_t max_ns_ = 0;
};

/// False when LOADER_STATS=0 was set in the environment when first asked (read once).
bool stats_recording() noexcept;

struct EpochStats {
  /// Batches next() returned so far in this epoch (a batch that failed not counted).
  int64_t batches = 0;
  /// Samples in those batches (each batch's first dimension; 1 per batch without
  /// automatic batching).
  int64_t samples = 0;
  /// Seconds from iter() to now, or to the end of the epoch (the epoch's wall time).
  double wall_s = 0;
  /// Seconds from iter() to the first batch next() returned (0 before it).
  double first_batch_s = 0;
  /// Seconds the application spent inside next(): waiting for data plus turning the
  /// batch into tensors.  Compared with the epoch's wall time it says whether training
  /// waits for the loader (input-bound) or the loader waits for training.
  double next_s = 0;
  /// The time of each next() call that returned a batch (or threw its error): what the
  /// application waited per batch (wait.quantile_s(0.5) ... , wait.max_s()).
  DurationHistogram wait;
  /// next() calls that found no batch ready and had to wait for one (num_workers > 0).
  int64_t waits = 0;
  /// Sampler stage: tasks (index batches) handed to workers so far in this epoch; with
  /// num_workers = 0, batches fetched.
  int64_t tasks_sent = 0;
  /// Tasks sent and not yet delivered, now: at most prefetch_factor * num_workers.
  int64_t in_flight = 0;
  /// Reorder stage: results that arrived and wait for their turn (in_order) or for
  /// next(), now.
  int64_t ready = 0;
  /// in_flight and ready over the epoch: seen each time next() hands a batch over
  /// (ready before it is taken, in_flight once its credit sent the next task), each
  /// value weighted by the time until the next hand-over; and their largest values.
  double in_flight_mean = 0;
  int64_t in_flight_max = 0;
  double ready_mean = 0;
  int64_t ready_max = 0;
  /// Sampler stage: seconds the application thread spent drawing the index batches
  /// of the tasks counted in tasks_sent (the sampler's and batch sampler's next()).
  double sampler_s = 0;
  /// The loader's shared-memory slab pool (all workers): bytes mapped now, bytes held
  /// by tasks and batches now, the most held at once in this epoch, and the slabs made
  /// in this epoch (each a growth of the pool: a first epoch makes its pool).
  int64_t slab_bytes_mapped = 0;
  int64_t slab_bytes_in_use = 0;
  int64_t slab_bytes_peak = 0;
  int64_t slab_grown = 0;
  /// Batches that came back inline (every worker's inline_batches), and worker
  /// restarts used (every worker's restarts).
  int64_t inline_batches = 0;
  int64_t restarts = 0;
  /// Minor page faults of the workers in the loader's previous epoch (-1: none): set by
  /// the DataLoader, for diagnosis()'s "warming up".
  int64_t previous_minor_faults = -1;

  struct Worker {
    int pid = -1;            ///< -1: an in-process worker, or none running
    std::string state;       ///< "starting", "running", "restarting" or "dead"
    int restarts = 0;        ///< restarts used (DataLoaderOptions::max_worker_restarts)
    int64_t held = 0;        ///< tasks it was sent and has not answered, now
    int64_t delivered = 0;   ///< its batches next() returned in this epoch
    int64_t tasks = 0;       ///< its answers (batches and errors) that reached the main process
    /// Its tasks of this epoch whose batch comes back in the main process's heap
    /// instead of a slab: next() waited for them while the application held every
    /// slab of this worker (it keeps batches) and the shared-memory budget (shm_limit_bytes
    /// or /dev/shm) allowed no more.
    int64_t inline_batches = 0;
    /// Seconds it spent loading, collating and writing into its slabs the batches (or
    /// errors) of this epoch that reached the main process: compared with the epoch's
    /// wall time, how busy the worker was (near 1: the workers are the bottleneck;
    /// near 0 while next() waits little: fewer workers would do).
    double busy_s = 0;
    /// busy_s split: collate_s is the collate function (default_collate, or a custom
    /// one) and the copy into the slab; fetch_s the rest (the dataset's get() /
    /// get_batch(); with a sample_spec() fast path the samples are written straight
    /// into the slab, which counts as fetch).
    double fetch_s = 0;
    double collate_s = 0;
    /// The process's CPU time and minor page faults in this epoch (from
    /// /proc/<pid>/stat when the stats are taken; 0 for an in-process worker).
    double cpu_user_s = 0;
    double cpu_system_s = 0;
    int64_t minor_faults = 0;
  };
  /// One per worker (empty with num_workers = 0).  With num_workers = auto, one per
  /// worker slot (max_workers); a retired slot's state is "parked".
  std::vector<Worker> workers;

  /// num_workers = auto (DataLoaderOptions::autotune): the tuner's decisions in this
  /// epoch, in order: `t_s` seconds after iter() (0: made as the epoch began, between
  /// epochs), the workers and prefetch_factor before and after (to_workers 0: this epoch
  /// loads in the application's thread), and why, with the figures it measured.
  struct TuneDecision {
    double t_s = 0;
    int from_workers = 0, to_workers = 0;
    int from_prefetch = 0, to_prefetch = 0;
    std::string reason;
  };
  std::vector<TuneDecision> autotune;
  /// The loader tunes itself (num_workers = auto); then the workers running and the
  /// prefetch depth now (0 workers: this epoch loads in the application's thread).
  bool autotuned = false;
  int workers_now = 0;
  int prefetch_now = 0;

  /// Adds `o` to these figures (totals over epochs): counts, times and histograms
  /// summed, maxima kept, means weighted by wall time, workers added by index.
  void add(const EpochStats& o);

  /// One line that says what bounds the epoch and what to change, e.g.
  /// "input-bound: workers 95% busy, training waited 61% of the epoch: more workers
  /// (2 -> 3) or cheaper samples".  Checked in this order, the first that holds:
  ///  - "no batches yet"                when batches == 0;
  ///  - "start-up-bound"  first_batch_s >= kStartupShare of wall_s, followed by
  ///                      "; after it " and one of the three below but the last;
  ///  - "sampler-bound"   sampler_s >= kSamplerShare of wall_s;
  ///  - "input-bound"     next_s >= kWaitShare of wall_s (with workers: their busy
  ///                      share, busy_share(), >= kBusyShare says more
  ///                      workers; below it, a deeper prefetch);
  ///  - "consumer-bound"  next_s < kWaitShare of wall_s and, with workers, busy share
  ///                      < kBusyShare or ready_mean >= kReadyPileUp: fewer workers or
  ///                      a lower prefetch_factor would do;
  ///  - "balanced"        otherwise.
  /// Then "; warming up: ..." is added when the workers' minor faults fell to at most
  /// kWarmingFall of the previous epoch's and are still at least kWarmingFaults: the
  /// workers are still faulting their mappings in and the rate will rise.
  std::string diagnosis() const;
  static constexpr double kStartupShare = 0.25;
  static constexpr double kSamplerShare = 0.2;
  static constexpr double kWaitShare = 0.2;
  static constexpr double kBusyShare = 0.7;
  static constexpr double kReadyPileUp = 1.0;
  static constexpr double kWarmingFall = 0.7;
  static constexpr int64_t kWarmingFaults = 1000;

  /// The workers' busy share: sum of busy_s / ((wall_s - first_batch_s) * workers), the
  /// time after the first batch (at least half the epoch), since fresh workers spend the
  /// start-up starting (0 without workers).
  double busy_share() const;
  /// The workers' minor faults in this epoch, summed.
  int64_t minor_faults() const;

  /// A JSON object: every figure above (wait as wait_p50_s, wait_p90_s, wait_p99_s,
  /// wait_max_s, wait_mean_s), workers as a list, and "diagnosis"; with num_workers =
  /// auto also "workers_now", "prefetch_now" and "autotune" (a list of {t_s,
  /// from_workers, to_workers, from_prefetch, to_prefetch, reason}).
  std::string to_json() const;
};

/// Every epoch of a DataLoader so far (ended, or left by its iterator; the one running
/// now is DataLoader::Iterator::stats()) and their totals (EpochStats::add).
struct LoaderStats {
  std::vector<EpochStats> epochs;
  EpochStats total;
  /// {"epochs": [...], "total": {...}}
  std::string to_json() const;
};

}  // namespace loader
