// The link actor: the worker stage as the main process holds it, one per worker slot,
// a thin shell over the pipeline's slot of that worker (WorkerStage).  Tasks from the
// sampler go to the worker (held until answered, with a slab, over the task ring or
// the socket); results from the worker (taken from the result ring or the socket)
// go on to the reorder stage, and the sampler hears that the task finished.
#pragma once

#include <caf/all.hpp>

#include "loader/runtime/parent/stage_actors.h"
#include "loader/runtime/protocol.h"

namespace loader::runtime {

/// Spawned lazily: it runs where its first message is handled.
link_actor spawn_link_actor(caf::actor_system& sys, int worker, WorkerStage* stage, sampler_actor sampler,
                            reorder_actor reorder);

}  // namespace loader::runtime
