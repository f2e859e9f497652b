// Shared main() of the test binaries: the runtime re-executes this binary as a
// worker process, so the worker entry point runs before GoogleTest.
#include <gtest/gtest.h>

#include "loader/worker_main.h"

int main(int argc, char** argv) {
  if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
