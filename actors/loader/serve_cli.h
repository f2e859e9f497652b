// The command line of `loader serve` on CLI11 (header only: a program that hosts workers
// with dataset types of its own links CLI11 too; Debian libcli11-dev).
//
//   CLI::App* cmd = app.add_subcommand("serve", "...");
//   auto o = std::make_shared<loader::runtime::ServeOptions>();
//   loader::runtime::add_serve_options(*cmd, *o);      // the `loader` tool does this
//
//   return loader::runtime::serve_main(argc - 1, argv + 1);   // or a whole command line
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "loader/serve.h"

namespace loader::runtime {

/// Declares serve's options on `cmd`, parsed into `o` (which must outlive the parse).
inline void add_serve_options(CLI::App& cmd, ServeOptions& o) {
  cmd.add_option("--listen", o.listen, "HOST:PORT the one address it binds (port 0: any free one; the first line "
                                       "on stdout says which)")
      ->required();
  cmd.add_option("--token-file", o.token_file, "the shared secret a client must present before anything is built")
      ->required();
  cmd.add_option("--tls-cert", o.tls_cert, "TLS: this host's certificate (with --tls-key and --tls-ca)");
  cmd.add_option("--tls-key", o.tls_key, "TLS: this host's private key");
  cmd.add_option("--tls-ca", o.tls_ca, "TLS: the CA whose certificates clients must present");
  cmd.add_option("--stats-every-ms", o.stats_every_ms, "one JSON line of counters on stdout per period (0: none)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--timeout-ms", o.timeout_ms, "a client silent this long is gone (its session ends; at least 100)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  auto* bulk_port = cmd.add_option("--bulk-port", o.bulk_port, "the bulk stream's port on the --listen host "
                                                               "(0: a free one)")
                        ->check(CLI::Range(0, 65535));
  cmd.add_flag_function("--no-bulk", [&o](int64_t) { o.bulk = false; },
                        "every reply over CAF's connection (no bulk stream)")
      ->excludes(bulk_port);
  cmd.footer("Serves until SIGINT or SIGTERM. docs/remote.md has the set-up.");
}

/// `argv[0] --listen ... --token-file ...`: parses and serves (--help: 0; bad options: 2).
inline int serve_main(int argc, char** argv) {
  CLI::App app{"Host workers for main processes on other machines", "loader serve"};
  ServeOptions o;
  add_serve_options(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return serve(o);
}

}  // namespace loader::runtime
