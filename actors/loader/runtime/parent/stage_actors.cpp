#include "loader/runtime/parent/stage_actors.h"

#include <stdexcept>

#include "loader/runtime/parent/link_actor.h"
#include "loader/runtime/parent/pin_actor.h"
#include "loader/runtime/parent/reorder_actor.h"
#include "loader/runtime/parent/sampler_actor.h"

namespace loader::runtime {

StageActors::StageActors(caf::actor_system& sys, int workers, WorkerStage& stage, StageFailures& failures,
                         std::shared_ptr<SlabStore> slabs)
    : exec_(sys) {
  // Each actor is spawned with the handles it sends to.  The sampler's task sinks are
  // the links, spawned last (they tell it when a worker's stream ran dry, and pass
  // results on to the reorder stage); the pin stage returns credits to the sampler.
  sampler_ = spawn_sampler_actor(sys, &sampling_, &links_, &failures);
  pin_ = spawn_pin_actor(sys, &handoff_, slabs, sampler_, &failures);
  reorder_ = spawn_reorder_actor(sys, &reordering_, pin_, std::move(slabs), &failures);
  for (int w = 0; w < workers; ++w) links_.push_back(make_link_actor(sys, w, &stage, &failures, sampler_, reorder_));
}

void StageActors::deliver(int worker, result_msg r) {
  if (worker < 0 || static_cast<size_t>(worker) >= links_.size()) return;  // stopped
  link_proxy(links_[static_cast<size_t>(worker)])->deliver(std::move(r), &exec_);
}

link_actor StageActors::link(int worker) const {
  if (worker < 0 || static_cast<size_t>(worker) >= links_.size()) return link_actor{};
  return caf::actor_cast<link_actor>(links_[static_cast<size_t>(worker)]);
}

StageActors::~StageActors() { stop(); }

std::optional<HandedOver> StageActors::take() {
  if (running_) throw std::logic_error("StageActors::take: called from a stage (the strand is running)");
  std::optional<HandedOver> handed;
  send(pin_, take_atom::value, PinTake{&handed});
  run();
  return handed;
}

void StageActors::run() {
  if (running_) return;  // the outer run() goes on with what was just scheduled
  running_ = true;
  try {
    exec_.run();
  } catch (...) {
    running_ = false;
    throw;
  }
  running_ = false;
}

void StageActors::stop() {
  if (stopped_) return;
  stopped_ = true;
  // Exit messages through the strand: every actor ends here, before the stages'
  // plain classes (members of this object) go.  They hold each other's handles, so
  // none would end by itself.
  for (const auto& l : links_) link_proxy(l)->kill_proxy(&exec_, caf::exit_reason::user_shutdown);
  std::vector<caf::abstract_actor*> actors{caf::actor_cast<caf::abstract_actor*>(sampler_),
                                           caf::actor_cast<caf::abstract_actor*>(reorder_),
                                           caf::actor_cast<caf::abstract_actor*>(pin_)};
  for (caf::abstract_actor* a : actors)
    if (a) a->eq_impl(caf::make_message_id(), nullptr, &exec_, caf::exit_msg{a->address(), caf::exit_reason::user_shutdown});
  exec_.run();
  links_.clear();
  sampler_ = nullptr;
  reorder_ = nullptr;
  pin_ = nullptr;
}

}  // namespace loader::runtime
