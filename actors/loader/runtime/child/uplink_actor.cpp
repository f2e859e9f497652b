#include "loader/runtime/child/uplink_actor.h"


namespace loader::runtime {

namespace {

struct UplinkActorState {
  UplinkSink* uplink = nullptr;
  static inline const char* name = "loader.uplink";
};

uplink_actor::behavior_type uplink_behavior(uplink_actor::stateful_pointer<UplinkActorState> self, UplinkSink* uplink) {
  self->state.uplink = uplink;
  return {
      [self](result_msg& r) { self->state.uplink->result(r.batch); },
      [self](ready_atom) { self->state.uplink->ready(); },
      [self](stream_atom, uint64_t task, std::string& rng, bool has_state, std::string& state) {
        StreamStart start{std::move(rng), std::nullopt};
        if (has_state) start.state = std::move(state);
        self->state.uplink->stream_start(task, start);
      },
      [self](fatal_atom, const std::string& type, const std::string& message, const std::string& when,
             int32_t status) { self->state.uplink->fatal(type, message, when, status); },
  };
}

}  // namespace

uplink_actor spawn_uplink_actor(caf::actor_system& sys, UplinkSink* uplink) {
  return sys.spawn<caf::lazy_init>(uplink_behavior, uplink);
}

}  // namespace loader::runtime
