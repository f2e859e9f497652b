// The reorder actor: a thin shell over ReorderBuffer (reorder_buffer.h).  Results come
// in any order; each one the order allows goes on to the pin stage at once.
#pragma once

#include <caf/all.hpp>

#include "loader/runtime/parent/reorder_buffer.h"
#include "loader/runtime/parent/stage_actors.h"
#include "loader/runtime/protocol.h"

namespace loader::runtime {

/// Spawned lazily: it runs where its first message is handled.
reorder_actor spawn_reorder_actor(caf::actor_system& sys, ReorderBuffer<result_msg>* buffer, pin_actor pin,
                                  StageFailures* failures);

}  // namespace loader::runtime
