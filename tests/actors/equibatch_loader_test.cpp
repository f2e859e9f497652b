// EquiBatchSampler as a DataLoader's batch_sampler with worker processes: the loader
// yields exactly the sampler's batches, epoch after epoch, and leaves nothing behind.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "loader/dataloader.h"
#include "loader/datasets.h"
#include "loader/equibatch_sampler.h"
#include "loader/python_random.h"
#include "process_leaks.h"

namespace loader {
namespace {

using Labels = std::vector<std::vector<int64_t>>;

/// 1..3 labels of [0, 5) per index, class 4 rare.
Labels some_labels(int64_t n) {
  PythonRandom rng(31);
  Labels out;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> l = rng.sample(4, rng.randint(1, 3));
    if (i % 25 == 0) l.push_back(4);
    out.push_back(l);
  }
  return out;
}

std::vector<std::vector<IndexBatch>> sampler_epochs(EquiBatchSampler& s, int epochs) {
  std::vector<std::vector<IndexBatch>> out(static_cast<size_t>(epochs));
  for (auto& e : out) {
    auto cursor = s.iter();
    while (auto b = cursor->next()) e.push_back(*b);
  }
  return out;
}

TEST(EquiBatchLoader, TwoWorkerProcessesYieldTheSamplersBatches) {
  register_builtin_datasets();
  const loader::testing::LeakCheck leaks;
  const Labels labels = some_labels(200);
  for (int64_t rank : {0, 1}) {
    EquiBatchSamplerOptions so;
    so.balanced_coef = 24;
    so.seed = 20261124;
    so.num_replicas = 2;
    so.rank = rank;
    EquiBatchSampler alone(labels, 6, so);
    const auto expected = sampler_epochs(alone, 3);
    ASSERT_EQ(expected[0].size(), 5u * 4u);
    ASSERT_NE(expected[0], expected[1]) << "epochs draw new pools";

    DataLoaderOptions o;
    o.batch_sampler = std::make_shared<EquiBatchSampler>(labels, 6, so);
    o.num_workers = 2;
    o.worker_mode = WorkerMode::Process;
    DataLoader dl(make_dataset({"range", Value::dict({{"n", int64_t{200}}})}), o);
    EXPECT_EQ(dl.size(), 20);
    for (size_t e = 0; e < expected.size(); ++e) {
      std::vector<IndexBatch> got;
      std::vector<int> pids;
      auto it = dl.iter();
      while (auto batch = it.next()) {
        if (pids.empty()) pids = it.worker_pids();
        got.push_back(batch->to_tensor().to_int64_vector());  // range: sample i is i
      }
      ASSERT_EQ(pids.size(), 2u) << "the epoch ran on two worker processes";
      for (int p : pids) EXPECT_GT(p, 0);
      EXPECT_EQ(got, expected[e]) << "rank " << rank << ", epoch " << e;
    }
  }
  EXPECT_EQ(leaks.new_segments(), "") << "shared-memory segments left behind";
  EXPECT_EQ(leaks.new_children(), "") << "child processes left behind";
}

}  // namespace
}  // namespace loader
