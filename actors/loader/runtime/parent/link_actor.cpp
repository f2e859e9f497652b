#include "loader/runtime/parent/link_actor.h"

#include "loader/runtime/parent/stage_actor_util.h"

namespace loader::runtime {

LinkProxy::LinkProxy(caf::actor_config& cfg, int worker, WorkerStage* stage, StageFailures* failures,
                     sampler_actor sampler, reorder_actor reorder)
    : caf::actor_proxy(cfg),
      worker_(worker),
      stage_(stage),
      failures_(failures),
      sampler_(std::move(sampler)),
      reorder_(std::move(reorder)),
      who_("the link actor of DataLoader worker " + std::to_string(worker)) {}

LinkProxy::~LinkProxy() = default;

void LinkProxy::enqueue(caf::mailbox_element_ptr what, caf::execution_unit* context) {
  if (!what) return;
  auto& m = what->content();
  auto retire = [&] {
    if (sampler_)
      sampler_->eq_impl(caf::make_message_id(), caf::strong_actor_ptr{ctrl()}, context, retire_atom::value,
                        static_cast<int32_t>(worker_));
  };
  if (m.match_elements<task_msg>()) {
    stage_guarded(failures_, who_, "a task", [&] { stage_->take_task(worker_, m.get_mutable_as<task_msg>(0)); });
  } else if (m.match_elements<uint32_t, result_msg>()) {
    if (stage_->current(worker_, m.get_as<uint32_t>(0))) deliver(std::move(m.get_mutable_as<result_msg>(1)), context);
  } else if (m.match_elements<hello_atom, uint32_t>()) {
    stage_guarded(failures_, who_, "a hello", [&] { stage_->hello(worker_, m.get_as<uint32_t>(1)); });
  } else if (m.match_elements<ready_atom, uint32_t>()) {
    stage_guarded(failures_, who_, "a ready", [&] { stage_->ready(worker_, m.get_as<uint32_t>(1)); });
  } else if (m.match_elements<fatal_atom, uint32_t, std::string, std::string>()) {
    stage_guarded(failures_, who_, "a worker's failure", [&] {
      if (stage_->failed(worker_, m.get_as<uint32_t>(1), m.get_as<std::string>(2), m.get_as<std::string>(3))) retire();
    });
  } else if (m.match_elements<stream_atom, uint32_t, uint64_t, std::string, bool, std::string>()) {
    stage_guarded(failures_, who_, "a stream's start", [&] {
      StreamStart start;
      start.rng = std::move(m.get_mutable_as<std::string>(3));
      if (m.get_as<bool>(4)) start.state = std::move(m.get_mutable_as<std::string>(5));
      stage_->stream_started(worker_, m.get_as<uint32_t>(1), m.get_as<uint64_t>(2), std::move(start));
    });
  } else if (m.match_elements<down_atom, uint32_t, WorkerExit>()) {
    stage_guarded(failures_, who_, "a worker's end", [&] {
      if (stage_->down(worker_, m.get_as<uint32_t>(1), m.get_as<WorkerExit>(2))) retire();
    });
  } else if (m.match_elements<caf::exit_msg>()) {
    // nothing to end: no mailbox, no thread
  } else {
    failures_->stage_failed("DataLoader runtime: " + who_ + " was sent a message it does not take (" +
                            caf::to_string(m) + ")");
  }
}

void LinkProxy::deliver(result_msg r, caf::execution_unit* context) {
  stage_guarded(failures_, who_, "a result", [&] {
    const uint64_t task = r.task_idx;
    auto send = [&](const auto& dest, auto&&... xs) {
      if (dest) dest->eq_impl(caf::make_message_id(), caf::strong_actor_ptr{ctrl()}, context, std::forward<decltype(xs)>(xs)...);
    };
    switch (stage_->take_result(worker_, r)) {
      case WorkerStage::Outcome::Deliver: send(reorder_, std::move(r)); break;
      case WorkerStage::Outcome::Dry:
        send(reorder_, skip_atom::value, task);
        send(sampler_, dry_atom::value, static_cast<int32_t>(worker_), task);
        break;
      case WorkerStage::Outcome::None: break;
    }
  });
}

void LinkProxy::kill_proxy(caf::execution_unit* context, caf::error reason) {
  cleanup(std::move(reason), context);
  sampler_ = nullptr;
  reorder_ = nullptr;
}

task_sink make_link_actor(caf::actor_system& sys, int worker, WorkerStage* stage, StageFailures* failures,
                          sampler_actor sampler, reorder_actor reorder) {
  caf::actor_config cfg;
  auto ptr = caf::make_actor<LinkProxy, caf::strong_actor_ptr>(sys.next_actor_id(), sys.node(), &sys, cfg, worker,
                                                               stage, failures, std::move(sampler), std::move(reorder));
  return caf::actor_cast<task_sink>(std::move(ptr));
}

LinkProxy* link_proxy(const task_sink& link) {
  return static_cast<LinkProxy*>(caf::actor_cast<caf::abstract_actor*>(link));
}

}  // namespace loader::runtime
