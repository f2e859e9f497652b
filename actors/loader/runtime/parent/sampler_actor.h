// The sampler actor: a thin shell over SamplerStage (sampler_stage.h).  Sends each task
// to its worker's task sink (the link actor of a local worker; whatever stands for a
// worker elsewhere) against a credit; resumes on each credit returned.
#pragma once

#include <caf/all.hpp>

#include <vector>

#include "loader/runtime/parent/sampler_stage.h"
#include "loader/runtime/parent/stage_actors.h"
#include "loader/runtime/protocol.h"

namespace loader::runtime {

/// `sinks`: worker k's task sink at [k]; read when tasks go out (the caller fills it
/// before the first message; it outlives the actor).  Spawned lazily: it runs where
/// its first message is handled.
sampler_actor spawn_sampler_actor(caf::actor_system& sys, SamplerStage* stage, const std::vector<task_sink>* sinks,
                                  StageFailures* failures);

}  // namespace loader::runtime
