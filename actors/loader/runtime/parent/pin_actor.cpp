#include "loader/runtime/parent/pin_actor.h"

#include "loader/runtime/parent/slab_store.h"
#include "loader/runtime/parent/stage_actor_util.h"

namespace loader::runtime {

namespace {

struct PinState {
  Handoff* handoff = nullptr;
  std::shared_ptr<SlabStore> slabs;
  StageFailures* failures = nullptr;
  static inline const char* name = "loader.pin";
};

using pin_pointer = pin_actor::stateful_pointer<PinState>;

pin_actor::behavior_type pin_behavior(pin_pointer self, Handoff* handoff, std::shared_ptr<SlabStore> slabs,
                                      StageFailures* failures) {
  self->state.handoff = handoff;
  self->state.slabs = std::move(slabs);
  self->state.failures = failures;
  return {
      [self](result_msg& r) {
        stage_guarded(self->state.failures, "the pin-memory actor", "a result", [&] {
          const uint64_t slab = r.batch.kind == WorkerReply::Kind::Result ? r.batch.slab : 0;
          const bool pinned = slab != 0 && self->state.slabs && self->state.slabs->pinned(slab);
          self->state.handoff->push(std::move(r), pinned);
        });
      },
  };
}

}  // namespace

pin_actor spawn_pin_actor(caf::actor_system& sys, Handoff* handoff, std::shared_ptr<SlabStore> slabs,
                          StageFailures* failures) {
  return sys.spawn<caf::lazy_init>(pin_behavior, handoff, std::move(slabs), failures);
}

}  // namespace loader::runtime
