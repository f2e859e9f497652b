// A program run under an address-space limit (RLIMIT_AS, `ulimit -v`) of its current
// size plus EXTRA_MB, set by itself once it has started ("none": no limit; the test
// puts it in a cgroup with few pids instead): one DataLoader with 2 worker processes
// (which inherit the limit), 2 epochs.  It prints "ok <batches>" and exits 0,
// or prints "error: <what>" and exits 1; it must never abort or crash, whichever thread,
// mapping or process the limit denies (CAF's own constructor used to call
// std::terminate when it could not start its last thread).
//
// "system": it only builds an actor system with the runtime's configuration, as
// acquire_system() and a worker process do, but without trying the threads first (the
// race a worker process loses when another process of its cgroup takes the last pids
// between the two): "ok" and exit 0, or "error: <what>" and exit 1 (CAF's constructor
// used to crash, SIGSEGV, when it could not start its first thread).
//
//   loader_test_address_space EXTRA_MB|none|system
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>

#include "loader/dataloader.h"
#include "loader/runtime/actor_system.h"
#include "loader/worker_main.h"
#include "test_datasets.h"

namespace {
/// VmSize of this process, in bytes (0 when unknown).
unsigned long long vm_size() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmSize:") {
      unsigned long long kb = 0;
      in >> kb;
      return kb * 1024;
    }
    std::getline(in, key);
  }
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  loader::testing::register_exe_squares();
  if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
  if (argc != 2) {
    std::fprintf(stderr, "usage: loader_test_address_space EXTRA_MB|none|system\n");
    return 2;
  }
  if (std::string(argv[1]) == "system") {
    try {
      loader::runtime::RuntimeConfig cfg;
      auto sys = loader::runtime::start_actor_system(cfg);
      std::printf("ok\n");
      return 0;
    } catch (const std::exception& e) {
      std::printf("error: %s\n", e.what());
      return 1;
    }
  }
  if (std::string(argv[1]) != "none") {
    const unsigned long long extra = std::strtoull(argv[1], nullptr, 10) << 20;
    struct rlimit r {};
    r.rlim_cur = r.rlim_max = vm_size() + extra;
    if (setrlimit(RLIMIT_AS, &r) != 0) {
      std::perror("setrlimit");
      return 2;
    }
  }
  try {
    loader::DataLoaderOptions o;
    o.batch_size = 4;
    o.num_workers = 2;
    o.timeout = 60;
    loader::DataLoader dl(loader::make_dataset({"test_exe_squares", loader::Value::dict({{"n", 64}})}), o);
    long long batches = 0;
    for (int epoch = 0; epoch < 2; ++epoch)
      for (loader::Value& b : dl) {
        (void)b;
        ++batches;
      }
    std::printf("ok %lld\n", batches);
    return 0;
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
}
