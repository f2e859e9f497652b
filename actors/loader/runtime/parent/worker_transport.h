// WorkerTransport: link k's transport, how worker k's tasks reach it and its results and
// events come back, one per worker slot, across the worker's incarnations.  The link
// actor (link_actor.h) and the worker stage (worker_slots.h) speak tasks, results and
// incarnations; only a transport knows what carries them:
//
//   ShmTransport     (shm_transport.h) a local child process or thread: tasks and
//                    results in the pool's shared-memory rings, batches in slabs, the
//                    frames with a descriptor on a Unix socket, the generator state page.
//   a remote one     a worker actor on another host over CAF's network layer: no shared
//                    memory, so every batch comes back inline (kInlineSlab) and the
//                    generator states come back with the results.
//
// A slot uses one transport at a time (its home one; a remote slot whose host was lost
// uses another host's or a local stand-in until a later epoch takes it home: the pool,
// Pipeline, chooses between incarnations).
//
// Thread use, and the locks (outermost first): the slot's owner, one thread at a time
// under the slot's owner lock (Pipeline: the slot actor for restart, watchdog, flush;
// the application thread for the first start, flushes after next(), shutdown), calls
// start/stop/say_shutdown/flush/watch, entering the strand only in between; the worker
// stage calls the strand methods with the strand entered; events come on the
// transport's own thread (LinkEvents).  A transport's frames queued on the strand and
// written by the owner are guarded by a lock of its own, innermost.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "loader/runtime/protocol.h"
#include "loader/runtime/wire.h"
#include "loader/runtime/worker_exit.h"
#include "loader/sampler.h"

namespace loader::runtime {

struct HostPort;  // remote_protocol.h

/// What a transport reports; implemented by the pool (Pipeline).  On the transport's own
/// thread (a local link's reader), never on the strand.
class LinkEvents {
 public:
  virtual ~LinkEvents() = default;
  /// A frame of incarnation `gen` of worker `worker` (hello, ready, an error, a result
  /// that did not travel in a ring).
  virtual void on_frame(int worker, uint32_t gen, Frame& frame) = 0;
  /// A reply of incarnation `gen` that came as a message, not a frame (a worker on
  /// another host: its batch inline).
  virtual void on_reply(int worker, uint32_t gen, WorkerReply&& reply) = 0;
  /// The incarnation is gone; `how` says how (a local process is reaped already).
  virtual void on_down(int worker, uint32_t gen, const WorkerExit& how) = 0;
};

/// What the watchdog knows of an incarnation (the worker stage's view).
struct Liveness {
  bool hello = false;  ///< it said hello
  std::chrono::steady_clock::time_point started;
};

class WorkerTransport {
 public:
  virtual ~WorkerTransport() = default;

  /// Batches go into the pool's shared-memory slabs; false: every batch comes back
  /// inline, in its reply.  Fixed for the transport's life.
  virtual bool shares_memory() const = 0;

  // ---- the slot's owner, under its owner lock, never on the strand
  /// Starts incarnation `gen` (a process, a thread, a connection); its events go to the
  /// pool.  Throws RuntimeError when it cannot.  REQUIRES: reset(gen) ran.
  virtual void start(uint32_t gen) = 0;
  /// Ends the current incarnation and waits for its events thread.  Idempotent.
  virtual void stop() = 0;
  /// The pool ends: what is queued is dropped and the worker is told (every worker
  /// first, then each stopped: they end together).
  virtual void say_shutdown() = 0;
  /// Writes the frames queued for the worker.
  virtual void flush() = 0;
  /// Looks at the incarnation every `tick` (a frozen or vanished process, no hello
  /// within `hello_deadline`): a lost one is ended and reported (LinkEvents::on_down).
  virtual void watch(const Liveness& seen, std::chrono::milliseconds tick,
                     std::chrono::milliseconds hello_deadline) = 0;
  /// The running incarnation's pid (-1: a thread, a remote worker, none).  Any thread.
  virtual int pid() const = 0;

  // ---- the worker stage, on the strand
  /// Incarnation `gen` is next: what was queued for the last one is dropped, and a
  /// transport with rings empties them.  The last one is dead or never ran.
  virtual void reset(uint32_t gen) = 0;
  /// Queues the incarnation's first frames: the transport's own (state page, rings),
  /// then the configuration `init` (an encoded WorkerConfig).
  virtual void prepare(std::string init) = 0;
  /// Queues a frame (SetRng, Init, Epoch, TaskSeeds, ResumeStream), in order with tasks.
  virtual void send(FrameType type, std::string body) = 0;
  /// Task `task`, the batch into `slab` (kInlineSlab: in the reply), after every frame
  /// sent before it.
  virtual void send_task(uint64_t task, uint64_t slab, const IndexBatch& indices) = 0;
  /// Task `task` did not fit its slab: again into `slab` (transports that share memory).
  virtual void use_slab(uint64_t task, uint64_t slab) = 0;
  /// Frames wait for the owner's flush().
  virtual bool dirty() const = 0;
  /// Takes the replies the worker published for the strand to read (the result ring),
  /// each to `sink`; returns how many.  Throws RuntimeError naming what it cannot read
  /// (nothing more of the incarnation is read then).
  virtual size_t take_results(const std::function<void(WorkerReply&&)>& sink) = 0;
  /// The generator state task `task` started from, among the records of tasks at or
  /// above `floor`; nullopt: not known.
  virtual std::optional<std::string> state_before(uint64_t task, uint64_t floor) const = 0;
  /// The latest task whose start the worker recorded (nullopt: none).
  virtual std::optional<uint64_t> last_started() const = 0;
  /// The state after the latest task the worker finished (its task, its state).
  virtual std::optional<std::pair<uint64_t, std::string>> last_state() const = 0;
  /// The slot moves here from another transport: its stream goes on from `state`, the
  /// state after task `task` (recorded as that task's After).  Before start().
  virtual void carry_state(uint64_t task, const std::string& state) = 0;
};

/// A transport to a worker on another host, which can be pointed at another host
/// (RemoteTransport; SlotPlacement moves a slot whose host was lost).  The owner, under
/// the slot's owner lock, calls these, between incarnations.
class HostedTransport : public WorkerTransport {
 public:
  /// The next start() connects to `a` instead.
  virtual void retarget(const HostPort& a) = 0;
  /// Where the next start() connects, and the host the slot was given.
  virtual const HostPort& target() const = 0;
  virtual const HostPort& home() const = 0;
};

}  // namespace loader::runtime
