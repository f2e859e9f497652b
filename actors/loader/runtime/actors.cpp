// The runtime's actors: thin shells that map messages onto the plain classes
// (WorkerCore behind a backend, WorkerSlabs, TaskDispatcher, ReorderBuffer).
#include "loader/runtime/actors.h"

#include <caf/all.hpp>

#include <chrono>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "loader/error.h"
#include "loader/pinned.h"
#include "loader/runtime/child_process.h"
#include "loader/runtime/reorder_buffer.h"
#include "loader/runtime/task_dispatcher.h"
#include "loader/runtime/wire.h"
#include "loader/runtime/worker_core.h"
#include "loader/warnings.h"

namespace loader::runtime {

// ------------------------------------------------------------------ configuration
RuntimeConfig::RuntimeConfig() {
  add_message_type<batch_msg>("loader::batch_msg");
  add_message_type<std::vector<int64_t>>("std::vector<int64_t>");
  // The default work-stealing policy sleeps 50 us per poll in its moderate phase,
  // which adds ~60 us to every blocking round trip (TOOLCHAIN.md); poll hard instead
  // and fall asleep early.
  set("scheduler.max-threads", 2);
  set("work-stealing.aggressive-poll-attempts", 0);
  set("work-stealing.moderate-poll-attempts", 0);
  set("logger.verbosity", caf::atom("quiet"));
  set("logger.console", caf::atom("none"));
}

std::shared_ptr<caf::actor_system> acquire_system() {
  static std::mutex mu;
  static std::weak_ptr<caf::actor_system> current;
  std::lock_guard<std::mutex> lock(mu);
  if (auto sys = current.lock()) return sys;
  static RuntimeConfig* cfg = nullptr;
  if (!cfg) {
    cfg = new RuntimeConfig();  // lives as long as the process: systems keep a reference
    // Without an argv CAF reads no config file.
    char arg0[] = "loader";
    char* argv[] = {arg0, nullptr};
    cfg->parse(1, argv);
  }
  auto sys = std::make_shared<caf::actor_system>(*cfg);
  current = sys;
  return sys;
}

namespace {

// ------------------------------------------------------------------ worker backends
/// How a worker actor reaches its WorkerCore.
class WorkerBackend {
 public:
  virtual ~WorkerBackend() = default;
  virtual void add_slab(uint64_t id, const ShmSegment& seg) = 0;
  virtual void drop_slab(uint64_t id) = 0;
  /// In-process backends answer at once; process backends answer later (frames).
  virtual std::optional<WorkerReply> task(uint64_t task, const IndexBatch& indices, uint64_t slab) = 0;
  virtual std::optional<WorkerReply> use_slab(uint64_t task, uint64_t slab) = 0;
  virtual void new_epoch() = 0;
  virtual std::string describe() const = 0;
};

class InProcessBackend final : public WorkerBackend {
 public:
  explicit InProcessBackend(const WorkerConfig& cfg) : core_(cfg), id_(cfg.worker_id) {}
  void add_slab(uint64_t id, const ShmSegment& seg) override { core_.add_slab(id, seg.data(), seg.size()); }
  void drop_slab(uint64_t id) override { core_.drop_slab(id); }
  std::optional<WorkerReply> task(uint64_t t, const IndexBatch& ind, uint64_t slab) override {
    return core_.run_task(t, ind, slab);
  }
  std::optional<WorkerReply> use_slab(uint64_t t, uint64_t slab) override { return core_.use_slab(t, slab); }
  void new_epoch() override { core_.reset_epoch(); }
  std::string describe() const override { return "DataLoader worker " + std::to_string(id_) + " (in-process)"; }

 private:
  WorkerCore core_;
  int id_;
};

/// A worker process and the thread that reads its socket.
class WorkerLink {
 public:
  WorkerLink(int worker_id, worker_impl_actor proxy) : id_(worker_id), proxy_(std::move(proxy)) {}
  ~WorkerLink() { stop(); }

  void start(const WorkerConfig& cfg) {
    child_ = ChildProcess::spawn_worker(id_);
    if (!write_frame(child_.socket(), FrameType::Init, encoded(cfg)))
      throw RuntimeError("cannot send the configuration to DataLoader worker " + std::to_string(id_));
    int sock = child_.socket();
    reader_ = std::thread([sock, proxy = proxy_] {
      Frame f;
      while (true) {
        ReadStatus st = read_frame(sock, f, -1);
        if (st != ReadStatus::Ok) break;
        caf::anon_send(proxy, frame_atom::value, static_cast<uint8_t>(f.type), std::move(f.body));
        f.body.clear();
      }
      caf::anon_send(proxy, linkdown_atom::value);
    });
  }

  /// Ends the process and the reader.  Idempotent, and safe to call from the
  /// worker actor's exit hook and the pool at the same time.
  void stop() {
    std::lock_guard<std::mutex> lock(stop_mu_);
    child_.shutdown_socket();
    if (reader_.joinable()) reader_.join();
    child_.terminate();
  }

  bool send(FrameType t, const std::string& body, int fd = -1) {
    return child_.socket() >= 0 && write_frame(child_.socket(), t, body, fd);
  }
  ChildProcess& child() { return child_; }
  int pid() const { return child_.pid(); }

 private:
  static std::string encoded(const WorkerConfig& cfg) {
    std::string s;
    encode_value(cfg.to_value(), s);
    return s;
  }
  int id_;
  worker_impl_actor proxy_;
  ChildProcess child_;
  std::thread reader_;
  std::mutex stop_mu_;
};

class ProcessBackend final : public WorkerBackend {
 public:
  ProcessBackend(std::shared_ptr<WorkerLink> link, int id) : link_(std::move(link)), id_(id) {}
  void add_slab(uint64_t id, const ShmSegment& seg) override {
    std::string b;
    put_u64(b, id);
    put_u64(b, seg.size());
    link_->send(FrameType::AddSlab, b, seg.fd());
  }
  void drop_slab(uint64_t id) override {
    std::string b;
    put_u64(b, id);
    link_->send(FrameType::DropSlab, b);
  }
  std::optional<WorkerReply> task(uint64_t t, const IndexBatch& ind, uint64_t slab) override {
    std::string b;
    b.reserve(24 + ind.size() * 8);
    put_u64(b, t);
    put_u64(b, slab);
    put_u64(b, ind.size());
    for (int64_t i : ind) put_u64(b, static_cast<uint64_t>(i));
    link_->send(FrameType::Task, b);
    return std::nullopt;
  }
  std::optional<WorkerReply> use_slab(uint64_t t, uint64_t slab) override {
    std::string b;
    put_u64(b, t);
    put_u64(b, slab);
    link_->send(FrameType::UseSlab, b);
    return std::nullopt;
  }
  void new_epoch() override { link_->send(FrameType::Epoch, {}); }
  std::string describe() const override {
    return "DataLoader worker " + std::to_string(id_) + " (pid " + std::to_string(link_->pid()) + ")";
  }
  WorkerLink& link() { return *link_; }

 private:
  std::shared_ptr<WorkerLink> link_;
  int id_;
};

// ------------------------------------------------------------------ worker actor

struct PendingTask {
  uint64_t epoch;
  IndexBatch indices;
  uint64_t slab;
};

struct WorkerState {
  WorkerSetup setup;
  std::unique_ptr<WorkerBackend> backend;
  std::shared_ptr<WorkerLink> link;  // process workers
  std::unique_ptr<WorkerSlabs> slabs;
  uint64_t epoch = 0;
  caf::actor sampler;
  caf::actor reorder;
  std::map<uint64_t, PendingTask> pending;     // sent to the worker, no result yet
  std::deque<std::pair<uint64_t, PendingTask>> waiting;  // no free slab yet
  int restarts = 0;
  int stopped_ticks = 0;  // consecutive watchdog ticks that found the process stopped
  bool dead = false;
  static inline const char* name = "loader.worker";
};

using worker_pointer = worker_impl_actor::stateful_pointer<WorkerState>;

void send_fatal(worker_pointer self, const std::string& message, const std::string& type = "RuntimeError") {
  auto& s = self->state;
  s.dead = true;
  batch_msg m;
  m.worker = s.setup.config.worker_id;
  m.status = batch_msg::Fatal;
  m.error_type = type;
  m.error_message = message;
  if (s.reorder) caf::anon_send(s.reorder, result_atom::value, m);
  if (s.sampler) caf::anon_send(s.sampler, retire_atom::value, static_cast<int32_t>(s.setup.config.worker_id), true, uint64_t{0});
}

/// Tells the worker about slabs created or destroyed since last time.
void sync_slabs(worker_pointer self) {
  auto& s = self->state;
  for (uint64_t id : s.slabs->take_dropped()) {
    s.backend->drop_slab(id);
    // Its page-lock goes with it (the pin-memory actor still holds the mapping).
    if (s.setup.pin) caf::anon_send(s.setup.pin, unpin_atom::value, id);
  }
  for (uint64_t id : s.slabs->take_new()) {
    auto seg = s.slabs->segment(id);
    if (s.setup.pin) {
      // The pin-memory actor page-locks the slab once, before it carries a batch.
      caf::scoped_actor blocking{self->system()};
      blocking->request(s.setup.pin, std::chrono::seconds(30), pin_atom::value, id)
          .receive([](bool) {}, [](caf::error&) {});
    }
    s.backend->add_slab(id, *seg);
  }
}

void handle_reply(worker_pointer self, WorkerReply r);

/// The state letter of /proc/<pid>/stat ('R', 'S', 'T', 'Z', ...), or '?'.
char process_state(int pid) {
  if (pid <= 0) return '?';
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  auto rp = stat.rfind(')');
  return rp == std::string::npos || rp + 2 >= stat.size() ? '?' : stat[rp + 2];
}

void dispatch(worker_pointer self, uint64_t task, PendingTask p) {
  auto& s = self->state;
  std::optional<uint64_t> slab;
  try {
    slab = s.slabs->acquire();
    sync_slabs(self);
  } catch (const Error& e) {
    send_fatal(self, e.what(), e.python_type());
    return;
  }
  if (!slab) {
    s.waiting.emplace_back(task, std::move(p));
    return;
  }
  p.slab = *slab;
  auto reply = s.backend->task(task, p.indices, p.slab);
  s.pending.emplace(task, std::move(p));
  if (reply) handle_reply(self, std::move(*reply));
}

void drain_waiting(worker_pointer self) {
  auto& s = self->state;
  while (!s.waiting.empty() && !s.dead) {
    size_t before = s.waiting.size();
    auto [task, p] = std::move(s.waiting.front());
    s.waiting.pop_front();
    dispatch(self, task, std::move(p));
    if (s.waiting.size() >= before) break;  // still no slab
  }
}

void handle_reply(worker_pointer self, WorkerReply r) {
  auto& s = self->state;
  auto it = s.pending.find(r.task);
  if (it == s.pending.end()) return;  // a task of a worker incarnation that is gone
  const bool stale = it->second.epoch != s.epoch;
  batch_msg m;
  m.task = r.task;
  m.worker = s.setup.config.worker_id;
  switch (r.kind) {
    case WorkerReply::Kind::Need: {
      if (stale) {
        uint64_t old = it->second.slab;
        s.pending.erase(it);
        if (old) s.slabs->release(old);
        sync_slabs(self);
        drain_waiting(self);
        return;
      }
      uint64_t old = it->second.slab;
      uint64_t slab;
      try {
        slab = s.slabs->acquire_at_least(r.bytes);
        if (old) s.slabs->release(old);
        sync_slabs(self);
      } catch (const Error& e) {
        send_fatal(self, e.what(), e.python_type());
        return;
      }
      it->second.slab = slab;
      auto again = s.backend->use_slab(r.task, slab);
      if (again) handle_reply(self, std::move(*again));
      return;
    }
    case WorkerReply::Kind::Result:
      m.status = batch_msg::Ok;
      m.slab = it->second.slab;
      m.payload = std::move(r.payload);
      break;
    case WorkerReply::Kind::Error:
      m.status = batch_msg::Error;
      m.error_type = r.error_type;
      m.error_message = r.error_message;
      if (it->second.slab) s.slabs->release(it->second.slab);
      break;
    case WorkerReply::Kind::IterEnd:
      m.status = batch_msg::Skipped;
      if (it->second.slab) s.slabs->release(it->second.slab);
      break;
  }
  s.pending.erase(it);
  if (stale) {
    if (m.status == batch_msg::Ok && m.slab) s.slabs->release(m.slab);
    sync_slabs(self);
    drain_waiting(self);
    return;
  }
  if (m.status == batch_msg::Skipped)
    caf::anon_send(s.sampler, retire_atom::value, static_cast<int32_t>(m.worker), false, m.task);
  caf::anon_send(s.reorder, result_atom::value, std::move(m));
  sync_slabs(self);
  drain_waiting(self);
}

/// The worker process is gone (or frozen: `how` says so): restart it or report it.
void on_link_down(worker_pointer self, std::string how = "") {
  auto& s = self->state;
  if (s.dead || !s.link) return;
  auto& child = s.link->child();
  int pid = child.pid();
  if (how.empty()) {
    auto status = child.wait_exit(1000);
    how = status ? status->describe() : "closed its connection but is still running";
  }
  // Tasks it held, for the message and for a restart.
  std::vector<uint64_t> held;
  std::ostringstream indices;
  for (const auto& [task, p] : s.pending) {
    if (p.epoch != s.epoch) continue;
    held.push_back(task);
    indices << (held.size() > 1 ? "; " : "") << "task " << task << ": [";
    for (size_t i = 0; i < p.indices.size() && i < 16; ++i) indices << (i ? ", " : "") << p.indices[i];
    if (p.indices.size() > 16) indices << ", ... (" << p.indices.size() << " indices)";
    indices << "]";
  }
  const int id = s.setup.config.worker_id;
  if (s.restarts < s.setup.max_restarts && !s.setup.config.iterable) {
    ++s.restarts;
    warn("DataLoader worker " + std::to_string(id) + " (pid " + std::to_string(pid) + ") " + how +
         "; restarting it (restart " + std::to_string(s.restarts) + " of " + std::to_string(s.setup.max_restarts) +
         ") and re-issuing its " + std::to_string(held.size()) + " unfinished task(s)");
    try {
      s.link->stop();
      s.stopped_ticks = 0;
      s.link->start(s.setup.config);
      for (uint64_t slab : s.slabs->all()) s.backend->add_slab(slab, *s.slabs->segment(slab));
      s.slabs->take_new();
      for (auto& [task, p] : s.pending) {
        if (p.epoch != s.epoch) continue;
        s.backend->task(task, p.indices, p.slab);
      }
      // Stale tasks will never answer now: give their slabs back.
      for (auto it = s.pending.begin(); it != s.pending.end();) {
        if (it->second.epoch != s.epoch) {
          if (it->second.slab) s.slabs->release(it->second.slab);
          it = s.pending.erase(it);
        } else {
          ++it;
        }
      }
      return;
    } catch (const Error& e) {
      how += "; restarting it failed: " + std::string(e.what());
    }
  }
  std::string msg = "DataLoader worker " + std::to_string(id) + " (pid " + std::to_string(pid) + ") " + how + ". ";
  if (held.empty()) msg += "It held no unfinished tasks.";
  else msg += "It held " + std::to_string(held.size()) + " unfinished task(s): " + indices.str() + ".";
  if (s.setup.max_restarts == 0)
    msg += " Set DataLoaderOptions::max_worker_restarts to restart dead workers.";
  s.link->stop();  // reap it now (or kill it, when frozen)
  send_fatal(self, msg);
}

worker_impl_actor::behavior_type worker_behavior(worker_pointer self, WorkerSetup setup) {
  auto& s = self->state;
  s.setup = std::move(setup);
  s.slabs = std::make_unique<WorkerSlabs>(s.setup.config.worker_id, s.setup.policy, s.setup.directory);
  std::string init_error, init_type;
  try {
    if (s.setup.in_process) {
      s.backend = std::make_unique<InProcessBackend>(s.setup.config);
    } else {
      s.link = std::make_shared<WorkerLink>(s.setup.config.worker_id, worker_impl_actor(self));
      s.link->start(s.setup.config);
      s.backend = std::make_unique<ProcessBackend>(s.link, s.setup.config.worker_id);
    }
  } catch (const Error& e) {
    init_error = e.what();
    init_type = e.python_type();
    s.dead = true;
  }
  // CAF 0.17 destroys the state before attach_functor callbacks run: the callback
  // holds the link itself.  It runs before the actor counts as terminated, so a
  // pool waiting for its workers finds every process reaped.
  self->attach_functor([link = s.link] {
    if (link) link->stop();
  });
  if (s.link && s.setup.stopper) s.setup.stopper->set([link = s.link] { link->stop(); });
  if (s.link) self->delayed_send(self, std::chrono::milliseconds(250), tick_atom::value);
  return {
      [self, init_error, init_type](epoch_atom, uint64_t epoch, caf::actor sampler, caf::actor reorder) {
        auto& st = self->state;
        const bool first = st.epoch == 0 && !st.sampler;
        st.epoch = epoch;
        st.sampler = sampler;
        st.reorder = reorder;
        // Work of older epochs is no longer wanted.
        for (auto& [task, p] : st.waiting)
          if (p.slab) st.slabs->release(p.slab);
        st.waiting.clear();
        if (!init_error.empty()) {
          send_fatal(self, "DataLoader worker " + std::to_string(st.setup.config.worker_id) +
                               " failed to start: " + init_type + ": " + init_error, init_type);
          return;
        }
        if (!first && !st.dead) st.backend->new_epoch();
      },
      [self](task_atom, uint64_t epoch, uint64_t task, std::vector<int64_t> indices) {
        auto& st = self->state;
        if (epoch != st.epoch || st.dead) return;
        dispatch(self, task, PendingTask{epoch, std::move(indices), 0});
      },
      [self](release_atom, uint64_t slab) {
        auto& st = self->state;
        st.slabs->release(slab);
        if (!st.dead) {
          sync_slabs(self);
          drain_waiting(self);
        }
      },
      [self](status_atom) -> int32_t {
        auto& st = self->state;
        return st.link && st.link->child().running() ? st.link->pid() : -1;
      },
      [self](frame_atom, uint8_t type, const std::string& body) {
        auto& st = self->state;
        auto ft = static_cast<FrameType>(type);
        if (ft == FrameType::Ready) return;
        if (ft == FrameType::InitError) {
          Reader in(body);
          std::string et = in.string();
          std::string em = in.string();
          send_fatal(self, "DataLoader worker " + std::to_string(st.setup.config.worker_id) +
                               " failed to start: " + et + ": " + em, et);
          return;
        }
        try {
          handle_reply(self, decode_reply(type, body));
        } catch (const Error& e) {
          send_fatal(self, std::string("bad reply from a worker process: ") + e.what());
        }
      },
      [self](linkdown_atom) { on_link_down(self); },
      [self](tick_atom) {
        // The watchdog: a process that exited without closing its socket (a
        // grandchild kept it open) or that is frozen (SIGSTOP, a debugger) is noticed
        // here, within a second, even though its socket stays open.
        auto& st = self->state;
        if (st.dead || !st.link) return;
        self->delayed_send(self, std::chrono::milliseconds(250), tick_atom::value);
        auto& child = st.link->child();
        if (auto status = child.poll_exit()) {
          on_link_down(self, status->describe());
          return;
        }
        char state = process_state(child.pid());
        if (state == 'T' || state == 't') {
          if (++st.stopped_ticks >= 4)
            on_link_down(self, std::string("is frozen (process state '") + state +
                                   "': stopped by a signal such as SIGSTOP, or by a debugger) and has "
                                   "answered nothing for a second; it was killed");
        } else {
          st.stopped_ticks = 0;
        }
      },
  };
}

// ------------------------------------------------------------------ sampler actor
struct SamplerState {
  std::optional<TaskSource> source;  // map-style datasets
  std::unique_ptr<TaskDispatcher> dispatcher;
  std::vector<worker_actor> workers;
  caf::actor reorder;
  uint64_t epoch = 0;
  uint64_t first_task = 0;
  bool iterable = false;
  bool exhausted = false;
  bool stopped = false;
  static inline const char* name = "loader.sampler";
};

void finish_if_done(caf::stateful_actor<SamplerState>* self) {
  auto& s = self->state;
  if (s.exhausted) return;
  if (s.iterable ? s.dispatcher->active_workers() == 0 : false) {
    s.exhausted = true;
    self->send(s.reorder, end_atom::value, s.dispatcher->next_task() - s.first_task);
  }
}

void sampler_dispatch(caf::stateful_actor<SamplerState>* self) {
  auto& s = self->state;
  while (!s.stopped && !s.exhausted && s.dispatcher->can_send()) {
    std::vector<int64_t> indices;
    if (!s.iterable) {
      std::optional<IndexBatch> next;
      try {
        next = s.source->next();
      } catch (const Error& e) {
        batch_msg m;
        m.status = batch_msg::Fatal;
        m.error_type = e.python_type();
        m.error_message = std::string("the sampler failed: ") + e.what();
        self->send(s.reorder, result_atom::value, m);
        s.exhausted = true;
        return;
      }
      if (!next) {
        s.exhausted = true;
        self->send(s.reorder, end_atom::value, s.dispatcher->next_task() - s.first_task);
        return;
      }
      indices = std::move(*next);
    }
    auto [task, worker] = *s.dispatcher->assign();
    self->send(s.workers[static_cast<size_t>(worker)], task_atom::value, s.epoch, task, std::move(indices));
  }
  finish_if_done(self);
}


caf::behavior sampler_behavior(caf::stateful_actor<SamplerState>* self, std::shared_ptr<SamplerSetup> setup) {
  auto& s = self->state;
  s.source = std::move(setup->source);
  s.iterable = !s.source;
  s.workers = setup->workers;
  s.reorder = setup->reorder;
  s.epoch = setup->epoch;
  s.first_task = setup->first_task;
  s.dispatcher = std::make_unique<TaskDispatcher>(static_cast<int>(s.workers.size()), setup->prefetch_factor,
                                                  setup->first_task);
  // Same sender, so every worker sees the epoch before its first task.
  for (auto& w : s.workers) self->send(w, epoch_atom::value, s.epoch, caf::actor(self), s.reorder);
  sampler_dispatch(self);
  return {
      [self](credit_atom, uint64_t task) {
        self->state.dispatcher->on_finished(task);
        self->state.dispatcher->on_delivered();
        sampler_dispatch(self);
      },
      [self](status_atom, uint64_t task) -> int32_t { return self->state.dispatcher->worker_of(task); },
      [self](retire_atom, int32_t worker, bool died, uint64_t task) {
        auto& st = self->state;
        st.dispatcher->deactivate(worker);
        if (!died) {
          st.dispatcher->on_finished(task);
          st.dispatcher->on_delivered();  // a skipped task returns its credit
        }
        sampler_dispatch(self);
      },
      [self](stop_atom) {
        self->state.stopped = true;
        return self->state.dispatcher->next_task();
      },
  };
}

// ------------------------------------------------------------------ reorder actor
struct ReorderState {
  std::unique_ptr<ReorderBuffer<batch_msg>> buffer;
  uint64_t first_task = 0;
  std::optional<uint64_t> total;
  std::optional<batch_msg> fatal;
  std::optional<caf::response_promise> waiting;
  static inline const char* name = "loader.reorder";
};

void try_deliver(caf::stateful_actor<ReorderState>* self) {
  auto& s = self->state;
  if (!s.waiting) return;
  if (s.fatal) {
    s.waiting->deliver(*s.fatal);
    s.waiting.reset();
    return;
  }
  if (auto item = s.buffer->pop()) {
    s.waiting->deliver(std::move(item->second));
    s.waiting.reset();
    return;
  }
  if (s.total && s.buffer->done(s.first_task, *s.total)) {
    batch_msg end;
    end.status = batch_msg::End;
    s.waiting->deliver(end);
    s.waiting.reset();
  }
}

caf::behavior reorder_behavior(caf::stateful_actor<ReorderState>* self, bool in_order, uint64_t first_task) {
  self->state.buffer = std::make_unique<ReorderBuffer<batch_msg>>(first_task, in_order);
  self->state.first_task = first_task;
  return {
      [self](result_atom, batch_msg& m) {
        auto& s = self->state;
        if (m.status == batch_msg::Fatal) {
          if (!s.fatal) s.fatal = m;
        } else if (m.status == batch_msg::Skipped) {
          s.buffer->skip(m.task);
        } else {
          uint64_t t = m.task;
          s.buffer->push(t, std::move(m));
        }
        try_deliver(self);
      },
      [self](end_atom, uint64_t total) {
        self->state.total = total;
        try_deliver(self);
      },
      [self](next_atom) {
        // Answered later (or at once) through the promise.
        self->state.waiting = self->make_response_promise();
        try_deliver(self);
      },
      [self](status_atom) { return self->state.buffer->next_expected(); },
  };
}

// ------------------------------------------------------------------ pin memory actor
// Page-locks each slab once, when it is created (sync_slabs asks before the worker
// hears of the slab), and releases it when the slab is dropped (unpin_atom) or the
// actor ends.  It holds a reference to every slab it pinned, so the registration is
// released while the memory is still mapped (CAF destroys the state before
// attach_functor callbacks run, so the release lives in the state's destructor).
struct PinState {
  std::shared_ptr<SlabDirectory> directory;
  std::shared_ptr<PinTracker> tracker;  ///< the loader's pin_memory_status()
  std::map<uint64_t, std::pair<std::shared_ptr<ShmSegment>, PinBackend>> pinned;
  static inline const char* name = "loader.pin_memory";
  PinState() = default;
  PinState(const PinState&) = delete;
  PinState& operator=(const PinState&) = delete;
  ~PinState() {
    for (auto& [id, p] : pinned) unpin_region(p.first->data(), p.first->size(), p.second);
  }
};

caf::behavior pin_behavior(caf::stateful_actor<PinState>* self, std::shared_ptr<SlabDirectory> directory,
                           std::shared_ptr<PinTracker> tracker) {
  self->state.directory = std::move(directory);
  // Without the loader's tracker the warning comes once per pool.
  self->state.tracker = tracker ? std::move(tracker) : std::make_shared<PinTracker>();
  return {
      [self](pin_atom, uint64_t slab) {
        auto& s = self->state;
        auto seg = s.directory->find(slab);
        if (!seg) return false;
        if (auto it = s.pinned.find(slab); it != s.pinned.end()) return it->second.second == PinBackend::Cuda;
        PinResult r = pin_region(seg->data(), seg->size());
        s.pinned[slab] = {seg, r.backend};
        s.directory->set_pinned(slab, r.pinned);
        // Once per loader: the tracker outlives the pools of non-persistent epochs.
        if (s.tracker->record(r)) warn(std::string("pin_memory=true but batches are not CUDA-pinned: ") + r.reason);
        return r.pinned;
      },
      [self](unpin_atom, uint64_t slab) {
        auto& s = self->state;
        auto it = s.pinned.find(slab);
        if (it == s.pinned.end()) return;
        unpin_region(it->second.first->data(), it->second.first->size(), it->second.second);
        s.pinned.erase(it);
      },
  };
}


}  // namespace

worker_impl_actor spawn_worker(caf::actor_system& sys, WorkerSetup setup) {
  // In-process workers load data in the actor, and with pin_memory a worker waits for
  // the pin-memory actor: both block, so they get a thread of their own (detached).
  // Otherwise process workers only move frames and share the scheduler's threads,
  // which measured 20-35% more batches/s than a thread each (W4, 250k, persistent:
  // 1 worker 4.75 -> 5.9 M samples/s, 2 workers 4.1 -> 5.5 M samples/s).
  if (setup.in_process || setup.pin) return sys.spawn<caf::detached>(worker_behavior, std::move(setup));
  return sys.spawn(worker_behavior, std::move(setup));
}

caf::actor spawn_sampler(caf::actor_system& sys, std::shared_ptr<SamplerSetup> setup) {
  return sys.spawn(sampler_behavior, std::move(setup));
}

caf::actor spawn_reorder(caf::actor_system& sys, bool in_order, uint64_t first_task) {
  return sys.spawn(reorder_behavior, in_order, first_task);
}

caf::actor spawn_pin_memory(caf::actor_system& sys, std::shared_ptr<SlabDirectory> directory,
                            std::shared_ptr<PinTracker> tracker) {
  // Detached: workers wait for its answer with a blocking request (sync_slabs), and
  // a scheduled pin actor could find every scheduler thread blocked in such a wait.
  return sys.spawn<caf::detached>(pin_behavior, std::move(directory), std::move(tracker));
}

}  // namespace loader::runtime
