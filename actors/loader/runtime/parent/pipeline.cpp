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
  std::vector<WorkerTransport*> transports;
  const int local = n - static_cast<int>(config_.remote.size());
  if (local < 0) throw RuntimeError("internal: more remote workers than workers");
  for (int w = 0; w < n; ++w) {
    auto c = std::make_unique<Carrier>();
    if (w >= local) {
      auto remote = std::make_unique<RemoteTransport>(w, config_.remote[static_cast<size_t>(w - local)], this, rng_slots);
      c->remote = remote.get();
      c->home = std::move(remote);
    } else {
      c->home = make_local_transport(w, rng_slots);
    }
    c->current = c->home.get();
    transports.push_back(c->current);
    carriers_.push_back(std::move(c));
  }
  workers_ = std::make_unique<WorkerSlots>(std::move(transports), config_.max_restarts, !iterable_, *slabs_, rng_slots,
                                           *this, config_.executable);
  stages_ = std::make_unique<StageActors>(*config_.system, n, *workers_, *this, slabs_);
}

std::unique_ptr<ShmTransport> Pipeline::make_local_transport(int worker, uint64_t rng_slots) {
  IncarnationFactory make = [this](const Link::Spec& spec) -> std::unique_ptr<Link> {
    if (config_.make_link) return config_.make_link(spec, this);
    return std::make_unique<WorkerLink>(spec, this);
  };
  return std::make_unique<ShmTransport>(Link::Spec{worker, 0, config_.in_process, config_.executable}, std::move(make),
                                        *rings_, *slabs_, rng_slots);
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
    Carrier& cr = carrier(w);
    std::lock_guard<std::mutex> owner(cr.owner);
    uint32_t gen;
    {
      const auto lock = stages_->enter();
      if (closed_) return;
      if (tuning_ && !tuning_->wanted(w)) {  // the autotuner starts it when needed
        workers_->park(w);
        continue;
      }
      gen = workers_->begin_incarnation(w);
    }
    try {
      cr.current->start(gen);
      const auto lock = stages_->enter();
      workers_->attach(w, gen, cr.current->pid(), encoded_config(config_.workers[static_cast<size_t>(w)]));
    } catch (const std::exception& e) {
      const auto lock = stages_->enter();
      const std::string type = dynamic_cast<const Error*>(&e) ? static_cast<const Error&>(e).python_type() : "RuntimeError";
      worker_failed_locked(w, type, "DataLoader worker " + std::to_string(w) + " could not be started: " + e.what());
    }
  }
  flush_all();
}

WorkerTransport& Pipeline::start_somewhere(int worker, uint32_t gen) {
  Carrier& cr = carrier(worker);
  std::optional<WorkerExit> lost;
  {
    const auto lock = stages_->enter();
    lost = workers_->host_lost(worker);
  }
  if (!lost || !cr.remote) {
    cr.current->start(gen);
    return *cr.current;
  }
  // Its host is gone: another worker host takes the slot (its own first, if it was
  // away), else a stand-in process here when this loader has local workers (the dataset
  // can be built here), with the same id, seed and random stream.
  const std::string lost_at = cr.remote->target().text();
  std::vector<HostPort> hosts;
  auto consider = [&](const HostPort& h) {
    if (h.text() == lost_at) return;
    for (const auto& k : hosts)
      if (k.text() == h.text()) return;
    hosts.push_back(h);
  };
  consider(cr.remote->home());
  for (const auto& r : config_.remote) consider(r.address);
  std::string tried;
  for (const HostPort& h : hosts) {
    try {
      cr.remote->retarget(h);
      use_transport(worker, cr.remote);
      cr.remote->start(gen);
      return *cr.remote;
    } catch (const std::exception& e) {
      tried += std::string(tried.empty() ? "" : "; ") + e.what();
    }
  }
  cr.remote->retarget(cr.remote->home());
  const int local = num_workers() - static_cast<int>(config_.remote.size());
  if (local > 0) {
    try {
      if (!cr.standin) cr.standin = make_local_transport(worker, workers_->rng_slots());
      use_transport(worker, cr.standin.get());
      cr.standin->start(gen);
      return *cr.standin;
    } catch (const std::exception& e) {
      tried += std::string(tried.empty() ? "" : "; ") + "a stand-in process here: " + e.what();
    }
  }
  throw RuntimeError("its host " + lost_at + " was lost (" + lost->detail + ") and no other worker could take its " +
                     "tasks: " +
                     (tried.empty() ? std::string("no other worker host is given (remote_workers) and this loader has "
                                                  "no local workers (num_workers = 0) to run a stand-in")
                                    : tried));
}

void Pipeline::restart(int worker, uint32_t gen) {
  if (worker < 0 || worker >= num_workers()) return;
  Carrier& cr = carrier(worker);
  std::lock_guard<std::mutex> owner(cr.owner);
  uint32_t next;
  {
    const auto lock = stages_->enter();
    if (closed_ || workers_->state(worker) != WorkerLifecycle::State::Restarting || workers_->generation(worker) != gen)
      return;
    next = workers_->begin_incarnation(worker);
  }
  run_incarnation(worker, next, /*carry_stream=*/false, "restarted");
}

void Pipeline::run_incarnation(int worker, uint32_t gen, bool carry_stream, const char* verb) {
  Carrier& cr = carrier(worker);
  cr.current->stop();  // the last incarnation's events have ended and its process is reaped: nothing waits here
  WorkerTransport* t;
  try {
    t = &start_somewhere(worker, gen);
  } catch (const std::exception& e) {
    const auto lock = stages_->enter();
    worker_failed_locked(worker, "RuntimeError",
                         "DataLoader worker " + std::to_string(worker) + " could not be " + verb + ": " + e.what());
    notify_locked();
    return;
  }
  {
    const auto lock = stages_->enter();
    const bool moved = carry_stream || workers_->host_lost(worker).has_value();
    workers_->attach(worker, gen, t->pid(), encoded_config(config_.workers[static_cast<size_t>(worker)]));
    workers_->resend_held(worker, moved);
  }
  t->flush();  // still its owner: the new incarnation's frames go out in order
}

void Pipeline::use_transport(int worker, WorkerTransport* t) {
  const auto lock = stages_->enter();
  workers_->set_transport(worker, t);
  carrier(worker).current = t;
}

void Pipeline::take_home(int worker) {
  Carrier& cr = carrier(worker);
  if (!cr.remote) return;
  std::lock_guard<std::mutex> owner(cr.owner);
  if (cr.current == cr.remote && cr.remote->target().text() == cr.remote->home().text()) return;  // at home
  uint32_t next;
  {
    const auto lock = stages_->enter();
    if (closed_ || !workers_->accepting(worker)) return;
    next = workers_->begin_incarnation(worker);
  }
  WorkerTransport* away = cr.current;
  const HostPort away_host = cr.remote->target();
  away->stop();
  try {
    cr.remote->retarget(cr.remote->home());
    use_transport(worker, cr.remote);
    cr.remote->start(next);
  } catch (const std::exception& e) {
    const std::string where = away == cr.remote ? "the worker host " + away_host.text() : "its stand-in process here";
    warn("DataLoader worker " + std::to_string(worker) + ": its host " + cr.remote->home().text() +
         " still cannot take it (" + e.what() + "); it stays with " + where + " for this epoch");
    try {
      cr.remote->retarget(away_host);
      use_transport(worker, away);
      away->start(next);
    } catch (const std::exception& again) {
      const auto lock = stages_->enter();
      worker_failed_locked(worker, "RuntimeError",
                           "DataLoader worker " + std::to_string(worker) + " could not be started again: " + again.what());
      return;
    }
  }
  {
    const auto lock = stages_->enter();
    workers_->attach(worker, next, cr.current->pid(), encoded_config(config_.workers[static_cast<size_t>(worker)]));
    workers_->resend_held(worker, /*moved=*/true);
  }
  cr.current->flush();
}

// ------------------------------------------------------------------ frames out

void Pipeline::flush(int worker) {
  if (worker < 0 || worker >= num_workers()) return;
  Carrier& cr = carrier(worker);
  std::lock_guard<std::mutex> owner(cr.owner);
  cr.current->flush();
}

void Pipeline::flush_all() {
  for (int w = 0; w < num_workers(); ++w) flush(w);
}

// ------------------------------------------------------------------ epochs and dispatch

EpochPosition Pipeline::position(uint64_t epoch) const {
  const auto lock = stages_->enter();
  const SamplerStage& sampling = stages_->sampling();
  if (epoch != epoch_ || !sampling.active())
    throw RuntimeError("DataLoader: the epoch to checkpoint is no longer running");
  const TaskDispatcher& dispatcher = sampling.dispatcher();
  EpochPosition p;
  if (config_.in_order) {
    p.consumed = next_for_application_locked() - first_task_;
  } else {
    // Results come in any order: the first task the application has not had, and the
    // ones above it it has.
    const Handoff& handoff = stages_->handoff();
    p.consumed = handoff.lowest_not_taken() - first_task_;
    for (uint64_t task : handoff.taken_above()) p.delivered_above.push_back(task - first_task_);
  }
  p.sent = dispatcher.next_task() - first_task_;
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
    p.stream_start.push_back(workers_->stream_start(w, first_task_));
  }
  return p;
}

bool Pipeline::healthy() const {
  const auto lock = stages_->enter();
  return healthy_locked();
}

bool Pipeline::healthy_locked() const {
  if (closed_) return false;
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
    if (closed_) throw RuntimeError("DataLoader: the worker pool was shut down");
    bool flush_needed = false;  // flush_all() below writes whatever this queues
    drain_rings_locked(flush_needed);
    // Results of the previous epoch that nobody took give their slabs back.
    release_undelivered_locked();
    ++epochs_started_;
    epoch_ = epochs_started_;
    SamplerStage& sampling = stages_->sampling();
    next_task_ = next_first_task_locked();
    const uint64_t first_task = next_task_;
    first_task_ = first_task;
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
    sampling.begin(std::move(source), iterable_, std::move(dispatcher));
    stages_->reordering().reset(first_task, config_.in_order);
    stages_->handoff().restart(first_task);
    fatal_.reset();
    stopped_ = false;
    waits_ = 0;
    wait_ns_ = 0;
    occupancy_.start(std::chrono::steady_clock::now());
    slabs_->new_window();
    slab_grown_at_begin_ = slabs_->stats().grown;
    workers_->set_epoch(epoch_);
    workers_->begin_epoch_counters(!resume.worker_rng.empty() || !resume.streams.empty() ? &resume.worker_rng
                                                                                          : nullptr);
    if (resume.task_seed_base) {
      // Task t of this epoch is seeded task_seed(base_seed, t - task_base), t - task_base
      // being its index in the (checkpointed) epoch; a worker restarted later gets it too.
      workers_->set_task_seeds(TaskSeedsFrame{*resume.task_seed_base, first_task - resume.consumed}.encode());
    }
    for (int w = 0; w < num_workers(); ++w) {
      if (workers_->dead(w)) {
        // A dead worker stays dead: every later epoch gets its error at once.
        sampling.dispatcher().deactivate(w);
        if (!fatal_) set_fatal_locked(workers_->fatal_type(w), workers_->fatal_message(w), w);
        continue;
      }
      if (workers_->parked(w)) continue;  // its next incarnation gets the task seeds at attach
      // A resumed stream (state hooks) begins with its checkpoint's state instead.
      if (static_cast<size_t>(w) < resume.streams.size())
        workers_->send(w, FrameType::ResumeStream, encode_stream_resume(resume.streams[static_cast<size_t>(w)]));
      else if (reset_streams) workers_->send(w, FrameType::Epoch, {});
      if (resume.task_seed_base) workers_->send(w, FrameType::TaskSeeds, *workers_->task_seeds());
    }
    // Slabs sized before the first task (sample_spec): a pool that cannot fit in
    // shared memory is this epoch's error, before its first batch.
    if (config_.batch_bytes && !fatal_) {
      try {
        slabs_->size_for(*config_.batch_bytes);
      } catch (const Error& e) {
        set_fatal_locked(e.python_type(), e.what(), -1);
      }
    }
    id = epoch_;
    rings_->ring();  // an iterator of the epoch this one replaced wakes and ends
  }
  flush_all();
  // The epoch's first tasks go out one at a time, each written at once: a worker does not
  // wait while the slabs of the other workers' tasks are made (a new slab takes
  // milliseconds: docs/transport.md).  Later tasks go out as credits come back (next()).
  while (true) {
    std::vector<int> dirty;
    {
      const auto lock = stages_->enter();
      if (epoch_ != id || closed_) break;  // another epoch began meanwhile
      const uint64_t before = stages_->sampling().dispatcher().next_task();
      stages_->send(stages_->sampler(), dispatch_atom::value, int32_t{1});
      run_stages_locked();
      if (epoch_ != id || stages_->sampling().dispatcher().next_task() == before) break;
      dirty = workers_->dirty();
    }
    for (int w : dirty) flush(w);
  }
  flush_all();  // frames a failing first task queued
  if (stats_recording()) {  // the first tasks are in flight from here
    const auto lock = stages_->enter();
    if (epoch_ == id && stages_->sampling().active())
      occupancy_.see(std::chrono::steady_clock::now(), stages_->sampling().dispatcher().in_flight(), 0);
  }
  return id;
}

void Pipeline::run_stages_locked() {
  stages_->run();
  const auto& failure = stages_->sampling().failure();
  if (failure && epoch_ != 0 && !fatal_) set_fatal_locked(failure->first, failure->second, -1);
}

void Pipeline::release_undelivered_locked() {
  auto& buffer = stages_->reordering();
  buffer.for_each_buffered([&](uint64_t, const result_msg& r) {
    if (r.batch.slab) slabs_->release(r.worker, r.batch.slab);
  });
  buffer.reset(buffer.next_expected(), buffer.in_order());
  for (auto& h : stages_->handoff().clear())
    if (h.result.batch.slab) slabs_->release(h.result.worker, h.result.batch.slab);
}

uint64_t Pipeline::next_for_application_locked() const {
  const Handoff& handoff = stages_->handoff();
  return handoff.empty() ? stages_->reordering().next_expected() : handoff.front_task();
}

void Pipeline::release_slab(int worker, uint64_t slab) {
  slabs_->release(worker, slab);
  {
    const auto lock = stages_->enter();
    if (!workers_->slab_released(worker)) return;
  }
  flush(worker);
}

// ------------------------------------------------------------------ the application thread

bool Pipeline::releasable_locked() const {
  const auto& total = stages_->sampling().total();
  return epoch_ == 0 || fatal_.has_value() || !stages_->handoff().empty() ||
         (total && stages_->reordering().done(first_task_, *total));
}

void Pipeline::notify_locked() {
  rings_->ring();  // a futex wake-up only when the application thread sleeps
}

size_t Pipeline::drain_rings_locked(bool& flush_needed, int only) {
  size_t taken = 0;
  for (int w = 0; w < num_workers(); ++w) {
    if (only >= 0 && w != only) continue;
    try {
      taken += carrier(w).current->take_results([&](WorkerReply&& r) {
        const uint64_t task = r.task;
        stages_->deliver(w, result_msg{task, std::move(r), w});
      });
    } catch (const Error& e) {
      worker_failed_locked(w, "RuntimeError", e.what());
    }
  }
  if (taken > 0) {
    run_stages_locked();  // link -> reorder -> pin
    for (int w = 0; w < num_workers() && !flush_needed; ++w)
      if (carrier(w).current->dirty()) flush_needed = true;
  }
  return taken;
}

Delivery Pipeline::next(uint64_t epoch, std::optional<std::chrono::steady_clock::time_point> deadline) {
  auto lock = stages_->enter();
  // Only workers that got frames are flushed (usually the one the next task went to).
  auto flush_dirty = [&] {
    int dirty[8];
    int n_dirty = 0;
    bool more = false;
    for (int w = 0; w < num_workers(); ++w) {
      if (!carrier(w).current->dirty()) continue;
      if (n_dirty < 8) dirty[n_dirty++] = w;
      else more = true;
    }
    lock.unlock();
    if (more) flush_all();
    else
      for (int i = 0; i < n_dirty; ++i) flush(dirty[i]);
  };
  bool flush_needed = false;
  bool waited = false;  // this call counted in waits_
  std::chrono::steady_clock::time_point wait_began;  // ... since then (the autotuner's wait_ns_)
  while (true) {
    const uint32_t seen = rings_->doorbell().seq.load(std::memory_order_acquire);  // before the look
    // The rings are taken when the handoff has nothing left: then every result the
    // workers published meanwhile goes through the stages in one run, several messages
    // per activation of the link, reorder and pin stages instead of one each.
    if (!closed_ && stages_->handoff().empty()) drain_rings_locked(flush_needed);
    if (epoch != epoch_) return Delivery{};  // ended, or replaced by a newer epoch
    if (fatal_) return *fatal_;
    if (!stages_->sampling().active()) return Delivery{};
    const uint64_t ready_before = stats_recording() ? stages_->reordering().buffered() + stages_->handoff().size() : 0;
    if (auto handed = stages_->handoff().take()) {
      result_msg& r = handed->result;
      Delivery d;
      d.task = r.task_idx;
      d.worker = r.worker;
      if (r.batch.kind == WorkerReply::Kind::Error) {
        d.kind = Delivery::Kind::Error;
        d.error_type = std::move(r.batch.error_type);
        d.error_message = std::move(r.batch.error_message);
      } else {
        d.kind = Delivery::Kind::Batch;
        d.slab = r.batch.slab;
        d.payload = std::move(r.batch.payload);
        d.value = std::move(r.batch.value);
        d.pinned = handed->pinned;
        if (d.worker >= 0 && d.worker < num_workers()) workers_->delivered(d.worker);
      }
      if (waited)
        wait_ns_ += static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - wait_began).count());
      // Its credit goes back to the sampler, whose next task goes out at once.
      stages_->send(stages_->sampler(), credit_atom::value, static_cast<int32_t>(d.worker), d.task);
      run_stages_locked();
      if (stats_recording())
        occupancy_.see(std::chrono::steady_clock::now(), stages_->sampling().dispatcher().in_flight(), ready_before);
      flush_dirty();
      return d;
    }
    if (const auto& total = stages_->sampling().total(); total && stages_->reordering().done(first_task_, *total))
      return Delivery{};  // End
    if (closed_) return Delivery{Delivery::Kind::Fatal, 0, -1, 0, "", "RuntimeError", "DataLoader: the worker pool was shut down"};
    if (flush_needed) {  // results of ended epochs freed slabs: waiting tasks go out
      flush_needed = false;
      flush_dirty();
      lock.lock();
      continue;
    }
    if (!waited) {
      waited = true;
      ++waits_;
      wait_began = std::chrono::steady_clock::now();
    }
    if (stages_->sampling().active() && !closed_ &&
        workers_->send_starved_inline(stages_->reordering().in_order(), stages_->reordering().next_expected())) {
      flush_dirty();
      lock.lock();
      continue;
    }
    // Nothing ready: poll the doorbell a little first (a result is usually close; a
    // futex sleep and wake-up cost a context switch on each side).
    if (const auto budget = spin_budget(); budget.count() > 0) {
      lock.unlock();
      const bool moved = spin_on(rings_->doorbell(), seen, budget);
      lock.lock();
      if (moved) continue;
    }
    // Say we sleep, then look at the rings once more: a worker that publishes after
    // that look sees the sleeper and rings (seq_cst on both sides).
    const uint32_t seq = rings_->prepare_sleep();
    if (drain_rings_locked(flush_needed) > 0 || releasable_locked()) {
      rings_->awake();
      continue;
    }
    lock.unlock();
    rings_->sleep(seq, deadline);
    lock.lock();
    rings_->awake();
    if (deadline && std::chrono::steady_clock::now() >= *deadline) {
      if (!closed_) drain_rings_locked(flush_needed);
      if (!releasable_locked() && epoch == epoch_ && !fatal_) {
        Delivery t;
        t.kind = Delivery::Kind::Timeout;
        return t;
      }
    }
  }
}

void Pipeline::end_epoch(uint64_t epoch) {
  const auto lock = stages_->enter();
  if (epoch != epoch_) return;  // already ended, or replaced by a newer epoch
  stopped_ = true;
  stages_->sampling().halt();  // no more sampler draws
  next_task_ = next_first_task_locked();
  release_undelivered_locked();
  epoch_ = 0;  // results still to come are stale: their slabs come back
  workers_->set_epoch(0);
}

std::pair<uint64_t, int> Pipeline::awaited() const {
  const auto lock = stages_->enter();
  const SamplerStage& sampling = stages_->sampling();
  if (!sampling.active()) return {0, -1};
  uint64_t task = next_for_application_locked();
  int worker = sampling.dispatcher().worker_of(task);
  return {task - first_task_, worker};
}

std::vector<int> Pipeline::pids() const {
  const auto lock = stages_->enter();
  std::vector<int> out;
  for (int w = 0; w < num_workers(); ++w) out.push_back(workers_->live_pid(w));
  return out;
}

void Pipeline::stats(uint64_t epoch, EpochStats& out) const {
  const auto lock = stages_->enter();
  if (epoch != epoch_ || epoch == 0) return;  // ended or replaced: the caller keeps what it had
  out.waits = static_cast<int64_t>(waits_);
  const SamplerStage& sampling = stages_->sampling();
  if (sampling.active()) {
    out.tasks_sent = static_cast<int64_t>(std::max(sampling.dispatcher().next_task(), first_task_) - first_task_);
    out.in_flight = static_cast<int64_t>(sampling.dispatcher().in_flight());
  }
  out.ready = static_cast<int64_t>(stages_->reordering().buffered() + stages_->handoff().size());
  out.sampler_s = static_cast<double>(sampling.sampler_ns()) * 1e-9;
  const auto [in_flight_mean, ready_mean] = occupancy_.means(std::chrono::steady_clock::now());
  out.in_flight_mean = in_flight_mean;
  out.ready_mean = ready_mean;
  out.in_flight_max = static_cast<int64_t>(occupancy_.in_flight_max);
  out.ready_max = static_cast<int64_t>(occupancy_.ready_max);
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

void Pipeline::Occupancy::start(std::chrono::steady_clock::time_point now) {
  *this = Occupancy{};
  began = last = now;
}

void Pipeline::Occupancy::see(std::chrono::steady_clock::time_point now, uint64_t in_flight_now,
                              uint64_t ready_now) {
  const double dt = std::chrono::duration<double>(now - last).count();
  in_flight_area += static_cast<double>(in_flight) * dt;
  ready_area += static_cast<double>(ready) * dt;
  last = now;
  in_flight = in_flight_now;
  ready = ready_now;
  in_flight_max = std::max(in_flight_max, in_flight_now);
  ready_max = std::max(ready_max, ready_now);
}

std::pair<double, double> Pipeline::Occupancy::means(std::chrono::steady_clock::time_point now) const {
  const double span = std::chrono::duration<double>(now - began).count();
  if (span <= 0) return {0.0, 0.0};
  const double tail = std::chrono::duration<double>(now - last).count();
  return {(in_flight_area + static_cast<double>(in_flight) * tail) / span,
          (ready_area + static_cast<double>(ready) * tail) / span};
}

WorkerLifecycle::State Pipeline::worker_state(int worker) const {
  const auto lock = stages_->enter();
  return workers_->state(worker);
}

void Pipeline::shutdown() {
  {
    const auto lock = stages_->enter();
    if (closed_) return;
    closed_ = true;
    workers_->close();
    rings_->ring();
  }
  // Fixed order: every worker is told first (they exit together), then each transport
  // is stopped (its reader joined, its process reaped).  Slots keep their lifecycle.
  for (auto& cr : carriers_) {
    std::lock_guard<std::mutex> owner(cr->owner);
    cr->current->say_shutdown();
  }
  for (auto& cr : carriers_) {
    std::lock_guard<std::mutex> owner(cr->owner);
    cr->home->stop();
    if (cr->standin) cr->standin->stop();
  }
  const auto lock = stages_->enter();
  for (int w = 0; w < num_workers(); ++w) workers_->release_all(w);
  stages_->sampling().halt();
  release_undelivered_locked();
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
    if (closed_) return acts;
    // Retired workers that finished their last task: their processes go.
    for (int w : tuning_->finished_retirements(tuning_slots_locked())) acts.emplace_back(w, false);
    if (epoch_ == 0 || fatal_ || !stages_->sampling().active()) return acts;
    epoch = epoch_;
    const TaskDispatcher& d = stages_->sampling().dispatcher();
    s.t_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - occupancy_.began).count();
    s.batches = workers_->delivered_total();
    s.wait_s = static_cast<double>(wait_ns_) * 1e-9;
    s.busy_s = static_cast<double>(workers_->busy_ns_total()) * 1e-9;
    for (int w = 0; w < num_workers(); ++w) {
      if (!tuning_->wanted(w)) continue;
      ++s.active;
      if (!d.is_active(w)) ++s.starting;
      if (workers_->live_pid(w) > 0) live.push_back(workers_->live_pid(w));
    }
    s.prefetch = tuning_->prefetch();
    s.ready = stages_->reordering().buffered() + stages_->handoff().size();
    s.batch_bytes = config_.batch_bytes.value_or(occupancy_.in_flight_max > 0
                                                     ? slabs_->stats().peak / occupancy_.in_flight_max
                                                     : 0);
  }
  if (config_.autotune->limits.memory_budget > 0)
    for (int pid : live) s.worker_rss = std::max(s.worker_rss, rss_bytes(pid));
  const std::optional<TuneStep> step = tuning_->observe(epoch, s);
  if (!step) return acts;
  std::vector<int> dirty;
  {
    const auto lock = stages_->enter();
    if (closed_ || epoch_ == 0) return acts;
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
  if (!tuning_ || !tuning_->wanted(worker) || epoch_ == 0 || !stages_->sampling().active()) return;
  if (stages_->sampling().dispatcher().is_active(worker)) return;
  stages_->send(stages_->sampler(), tune_atom::value, static_cast<int32_t>(worker), true, tuning_->max_in_flight());
}

void Pipeline::park(int worker) {
  if (worker < 0 || worker >= num_workers() || !tuning_) return;
  Carrier& cr = carrier(worker);
  std::lock_guard<std::mutex> owner(cr.owner);
  {
    const auto lock = stages_->enter();
    if (closed_ || tuning_->wanted(worker) || !workers_->accepting(worker) || workers_->held(worker) > 0)
      return;
    if (stages_->sampling().active() && stages_->sampling().dispatcher().is_active(worker)) return;
    if (!workers_->park(worker)) return;
  }
  // Told to exit as at shutdown; its exit (down) is expected and ignored.
  cr.current->say_shutdown();
  cr.current->stop();
}

void Pipeline::unpark(int worker) {
  if (worker < 0 || worker >= num_workers() || !tuning_) return;
  Carrier& cr = carrier(worker);
  std::lock_guard<std::mutex> owner(cr.owner);
  uint32_t gen;
  {
    const auto lock = stages_->enter();
    if (closed_ || !tuning_->wanted(worker) || !workers_->parked(worker)) return;
    gen = workers_->begin_incarnation(worker);
  }
  // Its random stream goes on from where it stopped (or, re-initialised meanwhile,
  // starts from the new configuration).
  run_incarnation(worker, gen, /*carry_stream=*/true, "started by the autotuner");
}

// ------------------------------------------------------------------ reader threads

void Pipeline::on_frame(int worker, uint32_t gen, Frame& f) {
  std::vector<int> dirty;
  {
    const auto lock = stages_->enter();
    if (closed_) return;
    // Every frame becomes a message to link k, which drops an older incarnation's.
    const link_actor link = stages_->link(worker);
    try {
      switch (f.type) {
        case FrameType::Hello: stages_->send(link, hello_atom::value, gen); break;
        case FrameType::Ready: stages_->send(link, ready_atom::value, gen); break;
        case FrameType::StreamStart: {
          auto [task, start] = decode_stream_start(f.body);
          stages_->send(link, stream_atom::value, gen, task, std::move(start.rng), start.state.has_value(),
                        start.state.value_or(std::string()));
          break;
        }
        case FrameType::InitError: {
          const InitErrorFrame e = InitErrorFrame::decode(f.body);
          const std::string when = e.when.empty() ? std::string("to start") : e.when;
          stages_->send(link, fatal_atom::value, gen, e.type,
                        "DataLoader worker " + std::to_string(worker) + " failed " + when + ": " + e.type + ": " +
                            e.message);
          break;
        }
        default: {
          // A result on the socket (too large for the ring, or the ring was full).
          WorkerReply r = decode_reply(static_cast<uint8_t>(f.type), f.body);
          const uint64_t task = r.task;
          stages_->send(link, gen, result_msg{task, std::move(r), worker});
          break;
        }
      }
    } catch (const std::exception& e) {
      stages_->send(link, fatal_atom::value, gen, std::string("RuntimeError"),
                    "DataLoader worker " + std::to_string(worker) + " sent a frame the main process cannot read (" +
                        frame_type_name(f.type) + "): " + e.what());
    }
    run_stages_locked();
    dirty = workers_->dirty();
    notify_locked();
  }
  if (hooks_.flush_later)
    for (int w : dirty) hooks_.flush_later(w);
}

void Pipeline::on_reply(int worker, uint32_t gen, WorkerReply&& reply) {
  std::vector<int> dirty;
  {
    const auto lock = stages_->enter();
    if (closed_) return;
    const uint64_t task = reply.task;
    stages_->send(stages_->link(worker), gen, result_msg{task, std::move(reply), worker});
    run_stages_locked();
    dirty = workers_->dirty();
    notify_locked();
  }
  if (hooks_.flush_later)
    for (int w : dirty) hooks_.flush_later(w);
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
    if (closed_) return;
    // What the incarnation published before it went down counts (answered tasks are not
    // re-sent); nothing more can come from it.
    if (workers_->current(worker, gen) && drain_rings_locked(flush_needed, worker) > 0) notify_locked();
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
  if (fatal_) return;
  stages_->sampling().halt();  // no task goes out after the epoch failed
  Delivery f;
  f.kind = Delivery::Kind::Fatal;
  f.worker = worker;
  f.error_type = type.empty() ? "RuntimeError" : type;
  f.error_message = message;
  fatal_ = std::move(f);
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
  Carrier& cr = carrier(worker);
  std::lock_guard<std::mutex> owner(cr.owner);
  std::optional<Liveness> seen;
  {
    const auto lock = stages_->enter();
    if (closed_) return;
    seen = workers_->liveness(worker);
  }
  if (seen) cr.current->watch(*seen, tick, config_.hello_deadline);
}

}  // namespace loader::runtime
