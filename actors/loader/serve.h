// Entry point of a worker host: `loader serve`, or any program with dataset types of its
// own that wants to host workers for main processes on other machines.
//
//   int main(int argc, char** argv) {
//     if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
//     if (argc > 1 && std::string(argv[1]) == "serve") return loader::runtime::serve(argc - 1, argv + 1);
//     ...
//   }
//
// serve() takes the options of `loader serve` (argv[0] is the command's name):
//   --listen HOST:PORT      the one address it binds (port 0: any free one; the first
//                           line on stdout says which)
//   --token-file F          the shared secret a client must present before anything is built
//   --tls-cert C --tls-key K --tls-ca A
//                           TLS (libcaf-openssl): clients must present a certificate
//                           signed by A, and trust C through A
//   --stats-every-ms MS     one JSON line per period on stdout (clients, tasks done,
//                           bytes sent)
//   --timeout-ms MS         a client silent this long is gone (its session ends); 10000
// It serves until SIGINT or SIGTERM, then ends the process (status 0) at once; it
// returns only when it cannot start (2: bad options, 1: it cannot listen).  The datasets
// it can build are the types registered in this program (a handle names one; nothing
// else can run).  docs/remote.md has the set-up.
#pragma once

namespace loader::runtime {

int serve(int argc, char** argv);

/// Whether this build has TLS for worker hosts and remote workers (libcaf-openssl was
/// found when it was built): without it --tls-* and remote_tls_* are refused.
bool has_tls();

}  // namespace loader::runtime
