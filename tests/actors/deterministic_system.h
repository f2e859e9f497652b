// The actor-system configuration of actor-level tests: CAF's deterministic scheduler
// (the `testing` policy: each message is handled when the test says so, timeouts fire
// when the test triggers them) and a quiet logger.  One configuration per process, as
// CAF keeps a reference to it.
#pragma once

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

namespace loader::runtime {

inline caf::actor_system_config& deterministic_config() {
  static caf::actor_system_config* cfg = [] {
    auto* c = new caf::actor_system_config();
    c->set("scheduler.policy", caf::atom("testing"));
    c->set("logger.verbosity", caf::atom("quiet"));
    c->set("logger.console", caf::atom("none"));
    return c;
  }();
  return *cfg;
}

}  // namespace loader::runtime
