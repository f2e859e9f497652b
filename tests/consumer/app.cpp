// The consumer's own dataset, loaded by 2 worker processes for 2 epochs: every
// sample must arrive exactly once per epoch, produced in a worker process (not this
// one) whose worker_init_fn ran, and collated by the consumer's named collate
// function.  Exits 0 when all holds, 1 otherwise (with what went wrong).
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "loader/dataloader.h"
#include "loader/serialization/pt.h"
#include "loader/worker_main.h"
#include "shared.h"

namespace {

// Sample i: (i, pid of the process that made it, whether consumer_init ran there).
class Tagged : public loader::Dataset {
 public:
  explicit Tagged(int64_t n) : n_(n) {}
  loader::Value get(int64_t i) override {
    return loader::Value::tuple({loader::Value(i), loader::Value(static_cast<int64_t>(::getpid())),
                                 loader::Value(static_cast<int64_t>(consumer::init_ran ? 1 : 0))});
  }
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

LOADER_REGISTER_DATASET("consumer_tagged", [](const loader::Value& p) {
  return std::make_shared<Tagged>(p.at("n").to_int());
});

int run() {
  const int64_t n = 1000;
  auto ds = loader::make_dataset({"consumer_tagged", loader::Value::dict({{"n", n}})});
  loader::DataLoaderOptions o;
  o.batch_size = 64;
  o.shuffle = true;
  o.num_workers = 2;
  o.collate_fn_name = "consumer_collate";
  o.worker_init_fn_name = "consumer_init";
  loader::DataLoader dl(ds, o);
  int problems = 0;
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "consumer_app: %s\n", what.c_str());
    ++problems;
  };
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int> seen(static_cast<size_t>(n), 0);
    std::set<int64_t> pids;
    int64_t batches = 0;
    for (loader::Value& batch : dl) {
      ++batches;
      if (batch.at("collated_by").to_string() != "consumer_collate") fail("batch not made by consumer_collate");
      const loader::Value& b = batch.at("batch");
      auto index = b[0].to_tensor().to_int64_vector();
      auto pid = b[1].to_tensor().to_int64_vector();
      auto init = b[2].to_tensor().to_int64_vector();
      for (size_t k = 0; k < index.size(); ++k) {
        if (index[k] < 0 || index[k] >= n) {
          fail("index " + std::to_string(index[k]) + " out of range");
          continue;
        }
        ++seen[static_cast<size_t>(index[k])];
        pids.insert(pid[k]);
        if (init[k] != 1) fail("sample " + std::to_string(index[k]) + " came from a worker where consumer_init did not run");
      }
    }
    for (int64_t i = 0; i < n; ++i)
      if (seen[static_cast<size_t>(i)] != 1)
        fail("epoch " + std::to_string(epoch) + ": sample " + std::to_string(i) + " seen " +
             std::to_string(seen[static_cast<size_t>(i)]) + " times");
    if (pids.count(::getpid())) fail("samples were made in the main process, not in worker processes");
    if (pids.size() != 2) fail("expected samples from 2 worker processes, got " + std::to_string(pids.size()));
    std::printf("consumer_app: epoch %d: %lld batches, %lld samples each seen once, from %zu worker processes\n",
                epoch, static_cast<long long>(batches), static_cast<long long>(n), pids.size());
  }
  // A mid-epoch checkpoint through a .pt byte string resumes the same batches in a new loader.
  std::vector<std::vector<int64_t>> rest;
  std::string saved;
  {
    auto it = dl.iter();
    for (int k = 0; k < 5; ++k) it.next();
    saved = loader::pt::save_bytes(it.state_dict());
    while (auto b = it.next()) rest.push_back(b->at("batch")[0].to_tensor().to_int64_vector());
  }
  loader::DataLoader resumed(ds, o);
  resumed.load_state_dict(loader::pt::load_bytes(saved));
  size_t k = 0;
  for (loader::Value& batch : resumed) {
    if (k >= rest.size() || batch.at("batch")[0].to_tensor().to_int64_vector() != rest[k])
      fail("the resumed epoch's batch " + std::to_string(5 + k) + " differs");
    ++k;
  }
  if (k != rest.size()) fail("the resumed epoch gave " + std::to_string(k) + " batches, not " + std::to_string(rest.size()));
  std::printf("consumer_app: checkpoint after 5 batches resumed %zu batches identically\n", k);
  return problems == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
  try {
    const int rc = run();
    std::puts(rc == 0 ? "consumer_app: ok" : "consumer_app: FAILED");
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer_app: %s\n", e.what());
    return 1;
  }
}
