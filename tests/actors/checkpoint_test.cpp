// Mid-epoch checkpoints (DataLoader::state_dict / load_state_dict): a loader resumed
// from a checkpoint, in a new loader whose generators were scrambled meanwhile, gives
// the rest of the epoch and the epochs after it byte for byte as the loader that was
// checkpointed would have, for datasets whose workers draw random numbers, with 0 and
// more workers, fresh and persistent.  The checkpoint travels through a .pt byte string
// as a user's would.
#include <signal.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loader/dataloader.h"
#include "loader/equibatch_sampler.h"
#include "loader/error.h"
#include "loader/runtime/rng_state_page.h"
#include "loader/runtime/os/shm.h"
#include "loader/samplers.h"
#include "loader/serialization/pt.h"
#include "loader/worker_info.h"
#include "process_leaks.h"

using namespace loader;
using loader::runtime::RngStatePage;

namespace {

// "test_random_draws" (faults_test.cpp): sample i = (float64[4] drawn from the default
// generator, i); in a worker the generator is the worker's.
std::shared_ptr<Dataset> random_draws(int64_t n) {
  return make_dataset({"test_random_draws", Value::dict({{"n", n}})});
}

/// An IterableDataset with random augmentation: sample v = (float64[4] drawn from the
/// default generator, int64 first + v) for v in [0, n), split between the workers as in
/// PyTorch's docs (worker w yields [w*per, min((w+1)*per, n))), each worker's share in an
/// order its iter() draws (a shuffling stream: iter() draws too).  In a worker the
/// generator is the worker's.  `first` lets a test change the stream (other data).
class RandomStream : public IterableDataset {
 public:
  RandomStream(int64_t n, int64_t first) : n_(n), first_(first) {}
  std::unique_ptr<Cursor<Value>> iter() override {
    int64_t lo = 0, hi = n_;
    if (const WorkerInfo* info = get_worker_info()) {
      const int64_t per = (n_ + info->num_workers - 1) / info->num_workers;
      lo = std::min<int64_t>(n_, info->id * per);
      hi = std::min<int64_t>(n_, lo + per);
    }
    std::vector<int64_t> order;
    for (int64_t v = lo; v < hi; ++v) order.push_back(first_ + v);
    for (size_t i = order.size(); i > 1; --i)
      std::swap(order[i - 1], order[default_generator().random64() % i]);
    return make_cursor<Value>([order = std::move(order), k = size_t{0}]() mutable -> std::optional<Value> {
      if (k >= order.size()) return std::nullopt;
      std::vector<double> x(4);
      for (auto& d : x) d = static_cast<double>(default_generator().random64());
      return Value::tuple({Value(Tensor::from_vector(x)), Value(order[k++])});
    });
  }

 private:
  int64_t n_, first_;
};
LOADER_REGISTER_ITERABLE_DATASET("test_checkpoint_random_stream", [](const Value& p) {
  return std::make_shared<RandomStream>(p.at("n").to_int(), p.get("first", Value(int64_t{0})).to_int());
});

std::shared_ptr<IterableDataset> random_stream(int64_t n, int64_t first = 0) {
  return make_iterable_dataset({"test_checkpoint_random_stream", Value::dict({{"n", n}, {"first", first}})});
}

struct Config {
  const char* name;
  int workers;
  bool persistent;
  int prefetch;           // 0: default
  bool own_generator;     // shuffle with options.generator instead of the default one
  WorkerMode mode;
};

std::ostream& operator<<(std::ostream& os, const Config& c) { return os << c.name; }

/// Batches of 4, shuffled, `workers` worker processes, a 60 s timeout.
DataLoaderOptions shuffled(int workers, bool persistent = false) {
  DataLoaderOptions o;
  o.batch_size = 4;
  o.shuffle = true;
  o.num_workers = workers;
  o.persistent_workers = persistent;
  o.timeout = 60;
  return o;
}

DataLoaderOptions options_of(const Config& c) {
  DataLoaderOptions o = shuffled(c.workers, c.persistent);
  if (c.prefetch) o.prefetch_factor = c.prefetch;
  if (c.own_generator) o.generator = std::make_shared<Generator>(1234);
  o.worker_mode = c.mode;
  return o;
}

/// The batches of a resumed epoch against the same epoch run through, from batch `cut`.
void expect_rest(const std::vector<std::string>& rest, const std::vector<std::string>& reference, size_t cut) {
  ASSERT_EQ(rest.size(), reference.size() - cut);
  for (size_t k = 0; k < rest.size(); ++k) EXPECT_TRUE(rest[k] == reference[cut + k]) << "batch " << cut + k;
}

/// The epoch after a resumed one against the same epoch run through.
void expect_next_epoch(const std::vector<std::string>& next, const std::vector<std::string>& reference) {
  ASSERT_EQ(next.size(), reference.size());
  for (size_t k = 0; k < next.size(); ++k) EXPECT_TRUE(next[k] == reference[k]) << "the next epoch's batch " << k;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

/// A batch as bytes: the drawn values and the indices.
std::string bytes_of(const Value& batch) {
  const Tensor& x = batch[0].to_tensor();
  const Tensor& i = batch[1].to_tensor();
  return std::string(static_cast<const char*>(x.data_ptr()), x.nbytes()) +
         std::string(static_cast<const char*>(i.data_ptr()), i.nbytes());
}

std::vector<std::string> epoch_bytes(DataLoader::Iterator& it) {
  std::vector<std::string> out;
  while (auto b = it.next()) out.push_back(bytes_of(*b));
  return out;
}

std::vector<std::string> epoch_bytes(DataLoader& dl) {
  auto it = dl.iter();
  return epoch_bytes(it);
}

/// The checkpoint as a user stores it: pt::save, then pt::load.
Value through_pt(const Value& state) { return pt::load_bytes(pt::save_bytes(state)); }

class Checkpoint : public ::testing::TestWithParam<Config> {};

TEST_P(Checkpoint, AResumedEpochAndTheNextOneAreByteIdenticalToRunningThrough) {
  const Config c = GetParam();
  loader::testing::LeakCheck leaks;
  const int64_t n = 50;  // 13 batches of 4, the last of 2
  std::vector<std::string> epoch1, epoch2;
  {
    manual_seed(7);
    DataLoader dl(random_draws(n), options_of(c));
    epoch1 = epoch_bytes(dl);
    epoch2 = epoch_bytes(dl);
  }
  ASSERT_EQ(epoch1.size(), 13u);
  ASSERT_FALSE(epoch1 == epoch2);
  for (size_t cut : {size_t{0}, size_t{1}, size_t{6}, size_t{12}}) {
    SCOPED_TRACE("checkpoint after " + std::to_string(cut) + " batches");
    Value state;
    {
      manual_seed(7);
      DataLoader dl(random_draws(n), options_of(c));
      auto it = dl.iter();
      for (size_t k = 0; k < cut; ++k) ASSERT_TRUE(bytes_of(*it.next()) == epoch1[k]);
      // Taken while the workers run ahead (tasks in flight, results waiting).
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      state = through_pt(it.state_dict());
      EXPECT_EQ(state.at("batches_consumed").to_int(), static_cast<int64_t>(cut));
    }
    manual_seed(999);  // whatever the default generator holds now, the checkpoint decides
    DataLoader resumed(random_draws(n), options_of(c));
    resumed.load_state_dict(state);
    auto it = resumed.iter();
    EXPECT_EQ(it.batches_yielded(), static_cast<int64_t>(cut));
    const std::vector<std::string> rest = epoch_bytes(it);
    expect_rest(rest, epoch1, cut);
    expect_next_epoch(epoch_bytes(resumed), epoch2);
  }
  EXPECT_EQ(leaks.new_segments(), "");
  EXPECT_EQ(leaks.new_children(), "");
}

// A trainer that saves at step 0, before the loader's first iter(): the checkpoint loads
// into a loader built the same way (one 'worker_rng' entry per worker, though no worker
// ran yet), whose epochs are then those of a fresh loader.
TEST_P(Checkpoint, AStateTakenBeforeAnyEpochLoadsAndResumes) {
  const Config c = GetParam();
  loader::testing::LeakCheck leaks;
  const int64_t n = 30;
  std::vector<std::string> epoch1, epoch2;
  {
    manual_seed(13);
    DataLoader fresh(random_draws(n), options_of(c));
    epoch1 = epoch_bytes(fresh);
    epoch2 = epoch_bytes(fresh);
  }
  ASSERT_FALSE(epoch1 == epoch2);
  Value state;
  {
    manual_seed(13);
    DataLoader dl(random_draws(n), options_of(c));
    state = through_pt(dl.state_dict());
    EXPECT_EQ(state.at("worker_rng").size(), static_cast<size_t>(c.workers));
    expect_next_epoch(epoch_bytes(dl), epoch1);  // taking it changed nothing
  }
  {
    manual_seed(999);  // whatever the default generator holds now, the checkpoint decides
    DataLoader resumed(random_draws(n), options_of(c));
    ASSERT_EQ(error_of([&] { resumed.load_state_dict(state); }), "");
    expect_next_epoch(epoch_bytes(resumed), epoch1);
    expect_next_epoch(epoch_bytes(resumed), epoch2);
  }
  EXPECT_EQ(leaks.new_segments(), "");
  EXPECT_EQ(leaks.new_children(), "");
}

/// `got` against `expected`, entry by entry (the failure names the entry), then whole.
void expect_same_checkpoint(const Value& got, const Value& expected) {
  ASSERT_TRUE(got.is_dict()) << got.repr().substr(0, 80);
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& [key, value] : expected.dict_items()) {
    ASSERT_TRUE(got.contains(key.to_string())) << "no '" << key.to_string() << "' entry";
    EXPECT_TRUE(got.at(key.to_string()) == value) << "'" << key.to_string() << "': " << got.at(key.to_string()).repr()
                                                  << " instead of " << value.repr();
  }
  EXPECT_TRUE(pt::save_bytes(got) == pt::save_bytes(expected)) << "saved, the two differ";
}

// A trainer that restarts from a checkpoint and saves again before its first step saves
// the checkpoint it loaded (the next iter() starts there), not where the loader's own
// earlier iterator stood, nor a loader's first epoch; resuming that one gives the same
// batches as resuming the original.
TEST_P(Checkpoint, StateDictAfterLoadStateDictIsTheLoadedState) {
  const Config c = GetParam();
  loader::testing::LeakCheck leaks;
  const int64_t n = 50;  // 13 batches of 4, the last of 2
  const size_t cut = 6;
  std::vector<std::string> epoch1, epoch2;
  Value state;
  {
    manual_seed(17);
    DataLoader dl(random_draws(n), options_of(c));
    auto it = dl.iter();
    while (auto b = it.next()) {
      epoch1.push_back(bytes_of(*b));
      if (epoch1.size() == cut) state = through_pt(it.state_dict());
    }
    epoch2 = epoch_bytes(dl);
  }
  ASSERT_EQ(epoch1.size(), 13u);
  for (bool ran_before : {false, true}) {
    SCOPED_TRACE(ran_before ? "the loader had run 2 batches before loading" : "a new loader");
    Value again;
    {
      SCOPED_TRACE("the loader that loaded it");
      manual_seed(18);
      DataLoader dl(random_draws(n), options_of(c));
      if (ran_before) {
        auto it = dl.iter();
        it.next();
        it.next();
      }
      Value mine = through_pt(state);
      dl.load_state_dict(mine);
      mine.set(Value("batches_consumed"), Value(0));  // the caller's dict changes after; the loader's does not
      again = dl.state_dict();
      expect_same_checkpoint(again, state);
      expect_same_checkpoint(dl.state_dict(), state);  // asked twice, the same
      again = through_pt(again);
      expect_rest(epoch_bytes(dl), epoch1, cut);
      expect_next_epoch(epoch_bytes(dl), epoch2);
    }
    SCOPED_TRACE("a loader that loaded the state_dict() it returned");
    manual_seed(19);
    DataLoader resumed(random_draws(n), options_of(c));
    resumed.load_state_dict(again);
    {
      auto it = resumed.iter();
      EXPECT_EQ(it.batches_yielded(), static_cast<int64_t>(cut));
      expect_rest(epoch_bytes(it), epoch1, cut);
    }
    expect_next_epoch(epoch_bytes(resumed), epoch2);
  }
  EXPECT_EQ(leaks.new_segments(), "");
  EXPECT_EQ(leaks.new_children(), "");
}

INSTANTIATE_TEST_SUITE_P(
    Configs, Checkpoint,
    ::testing::Values(Config{"NoWorkers", 0, false, 0, false, WorkerMode::Process},
                      Config{"TwoWorkers", 2, false, 0, false, WorkerMode::Process},
                      Config{"TwoPersistentWorkers", 2, true, 0, false, WorkerMode::Process},
                      Config{"ThreeWorkersPrefetch3OwnGenerator", 3, false, 3, true, WorkerMode::Process},
                      Config{"TwoPersistentInProcessOwnGenerator", 2, true, 0, true, WorkerMode::InProcess}),
    [](const ::testing::TestParamInfo<Config>& i) { return std::string(i.param.name); });

/// options_of(c) for an IterableDataset: no shuffle.
DataLoaderOptions streamed(const Config& c) {
  DataLoaderOptions o = options_of(c);
  o.shuffle.reset();
  return o;
}

class IterableCheckpoint : public ::testing::TestWithParam<Config> {};

// An IterableDataset's epoch is resumed by running it again from its start (its
// position lives in its own stream) and dropping what was given out: byte for byte the
// rest of the epoch, and the next epoch, for a stream with random augmentation.
TEST_P(IterableCheckpoint, AResumedEpochAndTheNextOneAreByteIdenticalToRunningThrough) {
  const Config c = GetParam();
  loader::testing::LeakCheck leaks;
  const int64_t n = 50;
  std::vector<std::string> epoch1, epoch2;
  {
    manual_seed(11);
    DataLoader dl(random_stream(n), streamed(c));
    epoch1 = epoch_bytes(dl);
    epoch2 = epoch_bytes(dl);
  }
  ASSERT_GE(epoch1.size(), 13u);
  ASSERT_FALSE(epoch1 == epoch2) << "the workers' draws differ from epoch to epoch";
  for (size_t cut : {size_t{0}, size_t{1}, size_t{6}, epoch1.size() - 1, epoch1.size()}) {
    SCOPED_TRACE("checkpoint after " + std::to_string(cut) + " of " + std::to_string(epoch1.size()) + " batches");
    Value state;
    {
      manual_seed(11);
      DataLoader dl(random_stream(n), streamed(c));
      auto it = dl.iter();
      for (size_t k = 0; k < cut; ++k) ASSERT_TRUE(bytes_of(*it.next()) == epoch1[k]);
      if (cut == epoch1.size()) {
        ASSERT_FALSE(it.next().has_value());  // an epoch that ended
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // workers run ahead
      state = through_pt(it.state_dict());
      EXPECT_EQ(state.at("batches_consumed").to_int(), static_cast<int64_t>(cut));
      EXPECT_EQ(state.at("finished").to_bool(), cut == epoch1.size());
    }
    manual_seed(999);
    DataLoader resumed(random_stream(n), streamed(c));
    resumed.load_state_dict(state);
    if (cut < epoch1.size()) {
      auto it = resumed.iter();
      EXPECT_EQ(it.batches_yielded(), static_cast<int64_t>(cut));
      expect_rest(epoch_bytes(it), epoch1, cut);
    }
    expect_next_epoch(epoch_bytes(resumed), epoch2);
  }
  EXPECT_EQ(leaks.new_segments(), "");
  EXPECT_EQ(leaks.new_children(), "");
}

INSTANTIATE_TEST_SUITE_P(
    Configs, IterableCheckpoint,
    ::testing::Values(Config{"NoWorkers", 0, false, 0, false, WorkerMode::Process},
                      Config{"TwoWorkers", 2, false, 0, false, WorkerMode::Process},
                      Config{"TwoPersistentWorkers", 2, true, 0, false, WorkerMode::Process},
                      Config{"ThreeWorkersPrefetch3OwnGenerator", 3, false, 3, true, WorkerMode::Process},
                      Config{"TwoPersistentInProcess", 2, true, 0, false, WorkerMode::InProcess}),
    [](const ::testing::TestParamInfo<Config>& i) { return std::string(i.param.name); });

// Fresh-worker epochs re-initialise the last epoch's processes: their iterable streams
// are made once, at Init, as new processes make them (a second iter() on an Epoch frame
// drew the shuffling stream's order twice, so a later epoch differed from PyTorch's).
TEST(NonPersistentWorkers, AnIterableStreamIsMadeOnceAnEpochAsNewWorkersMakeIt) {
  const Config c{"two", 2, false, 0, true, WorkerMode::Process};
  DataLoaderOptions o = streamed(c);
  DataLoader dl(random_stream(30), o);
  const std::vector<std::string> e1 = epoch_bytes(dl);
  DataLoaderOptions fresh_options = o;
  fresh_options.generator = std::make_shared<Generator>(*o.generator);  // as the first epoch left it
  const std::vector<std::string> e2 = epoch_bytes(dl);  // the re-initialised pool
  DataLoader fresh(random_stream(30), fresh_options);    // a new pool, its first epoch
  const std::vector<std::string> fresh2 = epoch_bytes(fresh);
  ASSERT_FALSE(e1 == e2);
  ASSERT_EQ(e2.size(), fresh2.size());
  for (size_t k = 0; k < e2.size(); ++k) EXPECT_TRUE(e2[k] == fresh2[k]) << "batch " << k;
}

TEST(CheckpointLoader, PersistentIterableWorkersResumeFromAnEpochsEndAndRefuseALaterEpochsMiddle) {
  const Config c{"persistent", 2, true, 0, false, WorkerMode::Process};
  const int64_t n = 30;
  std::vector<std::string> e1, e2, e3;
  {
    manual_seed(5);
    DataLoader dl(random_stream(n), streamed(c));
    e1 = epoch_bytes(dl);
    e2 = epoch_bytes(dl);
    e3 = epoch_bytes(dl);
  }
  Value after_epoch;
  {
    manual_seed(5);
    DataLoader dl(random_stream(n), streamed(c));
    EXPECT_TRUE(epoch_bytes(dl) == e1);
    after_epoch = through_pt(dl.state_dict());
    {
      auto it = dl.iter();  // the pool's second epoch: its workers' streams went on from the first
      ASSERT_TRUE(bytes_of(*it.next()) == e2[0]);
      const std::string why = error_of([&] { it.state_dict(); });
      EXPECT_NE(why.find("persistent workers' streams went on from an earlier epoch"), std::string::npos) << why;
      EXPECT_NE(why.find("take the checkpoint between epochs"), std::string::npos) << why;
    }
    // The iterator left mid-epoch: the loader's checkpoint says why there is none.
    const std::string why = error_of([&] { dl.state_dict(); });
    EXPECT_NE(why.find("the latest epoch left no checkpoint"), std::string::npos) << why;
    EXPECT_NE(why.find("persistent workers' streams went on"), std::string::npos) << why;
    EXPECT_EQ(epoch_bytes(dl).size(), e3.size()) << "the loader goes on";
    EXPECT_NO_THROW(dl.state_dict()) << "an epoch that ended is a checkpoint again";
  }
  // From the end of the first epoch: the next epochs as the persistent workers gave them.
  Value mid_second;
  {
    manual_seed(77);
    DataLoader dl(random_stream(n), streamed(c));
    dl.load_state_dict(after_epoch);
    auto it = dl.iter();  // its workers start from the states the first epoch left them in: known
    for (size_t k = 0; k < 3; ++k) ASSERT_TRUE(bytes_of(*it.next()) == e2[k]);
    mid_second = through_pt(it.state_dict());
    expect_rest(epoch_bytes(it), e2, 3);
    EXPECT_TRUE(epoch_bytes(dl) == e3);
  }
  {
    manual_seed(78);
    DataLoader dl(random_stream(n), streamed(c));
    dl.load_state_dict(mid_second);
    auto it = dl.iter();
    expect_rest(epoch_bytes(it), e2, 3);
    EXPECT_TRUE(epoch_bytes(dl) == e3);
  }
}

TEST(CheckpointLoader, AnIterableCheckpointIsRefusedByOtherWorkerSettingsAndByAShorterStream) {
  Config c{"two", 2, false, 0, false, WorkerMode::Process};
  Value state;
  {
    manual_seed(1);
    DataLoader dl(random_stream(40), streamed(c));
    auto it = dl.iter();
    for (int k = 0; k < 6; ++k) ASSERT_TRUE(it.next().has_value());
    state = through_pt(it.state_dict());
  }
  for (int workers : {0, 1, 3}) {
    c.workers = workers;
    DataLoader dl(random_stream(40), streamed(c));
    for (bool strict : {true, false}) {
      const std::string why = error_of([&] { dl.load_state_dict(state, strict); });
      EXPECT_NE(why.find("an IterableDataset's epoch is resumed by running it again"), std::string::npos) << why;
    }
  }
  c.workers = 2;
  {
    // Another stream, long enough: the replay cannot tell (the checkpoint holds no data);
    // a stream that ends before the batches given out is refused, and the plan dropped.
    DataLoader dl(random_stream(8), streamed(c));
    dl.load_state_dict(state);
    const std::string why = error_of([&] { dl.iter(); });
    EXPECT_NE(why.find("its stream ended after 2 batches, where the checkpointed iterator had given out 6"),
              std::string::npos)
        << why;
    EXPECT_EQ(epoch_bytes(dl).size(), 2u) << "a plain epoch follows";
  }
}

TEST(CheckpointLoader, StateDictAfterALoopOrABreakResumesWhereTheLoopStood) {
  // A range-for hides its iterator: DataLoader::state_dict() is the latest iterator's,
  // also once the loop is over.
  DataLoaderOptions o;
  o.batch_size = 5;
  o.shuffle = true;
  o.num_workers = 2;
  o.persistent_workers = true;
  o.timeout = 60;
  std::vector<std::string> e1, e2, e3;
  {
    manual_seed(3);
    DataLoader dl(random_draws(40), o);
    e1 = epoch_bytes(dl);
    e2 = epoch_bytes(dl);
    e3 = epoch_bytes(dl);
  }
  Value after_epoch, after_break;
  {
    manual_seed(3);
    DataLoader dl(random_draws(40), o);
    for (Value& b : dl) (void)b;
    after_epoch = through_pt(dl.state_dict());
    EXPECT_TRUE(after_epoch.at("finished").to_bool());
    size_t k = 0;
    for (Value& b : dl) {
      EXPECT_TRUE(bytes_of(b) == e2[k]);
      if (++k == 3) break;
    }
    after_break = through_pt(dl.state_dict());
    EXPECT_FALSE(after_break.at("finished").to_bool());
  }
  {
    manual_seed(50);
    DataLoader dl(random_draws(40), o);
    dl.load_state_dict(after_epoch);
    EXPECT_TRUE(epoch_bytes(dl) == e2);
    EXPECT_TRUE(epoch_bytes(dl) == e3);
  }
  {
    manual_seed(51);
    DataLoader dl(random_draws(40), o);
    dl.load_state_dict(after_break);
    auto rest = epoch_bytes(dl);
    expect_rest(rest, e2, 3);
    EXPECT_TRUE(epoch_bytes(dl) == e3);
  }
}

TEST(CheckpointLoader, AWorkerKilledInAResumedEpochIsRestartedAndTheBatchesStayTheSame) {
  // The checkpoint's state for a worker's first task is sent before that task; a worker
  // killed before or after it ran it starts again from the same state.
  DataLoaderOptions o = shuffled(2);
  o.max_worker_restarts = 2;
  auto ds = [] { return make_dataset({"test_random_draws", Value::dict({{"n", 60}, {"delay_ms", 2}})}); };
  std::vector<std::string> e1;
  {
    manual_seed(21);
    DataLoader dl(ds(), o);
    e1 = epoch_bytes(dl);
  }
  Value state;
  {
    manual_seed(21);
    DataLoader dl(ds(), o);
    auto it = dl.iter();
    for (int k = 0; k < 5; ++k) it.next();
    state = through_pt(it.state_dict());
  }
  for (int victim : {0, 1}) {
    SCOPED_TRACE("worker " + std::to_string(victim) + " killed");
    manual_seed(22);
    DataLoader dl(ds(), o);
    dl.load_state_dict(state);
    auto it = dl.iter();
    const std::vector<int> pids = it.worker_pids();
    ASSERT_EQ(pids.size(), 2u);
    ASSERT_GT(pids[static_cast<size_t>(victim)], 0);
    ASSERT_EQ(kill(pids[static_cast<size_t>(victim)], SIGKILL), 0);  // before or while it runs its first task
    const std::vector<std::string> rest = epoch_bytes(it);
    expect_rest(rest, e1, 5);
    EXPECT_GE(it.stats().workers.at(static_cast<size_t>(victim)).restarts, 1);
  }
}

/// Epochs 2 and 3 of a loader made by `make`, and the same from a checkpoint taken after
/// `cut` batches of epoch 2 (the generators scrambled in between, the samplers' streams
/// moved on by epoch 1).
void expect_resume_identical(const std::function<std::unique_ptr<DataLoader>()>& make, size_t cut) {
  std::vector<std::string> e2, e3;
  {
    manual_seed(31);
    auto dl = make();
    epoch_bytes(*dl);
    e2 = epoch_bytes(*dl);
    e3 = epoch_bytes(*dl);
  }
  ASSERT_GT(e2.size(), cut);
  Value state;
  {
    manual_seed(31);
    auto dl = make();
    epoch_bytes(*dl);
    auto it = dl->iter();
    for (size_t k = 0; k < cut; ++k) it.next();
    state = through_pt(it.state_dict());
  }
  manual_seed(32);
  auto dl = make();
  dl->load_state_dict(state);
  const auto rest = epoch_bytes(*dl);
  expect_rest(rest, e2, cut);
  EXPECT_TRUE(epoch_bytes(*dl) == e3) << "the next epoch";
}

TEST(CheckpointLoader, SamplersWithTheirOwnGeneratorsAreResumedToo) {
  // Each sampler's own random stream (random_streams()) is saved and replayed: a
  // class-balanced batch sampler's PythonRandom, whose stream runs on across epochs,
  // and a weighted sampler's Generator, both drawing once per epoch.
  std::vector<std::vector<int64_t>> labels;
  for (int64_t i = 0; i < 60; ++i) labels.push_back({i % 3});
  for (int workers : {0, 2}) {
    SCOPED_TRACE(std::to_string(workers) + " workers");
    expect_resume_identical(
        [&] {
          DataLoaderOptions o;
          o.num_workers = workers;
          o.timeout = 60;
          EquiBatchSamplerOptions so;
          so.balanced_coef = 12;
          so.seed = 5;
          o.batch_sampler = std::make_shared<EquiBatchSampler>(labels, 4, so);
          return std::make_unique<DataLoader>(random_draws(60), o);
        },
        4);
    expect_resume_identical(
        [&] {
          DataLoaderOptions o;
          o.num_workers = workers;
          o.batch_size = 3;
          o.timeout = 60;
          std::vector<double> w(60);
          for (size_t i = 0; i < w.size(); ++i) w[i] = 1.0 + static_cast<double>(i % 7);
          o.sampler = std::make_shared<WeightedRandomSampler>(w, 30, true, std::make_shared<Generator>(8));
          return std::make_unique<DataLoader>(random_draws(60), o);
        },
        5);
  }
}

TEST(CheckpointLoader, EachRankResumesItsOwnDistributedShareInTheCheckpointedEpoch) {
  // Two ranks of a DistributedSampler: rank r's checkpoint in epoch 1, loaded into a new
  // loader whose sampler is still at epoch 0 (set_epoch not called), gives the rest of
  // rank r's epoch 1, and epoch 2 after set_epoch(2); a checkpoint taken after epoch 1
  // ended, loaded before set_epoch(2), gives epoch 2.  Another rank's checkpoint, or one
  // of another seed, is refused naming both.
  static constexpr int64_t kReplicas = 2;
  constexpr size_t kCut = 3;
  auto make = [](int64_t rank, int64_t seed, std::shared_ptr<DistributedSampler>* sampler) {
    DataLoaderOptions o = shuffled(2);
    o.shuffle = false;
    *sampler = std::make_shared<DistributedSampler>(SampleSource(int64_t{50}), kReplicas, rank, true, seed);
    o.sampler = *sampler;
    return std::make_unique<DataLoader>(random_draws(50), o);
  };
  std::vector<Value> states;
  for (int64_t rank = 0; rank < kReplicas; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    std::shared_ptr<DistributedSampler> sampler;
    std::vector<std::string> e1, e2;
    {
      manual_seed(40 + rank);
      auto dl = make(rank, 9, &sampler);
      epoch_bytes(*dl);
      sampler->set_epoch(1);
      e1 = epoch_bytes(*dl);
      sampler->set_epoch(2);
      e2 = epoch_bytes(*dl);
    }
    ASSERT_GT(e1.size(), kCut);
    Value after_epoch_1;
    {
      manual_seed(40 + rank);
      auto dl = make(rank, 9, &sampler);
      epoch_bytes(*dl);
      sampler->set_epoch(1);
      {
        auto it = dl->iter();
        for (size_t k = 0; k < kCut; ++k) it.next();
        states.push_back(through_pt(it.state_dict()));
        epoch_bytes(it);
      }
      after_epoch_1 = through_pt(dl->state_dict());
    }
    {
      // A finished epoch's checkpoint: the program's set_epoch(2) for the next one stands.
      manual_seed(8);
      auto dl = make(rank, 9, &sampler);
      dl->load_state_dict(after_epoch_1);
      sampler->set_epoch(2);
      EXPECT_TRUE(epoch_bytes(*dl) == e2) << "the epoch after a finished epoch's checkpoint";
      EXPECT_EQ(sampler->epoch(), 2);
    }
    manual_seed(7);
    auto dl = make(rank, 9, &sampler);
    dl->load_state_dict(states.back());
    expect_rest(epoch_bytes(*dl), e1, kCut);
    EXPECT_EQ(sampler->epoch(), 1) << "the checkpoint's epoch";
    sampler->set_epoch(2);
    EXPECT_TRUE(epoch_bytes(*dl) == e2) << "the next epoch";
  }
  std::shared_ptr<DistributedSampler> sampler;
  auto rank1 = make(1, 9, &sampler);
  const std::string other_rank = error_of([&] { rank1->load_state_dict(states[0]); });
  EXPECT_NE(other_rank.find("rank 0 of 2"), std::string::npos) << other_rank;
  EXPECT_NE(other_rank.find("this one is rank 1 of 2"), std::string::npos) << other_rank;
  auto other_seed = make(0, 10, &sampler);
  const std::string seed_error = error_of([&] { other_seed->load_state_dict(states[0]); });
  EXPECT_NE(seed_error.find("seed 9"), std::string::npos) << seed_error;
  EXPECT_NE(seed_error.find("seed 10"), std::string::npos) << seed_error;
  EXPECT_EQ(sampler->epoch(), 0) << "a refused checkpoint changes nothing";
}

TEST(CheckpointLoader, ALoaderGoesBackToItsOwnEarlierCheckpointWhileItsPersistentWorkersRun) {
  // The same loader, its persistent workers' streams moved on by later epochs, resumes a
  // checkpoint of its first epoch: each worker's first task starts from the saved state
  // (or, for a worker that had not started, new workers as Init leaves them).
  const DataLoaderOptions o = shuffled(2, /*persistent=*/true);
  for (size_t cut : {size_t{0}, size_t{5}}) {
    SCOPED_TRACE("checkpoint after " + std::to_string(cut) + " batches");
    manual_seed(41);
    DataLoader dl(random_draws(40), o);
    Value state;
    std::vector<std::string> e1, e2;
    {
      auto it = dl.iter();
      if (cut == 0) state = through_pt(it.state_dict());  // maybe before a worker ran anything
      while (auto b = it.next()) {
        e1.push_back(bytes_of(*b));
        if (e1.size() == cut) state = through_pt(it.state_dict());
      }
    }
    e2 = epoch_bytes(dl);
    epoch_bytes(dl);  // the workers' streams move on
    dl.load_state_dict(state);
    const auto rest = epoch_bytes(dl);
    expect_rest(rest, e1, cut);
    EXPECT_TRUE(epoch_bytes(dl) == e2) << "the next epoch";
  }
}

/// The indices of a batch of "test_random_draws".
std::vector<int64_t> indices_of(const Value& batch) { return batch[1].to_tensor().to_int64_vector(); }

TEST(CheckpointLoader, NotStrictAnotherNumberOfWorkersResumesTheSameBatchesOfIndices) {
  // Autoscaling: a checkpoint of 2 workers resumed with 3, with none, and with
  // persistent workers gives the rest of the epoch with the same indices (what workers
  // draw at random differs: their streams start afresh).
  const DataLoaderOptions o = shuffled(2);
  std::vector<std::vector<int64_t>> e1, e2;
  Value state;
  {
    manual_seed(61);
    DataLoader dl(random_draws(44), o);
    auto it = dl.iter();
    while (auto b = it.next()) {
      e1.push_back(indices_of(*b));
      if (e1.size() == 4) state = through_pt(it.state_dict());
    }
    for (Value& b : dl) e2.push_back(indices_of(b));
  }
  for (int workers : {3, 0, 2}) {
    for (bool persistent : {false, true}) {
      if (workers == 0 && persistent) continue;
      SCOPED_TRACE(std::to_string(workers) + " workers, persistent " + std::to_string(persistent));
      DataLoaderOptions other = o;
      other.num_workers = workers;
      other.persistent_workers = persistent;
      manual_seed(62);
      DataLoader dl(random_draws(44), other);
      if (workers != 2 || persistent) {
        EXPECT_NE(error_of([&] { dl.load_state_dict(state); }), "") << "strict by default";
      }
      dl.load_state_dict(state, /*strict=*/false);
      EXPECT_TRUE(dl.state_dict() == state) << "the checkpoint loaded, the other loader's";
      std::vector<std::vector<int64_t>> rest, next;
      for (Value& b : dl) rest.push_back(indices_of(b));
      for (Value& b : dl) next.push_back(indices_of(b));
      EXPECT_TRUE(rest == std::vector<std::vector<int64_t>>(e1.begin() + 4, e1.end()));
      // Later epochs follow the new loader's own draws: persistent workers draw no
      // base_seed after their first epoch, and with 0 workers this dataset draws from
      // the main process's default generator, which the sampler draws its seed from.
      if (workers > 0 && !persistent) {
        EXPECT_TRUE(next == e2) << "the next epoch";
      }
    }
  }
}

TEST(CheckpointLoader, BeforeAnyEpochTheCheckpointStartsTheFirstOne) {
  DataLoaderOptions o;
  o.batch_size = 4;
  o.shuffle = true;
  manual_seed(11);
  DataLoader dl(random_draws(20), o);
  const Value state = through_pt(dl.state_dict());
  const auto first = epoch_bytes(dl);
  manual_seed(12);
  DataLoader other(random_draws(20), o);
  other.load_state_dict(state);
  EXPECT_TRUE(epoch_bytes(other) == first);
}

TEST(CheckpointLoader, ACheckpointThatDoesNotFitIsRefusedSayingWhatDiffersAndChangesNothing) {
  const DataLoaderOptions o = shuffled(2);
  manual_seed(5);
  DataLoader dl(random_draws(40), o);
  Value state;
  {
    auto it = dl.iter();
    it.next();
    state = it.state_dict();
  }
  auto damaged = [&](const std::string& key, Value v) {
    Value s = through_pt(state);
    s.set(Value(key), std::move(v));
    return s;
  };
  DataLoaderOptions three = o;
  three.num_workers = 3;
  DataLoader other_workers(random_draws(40), three);
  EXPECT_NE(error_of([&] { other_workers.load_state_dict(state); }).find("num_workers=2"), std::string::npos);
  DataLoaderOptions persistent = o;
  persistent.persistent_workers = true;
  DataLoader other_persistence(random_draws(40), persistent);
  EXPECT_NE(error_of([&] { other_persistence.load_state_dict(state); }).find("persistent_workers"), std::string::npos);
  DataLoaderOptions with_generator = o;
  with_generator.generator = std::make_shared<Generator>(1);
  DataLoader other_generators(random_draws(40), with_generator);
  EXPECT_NE(error_of([&] { other_generators.load_state_dict(state); }).find("random streams"), std::string::npos);

  DataLoader same(random_draws(40), o);
  EXPECT_NE(error_of([&] { same.load_state_dict(Value(3)); }).find("expected the dict"), std::string::npos);
  Value missing = through_pt(state);
  missing.dict_items().pop_back();
  EXPECT_NE(error_of([&] { same.load_state_dict(missing); }).find("no 'worker_rng' entry"), std::string::npos);
  EXPECT_NE(error_of([&] { same.load_state_dict(damaged("worker_rng", Value::list({Value::bytes("x"), Value()}))); })
                .find("not a worker's generator state"),
            std::string::npos);
  EXPECT_NE(error_of([&] { same.load_state_dict(damaged("batches_consumed", Value(-1))); }).find("non-negative"),
            std::string::npos);
  // A stream state that is not one is refused by load_state_dict: nothing loaded.
  const std::string before = default_generator().state();
  EXPECT_NE(error_of([&] { same.load_state_dict(damaged("streams_at_start", Value::list({Value::bytes("short")}))); })
                .find("random stream 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              same.load_state_dict(
                  damaged("streams_now", Value::list({Value::bytes(std::string(Generator::kStateBytes, '\xff'))})));
            }).find("random stream 0 of the checkpoint"),
            std::string::npos);
  EXPECT_EQ(default_generator().state(), before);
  EXPECT_EQ(epoch_bytes(same).size(), 10u) << "a refused checkpoint leaves the loader usable";

  // A loader over another dataset size or batching would replay other batches.
  DataLoader smaller(random_draws(12), o);
  EXPECT_NE(error_of([&] { smaller.load_state_dict(state); }).find("a dataset of size 40, this one has 12"),
            std::string::npos);
  DataLoaderOptions batch8 = o;
  batch8.batch_size = 8;
  DataLoader other_batching(random_draws(40), batch8);
  EXPECT_NE(error_of([&] { other_batching.load_state_dict(state); }).find("batch_size 4, this one has 8"),
            std::string::npos);
  EXPECT_NE(error_of([&] { same.load_state_dict(damaged("batches_sampled", Value(11))); }).find("above the 10 batches"),
            std::string::npos);
  // A sampler that gives fewer batches than its len() says is caught by the replay.
  class Short : public Sampler {
   public:
    std::unique_ptr<Cursor<int64_t>> iter() override {
      return make_cursor<int64_t>([i = int64_t{0}]() mutable -> std::optional<int64_t> {
        if (i >= 8) return std::nullopt;
        return i++;
      });
    }
    std::optional<int64_t> size() const override { return 40; }
  };
  DataLoaderOptions short_sampler = o;
  short_sampler.shuffle.reset();
  short_sampler.sampler = std::make_shared<Short>();
  Value late;
  {
    DataLoader dl2(random_draws(40), o);
    auto it = dl2.iter();
    for (int k = 0; k < 7; ++k) it.next();
    late = it.state_dict();
  }
  DataLoader lying(random_draws(40), short_sampler);
  lying.load_state_dict(late);
  const std::string generator_before = default_generator().state();
  EXPECT_NE(error_of([&] { lying.iter(); }).find("gives only 2"), std::string::npos);
  EXPECT_EQ(default_generator().state(), generator_before) << "a failed resume draws nothing";
  EXPECT_EQ(epoch_bytes(lying).size(), 2u) << "the plan is dropped: a plain epoch follows";
}

TEST(CheckpointLoader, OutOfOrderLoadersSayTheyCannotBeCheckpointed) {
  DataLoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  o.in_order = false;
  o.timeout = 60;
  DataLoader dl(random_draws(8), o);
  EXPECT_NE(error_of([&] { dl.state_dict(); }).find("in_order=false"), std::string::npos);
  auto it = dl.iter();
  EXPECT_NE(error_of([&] { it.state_dict(); }).find("in_order=true"), std::string::npos);
}

// ------------------------------------------------------------------ the state page
TEST(RngStatePageRing, TheStateBeforeATaskComesFromItsRecordOrTheLastOneAfter) {
  auto seg = loader::runtime::ShmSegment::create(RngStatePage::bytes_for(5));
  RngStatePage::format(seg->data(), 5);
  RngStatePage page(seg->data(), seg->size());
  Generator g(1);
  EXPECT_FALSE(page.state_before(0)) << "nothing ran: the state Init gave";
  const std::string s0 = g.state();
  page.write(0, RngStatePage::Before, g);
  g.random();
  page.write(0, RngStatePage::After, g);
  const std::string s1 = g.state();
  auto str = [](const std::optional<std::vector<unsigned char>>& v) {
    return v ? std::string(v->begin(), v->end()) : std::string("none");
  };
  EXPECT_EQ(str(page.state_before(0)), s0);
  EXPECT_EQ(str(page.state_before(3)), s1) << "task 3 not started: the state after task 0";
  EXPECT_EQ(str(page.state_before(3, /*floor=*/1)), "none") << "task 0 predates the last Init";
  // Later tasks keep the records of tasks not yet delivered (the ring is longer than
  // the tasks in flight): task 0's record survives tasks 1 to 4.
  for (uint64_t t = 1; t <= 4; ++t) {
    page.write(t, RngStatePage::Before, g);
    g.random();
    page.write(t, RngStatePage::After, g);
  }
  EXPECT_EQ(str(page.state_before(0)), s0);
  page.write(5, RngStatePage::Before, g);
  EXPECT_NE(str(page.state_before(0)), s0) << "task 5 took task 0's slot";
  EXPECT_EQ(page.last_before(), std::optional<uint64_t>(5));
  EXPECT_THROW(RngStatePage(seg->data(), RngStatePage::bytes_for(1) - 1), RuntimeError);
}

TEST(RngStatePageRing, ARecordReadWhileTheWorkerWritesIsNeverTorn) {
  // The parent reads a running worker's page (a checkpoint): every state it reads is
  // one the worker wrote whole.
  auto seg = loader::runtime::ShmSegment::create(RngStatePage::bytes_for(3));
  RngStatePage::format(seg->data(), 3);
  RngStatePage page(seg->data(), seg->size());
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (uint64_t t = 0; !stop.load(); ++t) {
      Generator g(1000 + t % 50);  // every record a state of its own
      page.write(t, RngStatePage::Before, g);
      g.random();
      page.write(t, RngStatePage::After, g);
    }
  });
  // Until 20,000 records were read (the writer may start late: nothing to read before).
  int checked = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (checked < 20000 && std::chrono::steady_clock::now() < deadline) {
    auto s = page.state_before(UINT64_MAX - 1);  // the state after the latest task
    if (!s) continue;
    Generator probe;
    ASSERT_TRUE(probe.set_state(std::string(s->begin(), s->end())));
    Generator whole(probe.initial_seed());
    whole.random();
    ASSERT_EQ(std::string(s->begin(), s->end()), whole.state()) << "a torn record";
    ++checked;
  }
  stop = true;
  writer.join();
  EXPECT_EQ(checked, 20000);
}

}  // namespace
