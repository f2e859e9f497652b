#include "loader/runtime/parent/link_actor.h"

#include "loader/runtime/parent/stage_actor_util.h"

namespace loader::runtime {

namespace {

struct LinkState {
  int worker = -1;
  WorkerStage* stage = nullptr;
  sampler_actor sampler;
  reorder_actor reorder;
  std::string who;
  static inline const char* name = "loader.link";
};

using link_pointer = link_actor::stateful_pointer<LinkState>;

link_actor::behavior_type link_behavior(link_pointer self, int worker, WorkerStage* stage, sampler_actor sampler,
                                        reorder_actor reorder) {
  auto& st = self->state;
  st.worker = worker;
  st.stage = stage;
  st.sampler = std::move(sampler);
  st.reorder = std::move(reorder);
  st.who = "the link actor of DataLoader worker " + std::to_string(worker);
  return {
      [self](task_msg& t) {
        auto& st = self->state;
        stage_guarded(st.stage, st.who, "a task", [&] { st.stage->take_task(st.worker, t); });
      },
      [self](result_msg& r) {
        auto& st = self->state;
        stage_guarded(st.stage, st.who, "a result", [&] {
          const uint64_t task = r.task_idx;
          switch (st.stage->take_result(st.worker, r)) {
            case WorkerStage::Outcome::Deliver:
              self->send(st.reorder, std::move(r));
              self->send(st.sampler, finished_atom::value, task);
              break;
            case WorkerStage::Outcome::Dry:
              self->send(st.reorder, skip_atom::value, task);
              self->send(st.sampler, dry_atom::value, static_cast<int32_t>(st.worker), task);
              break;
            case WorkerStage::Outcome::None: break;
          }
        });
      },
  };
}

}  // namespace

link_actor spawn_link_actor(caf::actor_system& sys, int worker, WorkerStage* stage, sampler_actor sampler,
                            reorder_actor reorder) {
  return sys.spawn<caf::lazy_init>(link_behavior, worker, stage, std::move(sampler), std::move(reorder));
}

}  // namespace loader::runtime
