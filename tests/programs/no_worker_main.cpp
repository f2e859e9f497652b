// A program whose main() forgets loader::runtime::run_worker_if_requested: its
// workers (this same program) must refuse to start workers of their own, and the
// DataLoader must fail at once with a message that says what to do.
#include <cstdio>

#include "loader/dataloader.h"
#include "test_datasets.h"

int main() {
  loader::testing::register_exe_squares();
  try {
    loader::DataLoaderOptions o;
    o.batch_size = 4;
    o.num_workers = 2;
    loader::DataLoader dl(loader::make_dataset({"test_exe_squares", loader::Value::dict({{"n", 64}})}), o);
    int64_t batches = 0;
    for (loader::Value& b : dl) {
      (void)b;
      ++batches;
    }
    std::printf("finished with %lld batches\n", static_cast<long long>(batches));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
