// Spawning the runtime's actors (the behaviors live in actors.cpp).  The pool and
// the epoch (runtime.cpp) wire them together; actor-level tests spawn them one by one.
#pragma once

#include <caf/all.hpp>

#include <functional>

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "loader/fetch.h"
#include "loader/pinned.h"
#include "loader/runtime/protocol.h"
#include "loader/runtime/worker_core.h"
#include "loader/runtime/worker_slabs.h"

namespace loader::runtime {

/// The process's actor system (tuned RuntimeConfig), shared by every loader and
/// alive while any pool or batch lease needs it.
std::shared_ptr<caf::actor_system> acquire_system();

/// Where batch leases send their slabs back.  Disarmed when the pool goes, so a
/// batch the application keeps longer releases into nothing.
class ReleaseSink {
 public:
  ReleaseSink(std::shared_ptr<caf::actor_system> sys, std::vector<worker_actor> workers)
      : sys_(std::move(sys)), workers_(std::move(workers)) {}
  void release(int worker, uint64_t slab) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!armed_ || worker < 0 || static_cast<size_t>(worker) >= workers_.size()) return;
    caf::anon_send(workers_[static_cast<size_t>(worker)], release_atom::value, slab);
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
    workers_.clear();
  }

 private:
  std::mutex mu_;
  bool armed_ = true;
  std::shared_ptr<caf::actor_system> sys_;  // released last: leases may outlive the pool
  std::vector<worker_actor> workers_;
};

/// Lets the pool end a worker's process itself, after the worker actor is gone
/// (CAF gives no order between an actor's exit hooks and a waiting monitor).
class ProcessStopper {
 public:
  void set(std::function<void()> stop) {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = std::move(stop);
  }
  /// Ends and reaps the process (idempotent).
  void run() {
    std::function<void()> f;
    {
      std::lock_guard<std::mutex> lock(mu_);
      f = stop_;
    }
    if (f) f();
  }

 private:
  std::mutex mu_;
  std::function<void()> stop_;
};

/// What a worker actor needs: its configuration, slab policy, restart budget.
struct WorkerSetup {
  WorkerConfig config;
  SlabPolicy policy;
  std::shared_ptr<SlabDirectory> directory;
  int max_restarts = 0;
  bool in_process = false;
  caf::actor pin;  ///< pin-memory actor, or invalid
  std::shared_ptr<ProcessStopper> stopper;  ///< filled in by process workers
};

/// What the sampler actor of one epoch needs.
struct SamplerSetup {
  std::optional<TaskSource> source;
  std::vector<worker_actor> workers;
  caf::actor reorder;
  uint64_t epoch;
  uint64_t first_task;
  int prefetch_factor;
};

/// A worker actor (detached).  In-process workers run WorkerCore directly; otherwise
/// the actor starts a worker process and proxies the typed interface to it.
worker_impl_actor spawn_worker(caf::actor_system& sys, WorkerSetup setup);
/// The epoch's sampler: sends the epoch notice to every worker, then tasks against credits.
caf::actor spawn_sampler(caf::actor_system& sys, std::shared_ptr<SamplerSetup> setup);
/// The epoch's reorder buffer.
caf::actor spawn_reorder(caf::actor_system& sys, bool in_order, uint64_t first_task);
/// The pin-memory actor: page-locks slabs once (pin_atom), releases them (unpin_atom, exit).
/// Every outcome is recorded in `tracker` (the loader's pin_memory_status()); the first
/// slab that is not CUDA-pinned makes it warn, once per tracker.
caf::actor spawn_pin_memory(caf::actor_system& sys, std::shared_ptr<SlabDirectory> directory,
                            std::shared_ptr<PinTracker> tracker = nullptr);

}  // namespace loader::runtime
