#include "loader/runtime/epoch_planner.h"

#include "loader/error.h"

namespace loader {

EpochPlanner::EpochPlanner(const ResumePlan* plan, EpochSettings settings)
    : plan_(plan), settings_(std::move(settings)) {}

std::optional<uint64_t> EpochPlanner::persistent_seed() const {
  return settings_.pool_workers > 0 ? settings_.persistent_seed : std::nullopt;
}

std::optional<StreamLoad> EpochPlanner::start_streams() const {
  if (!plan_) return std::nullopt;
  // A resumed epoch replays its draws from where the streams stood as it began; after a
  // finished epoch, the next one starts from where they stood at the checkpoint, with
  // the per-epoch settings the program made for it (DistributedSampler::set_epoch).
  if (plan_->finished) return StreamLoad{&plan_->streams_now, "the checkpoint", false};
  return StreamLoad{&plan_->streams_at_start, "the epoch's start", true};
}

SeedPlan EpochPlanner::seed() const {
  const bool workers = settings_.pool_workers > 0;
  const std::optional<uint64_t> persistent = persistent_seed();
  // WorkerSeeding::PerTask draws it at every iter(), persistent workers included: it
  // seeds the epoch's tasks (the workers keep the seeds they started with).
  const bool per_task = settings_.worker_seeding == WorkerSeeding::PerTask && workers;
  SeedPlan out;
  out.draw = !persistent || per_task;
  // A resumed epoch draws what the checkpointed one drew, so that the sampler's draws
  // that follow are the same; a finished one's next epoch draws as that loader would have.
  if (mid_epoch()) out.draw = plan_->base_seed_drawn;
  else if (plan_ && plan_->same_workers && workers) out.draw = !plan_->pool_alive || per_task;
  if (out.draw) {
    // The same workers are seeded from it: a draw that differs would give other batches.
    if (mid_epoch() && plan_->same_workers && workers) out.expect = plan_->base_seed;
  } else {
    out.value = plan_ && (!plan_->finished || plan_->same_workers) ? plan_->base_seed
                : persistent                                       ? *persistent
                                                                   : 0;
  }
  return out;
}

void EpochPlanner::check_drawn(uint64_t drawn) const {
  const SeedPlan seed_plan = seed();
  if (!seed_plan.expect || drawn == *seed_plan.expect) return;
  throw ValueError(
      "DataLoader.load_state_dict: replaying the checkpointed epoch drew base_seed " + std::to_string(drawn) +
      " where the epoch had drawn " + std::to_string(*seed_plan.expect) +
      ": this loader draws from other generators than the one checkpointed (build it with the same generator and "
      "sampler options)");
}

EpochPlan EpochPlanner::plan() const {
  EpochPlan out;
  out.mid_epoch = mid_epoch();
  if (mid_epoch() && settings_.iterable && !plan_->stream_states.empty()) {
    resume_streams(out);
  } else if (mid_epoch() && settings_.iterable) {
    // An IterableDataset's position lives in its own stream: the epoch runs again from
    // its start, with each worker's generator where it stood as the epoch began, and the
    // batches the checkpointed iterator had given out are dropped.
    out.resume.worker_rng = plan_->worker_rng;
    out.replay = plan_->consumed;
  } else if (mid_epoch()) {
    resume_map_style(out);
  } else if (plan_ && plan_->pool_alive) {
    out.resume.worker_rng = plan_->worker_rng;  // persistent workers' streams go on
  } else if (plan_ && settings_.persistent_workers && settings_.pool_workers > 0) {
    // A state taken while no persistent pool ran (before the loader's first epoch):
    // the next epoch's workers start as their Init leaves them, as they did then.  A
    // pool running now (its streams moved on by the epochs since, maybe in the middle
    // of a live iterator's epoch) is replaced (MultiProcessEpoch: fresh_workers()).
    out.resume.worker_rng.assign(static_cast<size_t>(settings_.pool_workers), std::nullopt);
  }
  out.start.iterable_rng = iterable_rng(out.resume);
  // The streams with state hooks pass the results taken of them themselves.
  out.passed = out.main_stream || !out.resume.streams.empty() ? plan_->consumed : 0;
  return out;
}

void EpochPlanner::resume_streams(EpochPlan& out) const {
  // State hooks: each stream (each worker's, in that worker) loads the state it began
  // from, makes its stream again and passes the results the checkpointed iterator had
  // taken of it; nothing comes to this process again.  The round robin goes on at the
  // stream whose result came next.  decode_checkpoint checked that this dataset has
  // the hooks and that there is a stream per worker.
  const bool workers = settings_.pool_workers > 0;
  for (size_t w = 0; w < plan_->stream_states.size(); ++w) {
    StreamResume r;
    r.state = plan_->stream_states[w];
    r.skip = plan_->stream_taken[w];
    if (workers) r.rng = *plan_->worker_rng[w];
    if (workers) out.resume.streams.push_back(std::move(r));
    else out.main_stream = std::move(r);
  }
  out.resume.first_worker = plan_->stream_next;
  out.start.stream_taken_before = plan_->stream_taken;
  out.hashes_restart_at = plan_->consumed;
}

void EpochPlanner::resume_map_style(EpochPlan& out) const {
  // A sampler that had run out is asked once more now, before the checkpoint's
  // streams are loaded: the draws it makes as its pass ends are in those streams
  // already, and asked again later (at the epoch's end) it draws nothing.
  // An in_order=false checkpoint's batches above the first one not delivered that the
  // application had are drawn again (the sampler's draws) and not sent.
  const std::vector<uint64_t>* delivered = plan_->delivered_above.empty() ? nullptr : &plan_->delivered_above;
  out.fast_forward = FastForward{plan_->consumed, plan_->sampled, plan_->exhausted, delivered};
  out.load_at_checkpoint = StreamLoad{&plan_->streams_now, "the checkpoint", true};
  StartPosition& start = out.start;
  start.consumed = plan_->consumed;
  start.pending = plan_->sampled - plan_->consumed - plan_->delivered_above.size();
  if (delivered) {
    // This epoch sends the tasks given out and not delivered first, in their order.
    start.remapped = true;
    start.delivered_above = plan_->delivered_above;
    start.sampled = plan_->sampled;
    size_t d = 0;
    for (uint64_t k = plan_->consumed; k < plan_->sampled; ++k) {
      if (d < delivered->size() && (*delivered)[d] == k) ++d;
      else start.pending_original.push_back(k);
    }
  }
  start.exhausted = plan_->exhausted;
  out.resume.consumed = plan_->consumed;
  out.resume.worker_rng = plan_->worker_rng;
}

std::optional<std::vector<std::optional<std::string>>> EpochPlanner::iterable_rng(const EpochResume& resume) const {
  if (!settings_.iterable || settings_.pool_workers <= 0) return std::nullopt;
  const auto workers = static_cast<size_t>(settings_.pool_workers);
  if (!resume.worker_rng.empty()) {
    // Each worker gets that state, or new workers their Init's.
    std::vector<std::optional<std::string>> rng = resume.worker_rng;
    rng.resize(workers);
    return rng;
  }
  // New or re-initialised workers start as their Init leaves them; persistent workers'
  // streams went on from an earlier epoch: not known.
  if (!persistent_seed()) return std::vector<std::optional<std::string>>(workers);
  return std::nullopt;
}

}  // namespace loader
