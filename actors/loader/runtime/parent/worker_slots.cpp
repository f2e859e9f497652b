#include "loader/runtime/parent/worker_slots.h"

#include <algorithm>

#include "loader/error.h"
#include "loader/runtime/parent/slab_store.h"

namespace loader::runtime {

WorkerSlots::WorkerSlots(std::vector<WorkerTransport*> transports, int max_restarts, bool restartable,
                         SlabStore& slabs, uint64_t rng_slots, WorkerStageEvents& events, std::string executable)
    : slabs_(slabs), rng_slots_(rng_slots), events_(events), executable_(std::move(executable)) {
  for (size_t w = 0; w < transports.size(); ++w)
    slots_.push_back(std::make_unique<Slot>(static_cast<int>(w), max_restarts, restartable, transports[w]));
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
  s.hello = false;
  s.attached = false;
  s.started = std::chrono::steady_clock::now();
  s.renewed = false;
  s.transport->reset(gen);
  return gen;
}

void WorkerSlots::attach(int w, uint32_t gen, int pid, std::string init) {
  Slot& s = at(w);
  if (!s.life.current(gen)) return;
  s.life.set_pid(gen, pid);
  s.attached = true;
  s.lost.reset();
  // First frames of every incarnation: the transport's own, then the configuration.
  s.transport->prepare(std::move(init));
  // A worker restarted mid-epoch seeds the tasks it is re-sent as the epoch began (its
  // Init names the pool's first epoch's seeds; persistent workers' epochs move on).
  if (task_seeds_) s.transport->task_seeds(*task_seeds_);
}

bool WorkerSlots::accepting(int w) const {
  const Slot& s = at(w);
  return s.attached && s.life.accepting();
}

int WorkerSlots::live_pid(int w) const { return accepting(w) ? at(w).transport->pid() : -1; }

std::optional<Liveness> WorkerSlots::liveness(int w) const {
  const Slot& s = at(w);
  if (closed_ || !accepting(w)) return std::nullopt;
  return Liveness{s.hello, s.started};
}

void WorkerSlots::set_transport(int w, WorkerTransport* t) {
  Slot& s = at(w);
  if (t == s.transport) return;
  // The stream goes on where the old transport last saw it.
  if (auto old = s.transport->last_state()) {
    auto mine = t->last_state();
    if (!mine || mine->first < old->first) t->carry_state(old->first, old->second);
  }
  s.previous = s.transport;
  s.transport = t;
  t->reset(s.life.generation());
}

void WorkerSlots::renew(int w, uint64_t first_task, std::string init) {
  Slot& s = at(w);
  s.rng_floor = first_task;
  s.resume_rng.reset();  // a fresh generator from the new configuration
  if (s.life.parked()) return;  // its next incarnation's Init is the new configuration
  s.renewed = true;
  s.transport->init(std::move(init));
}

bool WorkerSlots::park(int w) {
  Slot& s = at(w);
  if (!s.waiting.empty() || !s.life.park(s.life.generation())) return false;
  s.attached = false;
  return true;
}

uint64_t WorkerSlots::busy_ns_total() const {
  uint64_t total = 0;
  for (const auto& s : slots_) total += s->busy_ns;
  return total;
}

uint64_t WorkerSlots::delivered_total() const {
  uint64_t total = 0;
  for (const auto& s : slots_) total += s->delivered;
  return total;
}

void WorkerSlots::begin_epoch_counters(std::vector<std::optional<std::string>>* worker_rng) {
  for (size_t w = 0; w < slots_.size(); ++w) {
    Slot& s = *slots_[w];
    s.delivered = s.inline_batches = s.busy_ns = s.collate_ns = s.tasks = 0;
    // The epoch's CPU time and faults are counted from here (a read of /proc per worker
    // and epoch, never per batch).
    s.proc_pid = live_pid(static_cast<int>(w));
    s.proc_base = s.proc_pid > 0 ? read_proc_stat(s.proc_pid).value_or(ProcStat{}) : ProcStat{};
    s.resume_sent.reset();
    s.stream_start.reset();
    // A resumed epoch sets each worker's state; otherwise a state a worker was never
    // sent (it got no task of the last epoch) still waits for its first task.
    if (worker_rng) s.resume_rng = w < worker_rng->size() ? std::move((*worker_rng)[w]) : std::nullopt;
  }
}

EpochStats::Worker WorkerSlots::stats(int k) const {
  const Slot& s = at(k);
  EpochStats::Worker w;
  w.pid = live_pid(k);
  w.state = to_string(s.life.state());
  w.restarts = s.life.restarts();
  w.held = static_cast<int64_t>(s.life.held().size());
  w.delivered = static_cast<int64_t>(s.delivered);
  w.inline_batches = static_cast<int64_t>(s.inline_batches);
  w.busy_s = static_cast<double>(s.busy_ns) * 1e-9;
  w.collate_s = static_cast<double>(s.collate_ns) * 1e-9;
  w.fetch_s = static_cast<double>(s.busy_ns - std::min(s.collate_ns, s.busy_ns)) * 1e-9;
  w.tasks = static_cast<int64_t>(s.tasks);
  if (w.pid > 0) {
    if (auto now = read_proc_stat(w.pid)) {
      // A process that replaced the one the epoch began with: its whole life so far.
      const ProcStat base = w.pid == s.proc_pid ? s.proc_base : ProcStat{};
      w.cpu_user_s = std::max(0.0, now->user_s - base.user_s);
      w.cpu_system_s = std::max(0.0, now->system_s - base.system_s);
      w.minor_faults = std::max<int64_t>(0, now->minor_faults - base.minor_faults);
    }
  }
  return w;
}

std::optional<std::string> WorkerSlots::resume_state(int w, uint64_t task) const {
  const Slot& s = at(w);
  if (s.resume_rng) return s.resume_rng;  // not sent yet: its first task of the epoch is not out
  return state_before(w, task);
}

std::optional<StreamStart> WorkerSlots::stream_start(int w, uint64_t first_task) const {
  const Slot& s = at(w);
  // A report of an older epoch's stream: none yet.
  if (s.stream_start && s.stream_start->first >= first_task) return s.stream_start->second;
  return std::nullopt;
}

void WorkerSlots::resend_held(int w, bool moved) {
  Slot& s = at(w);
  // Tasks of older epochs will never be answered now: their slabs come back.
  for (uint64_t slab : s.life.drop_other_epochs(epoch_))
    if (slab) slabs_.release(w, slab);
  // The random stream resumes where the first unfinished task began.
  if (!s.life.held().empty()) {
    const uint64_t first = s.life.held().begin()->first;
    if (auto state = state_before(w, first)) s.transport->set_rng(first, std::move(*state));
  }
  if (moved && s.life.held().empty() && !s.resume_rng) {
    if (auto last = s.transport->last_state(); last && last->first >= s.rng_floor) s.resume_rng = last->second;
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
  if (current(w, gen) && at(w).life.ready(gen)) events_.worker_ready(w);
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
  if (s.renewed && s.life.current(gen)) {
    const auto before = s.transport->last_started();
    between_epochs = !before || *before < s.rng_floor;
  }
  if (how.pid > 0) s.life.set_pid(gen, how.pid);
  if (how.kind == WorkerExit::Kind::HostLost && s.life.current(gen)) s.lost = how;
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

std::vector<int> WorkerSlots::dirty() const {
  std::vector<int> out;
  for (size_t w = 0; w < slots_.size(); ++w)
    if (slots_[w]->transport->dirty()) out.push_back(static_cast<int>(w));
  return out;
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
    s.transport->set_rng(id, *s.resume_rng);
    s.resume_sent.emplace(id, std::move(*s.resume_rng));
    s.resume_rng.reset();
  }
  send_task(worker, id);
}

void WorkerSlots::send_task(int w, uint64_t task) {
  Slot& s = at(w);
  HeldTask* t = s.life.find(task);
  if (!t) return;
  // A worker being restarted gets its held tasks when its next incarnation's link
  // exists (the restart sends them after the incarnation's first frames).
  if (s.life.state() == WorkerLifecycle::State::Restarting || !s.attached) return;
  // A transport without shared memory brings every batch back in its reply.
  if (!s.transport->shares_memory() && !t->inline_batch) {
    t->inline_batch = true;
    ++s.inline_batches;
  }
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
  s.transport->send_task(task, t->inline_batch ? kInlineSlab : t->slab, t->indices);
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
  s.collate_ns += r.collate_ns;
  if (r.kind == WorkerReply::Kind::Result || r.kind == WorkerReply::Kind::Error) ++s.tasks;
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
      s.transport->use_slab(r.task, slab);
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
  if (auto state = s.transport->state_before(task, s.rng_floor)) return state;
  // A task the slot's previous transport ran (a remote slot moved after its host was lost).
  if (s.previous) return s.previous->state_before(task, s.rng_floor);
  return std::nullopt;
}

}  // namespace loader::runtime
