// The pin-memory actor: a thin shell over Handoff (handoff.h).  Holds each result it
// receives for the application, marked page-locked when its slab is (a slab is pinned
// once, when made, by the SlabStore: nothing is copied per batch).  The application's
// batch is its answer to a `take` (PinTake: the slot is filled in the strand run of
// the thread that asked), and the taken task's credit goes on to the sampler.  An
// epoch's begin (`begin`) and end (`drop`: the results not taken go, their slabs back
// to the SlabStore) are messages too.
#pragma once

#include <caf/all.hpp>

#include <memory>

#include "loader/runtime/parent/handoff.h"
#include "loader/runtime/parent/stage_actors.h"
#include "loader/runtime/protocol.h"

namespace loader::runtime {

class SlabStore;

/// `slabs`: null in tests without slabs (nothing is pinned).  `sampler`: where a taken
/// result's credit goes.  Spawned lazily.
pin_actor spawn_pin_actor(caf::actor_system& sys, Handoff* handoff, std::shared_ptr<SlabStore> slabs,
                          sampler_actor sampler, StageFailures* failures);

}  // namespace loader::runtime
