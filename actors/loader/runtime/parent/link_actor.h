// The link actor: worker k as the main process's stages see it, one per worker slot.
//
// It is a CAF actor proxy, as CAF's own stand-in for an actor of another process is:
// a message sent to it is not queued for an activation of its own but handed at once
// to the worker stage under it (WorkerStage: WorkerSlots' slot k), on the thread that
// sent it, the strand's.  Its typed handle is a `link_actor` (protocol.h); the sampler
// sees only its `task_sink` face:
//   task_msg     from the sampler: WorkerStage::take_task (held until answered, with a
//                slab, over the task ring or the socket);
//   events       from worker k's transport (its reader thread): a result that came
//                over the socket, hello, ready, fatal, stream, down, each naming the
//                incarnation; an older incarnation's are dropped.  A worker that died
//                of one is retired: `retire` to the sampler.
// A result taken from the result ring (the incarnation's own) is handed to deliver(),
// which lets the worker stage release the task and sends the `result_msg` on to the
// reorder actor (an iterable that ran dry: `skip` to the reorder actor and `dry` to
// the sampler), with this proxy as the sender.  So a worker costs the stages no
// activation of its own, and a worker elsewhere (a CAF proxy of CAF's network layer)
// fits the same place.
//
// Thread use: send to it, and call deliver(), on the strand (StageActors::enter()).
#pragma once

#include <caf/all.hpp>

#include <string>

#include "loader/runtime/parent/stage_actors.h"
#include "loader/runtime/protocol.h"

namespace loader::runtime {

class LinkProxy final : public caf::actor_proxy {
 public:
  LinkProxy(caf::actor_config& cfg, int worker, WorkerStage* stage, StageFailures* failures, sampler_actor sampler,
            reorder_actor reorder);
  ~LinkProxy() override;

  /// A message to worker k (link_actor's, protocol.h) goes to its WorkerStage method;
  /// anything else is a fault of the runtime and fails the epoch naming it.
  void enqueue(caf::mailbox_element_ptr what, caf::execution_unit* context) override;
  /// A result of worker k, taken from the transport: on to the reorder stage (through
  /// `context`: the strand's executor, or nullptr for the system's scheduler).
  void deliver(result_msg r, caf::execution_unit* context);

  bool add_backlink(caf::abstract_actor*) override { return false; }
  bool remove_backlink(caf::abstract_actor*) override { return false; }
  void kill_proxy(caf::execution_unit* context, caf::error reason) override;
  const char* name() const override { return "loader.link"; }

 private:
  int worker_;
  WorkerStage* stage_;
  StageFailures* failures_;
  sampler_actor sampler_;
  reorder_actor reorder_;
  std::string who_;
};

/// Makes the link of worker slot `worker` (no thread, no mailbox: it ends with its last
/// handle, or kill_proxy).
task_sink make_link_actor(caf::actor_system& sys, int worker, WorkerStage* stage, StageFailures* failures,
                          sampler_actor sampler, reorder_actor reorder);

/// The proxy behind a handle make_link_actor returned.
LinkProxy* link_proxy(const task_sink& link);

}  // namespace loader::runtime
