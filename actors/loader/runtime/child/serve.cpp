#include "loader/serve.h"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#ifndef LOADER_WITH_CAF_OPENSSL
#define LOADER_WITH_CAF_OPENSSL 0
#endif
#if LOADER_WITH_CAF_OPENSSL
#include <caf/openssl/publish.hpp>
#endif

#include <signal.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <algorithm>
#include <optional>
#include <string>

#include "loader/error.h"
#include "loader/runtime/actor_system.h"
#include "loader/runtime/child/bulk_listener.h"
#include "loader/runtime/child/remote_session.h"
#include "loader/runtime/child/worker_core.h"
#include "loader/runtime/remote_protocol.h"

namespace loader::runtime {

namespace {

/// What serve() runs with: the options, checked, with the token read.
struct Checked {
  ServeOptions o;
  HostPort listen;
  std::string token;
  bool tls() const { return !o.tls_cert.empty(); }
};

Checked check(const ServeOptions& o) {
  Checked c{o, {}, {}};
  if (o.listen.empty()) throw ValueError("loader serve: --listen HOST:PORT is required");
  if (o.token_file.empty()) throw ValueError("loader serve: --token-file is required (clients present its secret)");
  if (o.stats_every_ms < 0 || o.timeout_ms < 0)
    throw ValueError("loader serve: --stats-every-ms and --timeout-ms take a number of milliseconds (0 or more)");
  if (o.bulk_port < 0 || o.bulk_port > 65535) throw ValueError("loader serve: --bulk-port takes a port number (0-65535)");
  c.o.timeout_ms = std::max<int64_t>(100, o.timeout_ms);
  c.listen = parse_host_port(o.listen, "loader serve --listen");
  c.token = read_token_file(o.token_file);
  const int tls_given = !o.tls_cert.empty() + !o.tls_key.empty() + !o.tls_ca.empty();
  if (tls_given != 0 && tls_given != 3)
    throw ValueError("loader serve: TLS needs all of --tls-cert, --tls-key and --tls-ca");
#if !LOADER_WITH_CAF_OPENSSL
  if (tls_given) throw ValueError("loader serve: this build has no TLS (it was built without libcaf-openssl)");
#endif
  return c;
}

void log_line(const std::string& s) {
  std::cerr << "loader serve: " << s << std::endl;
}

struct SessionState {
  std::unique_ptr<RemoteSession> session;
  ServeCounters* counters = nullptr;
  static inline const char* name = "loader.remote_session";
};

/// One remote worker slot: the client's messages, in order, to the worker actor.  `sink`
/// (null: none) is where the client attaches its bulk stream, with `key` at `bulk`.
caf::behavior session_behavior(caf::stateful_actor<SessionState>* self, caf::actor client, ServeCounters* counters,
                               std::chrono::milliseconds timeout, BulkListener* bulk, std::string key,
                               std::shared_ptr<BulkSink> sink) {
  self->state.counters = counters;
  counters->clients.fetch_add(1);
  counters->sessions.fetch_add(1);
  self->state.session = std::make_unique<RemoteSession>(self->system(), client, *counters, sink);
  self->monitor(client);
  self->set_down_handler([self](caf::down_msg&) { self->quit(); });
  self->attach_functor([counters, bulk, key] {
    counters->clients.fetch_sub(1);
    if (bulk) bulk->close(key);
  });
  auto refuse = [self, client](const std::string& type, const std::string& why) {
    self->send(client, fatal_atom::value, type, why, std::string(), int32_t{1});
  };
  return {
      [self](task_msg& t) {
        if (self->state.session->ended()) return self->quit();  // its bulk stream broke: the client is gone
        t.slab = kInlineSlab;  // nothing is shared with the client: every batch inline
        self->state.session->deliver(std::move(t));
      },
      [self, refuse](init_atom, std::string& config) {
        if (self->state.session->ended()) return;
        // Only a handle this host can open may build: a dataset naming the client's
        // resources is refused naming the parameter.
        try {
          const WorkerConfig c = WorkerConfig::from_value(decode_value(config));
          if (auto why = remote_resource_error(c.dataset.params)) return refuse("ValueError", *why);
        } catch (const std::exception& e) {
          return refuse("RuntimeError", std::string("the worker configuration cannot be read: ") + e.what());
        }
        self->state.session->deliver(init_atom::value, std::move(config));
      },
      [self](set_rng_atom a, uint64_t task, std::string& state) {
        if (!self->state.session->ended()) self->state.session->deliver(a, task, std::move(state));
      },
      [self](epoch_atom a) {
        if (!self->state.session->ended()) self->state.session->deliver(a);
      },
      [self](seeds_atom a, uint64_t base_seed, uint64_t task_base) {
        if (!self->state.session->ended()) self->state.session->deliver(a, base_seed, task_base);
      },
      [self](resume_atom a, uint64_t skip, std::string& rng, std::string& state) {
        if (!self->state.session->ended()) self->state.session->deliver(a, skip, std::move(rng), std::move(state));
      },
      [self, client](ping_atom, uint64_t n) { self->send(client, pong_atom::value, n); },
      [self](bye_atom) { self->quit(); },
      caf::after(timeout) >> [self] { self->quit(); },  // the client went silent: gone
  };
}

/// The published actor: checks a client's token before anything is built.  `bulk`: the
/// bulk listener (null: none, over TLS or with --no-bulk).
caf::behavior gate_behavior(caf::event_based_actor* self, std::string token, ServeCounters* counters,
                            std::chrono::milliseconds timeout, BulkListener* bulk) {
  using Reply = std::tuple<bool, std::string, caf::actor, uint16_t, std::string>;
  return {
      [self, token, counters, timeout, bulk](open_atom, uint64_t version, const std::string& presented,
                                             caf::actor client) -> Reply {
        if (version != kRemoteProtocolVersion) {
          counters->refused.fetch_add(1);
          log_line("refused a client speaking protocol version " + std::to_string(version) + " (this host: " +
                   std::to_string(kRemoteProtocolVersion) + ")");
          return {false, "protocol version " + std::to_string(version) + " against the host's " +
                             std::to_string(kRemoteProtocolVersion) + ": run the same loader release on both sides",
                  caf::actor(), uint16_t{0}, std::string()};
        }
        if (!client || !tokens_equal(presented, token)) {
          counters->refused.fetch_add(1);
          log_line("refused a client: authentication failed (wrong or missing token)");
          return {false, "authentication failed (wrong or missing token)", caf::actor(), uint16_t{0}, std::string()};
        }
        // Detached: a session runs its worker's tasks on its own thread (deliver() blocks
        // while the worker computes), so the gate and other sessions never wait for one.
        // The sink is there before the reply: the client greets the bulk port at once.
        std::string key = bulk ? new_bulk_key() : std::string();
        std::shared_ptr<BulkSink> sink = bulk ? bulk->open(key) : nullptr;
        auto session = self->spawn<caf::detached>(session_behavior, client, counters, timeout, bulk, key, sink);
        return {true, "", caf::actor_cast<caf::actor>(session), bulk ? bulk->port() : uint16_t{0}, std::move(key)};
      },
  };
}

}  // namespace

bool has_tls() { return LOADER_WITH_CAF_OPENSSL != 0; }

int serve(const ServeOptions& options) {
  Checked o;
  try {
    o = check(options);
  } catch (const Error& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  // SIGINT and SIGTERM end the server: blocked in every thread, taken by sigtimedwait.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  ServeCounters counters;
  int rc = 0;
  try {
    // The worker host's actor system: CAF's network layer (and TLS), BASP heartbeats on
    // every connection (a client may drop a silent host), the runtime's message types.
    // No connection timeout here: a client over TLS sends no BASP heartbeats (CAF 0.17's
    // TLS broker), so an idle but healthy connection would be cut and the client's cached
    // route to this host left dead.  A silent client is noticed by its session instead
    // (no ping for --timeout-ms: the session ends).
    SystemSpec spec;
    spec.scheduler_threads = 0;
    spec.poll = true;
    spec.network = true;
    spec.tls_cert = o.o.tls_cert;
    spec.tls_key = o.o.tls_key;
    spec.tls_ca = o.o.tls_ca;
    RuntimeConfig cfg(spec);
    auto sys = start_actor_system(cfg);
    // The bulk stream's port, on the host --listen names (none over TLS: CAF's OpenSSL
    // module encrypts BASP only, and a batch must not cross unencrypted where TLS is asked for).
    std::unique_ptr<BulkListener> bulk;
    if (o.o.bulk && !o.tls()) {
      try {
        bulk = std::make_unique<BulkListener>(o.listen.host, static_cast<uint16_t>(o.o.bulk_port),
                                              std::chrono::milliseconds(o.o.timeout_ms),
                                              std::chrono::milliseconds(o.o.timeout_ms));
      } catch (const Error& e) {
        std::cerr << "loader serve: " << e.what() << " (--bulk-port P names another, --no-bulk does without)\n";
        return 1;
      }
    }
    auto gate = sys->spawn(gate_behavior, o.token, &counters, std::chrono::milliseconds(o.o.timeout_ms), bulk.get());
#if LOADER_WITH_CAF_OPENSSL
    caf::expected<uint16_t> port = o.tls() ? caf::openssl::publish(gate, o.listen.port, o.listen.host.c_str())
                                           : sys->middleman().publish(gate, o.listen.port, o.listen.host.c_str());
#else
    caf::expected<uint16_t> port = sys->middleman().publish(gate, o.listen.port, o.listen.host.c_str());
#endif
    if (!port) {
      std::cerr << "loader serve: cannot listen on " << o.listen.text() << ": " << sys->render(port.error()) << "\n";
      caf::anon_send_exit(gate, caf::exit_reason::user_shutdown);
      return 1;
    }
    std::cout << "{\"listening\": \"" << o.listen.host << ":" << *port << "\", \"tls\": " << (o.tls() ? "true" : "false")
              << ", \"bulk_port\": " << (bulk ? bulk->port() : 0) << "}" << std::endl;
    const auto start = std::chrono::steady_clock::now();
    const int64_t period = o.o.stats_every_ms > 0 ? o.o.stats_every_ms : 1000;
    while (true) {
      timespec ts{static_cast<time_t>(period / 1000), static_cast<long>((period % 1000) * 1000000)};
      const int sig = sigtimedwait(&stop, nullptr, &ts);
      if (sig == SIGINT || sig == SIGTERM) break;
      if (o.o.stats_every_ms > 0) {
        const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::cout << "{\"t_s\": " << t << ", \"clients\": " << counters.clients.load()
                  << ", \"sessions\": " << counters.sessions.load() << ", \"refused\": " << counters.refused.load()
                  << ", \"tasks_done\": " << counters.tasks_done.load()
                  << ", \"bytes_sent\": " << counters.bytes_sent.load()
                  << ", \"bytes_bulk\": " << counters.bytes_bulk.load()
                  << ", \"bulk_refused\": " << (bulk ? bulk->refused() : 0) << "}" << std::endl;
      }
    }
    // Ends here, not through the actor system's destructor: that waits for every
    // connection and session, and one to a client whose link is down waits long (a
    // SIGTERM then seemed ignored).  Nothing of the host outlives the process: its
    // sessions, sockets and pages go with it.
    std::cout.flush();
    std::cerr.flush();
    std::_Exit(0);
  } catch (const std::exception& e) {
    std::cerr << "loader serve: " << e.what() << "\n";
    rc = 1;
  }
  return rc;
}

}  // namespace loader::runtime
