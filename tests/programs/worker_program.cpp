// A dedicated worker program (DataLoaderOptions::worker_executable): it knows the
// test datasets and does nothing but serve as a worker.  Started by hand it says so.
#include <cstdio>

#include "loader/worker_main.h"
#include "test_datasets.h"

int main(int argc, char** argv) {
  loader::testing::register_exe_squares();
  if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
  std::fprintf(stderr, "loader_test_worker: a DataLoader worker program; the runtime starts it\n");
  return 2;
}
