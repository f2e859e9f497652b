// The plan of an epoch that DataLoader::iter() begins: from the checkpoint loaded for
// it (a ResumePlan, DataLoader::load_state_dict), if any, and the loader's worker
// settings, which random streams are loaded and when, whether base_seed is drawn (and
// what it must be) or taken, where the epoch's workers and its own stream resume, what
// the iterator records of the checkpointed epoch's position, and how many results of an
// IterableDataset are replayed.  EpochPlanner decides with no side effects: it draws
// nothing, loads no stream and starts no epoch; DataLoader::iter_from does what it says,
// in that order (docs/architecture.md, "Mid-epoch resume").  Plain classes, used by the
// application thread (the one that calls iter()).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loader/dataloader_options.h"
#include "loader/runtime/epoch.h"

namespace loader {

/// What an EpochPlanner needs to know of the loader (DataLoader::iter_from reads it from
/// its LoaderState as the epoch begins).
struct EpochSettings {
  int pool_workers = 0;              ///< DataLoaderOptions::pool_workers(): 0 loads in the application's thread
  bool persistent_workers = false;   ///< DataLoaderOptions::persistent_workers
  WorkerSeeding worker_seeding = WorkerSeeding::PerWorker;
  /// The base seed of the loader's persistent workers when they run
  /// (runtime::persistent_base_seed); none when no persistent pool runs.  Ignored with
  /// pool_workers = 0.
  std::optional<uint64_t> persistent_seed;
  bool iterable = false;             ///< an IterableDataset (else a map-style dataset)
};

/// Random states to load into the loader's streams: load_streams(streams, *states,
/// what, settings_too) (runtime/checkpoint.h).
struct StreamLoad {
  const std::vector<std::string>* states = nullptr;  ///< the plan's streams_at_start or streams_now
  const char* what = "";     ///< which states, for load_streams' refusal ("the epoch's start")
  bool settings_too = true;  ///< also the per-epoch settings (RandomStream::per_epoch_setting)
};

/// How the epoch gets its base_seed.
struct SeedPlan {
  /// Drawn now from the loader's generator (Generator::random_int64), as PyTorch's
  /// iter() does; else `value` is the epoch's base_seed.
  bool draw = false;
  uint64_t value = 0;  ///< not drawn: the checkpointed epoch's, the persistent pool's, or 0
  /// Drawn in the replay of a checkpointed epoch with the same workers: what that epoch
  /// drew, which the draw must give again (EpochPlanner::check_drawn).
  std::optional<uint64_t> expect;
};

/// A map-style epoch resumed mid-way: the arguments of TaskSource::fast_forward.
struct FastForward {
  uint64_t consumed = 0;  ///< tasks to skip (the checkpointed iterator had consumed them)
  uint64_t sampled = 0;   ///< tasks the checkpointed sampler had given (the others go out first)
  bool exhausted = false; ///< its sampler had run out: asked once more now
  /// in_order=false: the tasks above `consumed` the application already had (the plan's
  /// delivered_above), drawn again and not sent; null when there are none.
  const std::vector<uint64_t>* delivered = nullptr;
};

/// What DataLoader::Iterator::Start records of where the epoch begins, each field as the
/// one of that name there (dataloader.h says what they mean); all zero or empty for an
/// epoch that resumes no position.
struct StartPosition {
  uint64_t consumed = 0;
  uint64_t pending = 0;
  std::vector<uint64_t> delivered_above;
  uint64_t sampled = 0;
  std::vector<uint64_t> pending_original;
  bool remapped = false;
  bool exhausted = false;
  std::vector<uint64_t> stream_taken_before;
  std::optional<std::vector<std::optional<std::string>>> iterable_rng;
};

/// The epoch's plan after its base_seed (EpochPlanner::plan), in the order
/// DataLoader::iter_from applies it.
struct EpochPlan {
  /// The epoch resumes an unfinished one: the autotuner does not choose to load it in the
  /// application's thread (the checkpoint's worker states are the pool's).
  bool mid_epoch = false;
  /// A map-style epoch resumed mid-way: its TaskSource is fast-forwarded, then the
  /// streams are loaded with `load_at_checkpoint` (the draws of the replay are made
  /// from the epoch's start, and the checkpoint's states already hold them).
  std::optional<FastForward> fast_forward;
  std::optional<StreamLoad> load_at_checkpoint;
  /// An IterableDataset with state hooks resumed mid-way: the hashes of its results go
  /// on from this many, with the checkpoint's hash and marks (HashChain::restart_at).
  std::optional<uint64_t> hashes_restart_at;
  /// Where the workers start (runtime::make_multi_process_epoch): the round robin's
  /// offset, each worker's generator state, each worker's stream with state hooks.
  EpochResume resume;
  /// State hooks and no workers: where the loader's own stream resumes
  /// (make_single_process_epoch).
  std::optional<StreamResume> main_stream;
  /// An IterableDataset without state hooks resumed mid-way: the results its epoch runs
  /// again from the start and drops (checked against the checkpoint's hashes).
  uint64_t replay = 0;
  /// Results that the resumed streams pass themselves (state hooks): the iterator counts
  /// them as given out already.
  uint64_t passed = 0;
  StartPosition start;
};

/// Decides an epoch's plan from the checkpoint loaded for it and the loader's settings.
/// Every method is const and free of side effects; the results point into the plan
/// (StreamLoad::states, FastForward::delivered), which must outlive them.
class EpochPlanner {
 public:
  /// `plan`: the checkpoint the epoch resumes (null: a fresh epoch).  Never an elastic
  /// one: DataLoader::iter makes that a fresh pass (LoaderState::elastic_pass) first.
  EpochPlanner(const ResumePlan* plan, EpochSettings settings);

  /// The states loaded before anything else of the epoch: a resumed epoch's streams as
  /// it began (its draws are replayed, the per-epoch settings too), or, after a finished
  /// epoch, the streams at the checkpoint (with the per-epoch settings the program made
  /// for the next epoch, DistributedSampler::set_epoch).  None for a fresh epoch.
  std::optional<StreamLoad> start_streams() const;
  /// base_seed: drawn at every iter(), also with 0 workers, as PyTorch does; persistent
  /// workers draw it once, when they are created, except with WorkerSeeding::PerTask
  /// (it seeds each epoch's tasks).  A resumed epoch draws what the checkpointed one
  /// drew; a finished one's next epoch draws as that loader would have.
  SeedPlan seed() const;
  /// ValueError when `drawn`, the base_seed the epoch drew, is not seed().expect.
  void check_drawn(uint64_t drawn) const;
  /// The rest of the plan (after base_seed).
  EpochPlan plan() const;

 private:
  bool mid_epoch() const { return plan_ && !plan_->finished; }
  /// The persistent pool's base seed, when there are workers and it runs.
  std::optional<uint64_t> persistent_seed() const;
  /// An IterableDataset with state hooks, mid-epoch: each stream resumes itself.
  void resume_streams(EpochPlan& out) const;
  /// A map-style dataset, mid-epoch: the sampler is fast-forwarded.
  void resume_map_style(EpochPlan& out) const;
  /// An IterableDataset with workers: the states its workers' generators begin from.
  std::optional<std::vector<std::optional<std::string>>> iterable_rng(const EpochResume& resume) const;

  const ResumePlan* plan_;
  EpochSettings settings_;
};

}  // namespace loader
