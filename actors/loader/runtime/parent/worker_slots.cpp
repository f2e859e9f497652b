#include "loader/runtime/parent/worker_slots.h"

#include <algorithm>

#include "loader/error.h"
#include "loader/runtime/parent/slab_store.h"
#include "loader/runtime/rng_state_page.h"
#include "loader/runtime/worker_rings.h"

namespace loader::runtime {

WorkerSlots::WorkerSlots(int workers, int max_restarts, bool restartable, WorkerRings& rings, SlabStore& slabs,
                         uint64_t rng_slots, WorkerStageEvents& events, std::string executable)
    : rings_(rings), slabs_(slabs), rng_slots_(rng_slots), events_(events), executable_(std::move(executable)) {
  for (int w = 0; w < workers; ++w) slots_.push_back(std::make_unique<Slot>(w, max_restarts, restartable));
}

void WorkerSlots::set_epoch(uint64_t epoch) {
  epoch_ = epoch;
  if (epoch == 0)
    for (auto& s : slots_) s->waiting.clear();
}

// ------------------------------------------------------------------ incarnations

uint32_t WorkerSlots::begin_incarnation(int w) {
  Slot& s = at(w);
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
  rings_.reset(w, gen);
  return gen;
}

void WorkerSlots::prepare_incarnation(int w, std::string init) {
  // First frames of every incarnation: the RNG state page, the rings, then the configuration.
  Slot& s = at(w);
  if (!s.state_page) {
    s.state_page = ShmSegment::create(RngStatePage::bytes_for(rng_slots_));
    RngStatePage::format(s.state_page->data(), rng_slots_);
  }
  std::string page;
  put_u64(page, s.state_page->size());
  queue(w, FrameType::StatePage, std::move(page), s.state_page);
  std::string rings;
  put_u64(rings, rings_.layout().capacity);
  put_u64(rings, static_cast<uint64_t>(rings_.layout().workers));
  put_u64(rings, static_cast<uint64_t>(w));
  put_u64(rings, s.life.generation());
  queue(w, FrameType::Rings, std::move(rings), rings_.segment());
  queue(w, FrameType::Init, std::move(init));
  // A worker restarted mid-epoch seeds the tasks it is re-sent as the epoch began (its
  // Init names the pool's first epoch's seeds; persistent workers' epochs move on).
  if (task_seeds_) queue(w, FrameType::TaskSeeds, *task_seeds_);
}

void WorkerSlots::resend_held(int w) {
  Slot& s = at(w);
  // Tasks of older epochs will never be answered now: their slabs come back.
  for (uint64_t slab : s.life.drop_other_epochs(epoch_))
    if (slab) slabs_.release(w, slab);
  // The random stream resumes where the first unfinished task began.
  if (!s.life.held().empty()) {
    const uint64_t first = s.life.held().begin()->first;
    if (auto state = state_before(w, first)) {
      std::string body;
      put_u64(body, first);
      body.append(*state);
      queue(w, FrameType::SetRng, std::move(body));
    }
  }
  s.waiting.clear();
  std::vector<uint64_t> tasks;
  for (const auto& [task, t] : s.life.held()) tasks.push_back(task);
  for (uint64_t task : tasks) send_task(w, task);
}

void WorkerSlots::hello(int w, uint32_t gen) {
  if (current(w, gen)) at(w).hello = true;
}

void WorkerSlots::ready(int w, uint32_t gen) {
  if (current(w, gen)) at(w).life.ready(gen);
}

bool WorkerSlots::failed(int w, uint32_t gen, const std::string& type, const std::string& message) {
  if (!current(w, gen)) return false;
  fail(w, type, message);
  return true;
}

void WorkerSlots::stream_started(int w, uint32_t gen, uint64_t task, StreamStart start) {
  Slot& s = at(w);
  if (!current(w, gen) || epoch_ == 0 || (s.stream_start && s.stream_start->first > task)) return;
  s.stream_start.emplace(task, std::move(start));
}

bool WorkerSlots::down(int w, uint32_t gen, const WorkerExit& how) {
  Slot& s = at(w);
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
                          (executable_.empty() ? std::string("this program") : executable_) + ")"};
  const auto d = s.life.down(gen, exit, between_epochs);
  switch (d.kind) {
    case WorkerLifecycle::Decision::Kind::Ignore: return false;
    case WorkerLifecycle::Decision::Kind::Restart: events_.worker_restarting(w, gen, d.message); return false;
    case WorkerLifecycle::Decision::Kind::Fail: fail(w, "RuntimeError", d.message); return true;
  }
  return false;
}

void WorkerSlots::fail(int w, const std::string& type, const std::string& message) {
  Slot& s = at(w);
  s.life.fail(s.life.generation(), type, message);
  release_all(w);
  if (epoch_ != 0) events_.epoch_failed(s.life.fatal_type(), s.life.fatal_message(), w);
}

void WorkerSlots::release_all(int w) {
  Slot& s = at(w);
  for (auto& [task, t] : s.life.take_all()) release_task_slab(w, t);
  s.waiting.clear();
}

// ------------------------------------------------------------------ frames out

void WorkerSlots::queue(int w, FrameType type, std::string body, std::shared_ptr<ShmSegment> fd_owner) {
  Slot& s = at(w);
  s.outbox.push_back(OutFrame{type, std::move(body), std::move(fd_owner)});
  ++s.socket_queued;
}

std::vector<int> WorkerSlots::dirty() const {
  std::vector<int> out;
  for (size_t w = 0; w < slots_.size(); ++w)
    if (!slots_[w]->outbox.empty()) out.push_back(static_cast<int>(w));
  return out;
}

void WorkerSlots::announce(int w, uint64_t slab) {
  Slot& s = at(w);
  for (uint64_t id : slabs_.dropped_since(s.dropped_cursor)) {
    if (s.announced.erase(id)) {
      std::string b;
      put_u64(b, id);
      queue(w, FrameType::DropSlab, std::move(b));
    }
  }
  if (slab == 0 || s.announced.count(slab)) return;
  auto seg = slabs_.segment(slab);
  if (!seg) return;
  std::string b;
  put_u64(b, slab);
  put_u64(b, seg->size());
  queue(w, FrameType::AddSlab, std::move(b), seg);
  s.announced.insert(slab);
}

// ------------------------------------------------------------------ tasks

void WorkerSlots::take_task(int worker, task_msg& task) {
  Slot& s = at(worker);
  if (closed_ || s.life.dead()) {
    // The sampler heard of the death after it sent this task (it is told in order, so
    // this does not happen today): the task is answered as the worker's others were.
    if (epoch_ != 0) events_.epoch_failed(s.life.fatal_type(), s.life.fatal_message(), worker);
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
    queue(worker, FrameType::SetRng, std::move(body));
  }
  send_task(worker, id);
}

void WorkerSlots::send_task(int w, uint64_t task) {
  Slot& s = at(w);
  HeldTask* t = s.life.find(task);
  if (!t) return;
  // A worker being restarted gets its held tasks when its next incarnation's link
  // exists (the restart sends them after the incarnation's first frames).
  if (s.life.state() == WorkerLifecycle::State::Restarting || !s.link) return;
  if (t->slab == 0 && !t->inline_batch) {
    std::optional<uint64_t> slab;
    try {
      slab = slabs_.acquire(w);
    } catch (const Error& e) {
      events_.epoch_failed(e.python_type(), e.what(), w);
      return;
    }
    if (!slab) {
      s.waiting.push_back(task);  // every slab busy and the budget spent: wait for a release
      return;
    }
    t->slab = *slab;
  }
  announce(w, t->slab);
  std::string b;
  b.reserve(24 + t->indices.size() * 8);
  put_u64(b, task);
  put_u64(b, t->inline_batch ? kInlineSlab : t->slab);
  put_u64(b, t->indices.size());
  // The indices as put_u64 would write them, one by one (host order), in one append.
  b.append(reinterpret_cast<const char*>(t->indices.data()), t->indices.size() * sizeof(int64_t));
  // Through the task ring, after the socket frames queued so far (the AddSlab above);
  // on the socket when the ring is full or the task too large for it.
  if (rings_.post_task(w, s.socket_queued, b)) return;
  queue(w, FrameType::Task, std::move(b));
}

WorkerStage::Outcome WorkerSlots::take_result(int worker, result_msg& m) {
  Slot& s = at(worker);
  WorkerReply& r = m.batch;
  HeldTask* t = s.life.find(r.task);
  if (!t) return Outcome::None;
  if (t->epoch != epoch_) {  // a task of an epoch that ended: its slab comes back
    release_task_slab(worker, *t);
    s.life.release(r.task);
    drain_waiting(worker);
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
        slab = slabs_.acquire_at_least(worker, r.bytes);
      } catch (const Error& e) {
        events_.epoch_failed(e.python_type(), e.what(), worker);
        return Outcome::None;
      }
      if (t->slab) slabs_.release(worker, t->slab);
      t->slab = slab;
      announce(worker, slab);
      std::string b;
      put_u64(b, r.task);
      put_u64(b, slab);
      queue(worker, FrameType::UseSlab, std::move(b));
      return Outcome::None;
    }
    case WorkerReply::Kind::Result:
      r.slab = t->slab;  // the slab the task was given (0: the batch came inline)
      break;
    case WorkerReply::Kind::Error:
      release_task_slab(worker, *t);
      r.slab = 0;
      break;
    case WorkerReply::Kind::IterEnd:
      release_task_slab(worker, *t);
      s.life.release(r.task);
      return Outcome::Dry;
  }
  s.life.release(r.task);
  return Outcome::Deliver;
}

bool WorkerSlots::slab_released(int w) {
  if (closed_ || w < 0 || w >= size() || at(w).waiting.empty()) return false;
  drain_waiting(w);
  return true;
}

void WorkerSlots::drain_waiting(int w) {
  Slot& s = at(w);
  while (!s.waiting.empty() && !closed_) {
    const uint64_t task = s.waiting.front();
    s.waiting.pop_front();
    const size_t before = s.waiting.size();
    send_task(w, task);
    if (s.waiting.size() > before) break;  // still no slab
  }
}

bool WorkerSlots::send_starved_inline(bool in_order, uint64_t next_expected) {
  if (closed_) return false;
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
      const bool wanted = in_order ? *it == next_expected : *it < oldest;
      if (!wanted) continue;
      oldest = *it;
      worker = static_cast<int>(w);
      found = it;
    }
  }
  if (worker < 0 || (!in_order && computing)) return false;
  // Every slab this worker may have is held by batches the application keeps (and the
  // budget allows no more): waiting for a release could wait forever.  The batch
  // comes back in the frame instead, a copy in the main process's heap.
  Slot& s = at(worker);
  const uint64_t task = *found;
  s.waiting.erase(found);
  HeldTask* t = s.life.find(task);
  if (!t) return false;
  t->inline_batch = true;
  ++s.inline_batches;
  send_task(worker, task);
  return true;
}

void WorkerSlots::release_task_slab(int w, const HeldTask& t) {
  if (t.slab) slabs_.release(w, t.slab);
}

// ------------------------------------------------------------------ random streams

std::optional<std::string> WorkerSlots::state_before(int w, uint64_t task) const {
  const Slot& s = at(w);
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

}  // namespace loader::runtime
