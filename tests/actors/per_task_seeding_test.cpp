// WorkerSeeding::PerTask: the generator that loads the epoch's i-th index batch is
// seeded task_seed(base_seed, i), in a worker process and with num_workers = 0 alike, so
// the batches, random draws included, are the same for any num_workers, and a
// checkpoint resumes byte for byte into another num_workers (strict=false), persistent
// workers included (they get each epoch's base_seed, also after a restart).
#include <gtest/gtest.h>

#include <csignal>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loader/dataloader.h"
#include "loader/error.h"
#include "loader/generator.h"
#include "loader/serialization/pt.h"
#include "checkpoint_util.h"
#include "process_leaks.h"

using namespace loader;
using loader::testing::bytes_of;
using loader::testing::epoch_bytes;
using loader::testing::through_pt;

namespace {

// "test_random_draws" (faults_test.cpp): sample i = (float64[4] drawn from the default
// generator, i); in a worker the generator is the worker's.
std::shared_ptr<Dataset> random_draws(int64_t n, int64_t delay_ms = 0) {
  return make_dataset({"test_random_draws", Value::dict({{"n", n}, {"delay_ms", delay_ms}})});
}

/// Batches of 4, shuffled by a generator of their own, `workers` workers, seeded per task.
DataLoaderOptions per_task(int workers, WorkerSeeding seeding = WorkerSeeding::PerTask) {
  DataLoaderOptions o;
  o.batch_size = 4;
  o.shuffle = true;
  o.generator = std::make_shared<Generator>(11);
  o.num_workers = workers;
  o.worker_seeding = seeding;
  o.timeout = 60;
  return o;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(PerTaskSeeding, TaskSeedIsSplitmix64OfBaseSeedAndIndex) {
  // The documented mixing (docs/api.md): splitmix64's output `index` from base_seed.
  // splitmix64 seeded 0: its first two outputs (the reference values of Vigna's code).
  EXPECT_EQ(task_seed(0, 0), 0xE220A8397B1DCDAFULL);
  EXPECT_EQ(task_seed(0, 1), 0x6E789E6AA1B965F4ULL);
  EXPECT_NE(task_seed(1, 0), task_seed(0, 1));
}

TEST(PerTaskSeeding, BatchesAreTheSameForAnyNumberOfWorkers) {
  loader::testing::LeakCheck leaks;
  std::vector<std::vector<std::string>> reference;  // two epochs
  for (int workers : {0, 1, 3}) {
    SCOPED_TRACE(std::to_string(workers) + " workers");
    manual_seed(5);
    DataLoader dl(random_draws(37), per_task(workers));
    std::vector<std::vector<std::string>> epochs = {epoch_bytes(dl), epoch_bytes(dl)};
    ASSERT_EQ(epochs[0].size(), 10u);
    EXPECT_NE(epochs[0], epochs[1]) << "each epoch draws a new base_seed";
    if (reference.empty()) reference = epochs;
    else EXPECT_TRUE(epochs == reference) << "the batches differ from 0 workers'";
  }
  // Per worker (PyTorch's): the draws follow the workers, so 1 and 3 workers differ.
  std::vector<std::string> one, three;
  {
    DataLoader dl(random_draws(37), per_task(1, WorkerSeeding::PerWorker));
    one = epoch_bytes(dl);
  }
  {
    DataLoader dl(random_draws(37), per_task(3, WorkerSeeding::PerWorker));
    three = epoch_bytes(dl);
  }
  EXPECT_NE(one, three);
}

TEST(PerTaskSeeding, ACheckpointOfTwoWorkersResumesByteForByteIntoThreeAndNone) {
  loader::testing::LeakCheck leaks;
  std::vector<std::string> e1, e2;
  Value state;
  {
    manual_seed(7);
    DataLoader dl(random_draws(44), per_task(2));
    auto it = dl.iter();
    while (auto b = it.next()) {
      e1.push_back(bytes_of(*b));
      if (e1.size() == 4) state = through_pt(it.state_dict());
    }
    e2 = epoch_bytes(dl);
  }
  ASSERT_EQ(e1.size(), 11u);
  EXPECT_EQ(state.at("worker_seeding").to_string(), "per-task");
  for (int workers : {3, 0, 2}) {
    SCOPED_TRACE(std::to_string(workers) + " workers");
    manual_seed(8);  // another default generator: the checkpoint's streams are loaded
    DataLoader dl(random_draws(44), per_task(workers));
    dl.load_state_dict(state, /*strict=*/workers == 2);
    std::vector<std::string> rest = epoch_bytes(dl);
    EXPECT_TRUE(rest == std::vector<std::string>(e1.begin() + 4, e1.end())) << "the rest of the epoch";
    EXPECT_TRUE(epoch_bytes(dl) == e2) << "the next epoch";
  }
}

TEST(PerTaskSeeding, ACheckpointOfTheOtherSeedingIsRefusedNamingTheOption) {
  Value per_task_state, per_worker_state;
  {
    DataLoader dl(random_draws(20), per_task(2));
    auto it = dl.iter();
    it.next();
    per_task_state = through_pt(it.state_dict());
  }
  {
    DataLoader dl(random_draws(20), per_task(2, WorkerSeeding::PerWorker));
    auto it = dl.iter();
    it.next();
    per_worker_state = through_pt(it.state_dict());
  }
  {
    DataLoader dl(random_draws(20), per_task(2, WorkerSeeding::PerWorker));
    const std::string e = error_of([&] { dl.load_state_dict(per_task_state); });
    EXPECT_NE(e.find("worker_seeding=per-task"), std::string::npos) << e;
    EXPECT_NE(e.find("DataLoaderOptions::worker_seeding"), std::string::npos) << e;
  }
  {
    DataLoader dl(random_draws(20), per_task(2));
    const std::string e = error_of([&] { dl.load_state_dict(per_worker_state, /*strict=*/false); });
    EXPECT_NE(e.find("worker_seeding=per-worker"), std::string::npos) << e;
  }
}

TEST(PerTaskSeeding, IsRefusedWithIterableDatasets) {
  DataLoaderOptions it;
  it.worker_seeding = WorkerSeeding::PerTask;
  EXPECT_THROW(validate_options(it, /*iterable=*/true), ValueError);
}

TEST(PerTaskSeeding, PersistentWorkersGiveTheBatchesOfFreshOnesEveryEpochAlsoAfterARestart) {
  loader::testing::LeakCheck leaks;
  // Three epochs with fresh workers: the reference (each epoch draws its base_seed).
  std::vector<std::vector<std::string>> fresh;
  {
    manual_seed(5);
    DataLoader dl(random_draws(37), per_task(2));
    for (int e = 0; e < 3; ++e) fresh.push_back(epoch_bytes(dl));
  }
  ASSERT_NE(fresh[1], fresh[2]);
  for (int workers : {1, 3}) {
    SCOPED_TRACE(std::to_string(workers) + " persistent workers");
    manual_seed(5);
    DataLoaderOptions o = per_task(workers);
    o.persistent_workers = true;
    o.max_worker_restarts = 1;
    DataLoader dl(random_draws(37, /*delay_ms=*/2), o);  // slow enough to be killed mid-epoch
    EXPECT_TRUE(epoch_bytes(dl) == fresh[0]) << "epoch 1";
    EXPECT_TRUE(epoch_bytes(dl) == fresh[1]) << "epoch 2: the workers got its base_seed";
    // Epoch 3: worker 0 is killed after the first batch; its next incarnation starts
    // from its Init (the first epoch's seeds), then gets epoch 3's.
    std::vector<std::string> third;
    auto it = dl.iter();
    const std::vector<int> pids = it.worker_pids();
    while (auto b = it.next()) {
      third.push_back(bytes_of(*b));
      if (third.size() == 1) {
        ASSERT_GT(pids.at(0), 0);
        ASSERT_EQ(::kill(pids[0], SIGKILL), 0);
      }
    }
    EXPECT_EQ(it.stats().workers.at(0).restarts, 1) << "worker 0 was restarted";
    EXPECT_TRUE(third == fresh[2]) << "epoch 3, across the restart";
  }
}

TEST(PerTaskSeeding, APersistentPoolsLaterEpochResumesByteForByteIntoOtherWorkerCounts) {
  loader::testing::LeakCheck leaks;
  std::vector<std::string> e2, e3;
  Value state;
  {
    manual_seed(7);
    DataLoaderOptions o = per_task(2);
    o.persistent_workers = true;
    DataLoader dl(random_draws(44), o);
    epoch_bytes(dl);
    auto it = dl.iter();
    while (auto b = it.next()) {
      e2.push_back(bytes_of(*b));
      if (e2.size() == 5) state = through_pt(it.state_dict());
    }
    e3 = epoch_bytes(dl);
  }
  ASSERT_EQ(e2.size(), 11u);
  for (int workers : {3, 0, 2}) {
    for (bool persistent : {true, false}) {
      if (workers == 0 && persistent) continue;
      SCOPED_TRACE(std::to_string(workers) + (persistent ? " persistent" : " fresh") + " workers");
      manual_seed(8);
      DataLoaderOptions o = per_task(workers);
      o.persistent_workers = persistent;
      DataLoader dl(random_draws(44), o);
      dl.load_state_dict(state, /*strict=*/workers == 2 && persistent);
      EXPECT_TRUE(epoch_bytes(dl) == std::vector<std::string>(e2.begin() + 5, e2.end())) << "the rest of epoch 2";
      EXPECT_TRUE(epoch_bytes(dl) == e3) << "epoch 3";
    }
  }
}
