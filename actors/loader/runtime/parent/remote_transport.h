// RemoteTransport: link k's transport to a worker on another host (worker_transport.h):
// a session of a worker host (`loader serve`, child/serve.cpp) reached over CAF's
// network layer (remote_protocol.h).  No shared memory: every task goes out for a batch
// inline, and each reply carries the generator states its task started from and ended
// with, which this transport keeps on a state page of its own, so that restarts and
// checkpoints resume a remote worker's random stream exactly as a local one's.
//
// An incarnation is one authenticated session: start() connects (a TCP probe bounded
// by the timeout first: CAF's connect has none), presents the token, gets the session's
// handle, and attaches the session's bulk stream (remote_protocol.h), whose reader thread
// receives the replies and events; a client actor in the process's network actor system
// receives what the session sends over BASP (everything, without a bulk stream) and
// pings it every second.  The host is declared lost, once per incarnation and with one
// warning naming host:port (LinkEvents::on_down, WorkerExit::HostLost), when its
// connection closes (a killed host, a server that exited: the session's proxy goes down
// or the bulk stream ends), when it sends nothing for `timeout` (frozen, cut off), or
// when a task gets no answer within `timeout` (CAF leaves requests to a dead or frozen
// peer pending).
//
// Thread use as worker_transport.h says; the client actor's thread and the bulk reader
// call the pool's LinkEvents (through Inbox), and the handle of the session, the bulk
// stream and the tasks in flight are under mu_.
#pragma once

#include <caf/all.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "loader/runtime/os/unique_fd.h"
#include "loader/runtime/parent/worker_transport.h"
#include "loader/runtime/remote_protocol.h"

namespace loader::runtime {

/// Where a remote worker runs and how to reach it.
struct RemoteWorkerSpec {
  HostPort address;
  std::string token;                          ///< the shared secret (read from the token file)
  std::chrono::milliseconds timeout{10000};   ///< silence or a task without answer this long: lost
  std::string tls_cert, tls_key, tls_ca;      ///< TLS (all three, or none)
};

class RemoteTransport final : public HostedTransport {
 public:
  /// `events` outlives the transport.  `rng_slots`: before-records on its state page.
  RemoteTransport(int worker, RemoteWorkerSpec spec, LinkEvents* events, uint64_t rng_slots);
  ~RemoteTransport() override;

  bool shares_memory() const override { return false; }

  /// Owner: the next start() connects to `a` instead (a slot whose host was lost goes
  /// to another host; home() takes it back).
  void retarget(const HostPort& a) override { spec_.address = a; }
  const HostPort& target() const override { return spec_.address; }
  const HostPort& home() const override { return home_; }

  void start(uint32_t gen) override;
  void stop() override;
  void say_shutdown() override;
  void flush() override {}  // messages go out as they are sent
  void watch(const Liveness& seen, std::chrono::milliseconds tick, std::chrono::milliseconds hello_deadline) override;
  int pid() const override { return -1; }

  void reset(uint32_t gen) override;
  void prepare(std::string init) override;
  void init(std::string config) override;
  void set_rng(uint64_t task, std::string state) override;
  void task_seeds(const TaskSeeds& seeds) override;
  void restart_stream() override;
  void resume_stream(const StreamResume& resume) override;
  void send_task(uint64_t task, uint64_t slab, const IndexBatch& indices) override;
  void use_slab(uint64_t, uint64_t) override {}  // never: every batch is inline
  bool dirty() const override { return false; }
  size_t take_results(const std::function<void(WorkerReply&&)>&) override { return 0; }
  std::optional<std::string> state_before(uint64_t task, uint64_t floor) const override;
  std::optional<uint64_t> last_started() const override;
  std::optional<std::pair<uint64_t, std::string>> last_state() const override;
  void carry_state(uint64_t task, const std::string& state) override;

  /// Whether a host is lost, and why (`where`: its host:port): nothing heard from it
  /// for longer than `timeout` (`silent`), or a task in flight (sent at the time given)
  /// for longer than `timeout` at `now`.  The watchdog's rule, a plain function (tests).
  static std::optional<std::string> loss_reason(
      const std::string& where, std::chrono::milliseconds timeout, std::chrono::milliseconds silent,
      const std::map<uint64_t, std::chrono::steady_clock::time_point>& in_flight,
      std::chrono::steady_clock::time_point now);

  /// What the client actor hands over (its thread).  Each names the incarnation it
  /// belongs to; an older one's is dropped.
  struct Inbox;

 private:
  /// Declares incarnation `gen` lost (once): its client actor ends, its bulk stream is
  /// shut down, the pool hears `why`.
  void lost(uint32_t gen, const std::string& why);
  /// The owner: shuts the bulk stream down and joins its reader.
  void end_bulk();
  /// The incarnation's session (none when not connected).
  caf::actor session() const;
  /// Sends the session `xs` (nothing when not connected): the strand's way to tell the
  /// worker something, in order with the tasks.
  template <class... Ts>
  void tell(Ts&&... xs) {
    if (caf::actor s = session()) caf::anon_send(s, std::forward<Ts>(xs)...);
  }
  /// The bulk stream's reader thread of incarnation `gen`: frames to the inbox until the
  /// stream ends, then the loss (nothing when the incarnation was stopped first).
  static void read_bulk(std::shared_ptr<Inbox> inbox, std::shared_ptr<UniqueFd> fd, uint32_t gen, std::string where);

  const int worker_;
  RemoteWorkerSpec spec_;            ///< address: where the next start() connects
  const HostPort home_;              ///< the slot's own host
  LinkEvents* events_;
  std::shared_ptr<Inbox> inbox_;  ///< shared with the client actors

  mutable std::mutex mu_;
  uint32_t gen_ = 0;                 ///< the incarnation started last
  caf::actor session_;               ///< its session (a proxy), none when not connected
  caf::actor client_;                ///< its client actor
  bool lost_reported_ = false;       ///< the incarnation was reported lost (or stopped)
  std::map<uint64_t, std::chrono::steady_clock::time_point> in_flight_;  ///< tasks sent, not answered
  /// The incarnation's bulk stream (none: over BASP alone), shared with its reader,
  /// whose reference closes it; the reader thread is the owner's (start, stop).
  std::shared_ptr<UniqueFd> bulk_;
  std::thread bulk_reader_;
  bool bulk_warned_ = false;  ///< the owner's: an unreachable bulk port is said once

  std::unique_ptr<uint64_t[]> page_;  ///< the state page kept from the replies (aligned words)
  size_t page_bytes_ = 0;
};

}  // namespace loader::runtime
