// num_workers = kAutoWorkers end to end: worker processes retired and started again in
// the middle of an epoch, epochs moved into the application's thread, a checkpoint
// resumed, and through all of it the batches of a fixed pool (per-task seeding: the
// bytes too), with no process or segment left behind.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint_util.h"
#include "libloader/pt_test_util.h"
#include "loader/dataloader.h"
#include "loader/error.h"
#include "loader/generator.h"
#include "process_leaks.h"
#include "test_util.h"

using namespace loader;
using loader::testing::bytes_of;
using loader::testing::epoch_bytes;
using loader::testing::through_pt;

namespace {

// "test_random_draws" (faults_test.cpp): sample i = (float64[4] drawn from the default
// generator, i), after sleeping delay_ms.
std::shared_ptr<Dataset> draws(int64_t n, int64_t delay_ms = 0) {
  return make_dataset({"test_random_draws", Value::dict({{"n", n}, {"delay_ms", delay_ms}})});
}

DataLoaderOptions options(int workers, int max_workers = 2, int min_workers = 1) {
  DataLoaderOptions o;
  o.batch_size = 4;
  o.shuffle = true;
  o.generator = std::make_shared<Generator>(11);
  o.num_workers = workers;
  o.autotune.max_workers = max_workers;
  o.autotune.min_workers = min_workers;
  o.worker_seeding = WorkerSeeding::PerTask;
  o.timeout = 60;
  return o;
}

/// One epoch; the consumer spends `step_ms` on each batch.
std::vector<std::string> run_epoch(DataLoader& dl, int step_ms, EpochStats* stats = nullptr) {
  std::vector<std::string> out;
  DataLoader::Iterator it = dl.iter();
  while (auto b = it.next()) {
    out.push_back(bytes_of(*b));
    if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
  }
  if (stats) *stats = it.stats();
  return out;
}

std::string decisions(const EpochStats& s) {
  std::string out;
  for (const auto& d : s.autotune)
    out += std::to_string(d.t_s) + " s: " + std::to_string(d.from_workers) + "w/" + std::to_string(d.from_prefetch) +
           "p -> " + std::to_string(d.to_workers) + "w/" + std::to_string(d.to_prefetch) + "p: " + d.reason + "\n";
  return out;
}

bool has_step(const EpochStats& s, int to_workers, const std::string& words) {
  for (const auto& d : s.autotune)
    if (d.to_workers == to_workers && d.reason.find(words) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(Autotune, OptionsResolveToMaxWorkersSlotsAndBadBoundsAreRefusedWithTheReason) {
  DataLoaderOptions o = options(kAutoWorkers, 3, 1);
  DataLoader dl(draws(8), o);
  EXPECT_EQ(dl.options().num_workers, 3) << "the pool's slots";
  DataLoaderOptions bad = options(kAutoWorkers, 2, 3);
  try {
    DataLoader x(draws(8), bad);
    FAIL() << "min_workers above max_workers was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("min_workers=3 is above max_workers=2"), std::string::npos) << e.what();
  }
  DataLoaderOptions remote = options(kAutoWorkers);
  remote.remote_workers = {"127.0.0.1:1"};
  remote.remote_token_file = "/nonexistent";
  EXPECT_THROW(DataLoader(draws(8), remote), ValueError);
  DataLoaderOptions negative = options(-1);  // PyTorch's ValueError, not auto
  EXPECT_THROW(DataLoader(draws(8), negative), ValueError);
  DataLoaderOptions cpus = options(kAutoWorkers, 0, 0);
  DataLoader by_cpus(draws(8), cpus);
  EXPECT_EQ(by_cpus.options().num_workers, usable_cpus());
}

TEST(Autotune, ASlowConsumerRetiresAWorkerMidEpochAndAnInputBoundEpochStartsItAgainSameBatches) {
  loader::testing::LeakCheck leaks;
  std::vector<std::vector<std::string>> fixed;
  {
    manual_seed(3);
    DataLoader dl(draws(400, 3), options(2));
    fixed.push_back(run_epoch(dl, 0));
    fixed.push_back(run_epoch(dl, 0));
  }
  {
    manual_seed(3);
    DataLoaderOptions o = options(kAutoWorkers, 2, 1);
    o.persistent_workers = true;
    DataLoader dl(draws(400, 3), o);
    // Epoch 1: the consumer takes 25 ms a batch, the workers 12 ms each: one is idle.
    EpochStats first;
    EXPECT_EQ(run_epoch(dl, 25, &first), fixed[0]) << "retiring a worker changed the batches";
    EXPECT_TRUE(has_step(first, 1, "consumer-bound")) << decisions(first);
    ASSERT_EQ(first.workers.size(), 2u);
    EXPECT_EQ(first.workers_now, 1) << decisions(first);
    // Epoch 2: no consumer step: one worker cannot keep up, the retired one starts again.
    EpochStats second;
    EXPECT_EQ(run_epoch(dl, 0, &second), fixed[1]) << "starting a worker changed the batches";
    EXPECT_TRUE(has_step(second, 2, "one more worker")) << decisions(second);
    EXPECT_NE(second.to_json().find("\"autotune\":[{\"t_s\""), std::string::npos);
    // The loader's history keeps every decision.
    EXPECT_GE(dl.stats().total.autotune.size(), 2u);
  }
  EXPECT_EQ(leaks.new_children(), "");
  EXPECT_EQ(leaks.new_segments(), "");
}

TEST(Autotune, ACheapDatasetLoadsInTheApplicationsThreadBetweenEpochsSameBatches) {
  loader::testing::LeakCheck leaks;
  std::vector<std::vector<std::string>> inline_run;
  {
    manual_seed(4);
    DataLoaderOptions o = options(0);
    DataLoader dl(draws(2000), o);
    for (int e = 0; e < 4; ++e) inline_run.push_back(run_epoch(dl, 0));
  }
  {
    manual_seed(4);
    // One worker with one task in flight: the pool's batch costs the worker's time, the
    // application's and the round trip between them, the estimate for this thread the
    // first two only, so the choice does not hang on how busy the machine is (with two
    // workers and a deeper prefetch the pool's cost fell below the estimate on a loaded
    // CI machine under ASan: the workers' busy time grows when they are descheduled).
    DataLoaderOptions o = options(kAutoWorkers, 1, 0);
    o.prefetch_factor = 1;
    o.autotune.tune_prefetch = false;
    DataLoader dl(draws(2000), o);
    int inline_epochs = 0;
    std::string log;
    for (int e = 0; e < 4; ++e) {
      EpochStats s;
      EXPECT_EQ(run_epoch(dl, 0, &s), inline_run[static_cast<size_t>(e)]) << "epoch " << e;
      EXPECT_TRUE(s.autotuned);
      if (s.workers_now == 0) ++inline_epochs;
      log += decisions(s);
    }
    EXPECT_GE(inline_epochs, 1) << "a batch of 4 cheap samples costs less here than a round trip to a worker\n" << log;
    EXPECT_NE(log.find("between epochs"), std::string::npos) << log;
  }
  EXPECT_EQ(leaks.new_children(), "");
  EXPECT_EQ(leaks.new_segments(), "");
}

TEST(Autotune, ACheckpointMidEpochResumesTheRestByteForByte) {
  loader::testing::LeakCheck leaks;
  std::vector<std::string> whole;
  {
    manual_seed(6);
    DataLoader dl(draws(200, 1), options(kAutoWorkers));
    whole = run_epoch(dl, 0);
  }
  Value state;
  {
    manual_seed(6);
    DataLoader dl(draws(200, 1), options(kAutoWorkers));
    DataLoader::Iterator it = dl.iter();
    for (int k = 0; k < 20; ++k) ASSERT_TRUE(it.next());
    state = through_pt(it.state_dict());
  }
  {
    manual_seed(99);  // the checkpoint carries the streams
    DataLoader dl(draws(200, 1), options(kAutoWorkers));
    dl.load_state_dict(state);
    std::vector<std::string> rest = run_epoch(dl, 0);
    ASSERT_EQ(rest.size(), whole.size() - 20);
    EXPECT_TRUE(std::equal(rest.begin(), rest.end(), whole.begin() + 20));
  }
  EXPECT_EQ(leaks.new_children(), "");
  EXPECT_EQ(leaks.new_segments(), "");
}

// W5's shape, small: an ImageFolder of JPEG and PNG files (copies of the golden images,
// tests/golden/images/files), decoded in the workers, torchvision's training transform
// (RandomResizedCrop, flip, Normalize) drawn per task. A slow consumer retires a worker in
// the middle of the epoch and a fast one runs on whatever the tuner keeps: the batches,
// crops and flips included, are those of a fixed pool of two.
TEST(Autotune, ImageWorkersAreRetiredMidEpochAndTheDecodedBatchesStayThoseOfAFixedPool) {
  loader::testing::LeakCheck leaks;
  loader::testing::TempDir dir;
  const char* sources[] = {"rgb420_big.jpg", "rgb444.jpg", "progressive.jpg", "cmyk.jpg", "rgb8.png", "palette8.png"};
  for (int c = 0; c < 3; ++c) {
    const std::string cls = dir.file("images/class" + std::to_string(c));
    std::filesystem::create_directories(cls);
    for (int i = 0; i < 160; ++i) {
      const std::string from = sources[(c + i) % 6];
      std::ofstream(cls + "/" + std::to_string(i) + from.substr(from.find('.')), std::ios::binary)
          << loader::testing::read_file(loader::testing::golden_path("images/files/" + from));
    }
  }
  const Value params = Value::dict({{"root", dir.file("images")}, {"transform", "train"}, {"size", 32}});
  auto images = [&] { return make_dataset({"image_folder", params}); };
  auto image_options = [](int workers) {
    DataLoaderOptions o = options(workers, 2, 1);
    o.batch_size = 8;
    o.persistent_workers = true;
    return o;
  };
  std::vector<std::vector<std::string>> fixed;
  {
    DataLoader dl(images(), image_options(2));
    fixed.push_back(run_epoch(dl, 0));
    fixed.push_back(run_epoch(dl, 0));
  }
  ASSERT_EQ(fixed[0].size(), 60u);
  ASSERT_NE(fixed[0], fixed[1]) << "a new epoch draws new crops";
  {
    DataLoader dl(images(), image_options(kAutoWorkers));
    // 60 batches at 50 ms each: a loaded machine may make the first window look
    // input-bound (the workers wait for a core, which is not busy time), and a deeper
    // prefetch is then tried and judged first; the consumer-bound windows follow.
    EpochStats first;
    EXPECT_EQ(run_epoch(dl, 50, &first), fixed[0]) << "retiring an image worker changed the batches\n"
                                                    << decisions(first);
    EXPECT_TRUE(has_step(first, 1, "consumer-bound")) << decisions(first);
    EpochStats second;
    EXPECT_EQ(run_epoch(dl, 0, &second), fixed[1]) << decisions(second);
    EXPECT_TRUE(second.autotuned);
  }
  EXPECT_EQ(leaks.new_children(), "");
  EXPECT_EQ(leaks.new_segments(), "");
}
