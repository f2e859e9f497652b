#include "loader/runtime/parent/reorder_actor.h"

#include "loader/runtime/parent/slab_store.h"
#include "loader/runtime/parent/stage_actor_util.h"

namespace loader::runtime {

namespace {

struct ReorderState {
  ReorderBuffer<result_msg>* buffer = nullptr;
  pin_actor pin;
  std::shared_ptr<SlabStore> slabs;
  StageFailures* failures = nullptr;
  static inline const char* name = "loader.reorder";
};

using reorder_pointer = reorder_actor::stateful_pointer<ReorderState>;

void release(reorder_pointer self) {
  while (auto item = self->state.buffer->pop()) self->send(self->state.pin, std::move(item->second));
}

reorder_actor::behavior_type reorder_behavior(reorder_pointer self, ReorderBuffer<result_msg>* buffer, pin_actor pin,
                                              std::shared_ptr<SlabStore> slabs, StageFailures* failures) {
  self->state.buffer = buffer;
  self->state.pin = std::move(pin);
  self->state.slabs = std::move(slabs);
  self->state.failures = failures;
  return {
      [self](result_msg& r) {
        stage_guarded(self->state.failures, "the reorder actor", "a result", [&] {
          const uint64_t task = r.task_idx;
          self->state.buffer->push(task, std::move(r));
          release(self);
        });
      },
      [self](begin_atom, uint64_t first_task, bool in_order) { self->state.buffer->reset(first_task, in_order); },
      [self](drop_atom) {
        ReorderBuffer<result_msg>& buffer = *self->state.buffer;
        if (self->state.slabs)
          buffer.for_each_buffered([&](uint64_t, const result_msg& r) {
            if (r.batch.slab) self->state.slabs->release(r.worker, r.batch.slab);
          });
        buffer.reset(buffer.next_expected(), buffer.in_order());
      },
      [self](skip_atom, uint64_t task) {
        stage_guarded(self->state.failures, "the reorder actor", "a skipped task", [&] {
          self->state.buffer->skip(task);
          release(self);
        });
      },
  };
}

}  // namespace

reorder_actor spawn_reorder_actor(caf::actor_system& sys, ReorderBuffer<result_msg>* buffer, pin_actor pin,
                                  std::shared_ptr<SlabStore> slabs, StageFailures* failures) {
  return sys.spawn<caf::lazy_init>(reorder_behavior, buffer, std::move(pin), std::move(slabs), failures);
}

}  // namespace loader::runtime
