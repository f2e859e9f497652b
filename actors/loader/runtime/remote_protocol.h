// The messages between a main process and a worker host on another machine (`loader
// serve`), over CAF's network layer (BASP, libcaf-io; TLS with libcaf-openssl).  The
// worker actor there is the same one a child process hosts (child/worker_actor.h); what
// crosses the network is its messages, as CAF serializes them:
//
//   client (main process)                          server (loader serve)
//   remote_actor(host, port) ──────────────────►  the gate (published on host:port)
//   request (open, version, token, client) ──────► checks the token before anything
//                                                  is built; spawns a session: a worker
//   ◄──── (ok, why, session, bulk port, key)       actor, its uplink, a private page
//   TCP to host:bulk port, (magic, key) ─────────► the bulk listener: the session's
//   ◄──────────────────────────────────── 'K'      sink (a wrong key: closed)
//   task_msg, (init, cfg), (setrng, task, state), (epoch), (seeds, base, task_base),
//   (resume, skip, rng, state), (ping, n) ───────► session ──► worker actor
//   ◄── (result_msg, before, after): a reply, the batch inline, with the generator
//       states its task started from and ended with (the client keeps a state page of
//       its own from them: restarts and checkpoints work as with local workers)
//   ◄── (ready), (stream, ...), (fatal, type, message, when, status), (pong, n)
//
// The bulk stream: CAF's BASP copies a 9.6 MB batch three times on the way in (its
// receive buffer, zeroed as it grows, the message's string, the tensors) and twice on the
// way out, so a session's replies, ready, stream and fatal events go instead, once the
// client has attached, as frames (wire.h, frames.h: RemoteReply, Ready, StreamStart,
// InitError) on a TCP connection of their own to the host's bulk port: a batch's bytes
// are written from where the worker collated them and read straight into the reply.
// The tasks, the other client messages and the pings stay on BASP.  The client attaches
// before it sends anything else, so the session's events all go one way.  Over TLS
// (CAF's OpenSSL module owns the encryption) there is no bulk stream (bulk port 0), and a
// client that cannot reach the bulk port goes on over BASP alone, with one warning.
//
// Nothing local crosses: no descriptor, no shared memory, no slab (a task's slab is
// always kInlineSlab); a dataset handle naming a resource of the client's machine is
// refused by the server (remote_resource_error).
//
// Every type here is registered on both sides (add_remote_types).
#pragma once

#include <caf/all.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "loader/runtime/protocol.h"
#include "loader/value.h"

namespace loader::runtime {

/// Raised when the two sides speak different versions of this protocol.
constexpr uint64_t kRemoteProtocolVersion = 4;  // 2: WorkerReply carries collate_ns; 3: the bulk stream; 4: batches split on it

/// The bulk stream's greeting: 8 bytes of magic, then the session's key (kBulkKeyBytes
/// random bytes the open reply gave); the host answers kBulkAck once the session's sink
/// has the connection.
constexpr size_t kBulkKeyBytes = 16;
constexpr size_t kBulkHelloBytes = 8 + kBulkKeyBytes;
constexpr char kBulkAck = 'K';
/// A new session key (from std::random_device).
std::string new_bulk_key();
std::string bulk_hello(const std::string& key);
/// The key of a greeting, or nullopt when `data` is not one.
std::optional<std::string> parse_bulk_hello(const char* data, size_t size);

/// client -> gate: (open, version, token, client actor) -> (ok, why, session, bulk port,
/// bulk key): the bulk port is 0 and the key empty when the session has no bulk stream.
using open_atom = caf::atom_constant<caf::atom("open")>;
/// client -> session every second, session -> client: (ping|pong, n).  A side that
/// hears nothing from the other for the remote timeout declares it lost.
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using pong_atom = caf::atom_constant<caf::atom("pong")>;
/// client -> session: the pool ends (the session ends and frees its worker).
using bye_atom = caf::atom_constant<caf::atom("bye")>;

/// Adds every message type that crosses a BASP connection to `cfg` (both sides).
void add_remote_types(caf::actor_system_config& cfg);

/// Why a dataset handle's parameters cannot be used on another host, or nullopt: a
/// parameter that names a resource of the client's machine (a /proc/<pid>/... or
/// /dev/fd/... path, as `loader bench`'s in-memory tensor files are), named by its key.
std::optional<std::string> remote_resource_error(const Value& params);

/// "host:port" parsed; throws ValueError naming `what` when it is not one.
struct HostPort {
  std::string host;
  uint16_t port = 0;
  std::string text() const { return host + ":" + std::to_string(port); }
};
HostPort parse_host_port(const std::string& s, const std::string& what);

/// The token in `path` (its first line, surrounding whitespace removed); throws
/// ValueError naming the file when it cannot be read or is empty.
std::string read_token_file(const std::string& path);

/// Compares two tokens in time that does not depend on where they differ.
bool tokens_equal(const std::string& a, const std::string& b);

}  // namespace loader::runtime
