// The runtime's actor protocol: every message, in one place.
//
// The batch path (sampler, worker, reorder and pin stages) runs in the Pipeline
// (pipeline.h) as method calls: a batch costs the main process no actor message
// (docs/transport.md).  Actors own what must happen outside the application
// thread and outside the links' reader threads, and what will span hosts:
//
//   supervisor   one per worker pool: restarts dead workers, flushes frames that
//                reader threads queued, runs the watchdog every 250 ms.
//
// Messages (sender -> receiver: when):
#pragma once

#include <caf/all.hpp>

#include <cstdint>

namespace loader::runtime {

/// reader thread of worker k (Pipeline::on_down) -> supervisor: incarnation `gen` of
/// worker k went down and its lifecycle decided to restart it.
using down_atom = caf::atom_constant<caf::atom("down")>;
/// reader thread (Pipeline::on_frame) -> supervisor: frames are queued for worker k
/// (a larger slab for a batch that did not fit, the next task of an iterable).
using flush_atom = caf::atom_constant<caf::atom("flush")>;
/// supervisor -> itself, every 250 ms: the watchdog looks at every worker process.
using tick_atom = caf::atom_constant<caf::atom("tick")>;

/// The supervisor of one worker pool.
using supervisor_actor = caf::typed_actor<
    caf::reacts_to<down_atom, int32_t /*worker*/, uint32_t /*generation*/>,
    caf::reacts_to<flush_atom, int32_t /*worker*/>,
    caf::reacts_to<tick_atom>>;

/// The CAF configuration the runtime uses (quiet logger, 2 scheduler threads).
class RuntimeConfig : public caf::actor_system_config {
 public:
  RuntimeConfig();
};

}  // namespace loader::runtime
