#include "loader/runtime/parent/sampler_actor.h"

#include "loader/runtime/parent/stage_actor_util.h"

namespace loader::runtime {

namespace {

struct SamplerState {
  SamplerStage* stage = nullptr;
  const std::vector<task_sink>* sinks = nullptr;
  StageFailures* failures = nullptr;
  static inline const char* name = "loader.sampler";
};

using sampler_pointer = sampler_actor::stateful_pointer<SamplerState>;

/// Sends up to `max` tasks (-1: as many as the credits allow).
void pump(sampler_pointer self, int32_t max) {
  auto& st = self->state;
  int32_t sent = 0;
  int worker = -1;
  while (max < 0 || sent < max) {
    auto task = st.stage->next(worker);
    if (!task) break;
    self->send((*st.sinks)[static_cast<size_t>(worker)], std::move(*task));
    ++sent;
  }
}

sampler_actor::behavior_type sampler_behavior(sampler_pointer self, SamplerStage* stage,
                                              const std::vector<task_sink>* sinks, StageFailures* failures) {
  self->state.stage = stage;
  self->state.sinks = sinks;
  self->state.failures = failures;
  const std::string who = "the sampler actor";
  return {
      [self, who](begin_atom, sampler_begin& b) {
        stage_guarded(self->state.failures, who, "an epoch's begin", [&] {
          self->state.stage->begin(std::move(b->source), b->iterable, std::move(b->dispatcher));
        });
      },
      [self](halt_atom) { self->state.stage->halt(); },
      [self, who](credit_atom, int32_t worker, uint64_t task) {
        stage_guarded(self->state.failures, who, "a credit", [&] {
          if (!self->state.stage->active()) return;
          self->state.stage->dispatcher().on_finished(task);
          self->state.stage->dispatcher().on_delivered(worker);
          pump(self, -1);
        });
      },
      [self, who](dry_atom, int32_t worker, uint64_t task) {
        stage_guarded(self->state.failures, who, "a stream that ran dry", [&] {
          self->state.stage->dry(worker, task);
          pump(self, -1);
        });
      },
      [self, who](retire_atom, int32_t worker) {
        stage_guarded(self->state.failures, who, "a retired worker", [&] {
          if (self->state.stage->active()) self->state.stage->dispatcher().deactivate(worker);
        });
      },
      [self, who](dispatch_atom, int32_t max) {
        stage_guarded(self->state.failures, who, "a dispatch", [&] { pump(self, max); });
      },
      [self, who](tune_atom, int32_t worker, bool active, uint64_t max_in_flight) {
        stage_guarded(self->state.failures, who, "the autotuner's setting", [&] {
          if (!self->state.stage->active()) return;
          TaskDispatcher& d = self->state.stage->dispatcher();
          if (worker >= 0) {
            if (active) d.activate(worker);
            else d.deactivate(worker);
          }
          d.set_max_in_flight(max_in_flight);
          pump(self, -1);
        });
      },
  };
}

}  // namespace

sampler_actor spawn_sampler_actor(caf::actor_system& sys, SamplerStage* stage, const std::vector<task_sink>* sinks,
                                  StageFailures* failures) {
  return sys.spawn<caf::lazy_init>(sampler_behavior, stage, sinks, failures);
}

}  // namespace loader::runtime
