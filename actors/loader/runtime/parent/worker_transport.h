// WorkerTransport: link k's transport, how worker k's tasks reach it and its results and
// events come back, one per worker slot, across the worker's incarnations.  The link
// actor (link_actor.h) and the worker stage (worker_slots.h) speak tasks, results and
// incarnations; only a transport knows what carries them:
//
//   ShmTransport     (shm_transport.h) a local child process or thread: tasks and
//                    results in the pool's shared-memory rings, batches in slabs, the
//                    frames with a descriptor on a Unix socket, the generator state page.
//   RemoteTransport  (remote_transport.h) a worker actor on another host over CAF's
//                    network layer: no shared memory, so every batch comes back inline
//                    (kInlineSlab) and the generator states come back with the results.
//
// The seam is typed both ways: what the worker is told (a task, init, set_rng,
// task_seeds, restart_stream, resume_stream, say_shutdown) and what it reports
// (LinkEvents: hello, ready, stream_start, init_error, result, unreadable, down).  The
// frame protocol (wire.h, frames.h) is ShmTransport's own: it encodes the one and
// decodes the other; RemoteTransport sends CAF messages and reads its bulk stream.
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

#include "loader/runtime/epoch.h"  // StreamStart, StreamResume
#include "loader/runtime/protocol.h"
#include "loader/runtime/worker_exit.h"
#include "loader/sampler.h"

namespace loader::runtime {

struct HostPort;  // remote_protocol.h

/// WorkerSeeding::PerTask: task t of the epoch is seeded task_seed(base_seed, t - task_base).
struct TaskSeeds {
  uint64_t base_seed = 0;
  uint64_t task_base = 0;
};

/// What a transport reports of incarnation `gen` of worker `worker`, typed: how it
/// travelled (a frame on a socket, a CAF message, a bulk-stream frame) is the transport's
/// business.  Implemented by the pool (Pipeline).  On the transport's own thread (a
/// local link's reader, a remote one's client actor or bulk reader), never on the strand.
class LinkEvents {
 public:
  virtual ~LinkEvents() = default;
  /// The incarnation is up: a local process said hello, a remote session is open.
  virtual void on_hello(int worker, uint32_t gen) = 0;
  /// It finished its start-up (its dataset built, worker_init_fn run).
  virtual void on_ready(int worker, uint32_t gen) = 0;
  /// Its iterable stream answering `task` began (its generator state, and the stream's
  /// state() when the dataset has state hooks).
  virtual void on_stream_start(int worker, uint32_t gen, uint64_t task, StreamStart start) = 0;
  /// It cannot start or go on: `type`, `message` of the error, and `when` it failed
  /// (empty: to start; "to restart its stream", ...).
  virtual void on_init_error(int worker, uint32_t gen, const std::string& type, const std::string& message,
                             const std::string& when) = 0;
  /// It answered a task (a batch, a sample's error, a larger slab needed, the end of its
  /// stream) other than through the result ring.
  virtual void on_result(int worker, uint32_t gen, WorkerReply&& reply) = 0;
  /// It sent what the main process cannot read (`what`: "a frame ... (Type): why"): it fails.
  virtual void on_unreadable(int worker, uint32_t gen, const std::string& what) = 0;
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
  // What the worker is told, each in order with the tasks sent before and after it:
  /// A new configuration `config` (an encoded WorkerConfig: a kept pool re-initialised).
  virtual void init(std::string config) = 0;
  /// Its generator goes to `state`, the state task `task` began from (a restart).
  virtual void set_rng(uint64_t task, std::string state) = 0;
  /// WorkerSeeding::PerTask: how this epoch's tasks are seeded.
  virtual void task_seeds(const TaskSeeds& seeds) = 0;
  /// A persistent worker's iterable stream starts anew (a new epoch).
  virtual void restart_stream() = 0;
  /// Its iterable stream begins from a checkpoint's state instead.
  virtual void resume_stream(const StreamResume& resume) = 0;
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
