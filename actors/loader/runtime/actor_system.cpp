#include "loader/runtime/actor_system.h"

#include <mutex>
#include <string>

#include "loader/error.h"

namespace loader::runtime {

RuntimeConfig::RuntimeConfig() {
  // The actors here handle rare events (deaths, restarts, ticks): two threads are plenty.
  set("scheduler.max-threads", 2);
  set("work-stealing.aggressive-poll-attempts", 0);
  set("work-stealing.moderate-poll-attempts", 0);
  set("logger.verbosity", caf::atom("quiet"));
  set("logger.console", caf::atom("none"));
}

std::shared_ptr<caf::actor_system> acquire_system() {
  static std::mutex mu;
  static std::weak_ptr<caf::actor_system> current;
  std::lock_guard<std::mutex> lock(mu);
  if (auto sys = current.lock()) return sys;
  static RuntimeConfig* cfg = nullptr;
  if (!cfg) {
    cfg = new RuntimeConfig();  // lives as long as the process: systems keep a reference
    char arg0[] = "loader";
    char* argv[] = {arg0, nullptr};
    cfg->parse(1, argv);  // without an argv CAF reads no config file
  }
  std::shared_ptr<caf::actor_system> sys;
  try {
    sys = std::make_shared<caf::actor_system>(*cfg);
  } catch (const std::exception& e) {
    throw RuntimeError(std::string("DataLoader: cannot start the actor system (") + e.what() +
                       "); is the thread limit of this process reached?");
  }
  current = sys;
  return sys;
}

}  // namespace loader::runtime
