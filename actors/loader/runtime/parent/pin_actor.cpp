#include "loader/runtime/parent/pin_actor.h"

#include "loader/runtime/parent/slab_store.h"
#include "loader/runtime/parent/stage_actor_util.h"

namespace loader::runtime {

namespace {

struct PinState {
  Handoff* handoff = nullptr;
  std::shared_ptr<SlabStore> slabs;
  sampler_actor sampler;
  StageFailures* failures = nullptr;
  static inline const char* name = "loader.pin";
};

using pin_pointer = pin_actor::stateful_pointer<PinState>;

pin_actor::behavior_type pin_behavior(pin_pointer self, Handoff* handoff, std::shared_ptr<SlabStore> slabs,
                                      sampler_actor sampler, StageFailures* failures) {
  self->state.handoff = handoff;
  self->state.slabs = std::move(slabs);
  self->state.sampler = std::move(sampler);
  self->state.failures = failures;
  return {
      [self](result_msg& r) {
        stage_guarded(self->state.failures, "the pin-memory actor", "a result", [&] {
          const uint64_t slab = r.batch.kind == WorkerReply::Kind::Result ? r.batch.slab : 0;
          const bool pinned = slab != 0 && self->state.slabs && self->state.slabs->pinned(slab);
          self->state.handoff->push(std::move(r), pinned);
        });
      },
      [self](begin_atom, uint64_t first_task) { self->state.handoff->restart(first_task); },
      [self](drop_atom) {
        for (auto& h : self->state.handoff->clear())
          if (h.result.batch.slab && self->state.slabs) self->state.slabs->release(h.result.worker, h.result.batch.slab);
      },
      [self](take_atom, PinTake slot) {
        // The application's batch is this stage's answer; its credit goes back to the
        // sampler, whose next task goes out in the same strand run.
        *slot.out = self->state.handoff->take();
        if (*slot.out)
          self->send(self->state.sampler, credit_atom::value, static_cast<int32_t>((*slot.out)->result.worker),
                     (*slot.out)->result.task_idx);
      },
  };
}

}  // namespace

pin_actor spawn_pin_actor(caf::actor_system& sys, Handoff* handoff, std::shared_ptr<SlabStore> slabs,
                          sampler_actor sampler, StageFailures* failures) {
  return sys.spawn<caf::lazy_init>(pin_behavior, handoff, std::move(slabs), std::move(sampler), failures);
}

}  // namespace loader::runtime
