// The process's actor system: one CAF system shared by every loader, alive while any
// worker pool needs it.
#pragma once

#include <caf/all.hpp>

#include <memory>

namespace loader::runtime {

/// The CAF configuration the runtime uses (quiet logger, 2 scheduler threads).
class RuntimeConfig : public caf::actor_system_config {
 public:
  RuntimeConfig();
};

/// The process's actor system (RuntimeConfig), made on first use and destroyed when
/// the last holder lets go.  Thread-safe.  Throws RuntimeError naming the cause when
/// CAF cannot start (e.g. no thread can be created under the process's limit).
std::shared_ptr<caf::actor_system> acquire_system();

}  // namespace loader::runtime
