// Samplers against PyTorch 1.13: every case in tests/golden/{random_sampler,
// subset_random_sampler, weighted_random_sampler, distributed_sampler, batch_sampler}.json.
#include "loader/samplers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "loader/error.h"
#include "test_util.h"

namespace loader {
namespace {

using nlohmann::json;

json load_golden(const std::string& name) {
  std::string text = testing::read_file(testing::golden_path(name));
  if (text.empty()) throw std::runtime_error("cannot read golden file " + testing::golden_path(name));
  return json::parse(text);
}

template <class T>
std::vector<T> one_pass(SamplerOf<T>& sampler) {
  std::vector<T> out;
  auto cursor = sampler.iter();
  while (auto v = cursor->next()) out.push_back(*v);
  return out;
}

/// Counts golden cases checked and skipped; the test fails when nothing was checked.
struct Tally {
  explicit Tally(std::string name) : what(std::move(name)) {}
  std::string what;
  int checked = 0;
  std::vector<std::string> skipped;

  void skip(const std::string& key, const std::string& reason) { skipped.push_back(key + ": " + reason); }
  void report() const {
    std::cout << "[ golden   ] " << what << ": " << checked << " cases checked, " << skipped.size() << " skipped\n";
    for (const auto& s : skipped) std::cout << "[ skipped  ]   " << s << "\n";
    ::testing::Test::RecordProperty(what + "_checked", checked);
    ::testing::Test::RecordProperty(what + "_skipped", static_cast<int>(skipped.size()));
  }
};

/// Expects `fn` to throw exception type E with exactly `message`.
template <class E, class F>
void expect_error(F fn, const std::string& message, const std::string& context) {
  try {
    fn();
    ADD_FAILURE() << context << ": expected an exception with message '" << message << "'";
  } catch (const E& e) {
    EXPECT_EQ(std::string(e.what()), message) << context;
  } catch (const std::exception& e) {
    ADD_FAILURE() << context << ": wrong exception type, message '" << e.what() << "'";
  }
}

template <class F>
void expect_python_error(const json& expected, F fn, const std::string& context) {
  const std::string type = expected.at("type");
  const std::string message = expected.at("message");
  if (type == "ValueError") {
    expect_error<ValueError>(fn, message, context);
  } else if (type == "RuntimeError") {
    expect_error<RuntimeError>(fn, message, context);
  } else if (type == "TypeError") {
    expect_error<TypeError>(fn, message, context);
  } else {
    ADD_FAILURE() << context << ": unexpected golden exception type " << type;
  }
}

std::shared_ptr<Generator> seeded(const json& seed) { return std::make_shared<Generator>(seed.get<uint64_t>()); }

// ------------------------------------------------------------------ SequentialSampler
TEST(SequentialSampler, YieldsZeroToNMinusOneAndReadsTheLengthEachPass) {
  int64_t n = 3;
  SequentialSampler s(SampleSource::from_size_function([&n] { return n; }));
  EXPECT_EQ(one_pass(s), (std::vector<int64_t>{0, 1, 2}));
  n = 5;  // a dataset that grew between epochs (PyTorch reads len() in __iter__)
  EXPECT_EQ(s.size(), 5);
  EXPECT_EQ(one_pass(s), (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

class GrowingDataset : public Dataset {
 public:
  Value get(int64_t) override { return Value(); }
  int64_t size() const override { return n; }
  int64_t n = 3;
};

TEST(SampleSource, ADatasetSourceFollowsTheDatasetLength) {
  auto ds = std::make_shared<GrowingDataset>();
  SequentialSampler sequential(ds);
  RandomSampler shuffled(ds, std::make_shared<Generator>(0));
  EXPECT_EQ(shuffled.size(), 3);
  ds->n = 5;  // test_growing_dataset: len() is read lazily
  EXPECT_EQ(sequential.size(), 5);
  EXPECT_EQ(shuffled.size(), 5);
  auto pass = one_pass(shuffled);
  std::sort(pass.begin(), pass.end());
  EXPECT_EQ(pass, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_THROW(SampleSource(-1), ValueError);
}

// ------------------------------------------------------------------ RandomSampler
TEST(RandomSampler, MatchesPyTorchForEveryGoldenCase) {
  json golden = load_golden("random_sampler.json");
  Tally tally("random_sampler.cases");
  for (const auto& c : golden.at("cases")) {
    std::optional<int64_t> num_samples;
    if (!c.at("num_samples").is_null()) num_samples = c.at("num_samples").get<int64_t>();
    auto g = seeded(c.at("seed"));
    RandomSampler s(c.at("n").get<int64_t>(), c.at("replacement").get<bool>(), num_samples, g);
    std::string ctx = c.dump().substr(0, 120);
    EXPECT_EQ(s.size(), c.at("len").get<int64_t>()) << ctx;
    EXPECT_EQ(one_pass(s), c.at("epoch0").get<std::vector<int64_t>>()) << ctx;
    EXPECT_EQ(one_pass(s), c.at("epoch1").get<std::vector<int64_t>>()) << ctx;
    ++tally.checked;
  }
  tally.report();
  ASSERT_GT(tally.checked, 0);
  EXPECT_EQ(tally.checked, static_cast<int>(golden.at("cases").size()));
}

TEST(RandomSampler, WithoutGeneratorDrawsASeedFromTheDefaultGeneratorEachPass) {
  json golden = load_golden("random_sampler.json");
  Tally tally("random_sampler.default_generator_cases");
  for (const auto& c : golden.at("default_generator_cases")) {
    manual_seed(c.at("global_seed").get<uint64_t>());
    RandomSampler s(c.at("n").get<int64_t>());
    EXPECT_EQ(one_pass(s), c.at("epoch0").get<std::vector<int64_t>>()) << c.dump().substr(0, 80);
    EXPECT_EQ(one_pass(s), c.at("epoch1").get<std::vector<int64_t>>()) << c.dump().substr(0, 80);
    ++tally.checked;
  }
  tally.report();
  ASSERT_GT(tally.checked, 0);
}

TEST(RandomSampler, DrawsItsSeedAtTheFirstNextNotAtIter) {
  RandomSampler s(100);
  manual_seed(0);
  auto a = s.iter();
  manual_seed(5);  // the pass above has not drawn anything yet
  std::vector<int64_t> first;
  while (auto i = a->next()) first.push_back(*i);
  manual_seed(5);
  EXPECT_EQ(one_pass(s), first);
  manual_seed(0);
  EXPECT_NE(one_pass(s), first);
}

TEST(RandomSampler, DrawsTheTrailingPermutationAtTheNextThatEndsThePass) {
  auto g = std::make_shared<Generator>(7);
  RandomSampler s(10, g);
  Generator reference(7);
  auto cursor = s.iter();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(cursor->next());
  randperm(10, reference);  // the full permutation: consumed
  EXPECT_EQ(Generator(*g).random(), Generator(reference).random()) << "no trailing draw before the pass ends";
  EXPECT_FALSE(cursor->next());
  randperm(10, reference);  // randperm(n)[:num_samples % n] == randperm(10)[:0], drawn anyway
  EXPECT_EQ(g->random(), reference.random());
  EXPECT_FALSE(cursor->next()) << "an ended pass stays ended";
}

TEST(RandomSampler, WithReplacementDrawsChunksOf32Lazily) {
  auto g = std::make_shared<Generator>(3);
  RandomSampler s(1000, true, 40, g);
  Generator reference(3);
  auto cursor = s.iter();
  for (int i = 0; i < 32; ++i) ASSERT_TRUE(cursor->next());
  for (int i = 0; i < 32; ++i) reference.randint(1000);
  EXPECT_EQ(Generator(*g).random(), Generator(reference).random()) << "second chunk drawn too early";
  ASSERT_TRUE(cursor->next());
  for (int i = 0; i < 8; ++i) reference.randint(1000);
  EXPECT_EQ(Generator(*g).random(), Generator(reference).random());
}

TEST(RandomSampler, MillionIndexPassIsAPermutation) {
  auto g = std::make_shared<Generator>(11);
  RandomSampler s(1000000, g);
  std::vector<int64_t> seen = one_pass(s);
  ASSERT_EQ(seen.size(), 1000000u);
  std::sort(seen.begin(), seen.end());
  for (int64_t i = 0; i < 1000000; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], i);
}

TEST(RandomSampler, ValidationMatchesPyTorchMessages) {
  json v = load_golden("random_sampler.json").at("validation");
  Tally tally("random_sampler.validation");
  expect_python_error(v.at("num_samples=0"), [] { RandomSampler(5, false, 0); }, "num_samples=0");
  expect_python_error(v.at("num_samples=-1"), [] { RandomSampler(5, false, -1); }, "num_samples=-1");
  expect_python_error(v.at("empty_dataset"), [] { RandomSampler(0); }, "empty_dataset");
  tally.checked += 3;
  tally.skip("replacement=0", "Python-only type check: replacement is a C++ bool");
  tally.skip("num_samples=2.5", "Python-only type check: num_samples is a C++ int64_t");
  tally.report();
  EXPECT_EQ(tally.checked + static_cast<int>(tally.skipped.size()), static_cast<int>(v.size()));
}

TEST(RandomSampler, EmptyDataSourceWithExplicitNumSamplesFailsAtTheFirstNext) {
  RandomSampler no_repl(0, false, 3);
  auto c1 = no_repl.iter();
  EXPECT_THROW(c1->next(), ValueError);
  EXPECT_FALSE(c1->next());
  RandomSampler repl(0, true, 3);
  auto c2 = repl.iter();
  EXPECT_THROW(c2->next(), RuntimeError);
}

// ------------------------------------------------------------------ SubsetRandomSampler
TEST(SubsetRandomSampler, MatchesPyTorchForEveryGoldenCase) {
  json golden = load_golden("subset_random_sampler.json");
  Tally tally("subset_random_sampler.cases");
  for (const auto& c : golden.at("cases")) {
    SubsetRandomSampler s(c.at("indices").get<std::vector<int64_t>>(), seeded(c.at("seed")));
    EXPECT_EQ(s.size(), c.at("len").get<int64_t>());
    EXPECT_EQ(one_pass(s), c.at("epoch0").get<std::vector<int64_t>>()) << c.dump().substr(0, 80);
    EXPECT_EQ(one_pass(s), c.at("epoch1").get<std::vector<int64_t>>()) << c.dump().substr(0, 80);
    ++tally.checked;
  }
  for (const auto& c : golden.at("default_generator_cases")) {
    manual_seed(c.at("global_seed").get<uint64_t>());
    SubsetRandomSampler s(c.at("indices").get<std::vector<int64_t>>());
    EXPECT_EQ(one_pass(s), c.at("epoch0").get<std::vector<int64_t>>());
    EXPECT_EQ(one_pass(s), c.at("epoch1").get<std::vector<int64_t>>());
    ++tally.checked;
  }
  tally.report();
  ASSERT_GT(tally.checked, 0);
  EXPECT_EQ(tally.checked,
            static_cast<int>(golden.at("cases").size() + golden.at("default_generator_cases").size()));
}

// ------------------------------------------------------------------ WeightedRandomSampler
TEST(WeightedRandomSampler, MatchesPyTorchForEveryGoldenCase) {
  json golden = load_golden("weighted_random_sampler.json");
  Tally tally("weighted_random_sampler.cases");
  for (const auto& c : golden.at("cases")) {
    WeightedRandomSampler s(c.at("weights").get<std::vector<double>>(), c.at("num_samples").get<int64_t>(),
                            c.at("replacement").get<bool>(), seeded(c.at("seed")));
    std::string ctx = c.dump().substr(0, 160);
    EXPECT_EQ(s.size(), c.at("len").get<int64_t>()) << ctx;
    EXPECT_EQ(one_pass(s), c.at("epoch0").get<std::vector<int64_t>>()) << ctx;
    EXPECT_EQ(one_pass(s), c.at("epoch1").get<std::vector<int64_t>>()) << ctx;
    ++tally.checked;
  }
  // torch.manual_seed(s); list(WRS(w0, 5, True)); then list(WRS(w1, 5, False)) from the same default generator.
  const std::vector<double> w0{0.1, 0.9, 0.4, 0.7, 3.0, 0.6};
  const std::vector<double> w1{0.9, 0.4, 0.05, 0.2, 0.3, 0.1};
  for (const auto& c : golden.at("default_generator_cases")) {
    manual_seed(c.at("global_seed").get<uint64_t>());
    WeightedRandomSampler with(w0, 5, true);
    WeightedRandomSampler without(w1, 5, false);
    EXPECT_EQ(one_pass(with), c.at("with_replacement").get<std::vector<int64_t>>());
    EXPECT_EQ(one_pass(without), c.at("without_replacement_after").get<std::vector<int64_t>>());
    ++tally.checked;
  }
  tally.report();
  ASSERT_GT(tally.checked, 0);
  EXPECT_EQ(tally.checked,
            static_cast<int>(golden.at("cases").size() + golden.at("default_generator_cases").size()));
}

TEST(WeightedRandomSampler, ValidationMatchesPyTorchMessages) {
  json v = load_golden("weighted_random_sampler.json").at("validation");
  Tally tally("weighted_random_sampler.validation");
  expect_python_error(v.at("num_samples=0"), [] { WeightedRandomSampler({1.0, 2.0}, 0); }, "num_samples=0");
  expect_python_error(
      v.at("weights_2d"), [] { WeightedRandomSampler(Tensor::from_vector<double>({1.0, 2.0}, {1, 2}), 2); },
      "weights_2d");
  {
    WeightedRandomSampler s({1.0, 0.0, 2.0}, 3, false, std::make_shared<Generator>(0));
    EXPECT_EQ(one_pass(s), v.at("too_many_without_replacement").at("result").get<std::vector<int64_t>>());
  }
  expect_python_error(
      v.at("negative_weight"),
      [] {
        WeightedRandomSampler s({1.0, -1.0}, 1, true, std::make_shared<Generator>(0));
        one_pass(s);
      },
      "negative_weight");
  expect_python_error(
      v.at("all_zero"),
      [] {
        WeightedRandomSampler s({0.0, 0.0}, 1, true, std::make_shared<Generator>(0));
        one_pass(s);
      },
      "all_zero");
  tally.checked += 5;
  tally.skip("num_samples=True", "Python-only type check: num_samples is a C++ int64_t (a bool converts)");
  tally.skip("replacement=1", "Python-only type check: replacement is a C++ bool");
  tally.report();
  EXPECT_EQ(tally.checked + static_cast<int>(tally.skipped.size()), static_cast<int>(v.size()));
}

TEST(WeightedRandomSampler, InvalidWeightsAreReportedAtTheFirstNextLikePyTorch) {
  WeightedRandomSampler s({1.0, std::numeric_limits<double>::infinity()}, 2);  // constructing is fine
  auto cursor = s.iter();
  EXPECT_THROW(cursor->next(), RuntimeError);
  EXPECT_FALSE(cursor->next());
  WeightedRandomSampler too_many({1.0, 2.0}, 3, false);
  EXPECT_THROW(one_pass(too_many), RuntimeError);
}

// ------------------------------------------------------------------ DistributedSampler
TEST(DistributedSampler, MatchesPyTorchForEveryGoldenCase) {
  json golden = load_golden("distributed_sampler.json");
  Tally tally("distributed_sampler.cases");
  for (const auto& c : golden.at("cases")) {
    const int64_t replicas = c.at("num_replicas");
    std::string ctx = c.dump().substr(0, 140);
    for (int64_t rank = 0; rank < replicas; ++rank) {
      DistributedSamplerOptions o;
      o.num_replicas = replicas;
      o.rank = rank;
      o.shuffle = c.at("shuffle");
      o.seed = c.at("seed");
      o.drop_last = c.at("drop_last");
      DistributedSampler s(c.at("n").get<int64_t>(), o);
      s.set_epoch(c.at("epoch"));
      EXPECT_EQ(s.num_samples(), c.at("num_samples").get<int64_t>()) << ctx;
      EXPECT_EQ(s.total_size(), c.at("total_size").get<int64_t>()) << ctx;
      EXPECT_EQ(s.size(), c.at("num_samples").get<int64_t>()) << ctx;
      EXPECT_EQ(one_pass(s), c.at("per_rank").at(rank).get<std::vector<int64_t>>()) << ctx << " rank " << rank;
    }
    ++tally.checked;
  }
  tally.report();
  ASSERT_GT(tally.checked, 0);
  EXPECT_EQ(tally.checked, static_cast<int>(golden.at("cases").size()));
}

TEST(DistributedSampler, InvalidRankMatchesPyTorchMessage) {
  json v = load_golden("distributed_sampler.json").at("validation");
  expect_python_error(v.at("rank=num_replicas"), [] { DistributedSampler(10, 3, 3); }, "rank=num_replicas");
  expect_python_error(v.at("rank=-1"), [] { DistributedSampler(10, 3, -1); }, "rank=-1");
  Tally tally("distributed_sampler.validation");
  tally.checked = 2;
  tally.report();
  EXPECT_EQ(tally.checked, static_cast<int>(v.size()));
}

TEST(DistributedSampler, DropLastGivesNoDuplicatesAcrossRanks) {
  // test_duplicating_data_with_drop_last: 9 items, 4 replicas.
  std::set<int64_t> seen;
  size_t total = 0;
  for (int64_t rank = 0; rank < 4; ++rank) {
    DistributedSampler s(9, 4, rank, true, 0, true);
    for (int64_t i : one_pass(s)) {
      seen.insert(i);
      ++total;
    }
  }
  EXPECT_EQ(seen.size(), total);
  EXPECT_EQ(total, 8u);
}

TEST(DistributedSampler, SetEpochChangesTheShuffle) {
  DistributedSampler s(50, 2, 0);
  auto e0 = one_pass(s);
  EXPECT_EQ(one_pass(s), e0) << "same epoch, same order";
  s.set_epoch(1);
  EXPECT_NE(one_pass(s), e0);
}

// ------------------------------------------------------------------ BatchSampler
TEST(BatchSampler, MatchesPyTorchForEveryGoldenCase) {
  json golden = load_golden("batch_sampler.json");
  Tally tally("batch_sampler");
  for (const auto& c : golden.at("sequential")) {
    BatchSampler b(std::make_shared<SequentialSampler>(c.at("n").get<int64_t>()), c.at("batch_size"),
                   c.at("drop_last"));
    EXPECT_EQ(b.size(), c.at("len").get<int64_t>()) << c.dump();
    EXPECT_EQ(one_pass(b), c.at("batches").get<std::vector<IndexBatch>>()) << c.dump();
    ++tally.checked;
  }
  for (const auto& c : golden.at("over_random_sampler")) {
    auto inner = std::make_shared<RandomSampler>(c.at("n").get<int64_t>(), seeded(c.at("seed")));
    BatchSampler b(inner, c.at("batch_size"), c.at("drop_last"));
    EXPECT_EQ(b.size(), c.at("len").get<int64_t>());
    EXPECT_EQ(one_pass(b), c.at("epoch0").get<std::vector<IndexBatch>>()) << c.dump();
    EXPECT_EQ(one_pass(b), c.at("epoch1").get<std::vector<IndexBatch>>()) << c.dump();
    ++tally.checked;
  }
  for (const auto& c : golden.at("over_plain_iterable")) {
    BatchSampler b(c.at("sampler").get<std::vector<int64_t>>(), c.at("batch_size"), c.at("drop_last"));
    EXPECT_EQ(one_pass(b), c.at("batches").get<std::vector<IndexBatch>>()) << c.dump();
    ++tally.checked;
  }
  tally.report();
  ASSERT_GT(tally.checked, 0);
  EXPECT_EQ(tally.checked, static_cast<int>(golden.at("sequential").size() + golden.at("over_random_sampler").size() +
                                            golden.at("over_plain_iterable").size()));
}

TEST(BatchSampler, ValidationMatchesPyTorchMessages) {
  json v = load_golden("batch_sampler.json").at("validation");
  Tally tally("batch_sampler.validation");
  auto seq = std::make_shared<SequentialSampler>(3);
  expect_python_error(v.at("batch_size=0"), [&] { BatchSampler(seq, 0, false); }, "batch_size=0");
  expect_python_error(v.at("batch_size=-1"), [&] { BatchSampler(seq, -1, false); }, "batch_size=-1");
  tally.checked += 2;
  for (const char* key : {"batch_size=True", "batch_size=2.5", "batch_size=None", "drop_last=1", "drop_last=None"})
    tally.skip(key, "Python-only type check: batch_size is a C++ int64_t and drop_last a bool");
  tally.report();
  EXPECT_EQ(tally.checked + static_cast<int>(tally.skipped.size()), static_cast<int>(v.size()));
}

TEST(BatchSampler, DropLastPullsTheWrappedSamplerToItsEnd) {
  // The trailing randperm of a RandomSampler is drawn once the batch sampler runs out,
  // with or without drop_last, so both leave the shared generator in the same state.
  for (bool drop_last : {false, true}) {
    auto g = std::make_shared<Generator>(1);
    BatchSampler b(std::make_shared<RandomSampler>(10, g), 3, drop_last);
    one_pass(b);
    Generator reference(1);
    randperm(10, reference);
    randperm(10, reference);
    EXPECT_EQ(g->random(), reference.random()) << "drop_last=" << drop_last;
  }
}

TEST(BatchSampler, AnyIterableWorksAsTheSampler) {
  // test_sampler: sampler=range(2, 12) with batch_size 2 gives 5 batches data[2i+2 : 2i+4].
  BatchSampler b(ListSampler::range(2, 12), 2, false);
  EXPECT_EQ(b.size(), 5);
  auto batches = one_pass(b);
  ASSERT_EQ(batches.size(), 5u);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(batches[static_cast<size_t>(i)], (IndexBatch{2 * i + 2, 2 * i + 3}));
}

TEST(ListBatchSampler, YieldsTheGivenBatchesEveryPass) {
  // test_batch_sampler: batches of sizes 2, 3, 2, 3, ... over 0..19 give len 8.
  std::vector<IndexBatch> batches;
  for (int64_t start = 0, k = 0; start < 20; ++k) {
    int64_t size = k % 2 == 0 ? 2 : 3;
    IndexBatch b;
    for (int64_t i = start; i < std::min<int64_t>(start + size, 20); ++i) b.push_back(i);
    start += size;
    batches.push_back(b);
  }
  ListBatchSampler s(batches);
  EXPECT_EQ(s.size(), 8);
  EXPECT_EQ(one_pass(s), batches);
  EXPECT_EQ(one_pass(s), batches);
}

}  // namespace
}  // namespace loader
