// Entry point of worker processes.
//
// The runtime starts each worker by fork+exec of the running program
// (/proc/self/exe), or of DataLoaderOptions::worker_executable, with an environment
// variable that marks it as a worker.  The program must let it run before doing
// anything else in main():
//
//   int main(int argc, char** argv) {
//     if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
//     ...
//   }
//
// Datasets, collate functions and worker_init_fns registered by the program (static
// registrars or code before this call) are then available in the child.  A worker
// process whose main() skips this call refuses to start workers of its own: its
// first DataLoader with workers throws, and the parent's loader reports it.
#pragma once

#include <optional>

namespace loader::runtime {

/// Runs the worker loop and returns its exit status when this process was started
/// as a worker; returns nullopt (doing nothing) otherwise.
std::optional<int> run_worker_if_requested(int argc, char** argv);

}  // namespace loader::runtime
