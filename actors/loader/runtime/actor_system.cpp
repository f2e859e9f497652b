#include "loader/runtime/actor_system.h"

#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <vector>

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

namespace {
struct ExitRegistry {
  std::mutex mu;
  std::set<ExitTeardown*> holders;
  std::vector<std::shared_ptr<void>> kept;  ///< never destroyed (see keep_until_process_end)
};
ExitRegistry& exit_registry() {
  static auto* r = new ExitRegistry;  // never destroyed: used by destructors that run at exit
  return *r;
}
void tear_down_at_exit() {
  std::vector<ExitTeardown*> holders;
  {
    std::lock_guard<std::mutex> lock(exit_registry().mu);
    holders.assign(exit_registry().holders.begin(), exit_registry().holders.end());
    exit_registry().holders.clear();
  }
  for (ExitTeardown* h : holders) h->teardown_at_exit();
}
}  // namespace

void register_at_exit(ExitTeardown* holder) {
  {
    std::lock_guard<std::mutex> lock(exit_registry().mu);
    exit_registry().holders.insert(holder);
  }
  // Registered after the holder's owner was made: exit() runs it before it destroys
  // that owner.  Later runs find the registry empty.
  std::atexit(tear_down_at_exit);
}

void unregister_at_exit(ExitTeardown* holder) {
  std::lock_guard<std::mutex> lock(exit_registry().mu);
  exit_registry().holders.erase(holder);
}

void keep_until_process_end(std::shared_ptr<void> object) {
  std::lock_guard<std::mutex> lock(exit_registry().mu);
  exit_registry().kept.push_back(std::move(object));
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
