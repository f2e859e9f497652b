#include "loader/runtime/pipeline.h"

#include <algorithm>
#include <chrono>

#include "loader/error.h"
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
  for (size_t w = 0; w < config_.workers.size(); ++w)
    slots_.push_back(std::make_unique<Slot>(static_cast<int>(w), config_.max_restarts, !iterable_));
  try {
    rings_ = std::make_unique<WorkerRings>(static_cast<int>(slots_.size()));
  } catch (const Error& e) {
    throw ShmError(std::string("DataLoader: cannot create the task and result rings of ") +
                   std::to_string(slots_.size()) + " workers (" +
                   std::to_string(2 * RingLayout::kDefaultCapacity / 1024) + " KiB of shared memory each): " +
                   e.what() + "; free space in /dev/shm or use fewer workers");
  }
  stages_ = std::make_unique<StageActors>(*config_.system, static_cast<int>(slots_.size()), *this, slabs_);
}

Pipeline::~Pipeline() {
  shutdown();
  stop_stages();
}

void Pipeline::stop_stages() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stages_) stages_->stop();
}

void Pipeline::set_hooks(PipelineHooks hooks) { hooks_ = std::move(hooks); }

// ------------------------------------------------------------------ starting workers

uint32_t Pipeline::begin_incarnation_locked(Slot& s) {
  // Reset before the link exists: its reader may report a hello at once.
  const uint32_t gen = s.life.start();
  s.announced.clear();
  s.hello = false;
  s.started = std::chrono::steady_clock::now();
  s.stopped_ticks = 0;
  s.outbox.clear();  // frames for an older incarnation
  s.socket_queued = 0;
  s.renewed = false;
  // The rings are the new incarnation's: the previous one is dead (reaped) or never ran,
  // and on_down took what it had published.
  rings_->reset(s.life.id(), gen);
  return gen;
}

void Pipeline::start_locked_prepare(Slot& s) {
  // First frames of every incarnation: the RNG state page, then the configuration.
  const int w = s.life.id();
  if (!s.state_page) {
    s.state_page = ShmSegment::create(RngStatePage::bytes_for(rng_slots()));
    RngStatePage::format(s.state_page->data(), rng_slots());
  }
  std::string page;
  put_u64(page, s.state_page->size());
  queue_locked(w, FrameType::StatePage, std::move(page), s.state_page);
  std::string rings;
  put_u64(rings, rings_->layout().capacity);
  put_u64(rings, static_cast<uint64_t>(rings_->layout().workers));
  put_u64(rings, static_cast<uint64_t>(w));
  put_u64(rings, s.life.generation());
  queue_locked(w, FrameType::Rings, std::move(rings), rings_->segment());
  queue_locked(w, FrameType::Init, encoded_config(config_.workers[static_cast<size_t>(w)]));
}

void Pipeline::start_workers() {
  for (size_t w = 0; w < slots_.size(); ++w) {
    Slot& s = *slots_[w];
    std::lock_guard<std::mutex> fl(s.flush_mu);
    uint32_t gen;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      gen = begin_incarnation_locked(s);
    }
    try {
      auto link = make_link(Link::Spec{static_cast<int>(w), gen, config_.in_process, config_.executable});
      std::lock_guard<std::mutex> lock(mu_);
      s.life.set_pid(gen, link->pid());
      s.link = std::move(link);
      start_locked_prepare(s);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu_);
      const std::string type = dynamic_cast<const Error*>(&e) ? static_cast<const Error&>(e).python_type() : "RuntimeError";
      worker_failed_locked(static_cast<int>(w), type,
                           "DataLoader worker " + std::to_string(w) + " could not be started: " + e.what());
    }
  }
  flush_all();
}

void Pipeline::restart(int worker, uint32_t gen) {
  if (worker < 0 || static_cast<size_t>(worker) >= slots_.size()) return;
  Slot& s = *slots_[static_cast<size_t>(worker)];
  std::lock_guard<std::mutex> fl(s.flush_mu);
  std::unique_ptr<Link> old;
  uint32_t next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || s.life.state() != WorkerLifecycle::State::Restarting || s.life.generation() != gen) return;
    old = std::move(s.link);
    next = begin_incarnation_locked(s);
  }
  old.reset();  // its reader has finished and its process is reaped: nothing waits here
  std::unique_ptr<Link> link;
  try {
    link = make_link(Link::Spec{worker, next, config_.in_process, config_.executable});
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu_);
    worker_failed_locked(worker, "RuntimeError",
                         "DataLoader worker " + std::to_string(worker) + " could not be restarted: " + e.what());
    notify_locked();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.life.set_pid(next, link->pid());
    s.link = std::move(link);
    start_locked_prepare(s);
    // Tasks of older epochs will never be answered now: their slabs come back.
    for (uint64_t slab : s.life.drop_other_epochs(epoch_))
      if (slab) slabs_->release(worker, slab);
    // The random stream resumes where the first unfinished task began.
    if (!s.life.held().empty()) {
      uint64_t first = s.life.held().begin()->first;
      if (auto state = state_before_locked(s, first)) {
        std::string body;
        put_u64(body, first);
        body.append(*state);
        queue_locked(worker, FrameType::SetRng, std::move(body));
      }
    }
    s.waiting.clear();
    std::vector<uint64_t> tasks;
    for (const auto& [task, t] : s.life.held()) tasks.push_back(task);
    for (uint64_t task : tasks) send_task_locked(worker, task);
  }
  write_outbox(s);  // still under flush_mu: the new incarnation's frames go out in order
}

// ------------------------------------------------------------------ frames out

void Pipeline::queue_locked(int worker, FrameType type, std::string body, std::shared_ptr<ShmSegment> fd_owner) {
  Slot& s = *slots_[static_cast<size_t>(worker)];
  s.outbox.push_back(OutFrame{type, std::move(body), std::move(fd_owner)});
  ++s.socket_queued;
}

void Pipeline::flush(int worker) {
  if (worker < 0 || static_cast<size_t>(worker) >= slots_.size()) return;
  Slot& s = *slots_[static_cast<size_t>(worker)];
  std::lock_guard<std::mutex> fl(s.flush_mu);
  write_outbox(s);
}

void Pipeline::write_outbox(Slot& s) {
  std::vector<OutFrame> frames;
  Link* link;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (s.outbox.empty() || !s.link || closed_) return;
    frames.swap(s.outbox);
    link = s.link.get();  // replaced only under flush_mu (held by the caller); destroyed by shutdown, also under it
  }
  // Said first: the worker starts reading while they are written, so a frame larger
  // than the socket's buffer (a task of 8,000+ indices) cannot leave both sides
  // waiting.  If a write fails the link is broken and the worker's read ends too.
  rings_->socket_frames_coming(s.life.id(), link->generation(), frames.size());
  for (auto& f : frames)
    if (!link->send(f.type, f.body, f.fd_owner ? f.fd_owner->fd() : -1)) break;  // the reader reports the loss
}

std::unique_ptr<Link> Pipeline::make_link(const Link::Spec& spec) {
  if (config_.make_link) return config_.make_link(spec, this);
  return std::make_unique<WorkerLink>(spec, this);
}

void Pipeline::flush_all() {
  for (size_t w = 0; w < slots_.size(); ++w) flush(static_cast<int>(w));
}

void Pipeline::announce_locked(int worker, uint64_t slab) {
  Slot& s = *slots_[static_cast<size_t>(worker)];
  for (uint64_t id : slabs_->dropped_since(s.dropped_cursor)) {
    if (s.announced.erase(id)) {
      std::string b;
      put_u64(b, id);
      queue_locked(worker, FrameType::DropSlab, std::move(b));
    }
  }
  if (slab == 0 || s.announced.count(slab)) return;
  auto seg = slabs_->segment(slab);
  if (!seg) return;
  std::string b;
  put_u64(b, slab);
  put_u64(b, seg->size());
  queue_locked(worker, FrameType::AddSlab, std::move(b), seg);
  s.announced.insert(slab);
}

// ------------------------------------------------------------------ epochs and dispatch

uint64_t Pipeline::rng_slots() const {
  const uint64_t in_flight = static_cast<uint64_t>(config_.prefetch_factor) * slots_.size();
  return std::min<uint64_t>(in_flight + 1, 1024);
}

std::optional<std::string> Pipeline::state_before_locked(const Slot& s, uint64_t task) const {
  // A resumed epoch's first task of this worker: the checkpoint's state (the page may
  // not have it yet, or hold an older stream of a persistent worker).
  if (s.resume_sent && s.resume_sent->first == task) return s.resume_sent->second;
  if (s.state_page) {
    RngStatePage page(s.state_page->data(), s.state_page->size());
    if (auto state = page.state_before(task, s.rng_floor))
      return std::string(reinterpret_cast<const char*>(state->data()), state->size());
  }
  return std::nullopt;
}

EpochPosition Pipeline::position(uint64_t epoch) const {
  std::lock_guard<std::mutex> lock(mu_);
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
  p.exact = dispatcher.max_in_flight() + 1 <= rng_slots();
  // Each worker's first task not yet delivered: one it still computes, or one whose
  // result waits in the reorder stage or the handoff; none: its next task.
  std::vector<uint64_t> first(slots_.size(), dispatcher.next_task());
  for (size_t w = 0; w < slots_.size(); ++w) {
    const std::vector<uint64_t> unfinished = dispatcher.unfinished_tasks_of(static_cast<int>(w));
    if (!unfinished.empty()) first[w] = unfinished.front();
  }
  auto waiting = [&](uint64_t task, int worker) {
    if (worker >= 0 && static_cast<size_t>(worker) < first.size())
      first[static_cast<size_t>(worker)] = std::min(first[static_cast<size_t>(worker)], task);
  };
  stages_->reordering().for_each_buffered([&](uint64_t task, const result_msg& r) { waiting(task, r.worker); });
  stages_->handoff().for_each([&](const HandedOver& h) { waiting(h.result.task_idx, h.result.worker); });
  for (size_t w = 0; w < slots_.size(); ++w) {
    const Slot& s = *slots_[w];
    // A state not yet sent (the worker's first task of a resumed epoch is not out yet).
    if (s.resume_rng) p.worker_rng.push_back(s.resume_rng);
    else p.worker_rng.push_back(state_before_locked(s, first[w]));
    p.stream_start.push_back(s.stream_start);
  }
  return p;
}

bool Pipeline::healthy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return healthy_locked();
}

bool Pipeline::healthy_locked() const {
  if (closed_) return false;
  for (const auto& s : slots_)
    if (!s->link || !s->life.accepting()) return false;
  return true;
}

bool Pipeline::reinit(std::vector<WorkerConfig> workers) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (workers.size() != slots_.size()) throw RuntimeError("internal: reinit with another number of workers");
    // Checked under the lock that queues the configurations: a death reported after this
    // point is judged against them (on_down: a renewed worker that had not started a
    // task of the new epoch died between epochs); one reported before it refuses the pool.
    if (!healthy_locked()) return false;
    config_.workers = std::move(workers);
    for (size_t w = 0; w < slots_.size(); ++w) {
      Slot& s = *slots_[w];
      s.rng_floor = next_first_task_locked();
      s.renewed = true;
      s.resume_rng.reset();  // a fresh generator from the new configuration
      queue_locked(static_cast<int>(w), FrameType::Init, encoded_config(config_.workers[w]));
    }
  }
  flush_all();
  return true;
}

uint64_t Pipeline::next_first_task() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_first_task_locked();
}

uint64_t Pipeline::next_first_task_locked() const {
  // Task ids never repeat: tasks of an epoch that ended early may still be held.
  const SamplerStage& sampling = stages_->sampling();
  return sampling.active() ? std::max(next_task_, sampling.dispatcher().next_task()) : next_task_;
}

uint64_t Pipeline::begin_epoch(std::optional<TaskSource> source, bool reset_streams, EpochResume resume) {
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
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
    sampling.begin(std::move(source), iterable_,
                   TaskDispatcher(num_workers(), config_.prefetch_factor, first_task, config_.in_order,
                                  resume.first_worker >= 0 ? resume.first_worker
                                                           : static_cast<int>(resume.consumed % slots_.size())));
    stages_->reordering().reset(first_task, config_.in_order);
    stages_->handoff().restart(first_task);
    fatal_.reset();
    stopped_ = false;
    waits_ = 0;
    for (size_t w = 0; w < slots_.size(); ++w) {
      Slot& s = *slots_[w];
      s.delivered = s.inline_batches = s.busy_ns = 0;
      s.resume_sent.reset();
      s.stream_start.reset();
      // A resumed epoch sets each worker's state; otherwise a state a worker was never
      // sent (it got no task of the last epoch) still waits for its first task.
      if (!resume.worker_rng.empty() || !resume.streams.empty())
        s.resume_rng = w < resume.worker_rng.size() ? std::move(resume.worker_rng[w]) : std::nullopt;
    }
    for (size_t w = 0; w < slots_.size(); ++w) {
      Slot& s = *slots_[w];
      if (s.life.dead()) {
        // A dead worker stays dead: every later epoch gets its error at once.
        sampling.dispatcher().deactivate(static_cast<int>(w));
        if (!fatal_) set_fatal_locked(s.life.fatal_type(), s.life.fatal_message(), static_cast<int>(w));
        continue;
      }
      // A resumed stream (state hooks) begins with its checkpoint's state instead.
      if (w < resume.streams.size())
        queue_locked(static_cast<int>(w), FrameType::ResumeStream, encode_stream_resume(resume.streams[w]));
      else if (reset_streams) queue_locked(static_cast<int>(w), FrameType::Epoch, {});
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
      std::lock_guard<std::mutex> lock(mu_);
      if (epoch_ != id || closed_) break;  // another epoch began meanwhile
      const uint64_t before = stages_->sampling().dispatcher().next_task();
      stages_->send(stages_->sampler(), dispatch_atom::value, int32_t{1});
      run_stages_locked();
      if (epoch_ != id || stages_->sampling().dispatcher().next_task() == before) break;
      dirty = dirty_locked();
    }
    for (int w : dirty) flush(w);
  }
  flush_all();  // frames a failing first task queued
  return id;
}

void Pipeline::run_stages_locked() {
  stages_->run();
  const auto& failure = stages_->sampling().failure();
  if (failure && epoch_ != 0 && !fatal_) set_fatal_locked(failure->first, failure->second, -1);
}

std::vector<int> Pipeline::dirty_locked() const {
  std::vector<int> out;
  for (size_t w = 0; w < slots_.size(); ++w)
    if (!slots_[w]->outbox.empty()) out.push_back(static_cast<int>(w));
  return out;
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

void Pipeline::take_task(int worker, task_msg& task) {
  Slot& s = *slots_[static_cast<size_t>(worker)];
  if (closed_ || s.life.dead()) {
    // The sampler heard of the death after it sent this task (it is told in order, so
    // this does not happen today): the task is answered as the worker's others were.
    if (!fatal_ && epoch_ != 0) set_fatal_locked(s.life.fatal_type(), s.life.fatal_message(), worker);
    return;
  }
  const uint64_t id = task.task_idx;
  s.life.hold(id, HeldTask{epoch_, std::move(task.indices), 0});
  if (s.resume_rng) {
    // A resumed epoch: this worker's random stream goes on from the checkpoint's state
    // (the worker reads the socket frames queued before a task first).
    std::string body;
    put_u64(body, id);
    body.append(*s.resume_rng);
    s.resume_sent.emplace(id, std::move(*s.resume_rng));
    s.resume_rng.reset();
    queue_locked(worker, FrameType::SetRng, std::move(body));
  }
  send_task_locked(worker, id);
}

void Pipeline::send_task_locked(int worker, uint64_t task) {
  Slot& s = *slots_[static_cast<size_t>(worker)];
  HeldTask* t = s.life.find(task);
  if (!t) return;
  // A worker being restarted gets its held tasks when its next incarnation's link
  // exists (restart() sends them after the incarnation's first frames).
  if (s.life.state() == WorkerLifecycle::State::Restarting || !s.link) return;
  if (t->slab == 0 && !t->inline_batch) {
    std::optional<uint64_t> slab;
    try {
      slab = slabs_->acquire(worker);
    } catch (const Error& e) {
      set_fatal_locked(e.python_type(), e.what(), worker);
      return;
    }
    if (!slab) {
      s.waiting.push_back(task);  // every slab busy and the budget spent: wait for a release
      return;
    }
    t->slab = *slab;
  }
  announce_locked(worker, t->slab);
  std::string b;
  b.reserve(24 + t->indices.size() * 8);
  put_u64(b, task);
  put_u64(b, t->inline_batch ? kInlineSlab : t->slab);
  put_u64(b, t->indices.size());
  // The indices as put_u64 would write them, one by one (host order), in one append.
  b.append(reinterpret_cast<const char*>(t->indices.data()), t->indices.size() * sizeof(int64_t));
  // Through the task ring, after the socket frames queued so far (the AddSlab above);
  // on the socket when the ring is full or the task too large for it.
  if (rings_->post_task(worker, s.socket_queued, b)) return;
  queue_locked(worker, FrameType::Task, std::move(b));
}

bool Pipeline::send_starved_inline_locked() {
  if (!stages_->sampling().active() || closed_) return false;
  const ReorderBuffer<result_msg>& buffer = stages_->reordering();
  // The task the application must have next: in order, the next expected one; out of
  // order, the oldest waiting task, and only when no worker computes anything.
  int worker = -1;
  std::deque<uint64_t>::iterator found;
  uint64_t oldest = UINT64_MAX;
  bool computing = false;
  for (size_t w = 0; w < slots_.size(); ++w) {
    Slot& s = *slots_[w];
    if (s.life.held().size() > s.waiting.size()) computing = true;
    for (auto it = s.waiting.begin(); it != s.waiting.end(); ++it) {
      const bool wanted = buffer.in_order() ? *it == buffer.next_expected() : *it < oldest;
      if (!wanted) continue;
      oldest = *it;
      worker = static_cast<int>(w);
      found = it;
    }
  }
  if (worker < 0 || (!buffer.in_order() && computing)) return false;
  // Every slab this worker may have is held by batches the application keeps (and the
  // budget allows no more): waiting for a release could wait forever.  The batch
  // comes back in the frame instead, a copy in the main process's heap.
  Slot& s = *slots_[static_cast<size_t>(worker)];
  const uint64_t task = *found;
  s.waiting.erase(found);
  HeldTask* t = s.life.find(task);
  if (!t) return false;
  t->inline_batch = true;
  ++s.inline_batches;
  send_task_locked(worker, task);
  return true;
}

void Pipeline::drain_waiting_locked(int worker) {
  Slot& s = *slots_[static_cast<size_t>(worker)];
  while (!s.waiting.empty() && !closed_) {
    uint64_t task = s.waiting.front();
    s.waiting.pop_front();
    size_t before = s.waiting.size();
    send_task_locked(worker, task);
    if (s.waiting.size() > before) break;  // still no slab
  }
}

void Pipeline::release_slab(int worker, uint64_t slab) {
  slabs_->release(worker, slab);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || worker < 0 || static_cast<size_t>(worker) >= slots_.size()) return;
    if (slots_[static_cast<size_t>(worker)]->waiting.empty()) return;
    drain_waiting_locked(worker);
  }
  flush(worker);
}

void Pipeline::release_task_slab_locked(int worker, const HeldTask& t) {
  if (t.slab) slabs_->release(worker, t.slab);
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
  Frame f;
  for (int w = 0; w < static_cast<int>(slots_.size()); ++w) {
    if (only >= 0 && w != only) continue;
    try {
      while (rings_->take(w, f)) {
        ++taken;
        WorkerReply r = decode_reply(static_cast<uint8_t>(f.type), f.body);
        const uint64_t task = r.task;
        stages_->deliver(w, result_msg{task, std::move(r), w});
      }
    } catch (const std::exception& e) {
      worker_failed_locked(w, "RuntimeError", "DataLoader worker " + std::to_string(w) +
                                                  " sent a result the main process cannot read (" +
                                                  frame_type_name(f.type) + "): " + e.what());
      rings_->reset(w, 0);  // nothing more of this incarnation is read
    }
  }
  if (taken > 0) {
    run_stages_locked();  // link -> reorder -> pin
    if (!flush_needed)
      for (const auto& s : slots_)
        if (!s->outbox.empty()) flush_needed = true;
  }
  return taken;
}

Delivery Pipeline::next(uint64_t epoch, std::optional<std::chrono::steady_clock::time_point> deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  // Only workers that got frames are flushed (usually the one the next task went to).
  auto flush_dirty = [&] {
    int dirty[8];
    int n_dirty = 0;
    bool more = false;
    for (size_t w = 0; w < slots_.size(); ++w) {
      if (slots_[w]->outbox.empty()) continue;
      if (n_dirty < 8) dirty[n_dirty++] = static_cast<int>(w);
      else more = true;
    }
    lock.unlock();
    if (more) flush_all();
    else
      for (int i = 0; i < n_dirty; ++i) flush(dirty[i]);
  };
  bool flush_needed = false;
  bool waited = false;  // this call counted in waits_
  while (true) {
    const uint32_t seen = rings_->doorbell().seq.load(std::memory_order_acquire);  // before the look
    // The rings are taken when the handoff has nothing left: then every result the
    // workers published meanwhile goes through the stages in one run, several messages
    // per activation of the link, reorder and pin stages instead of one each.
    if (!closed_ && stages_->handoff().empty()) drain_rings_locked(flush_needed);
    if (epoch != epoch_) return Delivery{};  // ended, or replaced by a newer epoch
    if (fatal_) return *fatal_;
    if (!stages_->sampling().active()) return Delivery{};
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
        d.pinned = handed->pinned;
        if (d.worker >= 0 && static_cast<size_t>(d.worker) < slots_.size()) ++slots_[static_cast<size_t>(d.worker)]->delivered;
      }
      // Its credit goes back to the sampler, whose next task goes out at once.
      stages_->send(stages_->sampler(), credit_atom::value, static_cast<int32_t>(d.worker), d.task);
      run_stages_locked();
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
    }
    if (send_starved_inline_locked()) {
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
  std::lock_guard<std::mutex> lock(mu_);
  if (epoch != epoch_) return;  // already ended, or replaced by a newer epoch
  stopped_ = true;
  stages_->sampling().halt();  // no more sampler draws
  next_task_ = next_first_task_locked();
  release_undelivered_locked();
  epoch_ = 0;  // results still to come are stale: their slabs come back
  for (auto& s : slots_) s->waiting.clear();
}

std::pair<uint64_t, int> Pipeline::awaited() const {
  std::lock_guard<std::mutex> lock(mu_);
  const SamplerStage& sampling = stages_->sampling();
  if (!sampling.active()) return {0, -1};
  uint64_t task = next_for_application_locked();
  int worker = sampling.dispatcher().worker_of(task);
  return {task - first_task_, worker};
}

std::vector<int> Pipeline::pids() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> out;
  for (const auto& s : slots_) {
    out.push_back(s->live_pid());
  }
  return out;
}

void Pipeline::stats(uint64_t epoch, EpochStats& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (epoch != epoch_ || epoch == 0) return;  // ended or replaced: the caller keeps what it had
  out.waits = static_cast<int64_t>(waits_);
  const SamplerStage& sampling = stages_->sampling();
  if (sampling.active()) {
    out.tasks_sent = static_cast<int64_t>(std::max(sampling.dispatcher().next_task(), first_task_) - first_task_);
    out.in_flight = static_cast<int64_t>(sampling.dispatcher().in_flight());
  }
  out.ready = static_cast<int64_t>(stages_->reordering().buffered() + stages_->handoff().size());
  out.sampler_s = static_cast<double>(sampling.sampler_ns()) * 1e-9;
  out.workers.clear();
  for (const auto& s : slots_) {
    EpochStats::Worker w;
    w.pid = s->live_pid();
    w.state = to_string(s->life.state());
    w.restarts = s->life.restarts();
    w.held = static_cast<int64_t>(s->life.held().size());
    w.delivered = static_cast<int64_t>(s->delivered);
    w.inline_batches = static_cast<int64_t>(s->inline_batches);
    w.busy_s = static_cast<double>(s->busy_ns) * 1e-9;
    out.workers.push_back(std::move(w));
  }
}

WorkerLifecycle::State Pipeline::worker_state(int worker) const {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_[static_cast<size_t>(worker)]->life.state();
}

void Pipeline::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    closed_ = true;
    rings_->ring();
  }
  // Fixed order: every link is told first (the workers exit on EOF together), then
  // each is stopped (reader joined, process reaped).  Slots keep their lifecycle.
  std::vector<std::unique_ptr<Link>> links;
  for (auto& s : slots_) {
    std::lock_guard<std::mutex> fl(s->flush_mu);
    std::lock_guard<std::mutex> lock(mu_);
    if (s->link) links.push_back(std::move(s->link));
    s->outbox.clear();
  }
  rings_->close_all();  // a worker asleep on its task ring wakes and ends
  for (auto& l : links) l->send(FrameType::Shutdown, {});
  for (auto& l : links) l->stop();
  links.clear();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& s : slots_) {
    for (auto& [task, t] : s->life.take_all()) release_task_slab_locked(s->life.id(), t);
    s->waiting.clear();
  }
  stages_->sampling().halt();
  release_undelivered_locked();
}

// ------------------------------------------------------------------ reader threads

void Pipeline::on_frame(int worker, uint32_t gen, Frame& f) {
  std::vector<int> dirty;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Slot& s = *slots_[static_cast<size_t>(worker)];
    if (closed_ || !s.life.current(gen)) return;  // an older incarnation: nothing of it applies
    try {
      switch (f.type) {
        case FrameType::Hello: s.hello = true; return;
        case FrameType::Ready: s.life.ready(gen); return;
        case FrameType::StreamStart: {  // a stream of this epoch (its first task's id), not an older one
          auto [task, start] = decode_stream_start(f.body);
          if (epoch_ != 0 && task >= first_task_) s.stream_start = std::move(start);
          return;
        }
        case FrameType::InitError: {
          Reader in(f.body);
          std::string type = in.string();
          std::string message = in.string();
          const std::string when = in.remaining() ? in.string() : std::string("to start");
          worker_failed_locked(worker, type,
                               "DataLoader worker " + std::to_string(worker) + " failed " + when + ": " + type + ": " + message);
          notify_locked();
          return;
        }
        default: {
          // A result on the socket (too large for the ring, or the ring was full):
          // to the link actor, as the rings' results are.
          WorkerReply r = decode_reply(static_cast<uint8_t>(f.type), f.body);
          const uint64_t task = r.task;
          stages_->deliver(worker, result_msg{task, std::move(r), worker});
          run_stages_locked();
          dirty = dirty_locked();
          break;
        }
      }
    } catch (const std::exception& e) {
      worker_failed_locked(worker, "RuntimeError", "DataLoader worker " + std::to_string(worker) +
                                                       " sent a frame the main process cannot read (" +
                                                       frame_type_name(f.type) + "): " + e.what());
    }
    notify_locked();
  }
  if (hooks_.flush_later)
    for (int w : dirty) hooks_.flush_later(w);
}

WorkerStage::Outcome Pipeline::take_result(int worker, result_msg& m) {
  Slot& s = *slots_[static_cast<size_t>(worker)];
  WorkerReply& r = m.batch;
  HeldTask* t = s.life.find(r.task);
  if (!t) return Outcome::None;
  if (t->epoch != epoch_) {  // a task of an epoch that ended: its slab comes back
    release_task_slab_locked(worker, *t);
    s.life.release(r.task);
    drain_waiting_locked(worker);
    return Outcome::None;
  }
  m.task_idx = r.task;
  m.worker = worker;
  s.busy_ns += r.busy_ns;
  switch (r.kind) {
    case WorkerReply::Kind::Need: {
      // The batch is larger than the slab: a larger one, then the worker copies it in.
      uint64_t slab;
      try {
        slab = slabs_->acquire_at_least(worker, r.bytes);
      } catch (const Error& e) {
        set_fatal_locked(e.python_type(), e.what(), worker);
        return Outcome::None;
      }
      if (t->slab) slabs_->release(worker, t->slab);
      t->slab = slab;
      announce_locked(worker, slab);
      std::string b;
      put_u64(b, r.task);
      put_u64(b, slab);
      queue_locked(worker, FrameType::UseSlab, std::move(b));
      return Outcome::None;
    }
    case WorkerReply::Kind::Result:
      r.slab = t->slab;  // the slab the task was given (0: the batch came inline)
      break;
    case WorkerReply::Kind::Error:
      release_task_slab_locked(worker, *t);
      r.slab = 0;
      break;
    case WorkerReply::Kind::IterEnd:
      release_task_slab_locked(worker, *t);
      s.life.release(r.task);
      return Outcome::Dry;
  }
  s.life.release(r.task);
  return Outcome::Deliver;
}

void Pipeline::stage_failed(const std::string& message) { set_fatal_locked("RuntimeError", message, -1); }

void Pipeline::on_down(int worker, uint32_t gen, const WorkerExit& how) {
  std::string warning;
  bool restart = false;
  bool flush_needed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    Slot& s = *slots_[static_cast<size_t>(worker)];
    // What the incarnation published before it went down counts (answered tasks are not
    // re-sent); nothing more can come from it.
    if (s.life.current(gen) && drain_rings_locked(flush_needed, worker) > 0) notify_locked();
    // A kept worker that died before it started a task of the epoch it was
    // re-initialised for died between epochs (its state page has no record of such a
    // task): replaced for free, as PyTorch's fresh workers would have been.
    bool between_epochs = false;
    if (s.renewed && s.life.current(gen) && s.state_page) {
      auto before = RngStatePage(s.state_page->data(), s.state_page->size()).last_before();
      between_epochs = !before || *before < s.rng_floor;
    }
    if (how.pid > 0) s.life.set_pid(gen, how.pid);
    WorkerExit exit = how;
    if (!s.hello && how.kind == WorkerExit::Kind::ExitCode && s.life.current(gen))
      exit = WorkerExit{WorkerExit::Kind::StartFailed, 0,
                        "it exited with status " + std::to_string(how.code) +
                            " before it said hello to the main process: is the worker program one whose main() "
                            "calls loader::runtime::run_worker_if_requested(argc, argv) first? (" +
                            (config_.executable.empty() ? std::string("this program") : config_.executable) + ")"};
    auto d = s.life.down(gen, exit, between_epochs);
    switch (d.kind) {
      case WorkerLifecycle::Decision::Kind::Ignore: return;
      case WorkerLifecycle::Decision::Kind::Restart:
        warning = d.message;
        restart = true;
        break;
      case WorkerLifecycle::Decision::Kind::Fail:
        worker_failed_locked(worker, "RuntimeError", d.message);
        notify_locked();
        break;
    }
  }
  if (flush_needed && hooks_.flush_later)
    for (int w = 0; w < num_workers(); ++w) hooks_.flush_later(w);  // a flush with nothing queued writes nothing
  if (restart) {
    warn(warning);
    if (hooks_.restart_later) hooks_.restart_later(worker, gen);
  }
}

void Pipeline::worker_failed_locked(int worker, const std::string& type, const std::string& message) {
  Slot& s = *slots_[static_cast<size_t>(worker)];
  s.life.fail(s.life.generation(), type, message);
  // Every task it held is answered: the epoch fails with this error.
  for (auto& [task, t] : s.life.take_all()) release_task_slab_locked(worker, t);
  s.waiting.clear();
  if (stages_->sampling().active()) {
    stages_->send(stages_->sampler(), retire_atom::value, static_cast<int32_t>(worker));
    run_stages_locked();
  }
  if (epoch_ != 0) set_fatal_locked(s.life.fatal_type(), s.life.fatal_message(), worker);
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
  std::lock_guard<std::mutex> lock(mu_);
  set_fatal_locked(type, message, -1);
}

// ------------------------------------------------------------------ worker actor: watchdog

void Pipeline::watch(int worker, std::chrono::milliseconds tick) {
  if (worker < 0 || static_cast<size_t>(worker) >= slots_.size()) return;
  const auto now = std::chrono::steady_clock::now();
  Slot& s = *slots_[static_cast<size_t>(worker)];
  // Held while the link is used: restart (this actor) replaces the link under it, and
  // shutdown takes the links out under it.  The pool's actors are usually gone before
  // shutdown, but not at exit (WorkerPool::teardown_at_exit shuts the pipeline down and
  // keeps the actors, whose ticks may still come): without this lock a tick read a
  // link that shutdown was destroying (ThreadSanitizer, loader_test_static_loaders).
  std::lock_guard<std::mutex> fl(s.flush_mu);
  Link* link;
  bool hello;
  std::chrono::steady_clock::time_point started;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    if (!s.link || !s.life.accepting()) return;
    link = s.link.get();
    hello = s.hello;
    started = s.started;
  }
  if (link->pid() <= 0) return;  // a thread
  if (auto how = link->exited_with_socket_open()) {
    link->kill_with_reason(*how);
    return;
  }
  char st = link->process_state();
  if (st == 'T' || st == 't') {
    if (++s.stopped_ticks * tick >= std::chrono::milliseconds(1000))
      link->kill_with_reason(WorkerExit{WorkerExit::Kind::Frozen, 0,
                                        std::to_string(s.stopped_ticks * tick.count()) + " ms"});
    return;
  }
  s.stopped_ticks = 0;
  if (!hello && now - started > config_.hello_deadline)
    link->kill_with_reason(WorkerExit{
        WorkerExit::Kind::StartFailed, 0,
        "it did not enter the worker loop within " +
            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(config_.hello_deadline).count()) +
            " s: the worker program's main() must call loader::runtime::run_worker_if_requested(argc, argv) "
            "before anything else"});
}

}  // namespace loader::runtime
