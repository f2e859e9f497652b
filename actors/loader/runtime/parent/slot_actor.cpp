#include "loader/runtime/parent/slot_actor.h"

namespace loader::runtime {

namespace {

/// Runs `f` on the control; an exception of any kind becomes the loader's fatal error,
/// naming `who` and `what` it was handling.
template <class F>
void guarded(const std::weak_ptr<WorkerControl>& weak, const std::string& who, const char* what, F&& f) {
  auto control = weak.lock();
  if (!control) return;
  try {
    f(*control);
  } catch (const std::exception& e) {
    control->fail_all("RuntimeError",
                      "DataLoader runtime: " + who + " failed while handling " + what + ": " + e.what());
  } catch (...) {
    control->fail_all("RuntimeError",
                      "DataLoader runtime: " + who + " failed while handling " + what + ": an unknown exception");
  }
}

struct WorkerActorState {
  std::weak_ptr<WorkerControl> control;
  int worker = -1;
  std::string who;  ///< "the actor of DataLoader worker k", for error messages
  static inline const char* name = "loader.worker";
};

using worker_pointer = slot_actor::stateful_pointer<WorkerActorState>;

slot_actor::behavior_type worker_behavior(worker_pointer self, std::weak_ptr<WorkerControl> control, int worker) {
  self->state.control = std::move(control);
  self->state.worker = worker;
  self->state.who = "the actor of DataLoader worker " + std::to_string(worker);
  return {
      [self](down_atom, uint32_t gen) {
        guarded(self->state.control, self->state.who, "a worker restart",
                        [&](WorkerControl& c) { c.restart(self->state.worker, gen); });
      },
      [self](flush_atom) {
        guarded(self->state.control, self->state.who, "queued frames",
                        [&](WorkerControl& c) { c.flush(self->state.worker); });
      },
      [self](park_atom) {
        guarded(self->state.control, self->state.who, "retiring its worker",
                [&](WorkerControl& c) { c.park(self->state.worker); });
      },
      [self](unpark_atom) {
        guarded(self->state.control, self->state.who, "starting its worker again",
                [&](WorkerControl& c) { c.unpark(self->state.worker); });
      },
      [self](watch_atom, int64_t tick_ms) {
        guarded(self->state.control, self->state.who, "the watchdog", [&](WorkerControl& c) {
          c.watch(self->state.worker, std::chrono::milliseconds(tick_ms));
        });
      },
  };
}

}  // namespace

slot_actor spawn_slot_actor(caf::actor_system& sys, std::weak_ptr<WorkerControl> control, int worker,
                            bool own_thread) {
  if (own_thread) return sys.spawn<caf::detached>(worker_behavior, std::move(control), worker);
  return sys.spawn(worker_behavior, std::move(control), worker);
}

}  // namespace loader::runtime
