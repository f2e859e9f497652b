// The reorder actor: a thin shell over ReorderBuffer (reorder_buffer.h).  Results come
// in any order; each one the order allows goes on to the pin stage at once.  An epoch's
// begin (`begin`: its first task, in_order) and end (`drop`: what it still holds goes,
// each result's slab back to the SlabStore) are messages too.
#pragma once

#include <caf/all.hpp>

#include <memory>

#include "loader/runtime/parent/reorder_buffer.h"
#include "loader/runtime/parent/stage_actors.h"
#include "loader/runtime/protocol.h"

namespace loader::runtime {

class SlabStore;

/// Spawned lazily: it runs where its first message is handled.  `slabs`: where a
/// dropped result's slab goes back (null in tests without slabs).
reorder_actor spawn_reorder_actor(caf::actor_system& sys, ReorderBuffer<result_msg>* buffer, pin_actor pin,
                                  std::shared_ptr<SlabStore> slabs, StageFailures* failures);

}  // namespace loader::runtime
