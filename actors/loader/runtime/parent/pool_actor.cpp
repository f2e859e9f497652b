#include "loader/runtime/parent/pool_actor.h"

#include "loader/runtime/parent/pipeline.h"

namespace loader::runtime {

namespace {

struct PoolActorState {
  std::weak_ptr<WorkerControl> control;
  std::vector<slot_actor> workers;
  std::chrono::milliseconds tick{0};
  std::chrono::milliseconds tune_every{0};
  static inline const char* name = "loader.pool";
};

using pool_pointer = pool_actor::stateful_pointer<PoolActorState>;

pool_actor::behavior_type pool_behavior(pool_pointer self, std::weak_ptr<WorkerControl> control,
                                        std::vector<slot_actor> workers, std::chrono::milliseconds tick,
                                        std::chrono::milliseconds tune_every) {
  self->state.control = std::move(control);
  self->state.workers = std::move(workers);
  self->state.tick = tick;
  self->state.tune_every = tune_every;
  for (const auto& w : self->state.workers) self->monitor(w);
  // A slot actor that stops while its pool lives leaves its worker without restarts,
  // flushes and watchdog: the loader fails, saying which and why.
  self->set_down_handler([self](caf::down_msg& dm) {
    int worker = -1;
    for (size_t k = 0; k < self->state.workers.size(); ++k)
      if (dm.source == caf::actor_cast<caf::actor_addr>(self->state.workers[k])) worker = static_cast<int>(k);
    if (worker < 0) return;
    if (auto c = self->state.control.lock())
      c->fail_all("RuntimeError", "DataLoader runtime: the actor of DataLoader worker " + std::to_string(worker) +
                                      " stopped (" + self->system().render(dm.reason) +
                                      "); its worker can no longer be restarted or watched");
  });
  if (tick.count() > 0) self->delayed_send(self, tick, tick_atom::value);
  if (tune_every.count() > 0) self->delayed_send(self, tune_every, autotune_atom::value);
  return {
      [self](tick_atom) {
        const int64_t ms = self->state.tick.count() > 0 ? self->state.tick.count() : 250;
        for (const auto& w : self->state.workers) self->send(w, watch_atom::value, ms);
        if (self->state.tick.count() > 0) self->delayed_send(self, self->state.tick, tick_atom::value);
      },
      [self](autotune_atom) {
        // The autotuner's figures and steps: retired workers and started ones are their
        // slot actors' to stop and start (they own the processes).
        if (auto c = self->state.control.lock()) {
          std::vector<std::pair<int, bool>> acts;
          try {
            acts = c->tune();
          } catch (const std::exception& e) {
            c->fail_all("RuntimeError", std::string("DataLoader runtime: the autotuner failed: ") + e.what());
          }
          for (const auto& [w, start] : acts) {
            if (w < 0 || static_cast<size_t>(w) >= self->state.workers.size()) continue;
            if (start) self->send(self->state.workers[static_cast<size_t>(w)], unpark_atom::value);
            else self->send(self->state.workers[static_cast<size_t>(w)], park_atom::value);
          }
        }
        if (self->state.tune_every.count() > 0)
          self->delayed_send(self, self->state.tune_every, autotune_atom::value);
      },
  };
}

}  // namespace

pool_actor spawn_pool_actor(caf::actor_system& sys, std::weak_ptr<WorkerControl> control,
                            std::vector<slot_actor> workers, std::chrono::milliseconds tick,
                            std::chrono::milliseconds tune_every) {
  return sys.spawn(pool_behavior, std::move(control), std::move(workers), tick, tune_every);
}

PoolActors::PoolActors(caf::actor_system& sys, std::weak_ptr<WorkerControl> control, int workers,
                       std::chrono::milliseconds tick, std::chrono::milliseconds tune_every, int own_thread_from)
    : sys_(sys) {
  for (int k = 0; k < workers; ++k)
    workers_.push_back(spawn_slot_actor(sys, control, k, own_thread_from >= 0 && k >= own_thread_from));
  pool_ = spawn_pool_actor(sys, std::move(control), workers_, tick, tune_every);
}

PoolActors::~PoolActors() {
  if (!exits_sent_) stop();  // after send_exits() the caller runs the exits (tests)
}

PipelineHooks PoolActors::hooks() const {
  PipelineHooks h;
  auto workers = workers_;  // handles: copies refer to the same actors
  h.restart_later = [workers](int w, uint32_t gen) {
    if (w >= 0 && static_cast<size_t>(w) < workers.size())
      caf::anon_send(workers[static_cast<size_t>(w)], down_atom::value, gen);
  };
  h.flush_later = [workers](int w) {
    if (w >= 0 && static_cast<size_t>(w) < workers.size())
      caf::anon_send(workers[static_cast<size_t>(w)], flush_atom::value);
  };
  return h;
}

void PoolActors::send_exits() {
  if (exits_sent_) return;
  exits_sent_ = true;
  caf::anon_send_exit(pool_, caf::exit_reason::user_shutdown);
  for (const auto& w : workers_) caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
}

void PoolActors::stop() {
  if (stopped_) return;
  stopped_ = true;
  caf::scoped_actor self{sys_};
  // The pool actor first: it stops watching and stops supervising, so the worker
  // actors' exits below are not reported as failures.
  if (!exits_sent_) self->send_exit(pool_, caf::exit_reason::user_shutdown);
  self->wait_for(pool_);
  if (!exits_sent_)
    for (const auto& w : workers_) self->send_exit(w, caf::exit_reason::user_shutdown);
  exits_sent_ = true;
  for (const auto& w : workers_) self->wait_for(w);
}

}  // namespace loader::runtime
