// WorkerSeeding::PerTask: the generator that loads the epoch's i-th index batch is
// seeded task_seed(base_seed, i), in a worker process and with num_workers = 0 alike, so
// the batches, random draws included, are the same for any num_workers, and a
// checkpoint resumes byte for byte into another num_workers (strict=false).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "loader/dataloader.h"
#include "loader/error.h"
#include "loader/generator.h"
#include "loader/serialization/pt.h"
#include "process_leaks.h"

using namespace loader;

namespace {

// "test_random_draws" (faults_test.cpp): sample i = (float64[4] drawn from the default
// generator, i); in a worker the generator is the worker's.
std::shared_ptr<Dataset> random_draws(int64_t n) {
  return make_dataset({"test_random_draws", Value::dict({{"n", n}})});
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

/// A batch as bytes: the drawn values and the indices.
std::string bytes_of(const Value& batch) {
  const Tensor& x = batch[0].to_tensor();
  const Tensor& i = batch[1].to_tensor();
  return std::string(static_cast<const char*>(x.data_ptr()), x.nbytes()) +
         std::string(static_cast<const char*>(i.data_ptr()), i.nbytes());
}

std::vector<std::string> epoch_bytes(DataLoader& dl) {
  std::vector<std::string> out;
  auto it = dl.iter();
  while (auto b = it.next()) out.push_back(bytes_of(*b));
  return out;
}

Value through_pt(const Value& state) { return pt::load_bytes(pt::save_bytes(state)); }

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

TEST(PerTaskSeeding, IsRefusedWithPersistentWorkersAndIterableDatasets) {
  DataLoaderOptions o = per_task(2);
  o.persistent_workers = true;
  const std::string e = error_of([&] { DataLoader dl(random_draws(20), o); });
  EXPECT_NE(e.find("persistent_workers=false"), std::string::npos) << e;
  DataLoaderOptions it;
  it.worker_seeding = WorkerSeeding::PerTask;
  EXPECT_THROW(validate_options(it, /*iterable=*/true), ValueError);
}
