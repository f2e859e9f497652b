#include "loader/runtime/parent/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <unistd.h>

#include "loader/error.h"
#include "loader/runtime/frames.h"
#include "loader/runtime/rng_state_page.h"
#include "loader/warnings.h"

namespace loader::runtime {

namespace {
std::string encoded_config(const WorkerConfig& cfg) {
  std::string s;
  encode_value(cfg.to_value(), s);
  return s;
}
}  // namespace

Pipeline::Pipeline(PipelineConfig config, std::shared_ptr<SlabStore> slabs)
    : config_(std::move(config)), slabs_(std::move(slabs)) {
  if (!config_.system) throw RuntimeError("internal: a worker pool needs an actor system");
  iterable_ = !config_.workers.empty() && config_.workers.front().iterable;
  const int n = static_cast<int>(config_.workers.size());
  try {
    rings_ = std::make_unique<WorkerRings>(n);
  } catch (const Error& e) {
    throw ShmError(std::string("DataLoader: cannot create the task and result rings of ") + std::to_string(n) +
                   " workers (" + std::to_string(2 * RingLayout::kDefaultCapacity / 1024) +
                   " KiB of shared memory each): " + e.what() + "; free space in /dev/shm or use fewer workers");
  }
  // Before-records per state page: more than the tasks that can be in flight (with the
  // autotuner, at its deepest prefetch), at most 1024.
  const int deepest = config_.autotune ? std::max(config_.prefetch_factor, config_.autotune->limits.max_prefetch)
                                       : config_.prefetch_factor;
  const uint64_t rng_slots = std::min<uint64_t>(static_cast<uint64_t>(deepest) * n + 1, 1024);
  if (config_.autotune)
    tuning_ = std::make_unique<PoolTuning>(n, config_.autotune->limits, config_.autotune->workers_now,
                                           config_.autotune->prefetch_now, deepest);
  std::vector<HostPort> hosts;
  for (const auto& r : config_.remote) hosts.push_back(r.address);
  SlotPlacement::Hooks hooks;
  hooks.enter = [this] { return stages_->enter(); };
  hooks.use = [this](int w, WorkerTransport* t) { workers_->set_transport(w, t); };
  hooks.make_local = [this, rng_slots](int w) { return make_local_transport(w, rng_slots); };
  const int local = n - static_cast<int>(config_.remote.size());
  hooks.make_remote = [this, rng_slots, local](int w, size_t) -> std::unique_ptr<HostedTransport> {
    return std::make_unique<RemoteTransport>(w, config_.remote[static_cast<size_t>(w - local)], this, rng_slots);
  };
  placement_ = std::make_unique<SlotPlacement>(n, std::move(hosts), std::move(hooks));
  workers_ = std::make_unique<WorkerSlots>(placement_->homes(), config_.max_restarts, !iterable_, *slabs_, rng_slots,
                                           *this, config_.executable);
  stages_ = std::make_unique<StageActors>(*config_.system, n, *workers_, *this, slabs_);
  delivery_ = std::make_unique<BatchDelivery>(*stages_, *workers_, *rings_, *placement_, *slabs_, pool_, *this);
}

std::unique_ptr<WorkerTransport> Pipeline::make_local_transport(int worker, uint64_t rng_slots) {
  LinkFactory make = config_.make_link;
  if (!make)
    make = [](const Link::Spec& spec, LinkFrames* frames) -> std::unique_ptr<Link> {
      return std::make_unique<WorkerLink>(spec, frames);
    };
  return std::make_unique<ShmTransport>(Link::Spec{worker, 0, config_.in_process, config_.executable}, std::move(make),
                                        *rings_, *slabs_, rng_slots, this);
}

Pipeline::~Pipeline() {
  shutdown();
  stop_stages();
}

void Pipeline::stop_stages() {
  const auto lock = stages_->enter();
  stages_->stop();
}

void Pipeline::set_hooks(PipelineHooks hooks) { hooks_ = std::move(hooks); }

// ------------------------------------------------------------------ starting workers

void Pipeline::start_workers() {
  for (int w = 0; w < num_workers(); ++w) {
    std::lock_guard<std::mutex> owner(placement_->owner(w));
    uint32_t gen;
    {
      const auto lock = stages_->enter();
      if (pool_.closed) return;
      if (tuning_ && !tuning_->wanted(w)) {  // the autotuner starts it when needed
        workers_->park(w);
        continue;
      }
      gen = workers_->begin_incarnation(w);
    }
    try {
      WorkerTransport& t = placement_->current(w);
      t.start(gen);
      const auto lock = stages_->enter();
      workers_->attach(w, gen, t.pid(), encoded_config(config_.workers[static_cast<size_t>(w)]));
    } catch (const std::exception& e) {
      const auto lock = stages_->enter();
      const std::string type = dynamic_cast<const Error*>(&e) ? static_cast<const Error&>(e).python_type() : "RuntimeError";
      worker_failed_locked(w, type, "DataLoader worker " + std::to_string(w) + " could not be started: " + e.what());
    }
  }
  flush_all();
}

void Pipeline::restart(int worker, uint32_t gen) {
  if (worker < 0 || worker >= num_workers()) return;
  std::lock_guard<std::mutex> owner(placement_->owner(worker));
  uint32_t next;
  {
    const auto lock = stages_->enter();
    if (pool_.closed || workers_->state(worker) != WorkerLifecycle::State::Restarting || workers_->generation(worker) != gen)
      return;
    next = workers_->begin_incarnation(worker);
  }
  run_incarnation(worker, next, /*carry_stream=*/false, "restarted");
}

void Pipeline::run_incarnation(int worker, uint32_t gen, bool carry_stream, const char* verb) {
  placement_->current(worker).stop();  // the last incarnation's events have ended and its process is reaped: nothing waits here
  std::optional<WorkerExit> lost;
  {
    const auto lock = stages_->enter();
    lost = workers_->host_lost(worker);
  }
  WorkerTransport* t;
  try {
    t = &placement_->start(worker, gen, lost);
  } catch (const std::exception& e) {
    const auto lock = stages_->enter();
    worker_failed_locked(worker, "RuntimeError",
                         "DataLoader worker " + std::to_string(worker) + " could not be " + verb + ": " + e.what());
    notify_locked();
    return;
  }
  attach_started(worker, gen, *t, carry_stream);
}

void Pipeline::attach_started(int worker, uint32_t gen, WorkerTransport& t, bool carry_stream) {
  {
    const auto lock = stages_->enter();
    const bool moved = carry_stream || workers_->host_lost(worker).has_value();
    workers_->attach(worker, gen, t.pid(), encoded_config(config_.workers[static_cast<size_t>(worker)]));
    workers_->resend_held(worker, moved);
  }
  t.flush();  // still its owner: the new incarnation's frames go out in order
}

void Pipeline::take_home(int worker) {
  if (!placement_->remote(worker)) return;
  std::lock_guard<std::mutex> owner(placement_->owner(worker));
  if (placement_->at_home(worker)) return;
  uint32_t next;
  {
    const auto lock = stages_->enter();
    if (pool_.closed || !workers_->accepting(worker)) return;
    next = workers_->begin_incarnation(worker);
  }
  WorkerTransport* t;
  try {
    t = &placement_->go_home(worker, next);
  } catch (const std::exception& again) {
    const auto lock = stages_->enter();
    worker_failed_locked(worker, "RuntimeError",
                         "DataLoader worker " + std::to_string(worker) + " could not be started again: " + again.what());
    return;
  }
  attach_started(worker, next, *t, /*carry_stream=*/true);
}

// ------------------------------------------------------------------ frames out

void Pipeline::flush(int worker) {
  if (worker < 0 || worker >= num_workers()) return;
  std::lock_guard<std::mutex> owner(placement_->owner(worker));
  placement_->current(worker).flush();
}

void Pipeline::flush_all() {
  for (int w = 0; w < num_workers(); ++w) flush(w);
}

// ------------------------------------------------------------------ epochs and dispatch

EpochPosition Pipeline::position(uint64_t epoch) const {
  const auto lock = stages_->enter();
  const SamplerStage& sampling = stages_->sampling();
  if (epoch != pool_.epoch || !sampling.active())
    throw RuntimeError("DataLoader: the epoch to checkpoint is no longer running");
  const TaskDispatcher& dispatcher = sampling.dispatcher();
  EpochPosition p;
  if (config_.in_order) {
    p.consumed = delivery_->next_for_application_locked() - pool_.first_task;
  } else {
    // Results come in any order: the first task the application has not had, and the
    // ones above it it has.
    const Handoff& handoff = stages_->handoff();
    p.consumed = handoff.lowest_not_taken() - pool_.first_task;
    for (uint64_t task : handoff.taken_above()) p.delivered_above.push_back(task - pool_.first_task);
  }
  p.sent = dispatcher.next_task() - pool_.first_task;
  p.exhausted = sampling.exhausted();
  p.exact = dispatcher.max_in_flight() + 1 <= workers_->rng_slots();
  // Each worker's first task not yet delivered: one it still computes, or one whose
  // result waits in the reorder stage or the handoff; none: its next task.
  std::vector<uint64_t> first(static_cast<size_t>(num_workers()), dispatcher.next_task());
  for (int w = 0; w < num_workers(); ++w) {
    const std::vector<uint64_t> unfinished = dispatcher.unfinished_tasks_of(w);
    if (!unfinished.empty()) first[static_cast<size_t>(w)] = unfinished.front();
  }
  auto waiting = [&](uint64_t task, int worker) {
    if (worker >= 0 && static_cast<size_t>(worker) < first.size())
      first[static_cast<size_t>(worker)] = std::min(first[static_cast<size_t>(worker)], task);
  };
  stages_->reordering().for_each_buffered([&](uint64_t task, const result_msg& r) { waiting(task, r.worker); });
  stages_->handoff().for_each([&](const HandedOver& h) { waiting(h.result.task_idx, h.result.worker); });
  for (int w = 0; w < num_workers(); ++w) {
    p.worker_rng.push_back(workers_->resume_state(w, first[static_cast<size_t>(w)]));
    p.stream_start.push_back(workers_->stream_start(w, pool_.first_task));
  }
  return p;
}

bool Pipeline::healthy() const {
  const auto lock = stages_->enter();
  return healthy_locked();
}

bool Pipeline::healthy_locked() const {
  if (pool_.closed) return false;
  for (int w = 0; w < num_workers(); ++w)
    if (!workers_->accepting(w) && !workers_->parked(w)) return false;
  return true;
}

bool Pipeline::reinit(std::vector<WorkerConfig> workers) {
  {
    const auto lock = stages_->enter();
    if (workers.size() != static_cast<size_t>(num_workers())) throw RuntimeError("internal: reinit with another number of workers");
    // Checked under the lock that queues the configurations: a death reported after this
    // point is judged against them (on_down: a renewed worker that had not started a
    // task of the new epoch died between epochs); one reported before it refuses the pool.
    if (!healthy_locked()) return false;
    config_.workers = std::move(workers);
    for (int w = 0; w < num_workers(); ++w)
      workers_->renew(w, next_first_task_locked(), encoded_config(config_.workers[static_cast<size_t>(w)]));
  }
  flush_all();
  return true;
}

uint64_t Pipeline::next_first_task() const {
  const auto lock = stages_->enter();
  return next_first_task_locked();
}

uint64_t Pipeline::next_first_task_locked() const {
  // Task ids never repeat: tasks of an epoch that ended early may still be held.
  const SamplerStage& sampling = stages_->sampling();
  return sampling.active() ? std::max(next_task_, sampling.dispatcher().next_task()) : next_task_;
}

uint64_t Pipeline::begin_epoch(std::optional<TaskSource> source, bool reset_streams, EpochResume resume) {
  // A remote slot that moved after its host was lost tries the host again (a connect:
  // off the strand, before the epoch's first task).
  for (int w = 0; w < num_workers(); ++w) take_home(w);
  uint64_t id;
  {
    const auto lock = stages_->enter();
    if (pool_.closed) throw RuntimeError("DataLoader: the worker pool was shut down");
    id = begin_epoch_locked(std::move(source), reset_streams, std::move(resume));
  }
  flush_all();
  send_first_tasks(id);
  return id;
}

uint64_t Pipeline::begin_epoch_locked(std::optional<TaskSource> source, bool reset_streams, EpochResume resume) {
  bool flush_needed = false;  // begin_epoch's flush_all() writes whatever this queues
  delivery_->drain_rings_locked(flush_needed);
  // Results of the previous epoch that nobody took give their slabs back.
  delivery_->release_undelivered_locked();
  ++epochs_started_;
  pool_.epoch = epochs_started_;
  next_task_ = next_first_task_locked();
  const uint64_t first_task = next_task_;
  pool_.first_task = first_task;
  TaskDispatcher dispatcher(num_workers(), config_.prefetch_factor, first_task, config_.in_order,
                            resume.first_worker >= 0
                                ? resume.first_worker
                                : static_cast<int>(resume.consumed % static_cast<uint64_t>(num_workers())));
  if (tuning_) {
    // The autotuner's setting: its workers (a retired one still finishing gets nothing),
    // prefetch x workers tasks out.
    for (int w = 0; w < num_workers(); ++w)
      if (!tuning_->wanted(w) || !workers_->accepting(w)) dispatcher.deactivate(w);
    dispatcher.set_max_in_flight(tuning_->max_in_flight());
    tuning_->begin_epoch();
  }
  for (int w = 0; w < num_workers(); ++w)
    if (workers_->dead(w)) dispatcher.deactivate(w);
  // The epoch begins in each stage, as a message to its actor (they run at once).
  stages_->send(stages_->sampler(), begin_atom::value,
                std::make_shared<SamplerBegin>(SamplerBegin{std::move(source), iterable_, std::move(dispatcher)}));
  stages_->send(stages_->reorder(), begin_atom::value, first_task, config_.in_order);
  stages_->send(stages_->pin(), begin_atom::value, first_task);
  run_stages_locked();
  pool_.fatal.reset();
  delivery_->begin_epoch_locked(std::chrono::steady_clock::now());
  slabs_->new_window();
  slab_grown_at_begin_ = slabs_->stats().grown;
  workers_->set_epoch(pool_.epoch);
  workers_->begin_epoch_counters(!resume.worker_rng.empty() || !resume.streams.empty() ? &resume.worker_rng
                                                                                        : nullptr);
  if (resume.task_seed_base) {
    // Task t of this epoch is seeded task_seed(base_seed, t - task_base), t - task_base
    // being its index in the (checkpointed) epoch; a worker restarted later gets it too.
    workers_->set_task_seeds(TaskSeeds{*resume.task_seed_base, first_task - resume.consumed});
  }
  for (int w = 0; w < num_workers(); ++w) {
    if (workers_->dead(w)) {
      // A dead worker stays dead (it got no credits above): every later epoch gets its
      // error at once.
      if (!pool_.fatal) set_fatal_locked(workers_->fatal_type(w), workers_->fatal_message(w), w);
      continue;
    }
    if (workers_->parked(w)) continue;  // its next incarnation gets the task seeds at attach
    // A resumed stream (state hooks) begins with its checkpoint's state instead.
    if (static_cast<size_t>(w) < resume.streams.size())
      workers_->resume_stream(w, resume.streams[static_cast<size_t>(w)]);
    else if (reset_streams) workers_->restart_stream(w);
    if (resume.task_seed_base) workers_->send_task_seeds(w);
  }
  // Slabs sized before the first task (sample_spec): a pool that cannot fit in
  // shared memory is this epoch's error, before its first batch.
  if (config_.batch_bytes && !pool_.fatal) {
    try {
      slabs_->size_for(*config_.batch_bytes);
    } catch (const Error& e) {
      set_fatal_locked(e.python_type(), e.what(), -1);
    }
  }
  rings_->ring();  // an iterator of the epoch this one replaced wakes and ends
  return pool_.epoch;
}

void Pipeline::send_first_tasks(uint64_t id) {
  // The epoch's first tasks go out one at a time, each written at once: a worker does not
  // wait while the slabs of the other workers' tasks are made (a new slab takes
  // milliseconds: docs/transport.md).  Later tasks go out as credits come back (next()).
  while (true) {
    std::vector<int> dirty;
    {
      const auto lock = stages_->enter();
      if (pool_.epoch != id || pool_.closed) break;  // another epoch began meanwhile
      const uint64_t before = stages_->sampling().dispatcher().next_task();
      stages_->send(stages_->sampler(), dispatch_atom::value, int32_t{1});
      run_stages_locked();
      if (pool_.epoch != id || stages_->sampling().dispatcher().next_task() == before) break;
      dirty = workers_->dirty();
    }
    for (int w : dirty) flush(w);
  }
  flush_all();  // frames a failing first task queued
  if (stats_recording()) {  // the first tasks are in flight from here
    const auto lock = stages_->enter();
    if (pool_.epoch == id && stages_->sampling().active())
      delivery_->first_tasks_out_locked(stages_->sampling().dispatcher().in_flight());
  }
}

void Pipeline::halt_sampler_locked() {
  // Urgent: the sampler handles it before any message already in its mailbox (a stage
  // that fails the epoch while the strand runs: the strand's outer run takes it next).
  stages_->send_urgent(stages_->sampler(), halt_atom::value);
  stages_->run();
}

void Pipeline::run_stages_locked() {
  stages_->run();
  const auto& failure = stages_->sampling().failure();
  if (failure && pool_.epoch != 0 && !pool_.fatal) set_fatal_locked(failure->first, failure->second, -1);
}

void Pipeline::release_slab(int worker, uint64_t slab) { delivery_->release_slab(worker, slab); }

// ------------------------------------------------------------------ the application thread

Delivery Pipeline::next(uint64_t epoch, std::optional<std::chrono::steady_clock::time_point> deadline) {
  return delivery_->next(epoch, deadline);
}

void Pipeline::notify_locked() {
  rings_->ring();  // a futex wake-up only when the application thread sleeps
}

void Pipeline::end_epoch(uint64_t epoch) {
  const auto lock = stages_->enter();
  if (epoch != pool_.epoch) return;  // already ended, or replaced by a newer epoch
  halt_sampler_locked();  // no more sampler draws
  next_task_ = next_first_task_locked();
  delivery_->release_undelivered_locked();
  pool_.epoch = 0;  // results still to come are stale: their slabs come back
  workers_->set_epoch(0);
}

std::pair<uint64_t, int> Pipeline::awaited() const {
  const auto lock = stages_->enter();
  const SamplerStage& sampling = stages_->sampling();
  if (!sampling.active()) return {0, -1};
  uint64_t task = delivery_->next_for_application_locked();
  int worker = sampling.dispatcher().worker_of(task);
  return {task - pool_.first_task, worker};
}

std::vector<int> Pipeline::pids() const {
  const auto lock = stages_->enter();
  std::vector<int> out;
  for (int w = 0; w < num_workers(); ++w) out.push_back(workers_->live_pid(w));
  return out;
}

void Pipeline::stats(uint64_t epoch, EpochStats& out) const {
  const auto lock = stages_->enter();
  if (epoch != pool_.epoch || epoch == 0) return;  // ended or replaced: the caller keeps what it had
  out.waits = static_cast<int64_t>(delivery_->waits());
  const EpochOccupancy& occupancy = delivery_->occupancy();
  const SamplerStage& sampling = stages_->sampling();
  if (sampling.active()) {
    out.tasks_sent = static_cast<int64_t>(std::max(sampling.dispatcher().next_task(), pool_.first_task) - pool_.first_task);
    out.in_flight = static_cast<int64_t>(sampling.dispatcher().in_flight());
  }
  out.ready = static_cast<int64_t>(stages_->reordering().buffered() + stages_->handoff().size());
  out.sampler_s = static_cast<double>(sampling.sampler_ns()) * 1e-9;
  const auto [in_flight_mean, ready_mean] = occupancy.means(std::chrono::steady_clock::now());
  out.in_flight_mean = in_flight_mean;
  out.ready_mean = ready_mean;
  out.in_flight_max = static_cast<int64_t>(occupancy.in_flight_max);
  out.ready_max = static_cast<int64_t>(occupancy.ready_max);
  const SlabStore::Stats slabs = slabs_->stats();
  out.slab_bytes_mapped = static_cast<int64_t>(slabs.mapped);
  out.slab_bytes_in_use = static_cast<int64_t>(slabs.in_use);
  out.slab_bytes_peak = static_cast<int64_t>(slabs.peak);
  out.slab_grown = static_cast<int64_t>(slabs.grown - std::min(slabs.grown, slab_grown_at_begin_));
  if (tuning_) {
    out.autotuned = true;
    out.autotune = tuning_->decisions();
    out.workers_now = tuning_->wanted_count();
    out.prefetch_now = tuning_->prefetch();
  }
  out.workers.clear();
  out.inline_batches = out.restarts = 0;
  for (int k = 0; k < num_workers(); ++k) {
    out.workers.push_back(workers_->stats(k));
    out.inline_batches += out.workers.back().inline_batches;
    out.restarts += out.workers.back().restarts;
  }
}

WorkerLifecycle::State Pipeline::worker_state(int worker) const {
  const auto lock = stages_->enter();
  return workers_->state(worker);
}

void Pipeline::shutdown() {
  {
    const auto lock = stages_->enter();
    if (pool_.closed) return;
    pool_.closed = true;
    workers_->close();
    rings_->ring();
  }
  // Fixed order: every worker is told first (they exit together), then each transport
  // is stopped (its reader joined, its process reaped).  Slots keep their lifecycle.
  placement_->say_shutdown_all();
  placement_->stop_all();
  const auto lock = stages_->enter();
  for (int w = 0; w < num_workers(); ++w) workers_->release_all(w);
  halt_sampler_locked();
  delivery_->release_undelivered_locked();
}

// ------------------------------------------------------------------ num_workers = auto

std::pair<int, int> Pipeline::tuned() const {
  const auto lock = stages_->enter();
  if (!tuning_) return {num_workers(), config_.prefetch_factor};
  return {tuning_->wanted_count(), tuning_->prefetch()};
}

std::vector<PoolTuning::Slot> Pipeline::tuning_slots_locked() const {
  std::vector<PoolTuning::Slot> slots(static_cast<size_t>(num_workers()));
  for (int w = 0; w < num_workers(); ++w)
    slots[static_cast<size_t>(w)] = PoolTuning::Slot{workers_->accepting(w), workers_->dead(w), workers_->held(w) > 0};
  return slots;
}

namespace {
/// Resident memory of process `pid` (/proc/<pid>/statm), 0 when it cannot be read.
uint64_t rss_bytes(int pid) {
  if (pid <= 0) return 0;
  FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/statm").c_str(), "re");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return got == 2 ? resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}
}  // namespace

std::vector<std::pair<int, bool>> Pipeline::tune() {
  std::vector<std::pair<int, bool>> acts;
  if (!tuning_) return acts;
  TuneSample s;
  uint64_t epoch;
  std::vector<int> live;
  {
    const auto lock = stages_->enter();
    if (pool_.closed) return acts;
    // Retired workers that finished their last task: their processes go.
    for (int w : tuning_->finished_retirements(tuning_slots_locked())) acts.emplace_back(w, false);
    if (pool_.epoch == 0 || pool_.fatal || !stages_->sampling().active()) return acts;
    epoch = pool_.epoch;
    const TaskDispatcher& d = stages_->sampling().dispatcher();
    const EpochOccupancy& occupancy = delivery_->occupancy();
    s.t_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - occupancy.began).count();
    s.batches = workers_->delivered_total();
    s.wait_s = static_cast<double>(delivery_->wait_ns()) * 1e-9;
    s.busy_s = static_cast<double>(workers_->busy_ns_total()) * 1e-9;
    for (int w = 0; w < num_workers(); ++w) {
      if (!tuning_->wanted(w)) continue;
      ++s.active;
      if (!d.is_active(w)) ++s.starting;
      if (workers_->live_pid(w) > 0) live.push_back(workers_->live_pid(w));
    }
    s.prefetch = tuning_->prefetch();
    s.ready = stages_->reordering().buffered() + stages_->handoff().size();
    s.batch_bytes = config_.batch_bytes.value_or(occupancy.in_flight_max > 0
                                                     ? slabs_->stats().peak / occupancy.in_flight_max
                                                     : 0);
  }
  if (config_.autotune->limits.memory_budget > 0)
    for (int pid : live) s.worker_rss = std::max(s.worker_rss, rss_bytes(pid));
  const std::optional<TuneStep> step = tuning_->observe(epoch, s);
  if (!step) return acts;
  std::vector<int> dirty;
  {
    const auto lock = stages_->enter();
    if (pool_.closed || pool_.epoch == 0) return acts;
    const PoolTuning::Applied applied = tuning_->apply(*step, tuning_slots_locked(), s.t_s);
    for (const auto& [w, on] : applied.told)
      stages_->send(stages_->sampler(), tune_atom::value, static_cast<int32_t>(w), on, tuning_->max_in_flight());
    acts.insert(acts.end(), applied.acts.begin(), applied.acts.end());
    run_stages_locked();
    dirty = workers_->dirty();
    notify_locked();
  }
  if (hooks_.flush_later)
    for (int w : dirty) hooks_.flush_later(w);
  return acts;
}

void Pipeline::worker_ready(int worker) {
  // On the strand (link k's ready): the tuner's new worker gets tasks from now on.
  if (!tuning_ || !tuning_->wanted(worker) || pool_.epoch == 0 || !stages_->sampling().active()) return;
  if (stages_->sampling().dispatcher().is_active(worker)) return;
  stages_->send(stages_->sampler(), tune_atom::value, static_cast<int32_t>(worker), true, tuning_->max_in_flight());
}

void Pipeline::park(int worker) {
  if (worker < 0 || worker >= num_workers() || !tuning_) return;
  std::lock_guard<std::mutex> owner(placement_->owner(worker));
  {
    const auto lock = stages_->enter();
    if (pool_.closed || tuning_->wanted(worker) || !workers_->accepting(worker) || workers_->held(worker) > 0)
      return;
    if (stages_->sampling().active() && stages_->sampling().dispatcher().is_active(worker)) return;
    if (!workers_->park(worker)) return;
  }
  // Told to exit as at shutdown; its exit (down) is expected and ignored.
  placement_->current(worker).say_shutdown();
  placement_->current(worker).stop();
}

void Pipeline::unpark(int worker) {
  if (worker < 0 || worker >= num_workers() || !tuning_) return;
  std::lock_guard<std::mutex> owner(placement_->owner(worker));
  uint32_t gen;
  {
    const auto lock = stages_->enter();
    if (pool_.closed || !tuning_->wanted(worker) || !workers_->parked(worker)) return;
    gen = workers_->begin_incarnation(worker);
  }
  // Its random stream goes on from where it stopped (or, re-initialised meanwhile,
  // starts from the new configuration).
  run_incarnation(worker, gen, /*carry_stream=*/true, "started by the autotuner");
}

// ------------------------------------------------------------------ reader threads

// Every event becomes a message to link k, which drops an older incarnation's.
template <class F>
void Pipeline::to_link(int worker, F&& send) {
  std::vector<int> dirty;
  {
    const auto lock = stages_->enter();
    if (pool_.closed) return;
    send(stages_->link(worker));
    run_stages_locked();
    dirty = workers_->dirty();
    notify_locked();
  }
  if (hooks_.flush_later)
    for (int w : dirty) hooks_.flush_later(w);
}

void Pipeline::on_hello(int worker, uint32_t gen) {
  to_link(worker, [&](const link_actor& link) { stages_->send(link, hello_atom::value, gen); });
}

void Pipeline::on_ready(int worker, uint32_t gen) {
  to_link(worker, [&](const link_actor& link) { stages_->send(link, ready_atom::value, gen); });
}

void Pipeline::on_stream_start(int worker, uint32_t gen, uint64_t task, StreamStart start) {
  to_link(worker, [&](const link_actor& link) {
    stages_->send(link, stream_atom::value, gen, task, std::move(start.rng), start.state.has_value(),
                  start.state.value_or(std::string()));
  });
}

void Pipeline::on_init_error(int worker, uint32_t gen, const std::string& type, const std::string& message,
                             const std::string& when) {
  to_link(worker, [&](const link_actor& link) {
    stages_->send(link, fatal_atom::value, gen, type,
                  "DataLoader worker " + std::to_string(worker) + " failed " +
                      (when.empty() ? std::string("to start") : when) + ": " + type + ": " + message);
  });
}

void Pipeline::on_result(int worker, uint32_t gen, WorkerReply&& reply) {
  to_link(worker, [&](const link_actor& link) {
    const uint64_t task = reply.task;
    stages_->send(link, gen, result_msg{task, std::move(reply), worker});
  });
}

void Pipeline::on_unreadable(int worker, uint32_t gen, const std::string& what) {
  to_link(worker, [&](const link_actor& link) {
    stages_->send(link, fatal_atom::value, gen, std::string("RuntimeError"),
                  "DataLoader worker " + std::to_string(worker) + " sent " + what);
  });
}

void Pipeline::stage_failed(const std::string& message) { set_fatal_locked("RuntimeError", message, -1); }

void Pipeline::epoch_failed(const std::string& type, const std::string& message, int worker) {
  set_fatal_locked(type, message, worker);
}

void Pipeline::worker_restarting(int worker, uint32_t gen, const std::string& warning) {
  restarts_due_.push_back(RestartDue{worker, gen, warning});
}

void Pipeline::on_down(int worker, uint32_t gen, const WorkerExit& how) {
  std::vector<RestartDue> restarts;
  bool flush_needed = false;
  {
    const auto lock = stages_->enter();
    if (pool_.closed) return;
    // What the incarnation published before it went down counts (answered tasks are not
    // re-sent); nothing more can come from it.
    if (workers_->current(worker, gen) && delivery_->drain_rings_locked(flush_needed, worker) > 0) notify_locked();
    stages_->send(stages_->link(worker), down_atom::value, gen, how);
    run_stages_locked();
    restarts.swap(restarts_due_);  // worker_restarting, during the send
    notify_locked();
  }
  if (flush_needed && hooks_.flush_later)
    for (int w = 0; w < num_workers(); ++w) hooks_.flush_later(w);  // a flush with nothing queued writes nothing
  for (const RestartDue& r : restarts) {
    warn(r.warning);
    if (hooks_.restart_later) hooks_.restart_later(r.worker, r.gen);
  }
}

void Pipeline::worker_failed_locked(int worker, const std::string& type, const std::string& message) {
  // As the worker's own failure would: link k fails its slot and retires it.
  stages_->send(stages_->link(worker), fatal_atom::value, workers_->generation(worker), type, message);
  run_stages_locked();
}

void Pipeline::set_fatal_locked(const std::string& type, const std::string& message, int worker) {
  if (pool_.fatal) return;
  halt_sampler_locked();  // no task goes out after the epoch failed
  Delivery f;
  f.kind = Delivery::Kind::Fatal;
  f.worker = worker;
  f.error_type = type.empty() ? "RuntimeError" : type;
  f.error_message = message;
  pool_.fatal = std::move(f);
  notify_locked();
}

void Pipeline::fail_all(const std::string& type, const std::string& message) {
  const auto lock = stages_->enter();
  set_fatal_locked(type, message, -1);
}

// ------------------------------------------------------------------ slot actor: watchdog

void Pipeline::watch(int worker, std::chrono::milliseconds tick) {
  if (worker < 0 || worker >= num_workers()) return;
  // Its owner while it looks: restart (this actor) replaces the incarnation under the
  // same lock, and shutdown stops it under it.  The pool's actors are usually gone
  // before shutdown, but not at exit (WorkerPool::teardown_at_exit shuts the pipeline
  // down and keeps the actors, whose ticks may still come): without this lock a tick
  // read a link that shutdown was destroying (ThreadSanitizer, loader_test_static_loaders).
  std::lock_guard<std::mutex> owner(placement_->owner(worker));
  std::optional<Liveness> seen;
  {
    const auto lock = stages_->enter();
    if (pool_.closed) return;
    seen = workers_->liveness(worker);
  }
  if (seen) placement_->current(worker).watch(*seen, tick, config_.hello_deadline);
}

}  // namespace loader::runtime
