#include "loader/runtime/worker_actor.h"

namespace loader::runtime {

namespace {

struct WorkerActorState {
  std::weak_ptr<WorkerControl> control;
  int worker = -1;
  std::string who;  ///< "the actor of DataLoader worker k", for error messages
  static inline const char* name = "loader.worker";
};

using worker_pointer = worker_actor::stateful_pointer<WorkerActorState>;

worker_actor::behavior_type worker_behavior(worker_pointer self, std::weak_ptr<WorkerControl> control, int worker) {
  self->state.control = std::move(control);
  self->state.worker = worker;
  self->state.who = "the actor of DataLoader worker " + std::to_string(worker);
  return {
      [self](down_atom, uint32_t gen) {
        detail::guarded(self->state.control, self->state.who, "a worker restart",
                        [&](WorkerControl& c) { c.restart(self->state.worker, gen); });
      },
      [self](flush_atom) {
        detail::guarded(self->state.control, self->state.who, "queued frames",
                        [&](WorkerControl& c) { c.flush(self->state.worker); });
      },
      [self](watch_atom, int64_t tick_ms) {
        detail::guarded(self->state.control, self->state.who, "the watchdog", [&](WorkerControl& c) {
          c.watch(self->state.worker, std::chrono::milliseconds(tick_ms));
        });
      },
  };
}

}  // namespace

worker_actor spawn_worker_actor(caf::actor_system& sys, std::weak_ptr<WorkerControl> control, int worker) {
  return sys.spawn(worker_behavior, std::move(control), worker);
}

}  // namespace loader::runtime
