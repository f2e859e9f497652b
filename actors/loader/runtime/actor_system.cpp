#include "loader/runtime/actor_system.h"

#include <unistd.h>

#include <atomic>
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
/// The holders of one process.  A child forked from it inherits a copy of its
/// parent's registry and exit handlers: it must not end its parent's pools, so it
/// leaves that copy alone and makes its own on first use.
struct ExitRegistry {
  pid_t owner = getpid();
  std::mutex mu;
  std::set<ExitTeardown*> holders;
  std::vector<std::shared_ptr<void>> kept;  ///< never destroyed (see keep_until_process_end)
};
std::atomic<ExitRegistry*> g_exit_registry{nullptr};

ExitRegistry& exit_registry() {
  ExitRegistry* r = g_exit_registry.load();
  while (!r || r->owner != getpid()) {
    auto* fresh = new ExitRegistry;  // never freed: destructors that run at exit use it
    if (g_exit_registry.compare_exchange_strong(r, fresh)) return *fresh;
    delete fresh;  // another thread made it first; `r` is now that one
  }
  return *r;
}

void tear_down_at_exit() {
  ExitRegistry* r = g_exit_registry.load();
  if (!r || r->owner != getpid()) return;  // nothing registered here, or a forked child's copy
  std::vector<ExitTeardown*> holders;
  {
    std::lock_guard<std::mutex> lock(r->mu);
    holders.assign(r->holders.begin(), r->holders.end());
    r->holders.clear();
  }
  for (ExitTeardown* h : holders) h->teardown_at_exit();
}
}  // namespace

void register_at_exit(ExitTeardown* holder) {
  {
    ExitRegistry& r = exit_registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.holders.insert(holder);
  }
  // Registered after the holder's owner was made: exit() runs it before it destroys
  // that owner.  Later runs find the registry empty.
  std::atexit(tear_down_at_exit);
}

void unregister_at_exit(ExitTeardown* holder) {
  ExitRegistry& r = exit_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.holders.erase(holder);
}

void keep_until_process_end(std::shared_ptr<void> object) {
  ExitRegistry& r = exit_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.kept.push_back(std::move(object));
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
