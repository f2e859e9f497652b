// Internal: what a DataLoader shares with its epochs, and the epoch interface that
// the single-process path and the actor runtime implement.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loader/dataloader_options.h"
#include "loader/dataset.h"
#include "loader/epoch_stats.h"
#include "loader/fetch.h"
#include "loader/pinned.h"
#include "loader/value.h"

namespace loader {

namespace runtime {
class WorkerPool;
class SlabStore;
class EpochMode;
}

/// How one stream of an IterableDataset began (its state hooks, IterableDataset::state):
/// reported by each worker for every stream its copy starts (pipeline.h), kept by the
/// single-process epoch for the loader's own copy.
struct StreamStart {
  std::string rng;                   ///< the worker's generator state just before iter() (empty: no worker)
  std::optional<std::string> state;  ///< the copy's state() then; nullopt: the dataset has no state hooks
};

/// Where one stream of an IterableDataset with state hooks resumes (a checkpoint's).
struct StreamResume {
  std::string rng;     ///< the worker's generator state to start from (empty: no worker)
  std::string state;   ///< given to the copy's load_state() before its iter()
  uint64_t skip = 0;   ///< the results of the stream the checkpointed iterator had taken
};

/// Where a running epoch stands, for a checkpoint (DataLoader::Iterator::state_dict).
struct EpochPosition {
  /// Tasks delivered to the application (batches and errors); with in_order=false, the
  /// first task not delivered (every one below it was).
  uint64_t consumed = 0;
  /// in_order=false: the tasks above `consumed` already delivered, ascending.
  std::vector<uint64_t> delivered_above;
  uint64_t sent = 0;      ///< tasks the sampler has given so far
  /// The sampler has run out: it was asked for a task after its last one (and made
  /// whatever draws its pass makes at its end, as RandomSampler's trailing randperm).
  bool exhausted = false;
  /// Per worker: the generator state at the start of its first task not yet delivered
  /// (or of its next task); none: the state its last Init gave.
  std::vector<std::optional<std::string>> worker_rng;
  /// False when the workers' state pages are too short for the tasks in flight (a huge
  /// prefetch_factor * num_workers): worker_rng cannot be trusted.
  bool exact = true;
  /// IterableDataset: per stream (each worker's; with no workers the loader's copy), how
  /// this epoch's stream began (nullopt: not reported yet), the results of it the
  /// application took in this epoch (batches and errors), and the stream whose result
  /// comes next in the round robin (the one after the last taken).
  std::vector<std::optional<StreamStart>> stream_start;
  std::vector<uint64_t> stream_taken;
  int stream_next = 0;
};

/// Where a resumed epoch's workers start (DataLoader::load_state_dict).
struct EpochResume {
  /// Tasks of the epoch the checkpointed iterator had consumed: the round robin goes on
  /// at worker `consumed % W`, as it would have (task i of the epoch to worker i mod W).
  uint64_t consumed = 0;
  /// Per worker: the generator state its first task of the epoch starts from (a SetRng
  /// before it); none: the state its Init gives.
  std::vector<std::optional<std::string>> worker_rng;
  /// IterableDataset with state hooks: per worker, where its stream resumes (a
  /// ResumeStream frame, before anything else of the epoch); empty: none.
  std::vector<StreamResume> streams;
  /// Where the round robin starts; -1: at worker `consumed % W`.
  int first_worker = -1;
  /// WorkerSeeding::PerTask: the epoch's base_seed, sent to every worker before its
  /// first task (TaskSeeds: persistent workers get no configuration per epoch).
  std::optional<uint64_t> task_seed_base;
  /// Some worker must start from the state its Init gives: running persistent workers
  /// (whose streams moved on) are replaced.
  bool fresh_workers() const {
    for (const auto& w : worker_rng)
      if (!w) return true;
    return false;
  }
};

/// A checkpoint loaded by DataLoader::load_state_dict, applied by the next iter().
struct ResumePlan {
  bool finished = false;         ///< taken after its epoch ended: the next epoch starts afresh
  uint64_t consumed = 0;         ///< tasks the application had consumed
  uint64_t sampled = 0;          ///< tasks the sampler had given
  /// in_order=false: tasks between consumed and sampled the application already had,
  /// ascending (a resumed epoch does not send them again).
  std::vector<uint64_t> delivered_above;
  /// The sampler had run out (EpochPosition::exhausted): the draws its pass makes at its
  /// end are in streams_now, and a resumed epoch must not make them again.
  bool exhausted = false;
  std::vector<std::string> streams_at_start;  ///< random streams as the epoch began
  std::vector<std::string> streams_now;       ///< ... and when the checkpoint was taken
  bool base_seed_drawn = false;  ///< the epoch drew its base_seed (else: persistent workers')
  uint64_t base_seed = 0;
  bool pool_alive = false;       ///< finished: persistent workers would serve the next epoch
  std::vector<std::optional<std::string>> worker_rng;
  /// The hashes of the batches the epoch had handed out (an IterableDataset's: of the
  /// results taken), for a verified replay; no hash in a checkpoint without them.
  ReplayCheck check;
  /// An unfinished epoch of an IterableDataset with state hooks: per stream (each
  /// worker's; one with num_workers=0), the state() it began from and the results of it
  /// the application had taken, and the stream whose result came next; worker_rng holds
  /// each worker's generator state as its stream began.  Empty: no hooks (replayed).
  std::vector<std::string> stream_states;
  std::vector<uint64_t> stream_taken;
  int stream_next = 0;
  std::string sampler_type;        ///< the checkpointed loader's sampler ("" when none)
  std::string batch_sampler_type;  ///< ... and batch sampler
  /// The checkpointed loader had this loader's num_workers and persistent_workers (else
  /// load_state_dict(state, false): the batches' indices are resumed, not the workers'
  /// random streams).
  bool same_workers = true;
  /// An elastic checkpoint (merge_checkpoints): the epoch `elastic_epoch` of the
  /// loader's DistributedSampler goes on over `elastic_indices`, this rank's stripe of
  /// the samples no old rank consumed, as a fresh pass (nothing replayed, no stream
  /// loaded); the fields above are unused.
  bool elastic = false;
  int64_t elastic_epoch = 0;
  std::vector<int64_t> elastic_indices;
};

/// One pass over the data.
class EpochBackend {
 public:
  virtual ~EpochBackend() = default;
  /// Next batch, nullopt at the end; throws for a batch that failed.
  virtual std::optional<Value> next() = 0;
  /// Pids of the worker processes serving this epoch (empty without workers).
  virtual std::vector<int> worker_pids() { return {}; }
  /// Ends the epoch now (its next() returns nullopt from then on).
  virtual void end() {}
  /// The epoch is over: it ended, or an error ended it (a worker that died, a timeout);
  /// an error of one batch leaves it going.
  virtual bool finished() const { return false; }
  /// Fills the stage figures of `out` (tasks, in flight, ready, workers, waits);
  /// the Iterator fills batches and next_s.
  virtual void stats(EpochStats& out) const = 0;
  /// Where the epoch stands (tasks consumed and given, workers' random states).
  virtual EpochPosition position() const = 0;
};

/// State of one DataLoader, shared with its live epoch.
class LoaderState {
 public:
  std::shared_ptr<Dataset> dataset;            // map-style, or
  std::shared_ptr<IterableDataset> iterable;   // iterable-style
  DataLoaderOptions options;
  std::shared_ptr<Sampler> sampler;            // map-style only
  std::shared_ptr<BatchSamplerBase> batch_sampler;  // when auto-collation
  bool auto_collation = true;
  std::optional<int64_t> iterable_len_called;  // len(dataset) once len(loader) was asked
  /// The worker processes kept between epochs (persistent_workers).
  std::shared_ptr<runtime::WorkerPool> persistent_pool;
  /// persistent_workers=false: the pool of the last epoch, idle; the next epoch
  /// re-initialises its workers (fresh dataset, seeds, worker_init_fn) instead of
  /// starting new processes.  Shut down with the loader (DataLoader::shutdown).
  std::shared_ptr<runtime::WorkerPool> idle_pool;
  /// The shared-memory slabs of every worker index, made once and kept for the
  /// loader's life (pools of non-persistent epochs reuse them).
  std::shared_ptr<runtime::SlabStore> slab_store;
  /// The excessive-workers warning was given (once per loader).
  bool warned_worker_count = false;
  /// What pin_memory achieved (DataLoader::pin_memory_status()), shared with the
  /// loader's slab store; made by the DataLoader constructor.
  std::shared_ptr<PinTracker> pin_tracker;
  /// A checkpoint to resume at the next iter() (DataLoader::load_state_dict).
  std::optional<ResumePlan> resume;
  /// ... and that checkpoint as it was given (a copy sharing no container with the
  /// caller's): until the next iter() applies it, it is where the loader stands, so
  /// DataLoader::state_dict() returns it.
  std::optional<Value> resume_state;
  /// The loader's latest iterator (a DataLoader::Iterator*, kept by the iterator), and
  /// where it stood when it went (DataLoader::state_dict; streams_now left empty).
  const void* latest_iterator = nullptr;
  std::optional<ResumePlan> latest_plan;
  /// Why the latest iterator left no plan (DataLoader::state_dict says it).
  std::string latest_plan_error;
  /// The next pass's indices in place of the sampler's (an elastic checkpoint, applied
  /// by iter(): that one pass only; the epoch after it is the sampler's own).
  std::optional<std::vector<int64_t>> elastic_pass;
  /// The figures of the loader's epochs so far (DataLoader::stats()): each iterator adds
  /// its epoch as it ends, or as it goes having given batches.
  std::vector<EpochStats> epoch_stats;
  /// num_workers = auto (options.autotune resolved: options.num_workers is its
  /// max_workers, the pool's slots): the setting the loader's last pool had (its next
  /// pool starts with it; 0: none yet), and the choice between the pool and this thread
  /// for each epoch (runtime/parent/autotuner.h; application thread).
  bool auto_workers = false;
  int tuned_workers = 0;
  int tuned_prefetch = 0;
  std::shared_ptr<runtime::EpochMode> epoch_mode;
  /// The collate function to use in this process.
  CollateFn collate() const;
  Generator& generator() const;
};

/// num_workers == 0: fetch in the calling thread.  `source`: the index stream
/// (map-style datasets), made by the caller.
/// `base_seed`, `first_index`: with WorkerSeeding::PerTask each index batch is loaded
/// under a generator seeded task_seed(base_seed, its index in the epoch), the first one
/// taken being `first_index` (a resumed epoch's consumed batches).
/// `stream`: an IterableDataset with state hooks resumed mid-epoch: its state is loaded
/// before iter() and its first results skipped (ValueError naming the dataset when the
/// state is refused or the stream is shorter).
std::unique_ptr<EpochBackend> make_single_process_epoch(LoaderState& state, std::optional<TaskSource> source,
                                                         uint64_t base_seed = 0, uint64_t first_index = 0,
                                                         std::optional<StreamResume> stream = std::nullopt);

namespace runtime {
/// num_workers > 0: the actor runtime with worker processes (runtime.cpp).  `source`:
/// the index stream (map-style datasets); `resume`: where a resumed epoch's workers
/// start.  A pool of persistent workers whose base seed is not `base_seed` is replaced.
std::unique_ptr<EpochBackend> make_multi_process_epoch(const std::shared_ptr<LoaderState>& state,
                                                       uint64_t base_seed, std::optional<TaskSource> source,
                                                       EpochResume resume);
/// The base seed of the loader's persistent workers, if they run.
std::optional<uint64_t> persistent_base_seed(const LoaderState& state);
/// PyTorch's _check_worker_number_rationality: warns once per loader when num_workers
/// exceeds the CPUs this process may use (runtime.cpp).
void check_worker_number(LoaderState& state);
}  // namespace runtime

}  // namespace loader
