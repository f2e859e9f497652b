// DataLoader: torch.utils.data.DataLoader in C++.
//
//   auto ds = loader::make_dataset({"fashion_mnist", loader::Value::dict({{"train", true}})});
//   loader::DataLoaderOptions opts;
//   opts.batch_size = 128;
//   opts.shuffle = true;
//   opts.num_workers = 2;          // child processes, batches through shared memory
//   loader::DataLoader dl(ds, opts);
//   for (int epoch = 0; epoch < 3; ++epoch)
//     for (loader::Value& batch : dl) {
//       const loader::Tensor& images = batch[0].to_tensor();   // float32 [128, 1, 28, 28], zero-copy view
//       const loader::Tensor& labels = batch[1].to_tensor();   // int64 [128]
//       (void)images, (void)labels;                            // train on them here
//     }
//
// The example compiles as it stands in main() (tests/consumer builds it from the
// installed header): "fashion_mnist" is built in when the program links loader::loader.
// With num_workers > 0 the dataset must have been made from a handle
// (make_dataset), so worker processes can rebuild it; the program's main() must
// call loader::runtime::run_worker_if_requested first (see worker_main.h).
// The header carries no CAF or Boost types: the actor system is hidden inside.
#pragma once

#include <chrono>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loader/dataloader_options.h"
#include "loader/dataset.h"
#include "loader/epoch_stats.h"
#include "loader/pinned.h"
#include "loader/value.h"

namespace loader {

class EpochBackend;  // one pass over the data (single-process or actor runtime)
class LoaderState;   // what the loader shares with its epochs
struct EpochPosition;
struct ResumePlan;
class HashChain;     // hashes of what an epoch handed out (verified replay)
class TaskSource;    // a map-style epoch's index batches
struct ReplayCheck;  // what the replay of a checkpointed epoch checks
struct EpochPlan;    // what an epoch resumes (runtime/epoch_planner.h)

class DataLoader {
 public:
  /// Map-style dataset.  Throws ValueError/TypeError on invalid options, with PyTorch's wording.
  DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options = {});
  /// Iterable-style dataset.
  DataLoader(std::shared_ptr<IterableDataset> dataset, DataLoaderOptions options = {});
  ~DataLoader();
  DataLoader(DataLoader&&) noexcept;
  DataLoader& operator=(DataLoader&&) noexcept;
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// One epoch, as Python's iter(loader).  With persistent_workers, starting a new
  /// epoch ends the previous one (PyTorch resets its single persistent iterator);
  /// otherwise every iterator has workers of its own, as in PyTorch.
  class Iterator {
   public:
    Iterator(Iterator&&) noexcept;
    Iterator& operator=(Iterator&&) noexcept;
    ~Iterator();
    /// The next batch, or nullopt at the end of the epoch.  A batch whose loading
    /// failed throws here (with the worker and the original message); calling
    /// next() again continues with the following batch, as in PyTorch.
    std::optional<Value> next();
    /// Batches delivered so far in this epoch.
    int64_t batches_yielded() const noexcept { return yielded_; }
    /// Pids of the worker processes serving this epoch (-1 for an in-process
    /// worker or one not running); empty with num_workers = 0 or after the end.
    std::vector<int> worker_pids();
    /// What this epoch's stages did so far (batches, samples, time to the first batch,
    /// time in next() and its distribution per batch, tasks in flight and results
    /// ready, slab pool, each worker's state, busy time, CPU time and faults;
    /// EpochStats::to_json(), EpochStats::diagnosis()).  Valid also after the end of
    /// the epoch (the counters of the whole epoch; the "now" figures as it ended).
    EpochStats stats() const;
    /// A checkpoint of this epoch after the batches next() has returned so far
    /// (torchdata's StatefulDataLoader.state_dict()): a dict that loader::pt::save
    /// writes.  DataLoader::load_state_dict(it) on a loader built the same way, in this
    /// process or another, makes its next iter() give the rest of this epoch, batch for
    /// batch and byte for byte, and the epochs after it as this loader would, also for
    /// datasets that draw random numbers in the workers.  Cheap (no batch is copied);
    /// the workers go on meanwhile.  Call it from the thread that calls next() (it reads
    /// the random streams that thread draws from).  An IterableDataset's epoch is
    /// resumed by running it again from its start and dropping the results given out
    /// (docs/api.md, "Mid-epoch checkpoints").  Throws ValueError for in_order=false, and
    /// for an IterableDataset in mid-epoch with persistent workers past their first epoch.
    Value state_dict() const;

   private:
    friend class DataLoader;
    /// How the epoch began, for its checkpoints.
    struct Start {
      std::vector<std::string> streams;  ///< the random streams before its first draw
      /// When iter() began (the epoch's wall time and time to its first batch count from here).
      std::chrono::steady_clock::time_point began = std::chrono::steady_clock::now();
      bool base_seed_drawn = false;
      uint64_t base_seed = 0;
      uint64_t consumed = 0;  ///< resumed: tasks the checkpointed iterator had consumed
      uint64_t pending = 0;   ///< resumed: tasks it had given out but not consumed
      /// Resumed from an in_order=false checkpoint that lists batches delivered above
      /// `consumed`: those (checkpointed epoch's numbering), the checkpointed epoch's
      /// `sampled`, and the checkpointed epoch's number of each task this epoch sends
      /// first (the ones it had given out and not delivered).  This epoch's task j is
      /// pending_original[j], then sampled + (j - pending_original.size()).
      std::vector<uint64_t> delivered_above;
      uint64_t sampled = 0;
      std::vector<uint64_t> pending_original;
      bool remapped = false;
      bool exhausted = false; ///< resumed: its sampler had run out (it was asked once more)
      /// IterableDataset with workers: each worker's generator state as the epoch began
      /// (none: the state its Init gives); nullopt where it is not known (persistent
      /// workers whose streams went on from an earlier epoch).  An iterable epoch is
      /// resumed by replaying it from its start.
      std::optional<std::vector<std::optional<std::string>>> iterable_rng;
      /// IterableDataset with state hooks (its state() returned a value as the epoch
      /// began): a checkpoint stores how each stream began and the results taken of it,
      /// and is resumed without a replay.  A resumed epoch's streams had given
      /// `stream_taken_before` results before it (the checkpoint's).
      bool stream_hooks = false;
      std::vector<uint64_t> stream_taken_before;
      /// The hashes of the index batches the sampler gave (the TaskSource's), or of the
      /// results taken from an IterableDataset: a checkpoint carries them, its replay
      /// checks them.
      std::shared_ptr<HashChain> hashes;
      /// The pass is an elastic checkpoint's stripe (not the sampler's own): its position
      /// is not one a checkpoint can describe until it ends.
      bool elastic = false;
      /// num_workers = auto: the loader tunes itself; this epoch loads in the
      /// application's thread (0 workers) or with the pool, as decided when it began.
      bool autotuned = false;
      bool inline_auto = false;
      std::optional<EpochStats::TuneDecision> mode_decision;
    };
    Iterator(std::unique_ptr<EpochBackend> backend, std::shared_ptr<LoaderState> state, Start start);
    /// Where the epoch stands (a checkpoint without its streams_now).
    ResumePlan plan() const;
    /// An IterableDataset with state hooks: each stream's start and results taken, into `p`.
    void stream_plan(ResumePlan& p) const;
    /// An in_order=false epoch's position in the checkpointed epoch's numbering, into `p`.
    void out_of_order_position(const EpochPosition& pos, ResumePlan& p) const;
    /// The samplers' types and the hashes of what the epoch handed out, into `p`.
    void add_check(ResumePlan& p) const;
    /// This iterator goes (destroyed or moved over): if it is the loader's latest, the
    /// loader keeps where it stood.
    void leave_latest() noexcept;
    std::unique_ptr<EpochBackend> backend_;
    std::shared_ptr<LoaderState> state_;
    Start start_;
    std::unique_ptr<EpochPosition> ended_at_;  ///< where the epoch ended (backend_ gone)
    int64_t yielded_ = 0;
    uint64_t taken_ = 0;  ///< results taken this epoch: batches and batch errors (iterable checkpoints)
    double next_s_ = 0;
    EpochStats ended_;  ///< the stage figures as the epoch ended (backend_ gone)
    /// The application thread's figures of the epoch (EpochStats samples, first_batch_s,
    /// wait, wall_s), and whether the epoch went into the loader's stats() yet.
    struct Record {
      int64_t samples = 0;
      double first_batch_s = 0;
      double ended_wall_s = -1;  ///< wall_s once the epoch ended
      DurationHistogram wait;
      int64_t previous_faults = -1;  ///< the workers' minor faults in the loader's previous epoch
      bool kept = false;
    };
    Record rec_;
    /// Adds this epoch's stats() to the loader's (once; an epoch that gave no batch and
    /// did not end is left out).
    void keep_stats() noexcept;
    /// The IterableDataset length len(dataloader) reported before this iterator was made
    /// (PyTorch's iterator copies _IterableDataset_len_called when it is created).
    std::optional<int64_t> len_called_;
  };

  Iterator iter();

  /// Range-for support: `for (loader::Value& batch : loader)` runs one epoch.
  class RangeIterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Value;
    using difference_type = std::ptrdiff_t;
    using pointer = Value*;
    using reference = Value&;
    RangeIterator() = default;
    explicit RangeIterator(std::shared_ptr<Iterator> it);
    Value& operator*() { return *current_; }
    Value* operator->() { return &*current_; }
    RangeIterator& operator++();
    bool operator==(const RangeIterator& o) const { return done() == o.done(); }
    bool operator!=(const RangeIterator& o) const { return !(*this == o); }

   private:
    bool done() const { return !current_.has_value(); }
    std::shared_ptr<Iterator> it_;
    std::optional<Value> current_;
  };
  RangeIterator begin();
  RangeIterator end() { return RangeIterator(); }

  /// len(loader): batches per epoch (or samples without auto-batching).  TypeError
  /// for an iterable dataset without a length.
  int64_t size();

  const DataLoaderOptions& options() const;
  bool is_iterable() const;
  /// The sampler and batch sampler in use (null for iterable datasets / no batching).
  std::shared_ptr<Sampler> sampler() const;
  std::shared_ptr<BatchSamplerBase> batch_sampler() const;
  /// Shuts down persistent workers now (also done by the destructor).
  void shutdown();

  /// A checkpoint of the loader (torchdata's StatefulDataLoader.state_dict()): its
  /// latest iterator's (Iterator::state_dict()), also once that iterator is gone;
  /// before any epoch, the start of the first one (it loads, with workers too).  Taken
  /// after an epoch ended, it resumes at the next epoch.  After load_state_dict(s) and
  /// before the next iter(), the checkpoint loaded: a copy of s, entry for entry (saving
  /// again before the first step after a restart keeps the place; a checkpoint loaded
  /// with strict = false stays the other loader's, to load with strict = false again).
  /// Same thread rule as Iterator::state_dict().  The dict is format 2: its entries are
  /// ints, bools, None, lists and 1-D uint8 tensors (the random states), so
  /// torch.load(path, weights_only=True) opens a file that holds it; format 1
  /// checkpoints (states as bytes) still load.  Save it with loader::pt::save
  /// alongside the model:
  ///
  ///   for (loader::Value& batch : dl) { step(batch); if (++n % 1000 == 0) loader::pt::save(dl.state_dict(), "dl.pt"); }
  ///   // later, maybe in another process, a loader built the same way:
  ///   dl2.load_state_dict(loader::pt::load("dl.pt"));
  ///   for (loader::Value& batch : dl2) ...   // the rest of that epoch, identical
  Value state_dict() const;
  /// Makes the next iter() resume the checkpoint (see Iterator::state_dict).  The
  /// loader must be built like the checkpointed one: the same dataset, sampler and
  /// batching, the same num_workers, persistent_workers, generator and worker_init_fn.
  /// The next iter() replays the checkpointed epoch's random draws (without loading a
  /// sample) and leaves the default generator and the loader's generators where they
  /// stood when the checkpoint was taken; for an IterableDataset it runs the epoch
  /// again from its start and drops the results already given out (the checkpoint
  /// holds no data), refusing another num_workers or persistent_workers also when
  /// `strict` is false.  A DistributedSampler's set_epoch() is yours
  /// to call again, as before the original epoch.  Throws ValueError, changing nothing,
  /// for a checkpoint that does not fit this loader (saying what differs).
  /// `strict` = false also takes a checkpoint of a loader with another num_workers or
  /// persistent_workers (autoscaling the workers): the rest of the epoch has the same
  /// batches of indices, but the workers start as their Init leaves them, so what a
  /// dataset draws at random in them differs; later epochs follow this loader's own
  /// draws (persistent workers draw no base_seed after their first epoch; with 0
  /// workers the dataset's draws come from the default generator).
  ///
  /// An elastic checkpoint (merge_checkpoints) is loaded with `strict` = false by each
  /// rank of the new world: the next iter() is this rank's stripe of the samples no old
  /// rank consumed (docs/api.md, "Elastic ranks").
  void load_state_dict(const Value& state, bool strict = true);

  /// Every epoch of this loader so far (each as its iterator ended it, or went having
  /// given batches; the running one is Iterator::stats()) and their totals:
  /// LoaderStats::to_json() for a log.
  LoaderStats stats() const;

  /// What pin_memory achieved so far (it stays valid after the epoch ends):
  /// backend "cuda" (batches are CUDA page-locked: with workers the shared-memory
  /// slabs are registered once, cudaHostRegister; without workers each batch is
  /// copied into cudaHostAlloc memory), "mlock" (workers' slabs page-locked but not
  /// CUDA-pinned), or "none"; `reason` says why not "cuda".  requested is false with
  /// pin_memory=false.  See docs/gpu.md.
  PinStatus pin_memory_status() const;

 private:
  /// iter(), resuming `plan` when there is one, with the loader's random streams: the
  /// steps below, in this order, as an EpochPlanner (runtime/epoch_planner.h) plans them.
  /// All run in the application thread (the one that calls iter()).
  Iterator iter_from(const std::optional<ResumePlan>& plan, const std::vector<RandomStream>& streams);
  /// A map-style dataset's index stream for the epoch (an elastic checkpoint's stripe,
  /// this pass only, or the samplers'), with its hashes and whether an IterableDataset
  /// has state hooks (its state() now) into `start`.
  std::optional<TaskSource> epoch_source(Iterator::Start& start);
  /// The position `p` resumes: the hashes restarted, the TaskSource fast-forwarded and
  /// the streams loaded as at the checkpoint; p.start moved into `start`.
  static void resume_position(const std::optional<ResumePlan>& plan, EpochPlan& p, std::optional<TaskSource>& source,
                              const ReplayCheck& check, const std::vector<RandomStream>& streams,
                              Iterator::Start& start);
  /// num_workers = auto: whether the epoch loads in this thread or with the pool, into
  /// `start` (a `mid_epoch` resume goes to the pool).
  void choose_epoch_mode(bool mid_epoch, Iterator::Start& start);
  /// The epoch: single-process (0 workers, or inline by the autotuner) or with the
  /// workers, from p.main_stream or p.resume (moved out of `p`).
  std::unique_ptr<EpochBackend> epoch_backend(std::optional<TaskSource> source, EpochPlan& p,
                                              const Iterator::Start& start);
  /// An IterableDataset without state hooks resumed mid-epoch: takes its first `count`
  /// results again from `it` and drops them, each checked against `check`.
  static void replay(Iterator& it, const ReplayCheck& check, uint64_t count);
  std::shared_ptr<LoaderState> state_;
};

/// Elastic ranks: merges the DataLoader::state_dict() of the ranks of one
/// DistributedSampler epoch (each a loader whose sampler is DistributedSampler(dataset,
/// num_replicas=W, rank=r, ...), batched by batch_size) into one checkpoint that rank r'
/// of any new num_replicas W' loads with load_state_dict(merged, /*strict=*/false): its
/// next iter() gives its share of the epoch's samples that no old rank consumed (in the
/// epoch's order, padded or dropped as DistributedSampler does, then every W'-th from
/// r'); the epoch after it is the sampler's own (set_epoch as usual).  Pass every old
/// rank's checkpoint; when all ranks consumed the same number of batches, one rank's is
/// enough.  Throws ValueError naming the checkpoint, its rank and what is wrong
/// (another epoch, seed, shuffle, drop_last, dataset size or batch_size; a rank twice;
/// ranks missing when the counts differ; a loader without a DistributedSampler).  The
/// result is a dict of ints, bools and a list of ints (torch.load(weights_only=True)
/// opens it).  See docs/api.md, "Elastic ranks".
Value merge_checkpoints(const std::vector<Value>& checkpoints);

}  // namespace loader
