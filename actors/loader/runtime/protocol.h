// The runtime's actor protocol: every message and every actor handle, in one place.
//
// The batch path (sampler, worker, reorder and pin stages) runs in the Pipeline
// (pipeline.h) as method calls: a batch costs the main process no actor message
// (docs/transport.md).  Actors own the control plane of a worker pool: what must
// happen outside the application thread and outside the links' reader threads
// (starting and killing processes), one mailbox per worker, and what will span
// hosts (a worker on another machine is driven by its own worker actor):
//
//   worker actor  one per worker slot (worker_actor.h): restarts its worker after a
//                 death, writes the frames a reader thread queued for it, looks at
//                 its process when the pool actor says so.  A restart of worker 0
//                 (a process spawn) never delays worker 1's frames.
//   pool actor    one per worker pool (pool_actor.h): the 250 ms watchdog clock,
//                 fanned out to the worker actors; supervises the worker actors (one
//                 that stops for any reason but the pool's shutdown fails the loader
//                 with a message naming it).
//
// Messages (sender -> receiver: when), atoms at most 10 characters (CAF 0.17):
#pragma once

#include <caf/all.hpp>

#include <cstdint>

namespace loader::runtime {

/// reader thread of worker k (Pipeline::on_down) -> worker actor k: incarnation `gen`
/// of worker k went down and its lifecycle decided to restart it.
using down_atom = caf::atom_constant<caf::atom("down")>;
/// reader thread (Pipeline::on_frame) -> worker actor k: frames are queued for worker
/// k (a larger slab for a batch that did not fit, the next task of an iterable).
/// Readers never write to a socket themselves.
using flush_atom = caf::atom_constant<caf::atom("flush")>;
/// pool actor -> worker actor k, every tick: look at the process (frozen, exited
/// with its socket held open, no hello within the deadline).  Carries the tick in ms.
using watch_atom = caf::atom_constant<caf::atom("watch")>;
/// pool actor -> itself, every 250 ms: the watchdog clock.
using tick_atom = caf::atom_constant<caf::atom("tick")>;

/// The actor of one worker slot.
using worker_actor = caf::typed_actor<
    caf::reacts_to<down_atom, uint32_t /*generation*/>,
    caf::reacts_to<flush_atom>,
    caf::reacts_to<watch_atom, int64_t /*tick, ms*/>>;

/// The actor of one worker pool.
using pool_actor = caf::typed_actor<caf::reacts_to<tick_atom>>;

}  // namespace loader::runtime
