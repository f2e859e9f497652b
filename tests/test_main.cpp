// Shared main() of the test binaries: the runtime re-executes this binary as a
// worker process, so the worker entry point runs before GoogleTest; with `serve` it
// is a worker host (loader/serve_cli.h) for the remote tests.
#include <gtest/gtest.h>

#include <string>

#include "loader/serve_cli.h"
#include "loader/worker_main.h"

int main(int argc, char** argv) {
  if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
  // A worker host with the tests' datasets (remote_test.cpp starts it).
  if (argc > 1 && std::string(argv[1]) == "serve") return loader::runtime::serve_main(argc - 1, argv + 1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
