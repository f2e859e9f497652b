// The pin-memory actor: a thin shell over Handoff (handoff.h).  Hands each result it
// receives over to the application, marked page-locked when its slab is (a slab is
// pinned once, when made, by the SlabStore: nothing is copied per batch).
#pragma once

#include <caf/all.hpp>

#include <memory>

#include "loader/runtime/parent/handoff.h"
#include "loader/runtime/parent/stage_actors.h"
#include "loader/runtime/protocol.h"

namespace loader::runtime {

class SlabStore;

/// `slabs`: null in tests without slabs (nothing is pinned).  Spawned lazily.
pin_actor spawn_pin_actor(caf::actor_system& sys, Handoff* handoff, std::shared_ptr<SlabStore> slabs,
                          StageFailures* failures);

}  // namespace loader::runtime
