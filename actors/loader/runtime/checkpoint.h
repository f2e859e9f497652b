// Checkpoints of a DataLoader's epoch (DataLoader::state_dict / load_state_dict): the
// random streams an epoch draws from, and the checkpoint as a Value (a dict that
// loader::pt::save writes and torch.load reads) and back.
//
// An epoch is resumed by replaying it (docs/architecture.md, "Mid-epoch resume"):
// the streams are set to where they stood as the epoch began, base_seed is drawn as it
// was, the sampler gives again the tasks it had given (the consumed ones are dropped,
// the others go out first), the streams are set to where they stood at the checkpoint,
// and each worker's first task starts from the generator state the checkpoint saved
// for it.  Plain functions, called by the application thread.
#pragma once

#include <string>
#include <vector>

#include "loader/runtime/epoch.h"
#include "loader/sampler.h"
#include "loader/value.h"

namespace loader {

/// The random streams a loader's epoch draws from, in a fixed order: the default
/// generator, the loader's generator (when given), then its samplers' own streams
/// (batch sampler first), each stream once.
std::vector<RandomStream> loader_streams(const LoaderState& state);
std::vector<std::string> save_streams(const std::vector<RandomStream>& streams);
/// Loads `states` into `streams`; ValueError naming the stream when the count differs
/// or a state is not one.  `what`: which states ("the epoch's start").  With
/// `settings_too` false, streams that are per-epoch settings (RandomStream::
/// per_epoch_setting) are checked but keep what the program set.
void load_streams(const std::vector<RandomStream>& streams, const std::vector<std::string>& states,
                  const std::string& what, bool settings_too = true);

/// As load_streams, then every stream back where it was: only checks `states`.
void check_streams(const std::vector<RandomStream>& streams, const std::vector<std::string>& states,
                   const std::string& what);

/// The checkpoint as a Value (format 2): a dict of ints, bools, None, lists and 1-D
/// uint8 tensors (the random states, as torch.Generator.get_state() gives its own), which
/// torch.load(weights_only=True) of torch 1.13 reads (no bytes, no floats), with the
/// shape of the loader it is for (num_workers, persistent_workers, dataset size, batching).
Value encode_checkpoint(const ResumePlan& plan, const LoaderState& loader);
/// Reads a checkpoint for `loader`, which has `streams` random streams: format 2, or
/// format 1 (the random states as bytes; no 'sampler_exhausted': not run out).  Throws
/// ValueError naming what is wrong (or what differs from the checkpointed loader) and
/// what to do.  `strict` = false accepts another num_workers / persistent_workers
/// (ResumePlan::same_workers false: the workers' random streams are not resumed).
ResumePlan decode_checkpoint(const Value& state, const LoaderState& loader, size_t streams, bool strict);
/// `state` with its lists and dicts copied: Values share containers (as Python objects
/// do), and a checkpoint the loader keeps must not change when the caller's copy does.
Value copy_checkpoint(const Value& state);

/// Elastic ranks (docs/api.md, "Elastic ranks"): one DistributedSampler epoch as its
/// old ranks left it.  The epoch's order is recomputed from seed + epoch, so what the
/// ranks consumed is a count each: old rank r consumed the first consumed[r] samples of
/// its stripe (positions r, r + W, ... of the padded or truncated order).
struct ElasticEpoch {
  int64_t dataset_size = 0;
  int64_t batch_size = -1;  ///< -1: none (batch_size=None)
  bool drop_last = false;   ///< the loader's (its BatchSampler's)
  int64_t seed = 0;
  int64_t epoch = 0;
  bool shuffle = true;
  bool sampler_drop_last = false;  ///< the DistributedSampler's
  int64_t num_replicas = 1;        ///< the old world size
  std::vector<int64_t> consumed;   ///< samples each old rank consumed, by rank
};
/// The samples of `e`'s epoch that no old rank consumed, in the order of the epoch's
/// permutation, each once (padding repeats are the same samples; the tail a
/// drop_last sampler drops was in no rank's stripe, so it is not in the epoch).
std::vector<int64_t> elastic_remaining(const ElasticEpoch& e);
/// Rank `rank` of `replicas`'s share of `remaining`, as DistributedSampler shares an
/// epoch: padded by repeating from the start to a multiple of `replicas` (or, with
/// drop_last, the tail dropped), then every replicas-th from position `rank`.
std::vector<int64_t> elastic_stripe(const std::vector<int64_t>& remaining, int64_t replicas, int64_t rank,
                                    bool drop_last);
/// merge_checkpoints (dataloader.h): see there.
Value merge_elastic(const std::vector<Value>& checkpoints);
/// Whether `state` is merge_checkpoints' result.
bool is_elastic_checkpoint(const Value& state);
/// Reads an elastic checkpoint for `loader` (a DistributedSampler over a map-style
/// dataset): the plan of its stripe.  ValueError naming what differs.
ResumePlan decode_elastic(const Value& state, const LoaderState& loader);

/// Whether the loader's epochs can be checkpointed: any map-style loader (with
/// in_order=false the checkpoint lists the batches delivered above the first one not
/// delivered); an IterableDataset's with workers only with in_order=true (its epoch is
/// replayed from its start, DataLoader::iter_from).
bool resumable(const LoaderState& state);
/// ValueError saying why, unless resumable(state).
void check_resumable(const LoaderState& state, const char* what);

}  // namespace loader
