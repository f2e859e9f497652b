// SlotPlacement: which transport serves each worker slot of a pool, and moving a remote
// slot when its host is lost.  Pipeline's placement role, apart from the per-batch path
// (BatchDelivery) and the epochs:
//
//   slot k < local    its ShmTransport (a local process or thread), always
//   slot k >= local   its RemoteTransport, pointed at its own host; when that host is
//                     lost, start() tries the other worker hosts (its home first, if it
//                     was away), then a local stand-in process (a ShmTransport made when
//                     first needed, with the same id), in that order; go_home() takes
//                     it back to its host as an epoch begins
//
// It owns every transport of the pool (made with it, each stopped by stop_all()) and
// each slot's owner lock (worker_transport.h: it orders what is written to one worker
// and who starts and stops its incarnations).
//
// Thread use: the slot's owner (the thread holding owner(k): the slot actor, or the
// application thread starting the pool, taking a slot home or shutting down) calls
// start, go_home, at_home and the transports' owner methods; current(k) is changed only
// under both the owner lock and the strand (Hooks::enter), so either lock suffices to
// read it (the strand reads it to take results and see dirty frames).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "loader/runtime/parent/worker_transport.h"
#include "loader/runtime/remote_protocol.h"
#include "loader/runtime/worker_exit.h"

namespace loader::runtime {

class SlotPlacement {
 public:
  struct Hooks {
    /// Enters the strand (StageActors::enter).
    std::function<std::unique_lock<std::mutex>()> enter;
    /// On the strand: slot `worker`'s next incarnation goes through `t`
    /// (WorkerSlots::set_transport).
    std::function<void(int worker, WorkerTransport* t)> use;
    /// A local transport for slot `worker` (a local slot's, or a remote slot's stand-in).
    std::function<std::unique_ptr<WorkerTransport>(int worker)> make_local;
    /// Remote slot `worker`'s transport to the host `remote_hosts[index]`.
    std::function<std::unique_ptr<HostedTransport>(int worker, size_t index)> make_remote;
  };
  /// `workers` slots, the last remote_hosts.size() of them remote (a local slot's id is
  /// below every remote one's).  Makes every slot's home transport.
  SlotPlacement(int workers, std::vector<HostPort> remote_hosts, Hooks hooks);
  SlotPlacement(const SlotPlacement&) = delete;
  SlotPlacement& operator=(const SlotPlacement&) = delete;

  int size() const { return static_cast<int>(slots_.size()); }
  int local_count() const { return size() - static_cast<int>(remote_hosts_.size()); }
  /// The transport slot `worker` uses now.  Under its owner lock or the strand.
  WorkerTransport& current(int worker) const { return *slot(worker).current; }
  /// Whether slot `worker` is remote (fixed for the pool's life).  Any thread.
  bool remote(int worker) const { return slot(worker).remote != nullptr; }
  /// Slot `worker`'s owner lock.
  std::mutex& owner(int worker) const { return slot(worker).owner; }
  /// The transports each slot starts with, in slot order (WorkerSlots' at construction).
  std::vector<WorkerTransport*> homes() const;

  // ---- the slot's owner, its owner lock held, never on the strand
  /// Starts incarnation `gen` of slot `worker` where it can run: its current transport;
  /// when `lost` (its host was lost: WorkerSlots::host_lost) and the slot is remote,
  /// another worker host or a local stand-in.  Returns the transport it started on;
  /// throws RuntimeError saying what it tried when none could.  REQUIRES: the
  /// incarnation begun (WorkerSlots::begin_incarnation), the last one stopped.
  WorkerTransport& start(int worker, uint32_t gen, const std::optional<WorkerExit>& lost);
  /// Whether slot `worker` is where it was given: a local slot always; a remote one on
  /// its own transport, pointed at its own host.
  bool at_home(int worker) const;
  /// Takes a remote slot away from its host (moved after a loss) home: the transport in
  /// use stopped, incarnation `gen` started on its host; if the host cannot take it, it
  /// starts where it was (a warning says so).  Returns the transport it runs on; throws
  /// RuntimeError when it could start nowhere.  REQUIRES: !at_home(worker), the
  /// incarnation begun.
  WorkerTransport& go_home(int worker, uint32_t gen);

  // ---- the pool's shutdown (the application thread; every owner lock taken in turn)
  /// Tells every slot's worker to exit (every worker first: they end together).
  void say_shutdown_all();
  /// Stops every transport of every slot (readers joined, processes reaped).
  void stop_all();

 private:
  struct Slot {
    mutable std::mutex owner;
    std::unique_ptr<WorkerTransport> home;  ///< a local slot's ShmTransport, a remote slot's HostedTransport
    HostedTransport* remote = nullptr;      ///< home, when the slot is remote
    std::unique_ptr<WorkerTransport> standin;  ///< a remote slot's local stand-in, made when first needed
    WorkerTransport* current = nullptr;
  };
  Slot& slot(int worker) const { return *slots_.at(static_cast<size_t>(worker)); }
  /// Slot `worker` uses `t` from now (current, and the worker stage told, on the strand).
  void use(int worker, WorkerTransport* t);

  Hooks hooks_;
  std::vector<HostPort> remote_hosts_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace loader::runtime
