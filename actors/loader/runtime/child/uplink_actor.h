// The uplink actor: the main process as a worker actor sees it.  A thin shell over an
// Uplink (uplink.h): a result_msg becomes a Result frame in the result ring, `ready`
// a Ready frame, `fatal` an InitError frame and the worker's exit status.
//
// A worker on another host gets an uplink over CAF's network layer instead; the
// worker actor does not change.
#pragma once

#include <caf/all.hpp>

#include "loader/runtime/protocol.h"

namespace loader::runtime {

class Uplink;

/// Spawns the uplink actor over `uplink`, which must outlive it.  Spawned lazily: it
/// runs on the thread of the first message sent to it (the worker host's).
uplink_actor spawn_uplink_actor(caf::actor_system& sys, Uplink* uplink);

}  // namespace loader::runtime
