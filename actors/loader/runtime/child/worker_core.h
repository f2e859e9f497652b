// WorkerCore: what a worker does, without any actor or process machinery.
//
// It rebuilds the dataset from its handle, seeds the worker's default generator
// with base_seed + id, runs worker_init_fn, and turns tasks into batches written
// into shared-memory slabs.  The worker actor (worker_actor.h) is its shell, in a
// worker process and in an in-process worker thread alike, so both behave
// identically; tests drive it directly.
//
//   WorkerCore core(config);                        // may throw: init errors
//   core.add_slab(1, base, size);
//   WorkerReply r = core.run_task(7, {3, 1, 4}, 1); // Result, Need, Error or IterEnd
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "loader/dataset.h"
#include "loader/fetch.h"
#include "loader/generator.h"
#include "loader/worker_info.h"
#include "loader/runtime/buffer_pool.h"
#include "loader/runtime/epoch.h"     // StreamStart
#include "loader/runtime/protocol.h"  // WorkerReply, kInlineSlab

namespace loader::runtime {

/// Everything a worker needs to start; crosses the process boundary as a Value.
struct WorkerConfig {
  int worker_id = 0;
  int num_workers = 1;
  uint64_t seed = 0;
  DatasetHandle dataset;
  bool iterable = false;
  bool auto_collation = true;
  int64_t batch_size = 1;  ///< samples per task for iterable datasets
  bool drop_last = false;
  std::string collate_fn_name;
  std::string worker_init_fn_name;
  /// WorkerSeeding::PerTask: before each task the generator is seeded
  /// task_seed(base_seed, task - task_base), task_base being the (pipeline-wide) id of
  /// the epoch's index batch 0, so the seed depends on the batch's place in the epoch
  /// only, not on the worker or on what it ran before.
  bool per_task_seeding = false;
  uint64_t base_seed = 0;
  uint64_t task_base = 0;

  Value to_value() const;
  static WorkerConfig from_value(const Value& v);
};

class WorkerCore {
 public:
  /// Throws loader::Error when the dataset cannot be built or worker_init_fn fails.
  explicit WorkerCore(const WorkerConfig& config);

  void add_slab(uint64_t id, void* base, size_t size);
  void drop_slab(uint64_t id);
  /// Loads task `task` (the dataset indices; ignored for iterable datasets, which
  /// take batch_size samples) into slab `slab` (0: none yet; kInlineSlab: the batch
  /// itself in the reply's value, encoded by what sends it).
  WorkerReply run_task(uint64_t task, const IndexBatch& indices, uint64_t slab);
  /// Retries the batch of a task that answered Need, now with a larger slab.
  WorkerReply use_slab(uint64_t task, uint64_t slab);
  /// Starts a new epoch for persistent workers: iterable streams begin again.
  void reset_epoch();
  /// Sets the worker's generator to `state` (a SetRng frame); false, changing nothing,
  /// when it is not a generator state.  For an IterableDataset the state is the one its
  /// epoch begins with (an iterable epoch is only ever resumed from its start), so the
  /// stream is made again from it, as reset_epoch() does: the dataset's iter() may draw.
  bool set_generator_state(const std::string& state);
  /// WorkerSeeding::PerTask: tasks from now on are seeded task_seed(base_seed, task -
  /// task_base) (an epoch of persistent workers; a worker restarted mid-epoch).
  void set_task_seeds(uint64_t base_seed, uint64_t task_base) {
    config_.base_seed = base_seed;
    config_.task_base = task_base;
  }
  /// An IterableDataset with state hooks, a resumed epoch (a ResumeStream frame): the
  /// generator set to `r.rng`, the dataset copy's load_state(r.state), the stream made
  /// again, and its first r.skip results passed (IterableFetcher::skip).  Throws
  /// loader::Error naming the dataset when the state is refused or the stream is shorter.
  void resume_stream(const StreamResume& r);
  /// How the iterable stream began, once per stream, for the first reply it gives (the
  /// worker actor reports it with that reply's task); nullopt afterwards, and for a
  /// map-style dataset.
  std::optional<StreamStart> take_stream_start();

  const WorkerInfo& info() const { return info_; }
  /// The worker's default generator (its random stream; saved and restored across restarts).
  Generator& generator() { return generator_; }

 private:
  WorkerReply run(uint64_t task, const IndexBatch& indices, uint64_t slab);
  WorkerReply retry(uint64_t task, uint64_t slab);
  /// Sets r.busy_ns from `start` and r.collate_ns from collate_ns_ (plus the times of the
  /// task's tries that answered Need),
  /// or, for a Need, keeps the time for the retry.
  void account(WorkerReply& r, std::chrono::steady_clock::time_point start);
  /// The task's batch (nullopt: an iterable dataset's stream ended).
  std::optional<Value> fetch(const IndexBatch& indices);
  WorkerReply place(uint64_t task, const Value& batch, uint64_t slab);
  WorkerReply error_reply(uint64_t task, const std::string& type, const std::string& what) const;
  /// Begins the iterable stream: notes the generator and the copy's state(), then its
  /// iter() (through the fetcher).  Under the worker's scope.
  void start_stream();

  WorkerConfig config_;
  Generator generator_;
  WorkerInfo info_;
  std::optional<MapFetcher> map_fetcher_;
  std::optional<IterableFetcher> iter_fetcher_;
  std::optional<StreamStart> unreported_;  ///< how the current stream began, until reported
  struct Slab {
    void* base;
    size_t size;
  };
  std::map<uint64_t, Slab> slabs_;
  std::map<uint64_t, Value> pending_;  ///< batches waiting for a larger slab, by task
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> pending_ns_;  ///< their time so far (busy, collate), by task
  uint64_t collate_ns_ = 0;  ///< the current try's collate and write time (WorkerReply::collate_ns)
  /// Inline batches are made from it: their buffers come back once sent (a remote
  /// worker's stream of batches faults in no fresh pages per batch).
  BufferPool inline_pool_;
};

}  // namespace loader::runtime
