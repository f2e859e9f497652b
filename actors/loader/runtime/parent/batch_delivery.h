// BatchDelivery: the per-batch path of one worker pool, Pipeline's delivery role.  The
// application thread's next() takes the results the workers published in the result
// rings (shared memory, no system call) to their link actors, runs the strand (link ->
// reorder -> pin), takes the next handed-over result, sends the sampler its credit back
// and runs the strand again (the sampler's next task goes to a link, which posts it in
// the worker's task ring; the worker is woken only if it sleeps).  It sleeps on the
// rings' doorbell only when nothing is ready.  It also keeps the epoch's delivery
// figures: next() calls that waited, the time they waited (the autotuner's), and the
// tasks in flight and results ready over time (EpochOccupancy).
//
// Thread use: next() and release_slab() enter the strand themselves (next() leaves it
// to spin, sleep and flush); every other method with the strand entered.  The pool's
// epoch, fatal error and closed flag (PoolEpoch) are the pool's, read here on the strand.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "loader/runtime/parent/stage_actors.h"

namespace loader::runtime {

class SlabStore;
class SlotPlacement;
class WorkerRings;
class WorkerSlots;

/// What next() hands the application thread.
struct Delivery {
  enum class Kind { Batch, Error, End, Fatal, Timeout } kind = Kind::End;
  uint64_t task = 0;
  int worker = -1;
  uint64_t slab = 0;          ///< Batch: the slab the batch is in (0: inline payload)
  std::string payload;        ///< Batch: encoded batch (descriptors into the slab)
  std::string error_type;     ///< Error/Fatal
  std::string error_message;  ///< Error/Fatal
  bool pinned = false;        ///< Batch: its slab is page-locked (the pin stage says so)
  std::shared_ptr<Value> value = nullptr;  ///< Batch: the batch itself, read by a remote worker's bulk stream (payload empty)
};

/// The pool's own state that the delivery reads: written by the pool (Pipeline), on the
/// strand.
struct PoolEpoch {
  bool closed = false;          ///< shut down: nothing more is delivered
  uint64_t epoch = 0;           ///< the running epoch (0: none)
  uint64_t first_task = 0;      ///< its first task
  std::optional<Delivery> fatal;  ///< the error that ended it
};

/// The epoch's in-flight tasks and ready results over time (EpochStats in_flight_mean,
/// ready_mean, their max): seen at each hand-over of a batch, each value weighted by
/// the time to the next hand-over.  On the strand.
struct EpochOccupancy {
  std::chrono::steady_clock::time_point began, last;
  double in_flight_area = 0, ready_area = 0;  ///< value x seconds
  uint64_t in_flight = 0, ready = 0;           ///< the values seen last
  uint64_t in_flight_max = 0, ready_max = 0;
  void start(std::chrono::steady_clock::time_point now);
  void see(std::chrono::steady_clock::time_point now, uint64_t in_flight_now, uint64_t ready_now);
  /// The means up to `now` (the values seen last still count until then).
  std::pair<double, double> means(std::chrono::steady_clock::time_point now) const;
};

class BatchDelivery {
 public:
  /// What the delivery asks of the pool (Pipeline).
  class Pool {
   public:
    virtual ~Pool() = default;
    /// On the strand: runs the stage actors until every mailbox is empty (a sampler that
    /// failed fails the epoch).
    virtual void run_stages_locked() = 0;
    /// On the strand: worker `worker` cannot be read any more; it fails.
    virtual void worker_failed_locked(int worker, const std::string& type, const std::string& message) = 0;
    /// Off the strand: writes the frames queued for `worker` (under its owner lock).
    virtual void flush(int worker) = 0;
  };
  /// Every argument outlives the delivery.
  BatchDelivery(StageActors& stages, WorkerSlots& workers, WorkerRings& rings, const SlotPlacement& placement,
                SlabStore& slabs, const PoolEpoch& pool, Pool& actions);

  // ---- the application thread
  /// The next result of epoch `epoch` in order (End once another epoch began); waits
  /// until `deadline` (nullopt: forever).
  Delivery next(uint64_t epoch, std::optional<std::chrono::steady_clock::time_point> deadline);
  // ---- any thread but a reader
  /// A batch in `slab` was dropped by the application: a task waiting for a slab goes out.
  void release_slab(int worker, uint64_t slab);

  // ---- on the strand
  /// Takes every result the workers have published in the result rings (all rings, or
  /// only `worker`'s) and gives each to its link actor, then runs the stages.  Sets
  /// `flush_needed` when a worker has frames to write.  Returns how many it took.
  size_t drain_rings_locked(bool& flush_needed, int worker = -1);
  /// Gives back the slabs of every result of the epoch not taken (reorder, handoff).
  void release_undelivered_locked();
  /// The task the application gets next.
  uint64_t next_for_application_locked() const;
  /// Something next() would return now without waiting (a batch, the end, an error).
  bool releasable_locked() const;
  /// A new epoch: its figures start at `now`.
  void begin_epoch_locked(std::chrono::steady_clock::time_point now);
  /// The epoch's first tasks are out (`in_flight`).
  void first_tasks_out_locked(uint64_t in_flight);
  /// The epoch's figures so far.
  uint64_t waits() const { return waits_; }
  uint64_t wait_ns() const { return wait_ns_; }
  const EpochOccupancy& occupancy() const { return occupancy_; }

 private:
  /// Hands the result at the handoff's front to the application: its credit back to the
  /// sampler, the stages run, the occupancy seen.  `ready_before`: results ready before.
  Delivery hand_over(HandedOver& handed, uint64_t ready_before);
  /// Writes the frames of the workers that have some (usually the one the next task
  /// went to): unlocks `lock`.
  void flush_dirty(std::unique_lock<std::mutex>& lock);

  StageActors& stages_;
  WorkerSlots& workers_;
  WorkerRings& rings_;
  const SlotPlacement& placement_;
  SlabStore& slabs_;
  const PoolEpoch& pool_;
  Pool& actions_;
  // The epoch's figures, on the strand.
  uint64_t waits_ = 0;    ///< next() calls of this epoch that found nothing ready
  uint64_t wait_ns_ = 0;  ///< the application's time in them, waiting
  EpochOccupancy occupancy_;
};

}  // namespace loader::runtime
