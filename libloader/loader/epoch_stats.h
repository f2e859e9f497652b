// EpochStats: what the stages of one epoch did so far, for a dashboard, a log line or
// an autotuner (DataLoader::Iterator::stats()).  A snapshot: taking it costs a lock
// and a copy, never a message to a worker.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loader {

struct EpochStats {
  /// Batches next() returned so far in this epoch (a batch that failed not counted).
  int64_t batches = 0;
  /// Seconds the application spent inside next(): waiting for data plus turning the
  /// batch into tensors.  Compared with the epoch's wall time it says whether training
  /// waits for the loader (input-bound) or the loader waits for training.
  double next_s = 0;
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
  /// Sampler stage: seconds the application thread spent drawing the index batches
  /// of the tasks counted in tasks_sent (the sampler's and batch sampler's next()).
  double sampler_s = 0;

  struct Worker {
    int pid = -1;            ///< -1: an in-process worker, or none running
    std::string state;       ///< "starting", "running", "restarting" or "dead"
    int restarts = 0;        ///< restarts used (DataLoaderOptions::max_worker_restarts)
    int64_t held = 0;        ///< tasks it was sent and has not answered, now
    int64_t delivered = 0;   ///< its batches next() returned in this epoch
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
  };
  /// One per worker (empty with num_workers = 0).
  std::vector<Worker> workers;
};

}  // namespace loader
