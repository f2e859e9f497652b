// A worker host: `loader serve`, or any program with dataset types of its own that
// wants to host workers for main processes on other machines (docs/remote.md).
//
//   #include "loader/serve_cli.h"   // the command line of `loader serve` (CLI11)
//   int main(int argc, char** argv) {
//     if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
//     if (argc > 1 && std::string(argv[1]) == "serve") return loader::runtime::serve_main(argc - 1, argv + 1);
//     ...
//   }
//
// or, without a command line, serve(ServeOptions{...}).  It serves until SIGINT or
// SIGTERM, then ends the process (status 0) at once; it returns only when it cannot
// start (2: bad options, 1: it cannot listen).  The datasets it can build are the types
// registered in this program (a handle names one; nothing else can run).
#pragma once

#include <cstdint>
#include <string>

namespace loader::runtime {

/// The options of `loader serve` (serve_cli.h parses them from a command line).
struct ServeOptions {
  /// --listen HOST:PORT: the one address it binds (port 0: any free one; the first line
  /// on stdout says which).  Required.
  std::string listen;
  /// --token-file F: the shared secret a client must present before anything is built.
  /// Required.
  std::string token_file;
  /// --tls-cert C --tls-key K --tls-ca A: TLS (libcaf-openssl): clients must present a
  /// certificate signed by A, and trust C through A.  All three or none.
  std::string tls_cert, tls_key, tls_ca;
  /// --stats-every-ms MS: one JSON line per period on stdout (clients, tasks done, bytes
  /// sent); 0: none.
  int64_t stats_every_ms = 0;
  /// --timeout-ms MS: a client silent this long is gone (its session ends); at least 100.
  int64_t timeout_ms = 10000;
  /// --bulk-port P: the bulk stream's port on the --listen host (0: a free one).
  int64_t bulk_port = 0;
  /// false: --no-bulk (every reply over CAF's BASP connection).
  bool bulk = true;
};

/// Serves with `options` (checked first: a bad one is reported on stderr, status 2).
int serve(const ServeOptions& options);

/// Whether this build has TLS for worker hosts and remote workers (libcaf-openssl was
/// found when it was built): without it --tls-* and remote_tls_* are refused.
bool has_tls();

}  // namespace loader::runtime
