// IterableDataset state hooks (IterableDataset::state / load_state / skip): a
// checkpoint taken mid-epoch stores the state each stream (each worker's copy, or the
// loader's own with num_workers=0) began from and how many of its results were taken;
// the resumed copies load that state, make their streams again and pass those results
// in the worker (the dataset's skip() when it offers one, else built and dropped), so
// nothing is replayed through the main process and no replay warning is given.  A
// persistent pool's later epoch, refused without the hooks, is resumed too.  Every
// resumed epoch is compared with the same epoch of an uninterrupted run, byte for byte.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loader/dataloader.h"
#include "loader/error.h"
#include "loader/serialization/pt.h"
#include "loader/warnings.h"
#include "loader/worker_info.h"
#include "checkpoint_util.h"
#include "process_leaks.h"

using namespace loader;
using loader::testing::bytes_of;
using loader::testing::epoch_bytes;
using loader::testing::through_pt;

namespace {

/// Samples built by CounterStream cursors in this process (0 workers, in-process workers).
std::atomic<int64_t> g_built{0};

/// A counter stream whose copy counts its epochs: its e-th iter() in worker w yields
/// n + 7w samples (uneven: the workers run dry at different batches), sample k being
///   (int64 seed*1e12 + e*1e9 + offset*1e6 + w*1e4 + k, float64 noise)
/// where iter() draws `offset` from the default generator (the worker's, in a worker)
/// and, unless the dataset offers skip(), next() draws `noise` from it too (so a
/// resumed stream needs its worker's generator as the stream began, and a skip that
/// makes no draws would be wrong: with skip the noise is 0).  Parameters: n, seed, skip
/// (offers skip()), hooks (state() returns a state; without: none, the replay path),
/// refuse_load (load_state() throws).
class CounterStream : public IterableDataset {
 public:
  CounterStream(int64_t n, int64_t seed, bool skip, bool hooks, bool refuse_load)
      : n_(n), seed_(seed), skip_(skip), hooks_(hooks), refuse_load_(refuse_load) {}

  class Cursor final : public loader::Cursor<Value> {
   public:
    Cursor(int64_t base, int64_t length, bool draws) : base_(base), length_(length), draws_(draws) {}
    std::optional<Value> next() override {
      if (k_ >= length_) return std::nullopt;
      const double noise = draws_ ? static_cast<double>(default_generator().random64() % 1000000) : 0.0;
      ++g_built;
      return Value::tuple({Value(base_ + k_++), Value(noise)});
    }
    int64_t jump(int64_t samples) {
      const int64_t passed = std::min(samples, length_ - k_);
      k_ += passed;
      return passed;
    }

   private:
    int64_t base_, length_;
    bool draws_;
    int64_t k_ = 0;
  };

  std::unique_ptr<loader::Cursor<Value>> iter() override {
    const int64_t epoch = epoch_++;
    int64_t w = 0;
    if (const WorkerInfo* info = get_worker_info()) w = info->id;
    const int64_t offset = static_cast<int64_t>(default_generator().random64() % 1000);
    const int64_t base = seed_ * 1000000000000 + epoch * 1000000000 + offset * 1000000 + w * 10000;
    return std::make_unique<Cursor>(base, n_ + 7 * w, !skip_);
  }

  std::optional<std::string> state() const override {
    if (!hooks_) return std::nullopt;
    return "counter " + std::to_string(seed_) + " " + std::to_string(epoch_);
  }

  void load_state(const std::string& state) override {
    if (refuse_load_) throw ValueError("this copy refuses every state (the test's refuse_load)");
    const std::string prefix = "counter " + std::to_string(seed_) + " ";
    if (state.rfind(prefix, 0) != 0) throw ValueError("'" + state + "' is not a state of a counter of seed " + std::to_string(seed_));
    epoch_ = std::stoll(state.substr(prefix.size()));
  }

  std::optional<int64_t> skip(loader::Cursor<Value>& stream, int64_t samples) override {
    if (!skip_) return std::nullopt;
    return static_cast<Cursor&>(stream).jump(samples);
  }

 private:
  int64_t n_, seed_;
  bool skip_, hooks_, refuse_load_;
  int64_t epoch_ = 0;
};
LOADER_REGISTER_ITERABLE_DATASET("test_stateful_counter", [](const Value& p) {
  return std::make_shared<CounterStream>(p.at("n").to_int(), p.get("seed", Value(int64_t{3})).to_int(),
                                         p.get("skip", Value(false)).to_bool(), p.get("hooks", Value(true)).to_bool(),
                                         p.get("refuse_load", Value(false)).to_bool());
});

struct Counter {
  int64_t n = 10;
  bool skip = false;
  bool hooks = true;
  bool refuse_load = false;
};

std::shared_ptr<IterableDataset> counter(const Counter& c) {
  return make_iterable_dataset({"test_stateful_counter", Value::dict({{"n", c.n},
                                                                      {"seed", int64_t{3}},
                                                                      {"skip", c.skip},
                                                                      {"hooks", c.hooks},
                                                                      {"refuse_load", c.refuse_load}})});
}

struct Config {
  const char* name;
  int workers;
  bool persistent;
  int prefetch;  // 0: default
  WorkerMode mode;
  bool skip;  // the dataset offers skip()
};

std::ostream& operator<<(std::ostream& os, const Config& c) { return os << c.name; }

DataLoaderOptions options_of(const Config& c) {
  DataLoaderOptions o;
  o.batch_size = 4;
  o.num_workers = c.workers;
  o.persistent_workers = c.persistent;
  if (c.prefetch) o.prefetch_factor = c.prefetch;
  o.worker_mode = c.mode;
  o.timeout = 60;
  return o;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return std::string(e.python_type()) + ": " + e.what();
  }
  return "";
}

void expect_same(const std::vector<std::string>& got, const std::vector<std::string>& want, size_t from,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size() - from) << what;
  for (size_t k = 0; k < got.size(); ++k) EXPECT_TRUE(got[k] == want[from + k]) << what << ": batch " << from + k;
}

size_t replay_warnings(const WarningCapture& w) {
  size_t n = 0;
  for (const std::string& m : w.messages())
    if (m.find("replays its first") != std::string::npos) ++n;
  return n;
}

class IterableStateCheckpoint : public ::testing::TestWithParam<Config> {};

// A checkpoint mid-way in the first epoch and in a later one (a persistent pool's
// streams went on from the earlier epochs), resumed in a new loader whose generators
// were scrambled, then checkpointed again mid-way in the resumed epoch and resumed once
// more: the rest of the epoch and the epoch after it as the uninterrupted run gave them.
TEST_P(IterableStateCheckpoint, ResumedMidEpochGivesTheRestOfTheUninterruptedRun) {
  const Config c = GetParam();
  loader::testing::LeakCheck leaks;
  const Counter ds{30, c.skip};
  std::vector<std::vector<std::string>> ref;  // epochs 1..3 run through
  {
    manual_seed(21);
    DataLoader dl(counter(ds), options_of(c));
    for (int e = 0; e < 3; ++e) ref.push_back(epoch_bytes(dl));
  }
  ASSERT_GE(ref[0].size(), 8u);
  ASSERT_FALSE(ref[0] == ref[1]) << "each epoch's streams differ";
  for (size_t epoch : {size_t{0}, size_t{1}}) {
    for (size_t cut : {size_t{0}, size_t{1}, size_t{5}, ref[epoch].size() - 1}) {
      SCOPED_TRACE("epoch " + std::to_string(epoch + 1) + ", checkpoint after " + std::to_string(cut) + " of " +
                   std::to_string(ref[epoch].size()) + " batches");
      Value state;
      {
        manual_seed(21);
        DataLoader dl(counter(ds), options_of(c));
        for (size_t e = 0; e < epoch; ++e) ASSERT_TRUE(epoch_bytes(dl) == ref[e]);
        auto it = dl.iter();
        for (size_t k = 0; k < cut; ++k) ASSERT_TRUE(bytes_of(*it.next()) == ref[epoch][k]);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // workers run ahead
        state = through_pt(it.state_dict());
        EXPECT_EQ(state.at("batches_consumed").to_int(), static_cast<int64_t>(cut));
        ASSERT_TRUE(state.at("stream_states").is_list());
        EXPECT_EQ(state.at("stream_states").size(), static_cast<size_t>(std::max(1, c.workers)));
        // The loader goes on after its checkpoint.
        expect_same(epoch_bytes(it), ref[epoch], cut, "the checkpointed iterator");
      }
      Value again;
      const size_t more = std::min<size_t>(2, ref[epoch].size() - cut);
      {
        manual_seed(999);
        DataLoader dl(counter(ds), options_of(c));
        dl.load_state_dict(state);
        WarningCapture warnings;
        auto it = dl.iter();
        EXPECT_EQ(it.batches_yielded(), static_cast<int64_t>(cut));
        for (size_t k = 0; k < more; ++k) ASSERT_TRUE(bytes_of(*it.next()) == ref[epoch][cut + k]);
        again = through_pt(it.state_dict());
        EXPECT_EQ(again.at("batches_consumed").to_int(), static_cast<int64_t>(cut + more));
        const std::vector<std::string> rest = epoch_bytes(it);
        expect_same(rest, ref[epoch], cut + more, "resumed");
        // Nothing was replayed (the test below shows where the taken results went).
        EXPECT_EQ(replay_warnings(warnings), 0u);
        expect_same(epoch_bytes(dl), ref[epoch + 1], 0, "the next epoch");
      }
      {
        manual_seed(1000);
        DataLoader dl(counter(ds), options_of(c));
        dl.load_state_dict(again);
        auto it = dl.iter();
        expect_same(epoch_bytes(it), ref[epoch], cut + more, "resumed from the resumed epoch's checkpoint");
        expect_same(epoch_bytes(dl), ref[epoch + 1], 0, "the next epoch after it");
      }
    }
  }
  EXPECT_EQ(leaks.new_segments(), "");
  EXPECT_EQ(leaks.new_children(), "");
}

INSTANTIATE_TEST_SUITE_P(
    Configs, IterableStateCheckpoint,
    ::testing::Values(Config{"NoWorkers", 0, false, 0, WorkerMode::Process, false},
                      Config{"NoWorkersSkip", 0, false, 0, WorkerMode::Process, true},
                      Config{"TwoWorkers", 2, false, 0, WorkerMode::Process, false},
                      Config{"TwoWorkersSkip", 2, false, 0, WorkerMode::Process, true},
                      Config{"TwoPersistentWorkers", 2, true, 0, WorkerMode::Process, false},
                      Config{"TwoPersistentWorkersSkip", 2, true, 0, WorkerMode::Process, true},
                      Config{"ThreePersistentWorkersPrefetch3", 3, true, 3, WorkerMode::Process, false},
                      Config{"TwoPersistentInProcessSkip", 2, true, 0, WorkerMode::InProcess, true}),
    [](const ::testing::TestParamInfo<Config>& i) { return std::string(i.param.name); });

// Where the results taken are passed: with skip() no sample of them is built; without it
// they are built and dropped in the stream's own thread (0 workers, or in-process
// workers, whose samples this process counts), never sent as tasks.
TEST(IterableStateCheckpoint, TakenResultsAreSkippedWithoutBuildingThemOrBuiltAndDroppedInTheWorker) {
  for (int workers : {0, 2}) {
    for (bool skip : {true, false}) {
      SCOPED_TRACE(std::to_string(workers) + " workers, skip " + (skip ? "offered" : "absent"));
      const Config c{"c", workers, false, 0, WorkerMode::InProcess, skip};
      const Counter ds{60, skip};
      std::vector<std::string> ref;
      int64_t all = 0;
      {
        manual_seed(31);
        DataLoader dl(counter(ds), options_of(c));
        g_built = 0;
        ref = epoch_bytes(dl);
        all = g_built.load();
      }
      const size_t cut = workers > 0 ? 20 : 10;  // of 32 batches (15 and 17), or 15
      Value state;
      {
        manual_seed(31);
        DataLoader dl(counter(ds), options_of(c));
        auto it = dl.iter();
        for (size_t k = 0; k < cut; ++k) ASSERT_TRUE(it.next().has_value());
        state = through_pt(it.state_dict());
      }
      DataLoader dl(counter(ds), options_of(c));
      dl.load_state_dict(state);
      g_built = 0;
      auto it = dl.iter();
      const std::vector<std::string> rest = epoch_bytes(it);
      expect_same(rest, ref, cut, "resumed");
      // The rest, and with workers the tasks the ends of the streams answered (a few per
      // worker): none for the results taken, which a replay would have sent again.
      EXPECT_LT(it.stats().tasks_sent, static_cast<int64_t>(ref.size()));
      if (workers == 0) {
        EXPECT_EQ(it.stats().tasks_sent, static_cast<int64_t>(rest.size()));
      }
      const int64_t taken_samples = static_cast<int64_t>(cut) * 4;  // the first results are whole batches
      EXPECT_EQ(g_built.load(), skip ? all - taken_samples : all);
    }
  }
}

// A persistent pool's later epoch: refused without the hooks (its streams' starts were
// not recorded), resumed with them.
TEST(IterableStateCheckpoint, APersistentPoolsLaterEpochIsRefusedOnlyWithoutHooks) {
  const Config c{"persistent", 2, true, 0, WorkerMode::Process, false};
  for (bool hooks : {false, true}) {
    Counter ds;
    ds.hooks = hooks;
    DataLoader dl(counter(ds), options_of(c));
    (void)epoch_bytes(dl);
    auto it = dl.iter();
    ASSERT_TRUE(it.next().has_value());
    const std::string why = error_of([&] { it.state_dict(); });
    if (hooks) EXPECT_EQ(why, "");
    else EXPECT_NE(why.find("persistent workers' streams went on from an earlier epoch"), std::string::npos) << why;
  }
}

Value mid_epoch_checkpoint(const Counter& ds, const Config& c, size_t cut) {
  DataLoader dl(counter(ds), options_of(c));
  auto it = dl.iter();
  for (size_t k = 0; k < cut; ++k) EXPECT_TRUE(it.next().has_value());
  return through_pt(it.state_dict());
}

// A checkpoint and a dataset whose hooks differ are refused at load_state_dict, and the
// loader stays as it was (its next epoch is a plain first one).
TEST(IterableStateCheckpoint, AnotherDatasetsHooksOrWorkersAreRefusedAndTheLoaderStaysAsItWas) {
  for (int workers : {0, 2}) {
    SCOPED_TRACE(std::to_string(workers) + " workers");
    const Config c{"c", workers, false, 0, WorkerMode::Process, false};
    Counter with{20};
    Counter without{20};
    without.hooks = false;
    std::vector<std::string> plain;
    {
      manual_seed(5);
      DataLoader dl(counter(with), options_of(c));
      plain = epoch_bytes(dl);
    }
    const Value hooked = mid_epoch_checkpoint(with, c, 3);
    const Value replayed = mid_epoch_checkpoint(without, c, 3);
    ASSERT_TRUE(hooked.at("stream_states").is_list());
    EXPECT_TRUE(replayed.at("stream_states").is_none());
    {
      DataLoader dl(counter(without), options_of(c));
      const std::string why = error_of([&] { dl.load_state_dict(hooked); });
      EXPECT_EQ(why.rfind("ValueError: ", 0), 0u) << why;
      EXPECT_NE(why.find("test_stateful_counter has no state hooks"), std::string::npos) << why;
    }
    {
      manual_seed(5);
      DataLoader dl(counter(with), options_of(c));
      const std::string why = error_of([&] { dl.load_state_dict(replayed); });
      EXPECT_EQ(why.rfind("ValueError: ", 0), 0u) << why;
      EXPECT_NE(why.find("taken without state hooks"), std::string::npos) << why;
      EXPECT_NE(why.find("test_stateful_counter has them"), std::string::npos) << why;
      EXPECT_TRUE(epoch_bytes(dl) == plain) << "nothing of the checkpoint was applied";
    }
    {
      Config other = c;
      other.workers = workers == 0 ? 2 : 3;
      DataLoader dl(counter(with), options_of(other));
      const std::string why = error_of([&] { dl.load_state_dict(hooked); });
      EXPECT_NE(why.find("num_workers=" + std::to_string(workers)), std::string::npos) << why;
    }
    {
      // A damaged entry.
      Value broken = hooked;
      std::vector<std::pair<Value, Value>> items;
      for (const auto& [key, value] : hooked.dict_items())
        items.emplace_back(key, key.to_string() == "stream_taken" ? Value::list({Value(int64_t{1})}) : value);
      broken = Value::dict(std::move(items));
      DataLoader dl(counter(with), options_of(c));
      const std::string why = error_of([&] { dl.load_state_dict(broken); });
      EXPECT_NE(why.find("'stream_taken'"), std::string::npos) << why;
    }
  }
}

// A copy that refuses its state, and a stream shorter than what was taken of it: the
// resumed epoch's error names the dataset (and the worker).
TEST(IterableStateCheckpoint, ARefusedStateOrAShorterStreamIsTheResumedEpochsError) {
  for (int workers : {0, 2}) {
    SCOPED_TRACE(std::to_string(workers) + " workers");
    const Config c{"c", workers, false, 0, WorkerMode::Process, false};
    const Value state = mid_epoch_checkpoint(Counter{20}, c, 4);
    {
      Counter refusing;
      refusing.refuse_load = true;
      DataLoader dl(counter(refusing), options_of(c));
      dl.load_state_dict(state);
      const std::string why = error_of([&] {
        auto it = dl.iter();
        while (it.next()) {
        }
      });
      EXPECT_EQ(why.rfind("ValueError: ", 0), 0u) << why;
      EXPECT_NE(why.find("the IterableDataset test_stateful_counter refused the state"), std::string::npos) << why;
      EXPECT_NE(why.find("refuses every state"), std::string::npos) << why;
      if (workers > 0) {  // both copies refuse: whichever worker reports first names itself
        EXPECT_TRUE(why.find("DataLoader worker 0 failed to resume its stream") != std::string::npos ||
                    why.find("DataLoader worker 1 failed to resume its stream") != std::string::npos)
            << why;
      }
    }
    {
      Counter shorter;
      shorter.n = 3;  // 1 batch of 3, where worker 0 had given 2 batches of 4 (with no worker, the loader 4)
      DataLoader dl(counter(shorter), options_of(c));
      dl.load_state_dict(state);
      const std::string why = error_of([&] {
        auto it = dl.iter();
        while (it.next()) {
        }
      });
      EXPECT_NE(why.find("resuming the stream of the IterableDataset test_stateful_counter: it ended after 1 "
                         "result(s), where the checkpointed iterator had taken " +
                         std::to_string(workers > 0 ? 2 : 4)),
                std::string::npos)
          << why;
    }
  }
}

}  // namespace
