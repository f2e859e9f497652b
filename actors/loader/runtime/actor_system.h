// The process's actor system: one CAF system shared by every loader, alive while any
// worker pool needs it.
#pragma once

#include <caf/all.hpp>

#include <memory>
#include <string>

namespace loader::runtime {

/// What an actor system of the runtime is for (RuntimeConfig).
struct SystemSpec {
  /// The scheduler's threads (0: CAF's default, one per core).
  int scheduler_threads = 2;
  /// CAF's busy polling before an idle scheduler thread sleeps (false: none; the
  /// runtime's actors handle rare events).
  bool poll = false;
  /// CAF's network layer (middleman, BASP heartbeats every 500 ms) and the remote
  /// protocol's types: a worker host, and the main process's system for remote workers.
  bool network = false;
  /// TLS on the network layer (libcaf-openssl; all three or none): this side's
  /// certificate and key, and the CA the peer's certificate must be signed by.
  std::string tls_cert, tls_key, tls_ca;
};

/// The one CAF configuration of the runtime (the main process's system, a worker
/// process's, the remote workers', a worker host's): quiet logger, the guarded
/// scheduler (guard_scheduler_start), and what `spec` asks for.
class RuntimeConfig : public caf::actor_system_config {
 public:
  explicit RuntimeConfig(const SystemSpec& spec = {});
};

/// Makes the systems built from `cfg` use CAF's default scheduler (work stealing) in a
/// shell whose start never throws: when CAF's scheduler cannot start one of its
/// threads (std::thread throws std::system_error, EAGAIN under a process limit),
/// caf::actor_system's constructor unwinds a half-started system, and CAF 0.17 cannot
/// do that: its registry releases the system's own actors after the scheduler is gone
/// (SIGSEGV in actor_system::clock()), or it destroys threads it started while they
/// are joinable (std::terminate).  The shell records the failure instead, and
/// start_actor_system reports it.
void guard_scheduler_start(caf::actor_system_config& cfg);

/// Builds an actor system from `cfg` (which called guard_scheduler_start).  Throws
/// RuntimeError naming the thread that could not be started and the process's limits;
/// that half-started system is left undestroyed (its destructor would wait for
/// scheduler threads that never ran), with whatever threads it did start.
std::unique_ptr<caf::actor_system> start_actor_system(caf::actor_system_config& cfg);

/// The process's actor system (RuntimeConfig), made on first use and destroyed when
/// the last holder lets go.  Thread-safe.  Throws RuntimeError naming the cause when
/// CAF cannot start (e.g. no thread can be created under the process's limit).
std::shared_ptr<caf::actor_system> acquire_system();

/// Starts `count` threads and joins them, waiting until the kernel has counted them
/// out again: CAF's actor system calls std::terminate when it cannot start one of its
/// threads, so a process builds one only after this succeeded.  Throws RuntimeError
/// naming the thread and process limits when a thread cannot be created.
void probe_system_threads(int count);

/// A holder of the actor system that may still live when exit() runs: a worker pool
/// whose owner is a static (a DataLoader in a global or a function's static) is
/// destroyed during exit, after statics CAF made lazily are gone, and tearing CAF
/// down then corrupted the heap.  register_at_exit() also registers an exit handler
/// (again each time, so the latest runs before every owner made earlier is
/// destroyed); it calls teardown_at_exit() of each registered holder, which must end
/// its OS resources (worker processes, sockets, threads) without touching CAF, and
/// make its own destructor skip what it did.
class ExitTeardown {
 public:
  virtual ~ExitTeardown() = default;
  /// Called at most once, from the exit handler, on the thread calling exit().
  virtual void teardown_at_exit() = 0;
};
/// Any thread; REQUIRES: `holder` stays valid until unregister_at_exit(holder).
void register_at_exit(ExitTeardown* holder);
void unregister_at_exit(ExitTeardown* holder);
/// Keeps `object` alive, and reachable, until the process ends: what a holder leaves
/// undestroyed at exit (leak checkers see it referenced, not lost).
void keep_until_process_end(std::shared_ptr<void> object);

}  // namespace loader::runtime
