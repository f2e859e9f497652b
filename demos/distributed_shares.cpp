// DistributedSampler: which samples each rank of a data-parallel job loads.
//
// Every rank builds the same DistributedSampler(dataset, num_replicas, rank) with the
// same seed; the shares are disjoint, cover the data set (padded by repeating the first
// indices, or trimmed with drop_last), and change every epoch through set_epoch().  In
// a real job each rank is its own process (num_replicas and rank may then come from
// the WORLD_SIZE and RANK environment variables that torchrun sets); here the ranks
// run one after another in this process to show their shares side by side.
//
//   build/demos/distributed_shares [--world-size 4] [--workers 2]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "loader/dataloader.h"
#include "loader/fashion_mnist.h"
#include "loader/worker_main.h"
#include "loader/samplers.h"

namespace {

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : " ") + std::to_string(x);
  return "[" + s + "]";
}

std::vector<int64_t> share(loader::DistributedSampler& s) {
  std::vector<int64_t> out;
  auto pass = s.iter();
  while (auto i = pass->next()) out.push_back(*i);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
  int64_t world = 4;
  int workers = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--world-size") world = std::atoll(argv[i + 1]);
    else if (a == "--workers") workers = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: distributed_shares [--world-size N] [--workers W]\n");
      return 2;
    }
  }
  try {
    // 1. Ten samples over the ranks: padding vs drop_last, and a new order every epoch.
    for (bool drop_last : {false, true}) {
      std::printf("10 samples, %lld ranks, shuffle, seed 0, drop_last=%s:\n", static_cast<long long>(world),
                  drop_last ? "true" : "false");
      for (int64_t epoch = 0; epoch < 2; ++epoch) {
        for (int64_t rank = 0; rank < world; ++rank) {
          loader::DistributedSampler s(10, world, rank, /*shuffle=*/true, /*seed=*/0, drop_last);
          s.set_epoch(epoch);
          std::printf("  epoch %lld rank %lld: %s\n", static_cast<long long>(epoch), static_cast<long long>(rank),
                      join(share(s)).c_str());
        }
      }
    }

    // 2. Each rank's DataLoader over the Fashion-MNIST training set, with worker processes.
    loader::register_fashion_mnist();
    auto ds = loader::make_dataset({"fashion_mnist", loader::Value::dict({{"train", true}})});
    std::printf("Fashion-MNIST training set (%lld images), %lld ranks, batch 250, %d workers per rank, epoch 0:\n",
                static_cast<long long>(ds->size()), static_cast<long long>(world), workers);
    std::vector<int> seen(static_cast<size_t>(ds->size()), 0);
    for (int64_t rank = 0; rank < world; ++rank) {
      auto sampler = std::make_shared<loader::DistributedSampler>(ds, world, rank);
      sampler->set_epoch(0);
      loader::DataLoaderOptions o;
      o.batch_size = 250;
      o.num_workers = workers;
      o.sampler = sampler;
      loader::DataLoader dl(ds, o);
      std::vector<int64_t> classes(10, 0);
      int64_t batches = 0, samples = 0;
      for (loader::Value& batch : dl) {
        for (int64_t label : batch[1].to_tensor().to_int64_vector()) ++classes[static_cast<size_t>(label)];
        samples += batch[1].to_tensor().numel();
        ++batches;
      }
      const std::vector<int64_t> mine = share(*sampler);  // the same pass again: same seed, same epoch
      for (int64_t i : mine) ++seen[static_cast<size_t>(i)];
      std::printf("  rank %lld: %lld samples in %lld batches, first indices %s, per class %s\n",
                  static_cast<long long>(rank), static_cast<long long>(samples), static_cast<long long>(batches),
                  join(std::vector<int64_t>(mine.begin(), mine.begin() + std::min<size_t>(4, mine.size()))).c_str(),
                  join(classes).c_str());
    }
    int64_t once = 0, more = 0, never = 0;
    for (int c : seen) (c == 0 ? never : c == 1 ? once : more) += 1;
    std::printf("over all ranks: %lld images loaded once, %lld more than once, %lld never\n",
                static_cast<long long>(once), static_cast<long long>(more), static_cast<long long>(never));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "distributed_shares: %s\n", e.what());
    return 1;
  }
}
