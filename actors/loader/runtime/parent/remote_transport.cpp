#include "loader/runtime/parent/remote_transport.h"

#include <caf/io/all.hpp>
#if LOADER_WITH_CAF_OPENSSL
#include <caf/openssl/manager.hpp>
#endif

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "loader/error.h"
#include "loader/runtime/actor_system.h"
#include "loader/runtime/buffer_pool.h"
#include "loader/runtime/frames.h"
#include "loader/runtime/rng_state_page.h"
#include "loader/warnings.h"

namespace loader::runtime {

namespace {

/// The process's actor system for workers on other hosts: CAF's network layer (and TLS
/// when the first remote pool asks for it), made on first use and kept to the process's
/// end.  BASP heartbeats keep an idle connection alive at the host (its connection
/// timeout); the loss of a host is decided by the transports themselves.
caf::actor_system& remote_system(const RemoteWorkerSpec& s) {
  static std::mutex mu;
  static caf::actor_system* sys = nullptr;  // kept to the process's end
  static std::string tls_key;
  const std::string key = s.tls_cert + "\n" + s.tls_key + "\n" + s.tls_ca;
  std::lock_guard<std::mutex> l(mu);
  if (!sys) {
#if !LOADER_WITH_CAF_OPENSSL
    if (!s.tls_cert.empty())
      throw ValueError("DataLoader: remote_tls_* needs TLS, and this build has none (built without libcaf-openssl)");
#endif
    SystemSpec spec;
    spec.poll = true;
    spec.network = true;
    spec.tls_cert = s.tls_cert;
    spec.tls_key = s.tls_key;
    spec.tls_ca = s.tls_ca;
    auto* cfg = new RuntimeConfig(spec);  // the system keeps a reference to its configuration
    sys = start_actor_system(*cfg).release();
    tls_key = key;
  } else if (key != tls_key) {
    // A second system would have the same node id as the first (CAF derives it from
    // the process and the host): a host it connects to mistakes one for the other.
    throw ValueError("DataLoader: the workers on other hosts of one process share one TLS configuration; this loader "
                     "names other remote_tls_* files than the first one that connected");
  }
  return *sys;
}

/// A plain TCP connection to `a`, bounded by `timeout` (CAF's own connect has no bound:
/// an unreachable host would hold the pool for minutes), in blocking mode.  Throws
/// RuntimeError saying why not.
UniqueFd connect_bounded(const HostPort& a, std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(a.port);
  if (int rc = getaddrinfo(a.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    throw RuntimeError("cannot resolve the worker host " + a.text() + ": " + gai_strerror(rc));
  std::string why = "no address";
  UniqueFd out;
  for (addrinfo* p = res; p && !out; p = p->ai_next) {
    UniqueFd fd(socket(p->ai_family, p->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, p->ai_protocol));
    if (!fd) {
      why = std::strerror(errno);
      continue;
    }
    bool ok = false;
    if (connect(fd.get(), p->ai_addr, p->ai_addrlen) == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd pfd{fd.get(), POLLOUT, 0};
      const int n = poll(&pfd, 1, static_cast<int>(timeout.count()));
      int err = 0;
      socklen_t len = sizeof err;
      if (n == 1 && getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) ok = true;
      else why = n == 0 ? "no answer within " + std::to_string(timeout.count()) + " ms" : std::strerror(err ? err : errno);
    } else {
      why = std::strerror(errno);
    }
    if (!ok) continue;
    const int flags = fcntl(fd.get(), F_GETFL);
    if (flags >= 0) fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
    out = std::move(fd);
  }
  freeaddrinfo(res);
  if (!out) throw RuntimeError("cannot connect to the worker host " + a.text() + ": " + why);
  return out;
}

/// Attaches the bulk stream of a session (remote_protocol.h): connects to the host's
/// bulk port, greets with the session's key and waits for the host's answer, all within
/// `timeout`.  An empty UniqueFd when the port cannot be reached (the session goes on
/// over BASP; `why` says why); throws RuntimeError when the host took the greeting but did
/// not answer it.
UniqueFd attach_bulk(const HostPort& bulk, const std::string& key, std::chrono::milliseconds timeout,
                     std::string& why) {
  UniqueFd fd;
  try {
    fd = connect_bounded(bulk, timeout);
  } catch (const Error& e) {
    why = e.what();
    return UniqueFd();
  }
  const std::string hello = bulk_hello(key);
  if (::send(fd.get(), hello.data(), hello.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hello.size())) {
    why = std::string("cannot greet the bulk port ") + bulk.text() + ": " + std::strerror(errno);
    return UniqueFd();
  }
  pollfd pfd{fd.get(), POLLIN, 0};
  char ack = 0;
  if (poll(&pfd, 1, static_cast<int>(timeout.count())) != 1 || read_bytes(fd.get(), &ack, 1) != ReadStatus::Ok ||
      ack != kBulkAck)
    throw RuntimeError("the worker host's bulk port " + bulk.text() + " did not take this session's stream within " +
                       std::to_string(timeout.count()) + " ms");
  const int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

/// Before-records on a remote worker's page: as a local one's.
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// The gate published at `s.address`, through the network layer's own actor (as
/// remote_actor() does, but with the timeout: a host that accepts the connection and
/// then says nothing, a frozen one, would hold remote_actor() forever).
caf::expected<caf::actor> connect_gate(caf::actor_system& sys, const RemoteWorkerSpec& s) {
  caf::io::middleman_actor handle =
#if LOADER_WITH_CAF_OPENSSL
      !s.tls_cert.empty() ? sys.openssl_manager().actor_handle() :
#endif
                          sys.middleman().actor_handle();
  caf::expected<caf::actor> out = caf::make_error(caf::sec::request_timeout);
  caf::scoped_actor self{sys};
  self->request(handle, s.timeout, caf::connect_atom::value, s.address.host, s.address.port)
      .receive(
          [&](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>&) {
            if (ptr) out = caf::actor_cast<caf::actor>(ptr);
            else out = caf::make_error(caf::sec::no_actor_published_at_port);
          },
          [&](caf::error& e) { out = std::move(e); });
  return out;
}

}  // namespace

/// The client actors' way into their transport: gone (nullptr) once the transport is.
struct RemoteTransport::Inbox {
  std::mutex mu;
  RemoteTransport* t = nullptr;
  std::atomic<int64_t> last_heard_ns{0};

  void heard() { last_heard_ns.store(now_ns(), std::memory_order_relaxed); }

  /// A reply of incarnation `gen`: its states on the page, its task answered, on to the pool.
  void reply(uint32_t gen, result_msg& r, const std::string& before, const std::string& after) {
    heard();
    std::lock_guard<std::mutex> l(mu);
    if (!t) return;
    {
      std::lock_guard<std::mutex> tl(t->mu_);
      if (gen != t->gen_) return;  // an older incarnation's
      t->in_flight_.erase(r.batch.task);
    }
    RngStatePage page(t->page_.get(), t->page_bytes_);
    if (!before.empty()) page.write(r.batch.task, RngStatePage::Before, before);
    if (!after.empty()) page.write(r.batch.task, RngStatePage::After, after);
    t->events_->on_result(t->worker_, gen, std::move(r.batch));
  }

  /// Runs `event` for the pool, unless the transport is gone.
  template <class F>
  void event(F&& event) {
    heard();
    std::lock_guard<std::mutex> l(mu);
    if (t) event(*t->events_, t->worker_);
  }
  void ready(uint32_t gen) {
    event([&](LinkEvents& e, int w) { e.on_ready(w, gen); });
  }
  void stream_start(uint32_t gen, uint64_t task, StreamStart start) {
    event([&](LinkEvents& e, int w) { e.on_stream_start(w, gen, task, std::move(start)); });
  }
  void init_error(uint32_t gen, const std::string& type, const std::string& message, const std::string& when) {
    event([&](LinkEvents& e, int w) { e.on_init_error(w, gen, type, message, when); });
  }
  void unreadable(uint32_t gen, const std::string& what) {
    event([&](LinkEvents& e, int w) { e.on_unreadable(w, gen, what); });
  }
  /// What a bulk-stream frame of incarnation `gen` says (the events a session sends on
  /// its bulk stream, in order with its replies; without one they come as messages).
  void bulk(uint32_t gen, BulkFrame& f) {
    try {
      bulk_event(gen, f);
    } catch (const std::exception& e) {  // as a local worker's frame: the worker fails
      unreadable(gen, std::string("a frame the main process cannot read (") + frame_type_name(f.type) + "): " +
                          e.what());
    }
  }
  void bulk_event(uint32_t gen, BulkFrame& f) {
    switch (f.type) {
      case FrameType::RemoteReply: {
        result_msg m{f.reply.task, std::move(f.reply), -1};
        reply(gen, m, f.before, f.after);
        return;
      }
      case FrameType::Ready: ready(gen); return;
      case FrameType::StreamStart: {
        auto [task, start] = decode_stream_start(f.body);
        stream_start(gen, task, std::move(start));
        return;
      }
      case FrameType::InitError: {
        const InitErrorFrame e = InitErrorFrame::decode(f.body);
        init_error(gen, e.type, e.message, e.when);
        return;
      }
      default:
        unreadable(gen, std::string("a bulk-stream frame the main process does not expect (") +
                            frame_type_name(f.type) + ")");
    }
  }

  void lost(uint32_t gen, const std::string& why) {
    std::lock_guard<std::mutex> l(mu);
    if (t) t->lost(gen, why);
  }
};

namespace {

struct ClientState {
  std::shared_ptr<RemoteTransport::Inbox> inbox;
  uint32_t gen = 0;
  caf::actor session;
  uint64_t pings = 0;
  static inline const char* name = "loader.remote_client";
};

/// Receives what incarnation `gen`'s session sends; pings it every second.
caf::behavior client_behavior(caf::stateful_actor<ClientState>* self, std::shared_ptr<RemoteTransport::Inbox> inbox,
                              uint32_t gen, std::string where) {
  self->state.inbox = std::move(inbox);
  self->state.gen = gen;
  self->set_down_handler([self, where](caf::down_msg& m) {
    if (m.source != self->state.session.address()) return;
    self->state.inbox->lost(self->state.gen, where + ": its connection closed (the host or its server stopped, or "
                                                     "the network dropped the connection)");
    self->quit();
  });
  return {
      [self](open_atom, caf::actor session) {
        self->state.session = session;
        self->monitor(session);
        self->delayed_send(self, std::chrono::seconds(1), tick_atom::value);
      },
      [self](tick_atom) {
        if (!self->state.session) return;
        self->send(self->state.session, ping_atom::value, ++self->state.pings);
        self->delayed_send(self, std::chrono::seconds(1), tick_atom::value);
      },
      [self](pong_atom, uint64_t) { self->state.inbox->heard(); },
      [self](result_msg& r, const std::string& before, const std::string& after) {
        self->state.inbox->reply(self->state.gen, r, before, after);
      },
      [self](ready_atom) { self->state.inbox->ready(self->state.gen); },
      [self](stream_atom, uint64_t task, std::string& rng, bool has_state, std::string& state) {
        StreamStart s{std::move(rng), std::nullopt};
        if (has_state) s.state = std::move(state);
        self->state.inbox->stream_start(self->state.gen, task, std::move(s));
      },
      [self](fatal_atom, std::string& type, std::string& message, std::string& when, int32_t) {
        self->state.inbox->init_error(self->state.gen, type, message, when);
      },
  };
}

}  // namespace

RemoteTransport::RemoteTransport(int worker, RemoteWorkerSpec spec, LinkEvents* events, uint64_t rng_slots)
    : worker_(worker),
      spec_(std::move(spec)),
      home_(spec_.address),
      events_(events),
      inbox_(std::make_shared<Inbox>()),
      page_bytes_(RngStatePage::bytes_for(rng_slots)) {
  page_.reset(new uint64_t[(page_bytes_ + 7) / 8]());
  RngStatePage::format(page_.get(), rng_slots);
  inbox_->t = this;
}

RemoteTransport::~RemoteTransport() {
  {
    std::lock_guard<std::mutex> l(inbox_->mu);
    inbox_->t = nullptr;  // a client actor still running calls nothing from now on
  }
  stop();
}

// ------------------------------------------------------------------ the owner

void RemoteTransport::start(uint32_t gen) {
  caf::actor_system& sys = remote_system(spec_);
  const std::string where = spec_.address.text();
  end_bulk();  // the previous incarnation's stream, shut down when it was lost or stopped
  connect_bounded(spec_.address, spec_.timeout);  // a probe, bounded: CAF's own connect is not
  caf::expected<caf::actor> gate = connect_gate(sys, spec_);
  if (!gate) {
    const std::string err = sys.render(gate.error());
    if (gate.error() == caf::sec::disconnect_during_handshake)
      throw RuntimeError("authentication failed at " + where + ": the host closed the connection during the handshake (" +
                         err + "): a host serving TLS accepts only a client with a certificate signed by the CA it "
                         "trusts (remote_tls_cert, remote_tls_key, remote_tls_ca), and both sides must agree on TLS");
    throw RuntimeError("cannot reach the worker host at " + where + ": " + err +
                       (spec_.tls_cert.empty() ? std::string()
                                               : " (TLS: is the host's certificate signed by remote_tls_ca, and ours "
                                                 "by the CA the host trusts?)"));
  }
  auto client = sys.spawn(client_behavior, inbox_, gen, where);
  bool ok = false;
  std::string why = "no answer within " + std::to_string(spec_.timeout.count()) + " ms";
  caf::actor session;
  uint16_t bulk_port = 0;
  std::string bulk_key;
  {
    caf::scoped_actor self{sys};
    self->request(*gate, spec_.timeout, open_atom::value, kRemoteProtocolVersion, spec_.token, client)
        .receive(
            [&](bool accepted, std::string& reason, caf::actor& s, uint16_t port, std::string& key) {
              ok = accepted && s;
              why = reason;
              session = std::move(s);
              bulk_port = port;
              bulk_key = std::move(key);
            },
            [&](caf::error& e) { why = sys.render(e); });
  }
  if (!ok) {
    caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
    if (why.find("authentication") != std::string::npos)
      throw RuntimeError("authentication failed at " + where + ": the host refused remote_token_file's token (" +
                         why + ")");
    throw RuntimeError("the worker host at " + where + " refused the worker: " + why);
  }
  // The bulk stream, attached before anything else goes to the session: its events all
  // come one way from here.
  std::shared_ptr<UniqueFd> bulk;
  if (bulk_port != 0 && spec_.tls_cert.empty()) {
    std::string bulk_why;
    UniqueFd fd;
    try {
      fd = attach_bulk(HostPort{spec_.address.host, bulk_port}, bulk_key, spec_.timeout, bulk_why);
    } catch (const Error&) {
      caf::anon_send(session, bye_atom::value);
      caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
      throw;
    }
    if (fd) bulk = std::make_shared<UniqueFd>(std::move(fd));
    else if (!bulk_warned_) {
      bulk_warned_ = true;
      warn("the worker host at " + where + " has its bulk stream on port " + std::to_string(bulk_port) +
           ", which this process cannot reach (" + bulk_why +
           "): its batches come over CAF's connection instead, at a lower rate. Open that port (loader serve "
           "--bulk-port P fixes it), or start the host with --no-bulk to say so.");
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    gen_ = gen;
    session_ = session;
    client_ = client;
    lost_reported_ = false;
    in_flight_.clear();
    bulk_ = bulk;
  }
  if (bulk) bulk_reader_ = std::thread(read_bulk, inbox_, bulk, gen, where);
  inbox_->heard();
  caf::anon_send(client, open_atom::value, session);
  // Connected and authenticated: the incarnation's hello (the watchdog stops waiting).
  events_->on_hello(worker_, gen);
}

void RemoteTransport::stop() {
  caf::actor session, client;
  {
    std::lock_guard<std::mutex> l(mu_);
    session = std::move(session_);
    client = std::move(client_);
    session_ = caf::actor();
    client_ = caf::actor();
    lost_reported_ = true;  // a stopped incarnation is not reported lost
    in_flight_.clear();
  }
  if (session) caf::anon_send(session, bye_atom::value);
  if (client) caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
  end_bulk();
}

void RemoteTransport::end_bulk() {
  std::shared_ptr<UniqueFd> bulk;
  {
    std::lock_guard<std::mutex> l(mu_);
    bulk = std::move(bulk_);
    bulk_.reset();
  }
  if (bulk) ::shutdown(bulk->get(), SHUT_RDWR);  // wakes its reader; the reader's reference closes it
  if (!bulk_reader_.joinable()) return;
  if (bulk_reader_.get_id() == std::this_thread::get_id()) bulk_reader_.detach();  // called from its own events
  else bulk_reader_.join();
}

void RemoteTransport::read_bulk(std::shared_ptr<Inbox> inbox, std::shared_ptr<UniqueFd> fd, uint32_t gen,
                                std::string where) {
  std::string why = where + ": its connection closed (the host or its server stopped, or the network dropped the "
                            "connection)";
  // The batches' buffers: each comes back when the application drops its batch.
  BufferPool pool;
  try {
    while (true) {
      BulkFrame f;
      if (read_bulk_frame(fd->get(), f, &pool) != ReadStatus::Ok) break;
      inbox->bulk(gen, f);
    }
  } catch (const std::exception& e) {
    why = where + ": its bulk stream cannot be read: " + e.what();
  }
  inbox->lost(gen, why);  // nothing when the incarnation was stopped or already lost
}

void RemoteTransport::say_shutdown() {
  std::lock_guard<std::mutex> l(mu_);
  if (session_) caf::anon_send(session_, bye_atom::value);
}

std::optional<std::string> RemoteTransport::loss_reason(
    const std::string& where, std::chrono::milliseconds timeout, std::chrono::milliseconds silent,
    const std::map<uint64_t, std::chrono::steady_clock::time_point>& in_flight,
    std::chrono::steady_clock::time_point now) {
  if (silent > timeout)
    return where + ": it sent nothing for " + std::to_string(silent.count()) + " ms (remote_timeout " +
           std::to_string(timeout.count()) + " ms): the host is frozen, overloaded or cut off";
  if (in_flight.empty()) return std::nullopt;
  auto oldest = in_flight.begin();
  for (auto it = in_flight.begin(); it != in_flight.end(); ++it)
    if (it->second < oldest->second) oldest = it;
  if (now - oldest->second > timeout)
    return where + ": task " + std::to_string(oldest->first) + " got no answer within " +
           std::to_string(timeout.count()) + " ms (remote_timeout)";
  return std::nullopt;
}

void RemoteTransport::watch(const Liveness&, std::chrono::milliseconds, std::chrono::milliseconds) {
  uint32_t gen;
  std::optional<std::string> why;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!session_ || lost_reported_) return;
    gen = gen_;
    const auto silent =
        std::chrono::milliseconds((now_ns() - inbox_->last_heard_ns.load(std::memory_order_relaxed)) / 1000000);
    why = loss_reason(spec_.address.text(), spec_.timeout, silent, in_flight_, std::chrono::steady_clock::now());
  }
  if (why) lost(gen, *why);
}

void RemoteTransport::lost(uint32_t gen, const std::string& why) {
  caf::actor client;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (gen != gen_ || lost_reported_) return;
    lost_reported_ = true;
    client = client_;
  }
  if (client) caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
  {
    std::lock_guard<std::mutex> l(mu_);
    if (gen == gen_ && bulk_) ::shutdown(bulk_->get(), SHUT_RDWR);  // its reader wakes and ends
  }
  events_->on_down(worker_, gen, WorkerExit{WorkerExit::Kind::HostLost, 0, why});
}

// ------------------------------------------------------------------ the strand

void RemoteTransport::reset(uint32_t) {
  std::lock_guard<std::mutex> l(mu_);
  in_flight_.clear();
}

void RemoteTransport::prepare(std::string config) { init(std::move(config)); }

caf::actor RemoteTransport::session() const {
  std::lock_guard<std::mutex> l(mu_);
  return session_;
}

void RemoteTransport::init(std::string config) { tell(init_atom::value, std::move(config)); }

void RemoteTransport::set_rng(uint64_t task, std::string state) {
  tell(set_rng_atom::value, task, std::move(state));
}

void RemoteTransport::task_seeds(const TaskSeeds& seeds) {
  tell(seeds_atom::value, seeds.base_seed, seeds.task_base);
}

void RemoteTransport::restart_stream() { tell(epoch_atom::value); }

void RemoteTransport::resume_stream(const StreamResume& r) {
  tell(resume_atom::value, r.skip, r.rng, r.state);
}

void RemoteTransport::send_task(uint64_t task, uint64_t, const IndexBatch& indices) {
  caf::actor s;
  {
    std::lock_guard<std::mutex> l(mu_);
    s = session_;
    if (!s) return;
    in_flight_[task] = std::chrono::steady_clock::now();
  }
  caf::anon_send(s, task_msg{task, indices, kInlineSlab});
}

std::optional<std::string> RemoteTransport::state_before(uint64_t task, uint64_t floor) const {
  RngStatePage page(page_.get(), page_bytes_);
  if (auto s = page.state_before(task, floor)) return std::string(reinterpret_cast<const char*>(s->data()), s->size());
  return std::nullopt;
}

std::optional<uint64_t> RemoteTransport::last_started() const {
  return RngStatePage(page_.get(), page_bytes_).last_before();
}

std::optional<std::pair<uint64_t, std::string>> RemoteTransport::last_state() const {
  return RngStatePage(page_.get(), page_bytes_).last_after();
}

void RemoteTransport::carry_state(uint64_t task, const std::string& state) {
  RngStatePage(page_.get(), page_bytes_).write(task, RngStatePage::After, state);
}

}  // namespace loader::runtime
