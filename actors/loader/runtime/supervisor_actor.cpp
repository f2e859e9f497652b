#include "loader/runtime/supervisor_actor.h"

#include <mutex>

#include "loader/error.h"

namespace loader::runtime {

RuntimeConfig::RuntimeConfig() {
  // The actors here handle rare events (deaths, restarts, ticks): two threads are plenty.
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
    char arg0[] = "loader";
    char* argv[] = {arg0, nullptr};
    cfg->parse(1, argv);  // without an argv CAF reads no config file
  }
  std::shared_ptr<caf::actor_system> sys;
  try {
    sys = std::make_shared<caf::actor_system>(*cfg);
  } catch (const std::exception& e) {
    throw RuntimeError(std::string("DataLoader: cannot start the actor system (") + e.what() +
                       "); is the thread limit of this process reached?");
  }
  current = sys;
  return sys;
}

namespace {

struct SupervisorState {
  std::weak_ptr<Supervised> pipeline;
  std::chrono::milliseconds tick{0};
  static inline const char* name = "loader.supervisor";
};

using supervisor_pointer = supervisor_actor::stateful_pointer<SupervisorState>;

/// Runs `f` on the pipeline; an exception becomes the loader's fatal error.
template <class F>
void guarded(supervisor_pointer self, const char* what, F&& f) {
  auto p = self->state.pipeline.lock();
  if (!p) return;
  try {
    f(*p);
  } catch (const std::exception& e) {
    p->fail_all("RuntimeError", std::string("DataLoader runtime: the supervisor failed while handling ") + what +
                                    ": " + e.what());
  }
}

supervisor_actor::behavior_type supervisor_behavior(supervisor_pointer self, std::weak_ptr<Supervised> pipeline,
                                                    std::chrono::milliseconds tick) {
  self->state.pipeline = std::move(pipeline);
  self->state.tick = tick;
  if (tick.count() > 0) self->delayed_send(self, tick, tick_atom::value);
  return {
      [self](down_atom, int32_t worker, uint32_t gen) {
        guarded(self, "a worker restart", [&](Supervised& p) { p.restart(worker, gen); });
      },
      [self](flush_atom, int32_t worker) {
        guarded(self, "queued frames", [&](Supervised& p) { p.flush(worker); });
      },
      [self](tick_atom) {
        guarded(self, "the watchdog", [&](Supervised& p) {
          p.watchdog(self->state.tick.count() > 0 ? self->state.tick : std::chrono::milliseconds(250));
        });
        if (self->state.tick.count() > 0) self->delayed_send(self, self->state.tick, tick_atom::value);
      },
  };
}

}  // namespace

supervisor_actor spawn_supervisor(caf::actor_system& sys, std::weak_ptr<Supervised> pipeline,
                                  std::chrono::milliseconds tick) {
  return sys.spawn(supervisor_behavior, std::move(pipeline), tick);
}

}  // namespace loader::runtime
