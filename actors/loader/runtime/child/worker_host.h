// WorkerHost: hosts a worker actor and feeds its mailbox from the main process's link.
//
// The transport under the actor messages between the main process and its workers is
// shared memory: tasks arrive in the worker's task ring, results leave in its result
// ring (worker_rings.h), and the socket carries what the rings cannot (descriptors,
// configuration, a frame too large for a ring) and EOF.  The host reads both, keeps
// every OS resource they bring (the mappings of slabs, of the state page and of the
// rings), and turns each frame into the worker actor's message (protocol.h):
//
//   Task -> task_msg          UseSlab -> use_slab      Init -> init
//   AddSlab/DropSlab -> slab  StatePage -> page        SetRng -> set_rng
//   Epoch -> epoch            Rings: the uplink's result ring   Shutdown: the end
//
// It runs the worker actor and the uplink actor on its own thread (InlineExecutor):
// a task goes from the ring into the actor's mailbox, is computed, and its result_msg
// is written into the result ring without a thread hand-off or a system call.
//
// One per worker incarnation: in a worker process (run_worker_if_requested, with an
// actor system of its own) or in a thread of the main process (in-process workers,
// in the main process's actor system).
//
// Thread use: one thread (the one that calls run()) for the host's whole life.
#pragma once

#include <sys/types.h>

#include <caf/all.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>

#include "loader/runtime/child/uplink.h"
#include "loader/runtime/inline_executor.h"
#include "loader/runtime/protocol.h"
#include "loader/runtime/os/shm.h"
#include "loader/runtime/wire.h"
#include "loader/runtime/worker_rings.h"

namespace loader::runtime {

class WorkerHost {
 public:
  /// `sock`: the link to the main process (not owned); `parent`: the main process's pid
  /// (0 in a thread of the main process).  The actors live in `sys`.
  WorkerHost(caf::actor_system& sys, int sock, pid_t parent);
  /// Stops both actors (they run here one last time), then unmaps what the host mapped.
  ~WorkerHost();
  WorkerHost(const WorkerHost&) = delete;
  WorkerHost& operator=(const WorkerHost&) = delete;

  /// Serves the link until EOF, Shutdown or a fatal error; returns the exit status
  /// (0: the link ended, 1: the worker could not start or go on, 2: a protocol error).
  int run();

 private:
  bool read_socket(Frame& f);
  /// Hands one frame to the worker actor and runs the actors; -1 to go on, else the
  /// exit status.
  int handle(Frame& f);
  int deliver_frame(Frame& f);
  /// Runs the actors; the uplink's status once the worker must end, else -1.
  int run_actors();
  int protocol_error(const std::string& what);

  int sock_;
  // Declared before the actors: unmapped after they are gone.
  std::map<uint64_t, ShmMapping> slabs_;
  ShmMapping state_mapping_;
  ShmMapping rings_mapping_;
  std::unique_ptr<WorkerRingEnd> ring_;
  Uplink uplink_;
  InlineExecutor exec_;
  uplink_actor uplink_actor_;
  worker_actor worker_;
  uint64_t socket_read_ = 0;  ///< frames read from the socket, all of them counted
  bool shutdown_ = false;
};

/// Serves the link `sock` with a worker host; returns its exit status.  `parent`: the
/// main process's pid in a worker process (a CAF actor system of the process's own is
/// built for the worker actor), 0 in a thread of the main process (its actor system).
int run_worker_loop(int sock, pid_t parent);

}  // namespace loader::runtime
