// A program whose loaders outlive main(): a DataLoader in a global and one in a
// function's static, each with live worker processes (one with an epoch still
// running), ended by returning from main() or by exit().  exit() destroys them after
// statics CAF made lazily are gone; the runtime must end its workers and exit 0,
// never corrupt the heap (it did: "free(): corrupted unsorted chunks", abort).
//
// With "fork", a child forked after the first epochs calls exit(): it inherits the
// exit handler and copies of the pools, and must leave its parent's workers alone.
//
//   loader_test_static_loaders return|exit|fork
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "loader/dataloader.h"
#include "loader/worker_main.h"
#include "test_datasets.h"

namespace {
std::unique_ptr<loader::DataLoader> g_loader;                 // constant-initialised: destroyed last
std::optional<loader::DataLoader::Iterator> g_live_epoch;     // an epoch with tasks in flight

loader::DataLoader& function_static_loader() {
  loader::DataLoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  static loader::DataLoader dl(loader::make_dataset({"test_exe_squares", loader::Value::dict({{"n", 64}})}), o);
  return dl;
}

int64_t one_epoch(loader::DataLoader& dl) {
  int64_t batches = 0;
  for (loader::Value& b : dl) {
    (void)b;
    ++batches;
  }
  return batches;
}
}  // namespace

int main(int argc, char** argv) {
  loader::testing::register_exe_squares();
  if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
  const std::string how = argc > 1 ? argv[1] : "return";
  const bool by_exit = how == "exit";
  loader::DataLoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  o.persistent_workers = true;
  g_loader = std::make_unique<loader::DataLoader>(
      loader::make_dataset({"test_exe_squares", loader::Value::dict({{"n", 64}})}), o);
  const int64_t a = one_epoch(*g_loader);
  const int64_t b = one_epoch(function_static_loader());
  if (how == "fork") {
    std::fflush(nullptr);
    const pid_t child = fork();
    if (child == 0) std::exit(0);  // runs the exit handlers the parent registered
    int status = 0;
    waitpid(child, &status, 0);
    const int64_t a2 = one_epoch(*g_loader);
    const int64_t b2 = one_epoch(function_static_loader());
    std::printf("after the child's exit: batches %lld %lld\n", static_cast<long long>(a2), static_cast<long long>(b2));
  }
  g_live_epoch.emplace(g_loader->iter());
  const bool live = g_live_epoch->next().has_value();
  std::printf("batches %lld %lld, live epoch %d\n", static_cast<long long>(a), static_cast<long long>(b), live);
  std::fflush(stdout);
  if (by_exit) std::exit(0);
  return 0;
}
