// EquiBatchSampler: the samplers document's DistributedEquiBatchSampler, batch for batch
// (tests/golden/equibatch.json, every case and rank), its balance and distribution
// properties, len() without drawing, and its validation.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "loader/equibatch_sampler.h"
#include "loader/error.h"
#include "loader/python_random.h"
#include "test_util.h"

namespace loader {
namespace {

using nlohmann::json;
using Labels = std::vector<std::vector<int64_t>>;
using Epoch = std::vector<IndexBatch>;

json load_golden() {
  return json::parse(loader::testing::read_file(loader::testing::golden_path("equibatch.json")));
}

EquiBatchSamplerOptions with_coef(int64_t balanced_coef, uint64_t seed = 0) {
  EquiBatchSamplerOptions o;
  o.balanced_coef = balanced_coef;
  o.seed = seed;
  return o;
}

Epoch one_pass(BatchSamplerBase& s) {
  Epoch out;
  auto cursor = s.iter();
  while (auto b = cursor->next()) out.push_back(std::move(*b));
  return out;
}

std::vector<Epoch> epochs(BatchSamplerBase& s, int64_t n) {
  std::vector<Epoch> out;
  for (int64_t e = 0; e < n; ++e) out.push_back(one_pass(s));
  return out;
}

/// The document's class, line by line (bless, then the while loop of __iter__ with its
/// `indices` and `cur_key`), on a PythonRandom: an independent statement of the algorithm
/// to check the library's closed form (batch t = class t mod |C|) against.
struct DocumentSampler {
  DocumentSampler(const Labels& idx2labels, int64_t batch_size, int64_t num_replicas, int64_t rank,
                  int64_t balanced_coef, PythonRandom& rng)
      : batch_size(batch_size), num_replicas(num_replicas), rank(rank), balanced_coef(balanced_coef), rng(rng) {
    std::map<int64_t, size_t> seen;
    for (size_t idx = 0; idx < idx2labels.size(); ++idx)
      for (int64_t label : idx2labels[idx]) {
        if (!seen.count(label)) {
          seen[label] = keys.size();
          keys.push_back(label);
          dataset.emplace_back();
        }
        dataset[seen[label]].push_back(static_cast<int64_t>(idx));
      }
  }
  void bless() {
    cur_key = 0;
    indices.assign(keys.size(), -1);
    cur_dataset.clear();
    for (auto& members : dataset) {
      std::vector<int64_t> tmp = members;
      rng.shuffle(tmp);
      std::vector<int64_t> cur = static_cast<int64_t>(members.size()) > balanced_coef
                                     ? std::vector<int64_t>(tmp.begin(), tmp.begin() + balanced_coef)
                                     : tmp;
      while (static_cast<int64_t>(cur.size()) < balanced_coef) {
        int64_t pick = rng.choice(cur);
        cur.push_back(pick);
      }
      cur_dataset.push_back(cur);
    }
  }
  Epoch pass() {
    Epoch out;
    IndexBatch batch;
    while (indices[cur_key] < balanced_coef - 1) {
      indices[cur_key] += 1;
      batch.push_back(cur_dataset[cur_key][static_cast<size_t>(indices[cur_key])]);
      if (static_cast<int64_t>(batch.size()) == batch_size) {
        IndexBatch mine;
        for (int64_t j = rank; j < batch_size; j += num_replicas) mine.push_back(batch[static_cast<size_t>(j)]);
        out.push_back(mine);
        batch.clear();
        cur_key = (cur_key + 1) % keys.size();
      }
    }
    return out;
  }

  int64_t batch_size, num_replicas, rank, balanced_coef;
  PythonRandom& rng;
  std::vector<int64_t> keys;
  std::vector<std::vector<int64_t>> dataset, cur_dataset;
  std::vector<int64_t> indices;
  size_t cur_key = 0;
};

/// Random multi-label data: n indices, labels drawn from [0, classes), 1..max_labels each.
Labels random_labels(PythonRandom& rng, int64_t n, int64_t classes, int64_t max_labels) {
  Labels out;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> l = rng.sample(classes, rng.randint(1, max_labels));
    std::sort(l.begin(), l.end());
    out.push_back(l);
  }
  return out;
}

TEST(EquiBatchGolden, EveryCaseAndRankMatchesTheDocumentsSampler) {
  const json golden = load_golden();
  int cases = 0, batches = 0;
  for (const json& c : golden.at("cases")) {
    const Labels labels = c.at("idx2labels").get<Labels>();
    EquiBatchSamplerOptions o;
    o.balanced_coef = c.at("balanced_coef").get<int64_t>();
    o.seed = c.at("seed").get<uint64_t>();
    o.num_replicas = c.at("num_replicas").get<int64_t>();
    o.rank = c.at("rank").get<int64_t>();
    const int64_t batch_size = c.at("batch_size").get<int64_t>();
    const std::string where = "case " + std::to_string(cases) + " (batch_size " + std::to_string(batch_size) +
                              ", coef " + std::to_string(o.balanced_coef) + ", seed " + std::to_string(o.seed) +
                              ", rank " + std::to_string(o.rank) + "/" + std::to_string(o.num_replicas) + ")";
    const auto want = c.at("batches").get<std::vector<Epoch>>();

    EquiBatchSampler sampler(labels, batch_size, o);
    const auto got = epochs(sampler, c.at("epochs").get<int64_t>());
    ASSERT_EQ(got, want) << where;
    for (const Epoch& e : want) {
      EXPECT_EQ(sampler.size(), static_cast<int64_t>(e.size())) << where << ": len() vs the batches of a pass";
      batches += static_cast<int>(e.size());
    }
    // The document's positional order gives the same sampler.
    DistributedEquiBatchSampler positional(labels, batch_size, o.num_replicas, o.rank, o.balanced_coef, o.seed);
    EXPECT_EQ(epochs(positional, c.at("epochs").get<int64_t>()), want) << where << " (positional constructor)";
    ++cases;
  }
  std::cout << "[ golden   ] equibatch.json: " << cases << " cases (every rank), " << batches << " batches\n";
  EXPECT_EQ(cases, 14);
  EXPECT_GT(batches, 300);
}

TEST(EquiBatchGolden, TheGoldenFileCoversOversamplingSubsamplingAndAnEmptyPass) {
  // What the cases above exercise, so that a thinner golden file would be noticed.
  const json golden = load_golden();
  bool oversampled = false, subsampled = false, empty_pass = false, several_ranks = false, several_labels = false;
  for (const json& c : golden.at("cases")) {
    EquiBatchSampler s(c.at("idx2labels").get<Labels>(), c.at("batch_size").get<int64_t>(),
                       c.at("num_replicas").get<int64_t>(), c.at("rank").get<int64_t>(),
                       c.at("balanced_coef").get<int64_t>());
    for (int64_t k = 0; k < s.num_classes(); ++k) {
      const auto n = static_cast<int64_t>(s.members(static_cast<size_t>(k)).size());
      oversampled |= n < s.balanced_coef();
      subsampled |= n > s.balanced_coef();
    }
    empty_pass |= s.size() == 0;
    several_ranks |= s.num_replicas() > 1;
    for (const json& l : c.at("idx2labels")) several_labels |= l.size() > 1;
  }
  EXPECT_TRUE(oversampled && subsampled && empty_pass && several_ranks && several_labels);
}

TEST(EquiBatchSampler, MatchesALineByLineTranscriptionOnManyConfigurations) {
  PythonRandom configs(99);
  int checked = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const int64_t n = configs.randint(1, 120), classes = configs.randint(1, 9), max_labels = configs.randint(1, 3);
    const int64_t batch_size = configs.randint(1, 12), coef = configs.randint(1, 40);
    const int64_t replicas = configs.randint(1, batch_size < 4 ? batch_size : 4);
    const uint64_t seed = configs.getrandbits(64) >> configs.randint(0, 63);
    const Labels labels = random_labels(configs, n, classes, std::min(max_labels, classes));
    for (int64_t rank = 0; rank < replicas; ++rank) {
      EquiBatchSampler sampler(labels, batch_size, replicas, rank, coef, seed);
      PythonRandom rng(seed);
      DocumentSampler doc(labels, batch_size, replicas, rank, coef, rng);
      for (int e = 0; e < 3; ++e) {
        doc.bless();
        const Epoch want = doc.pass();
        ASSERT_EQ(one_pass(sampler), want) << "trial " << trial << ", rank " << rank << ", epoch " << e;
        ASSERT_EQ(sampler.size(), static_cast<int64_t>(want.size())) << "trial " << trial;
      }
      ++checked;
    }
  }
  std::cout << "[ model    ] " << checked << " sampler configurations x 3 epochs match the transcription\n";
}

TEST(EquiBatchSampler, EveryBatchComesFromOneClassAndTheClassesTakeTurns) {
  PythonRandom data(5);
  const Labels labels = random_labels(data, 300, 6, 3);
  EquiBatchSampler sampler(labels, 5, with_coef(23));
  ASSERT_EQ(sampler.num_classes(), 6);
  const Epoch pass = one_pass(sampler);
  ASSERT_EQ(pass.size(), 6u * (23 / 5));
  for (size_t t = 0; t < pass.size(); ++t) {
    const int64_t cls = sampler.classes()[t % 6];
    ASSERT_EQ(pass[t].size(), 5u);
    for (int64_t i : pass[t]) {
      const auto& l = labels[static_cast<size_t>(i)];
      EXPECT_NE(std::find(l.begin(), l.end(), cls), l.end()) << "batch " << t << " is class " << cls << "'s, index " << i;
    }
  }
}

TEST(EquiBatchSampler, ClassesAreVisitedInTheOrderTheirLabelsFirstAppear) {
  EquiBatchSampler s({{7}, {3, 7}, {-1}, {3}, {7, 12}}, 1, with_coef(2));
  EXPECT_EQ(s.classes(), (std::vector<int64_t>{7, 3, -1, 12}));
  EXPECT_EQ(s.members(0), (std::vector<int64_t>{0, 1, 4}));
  EXPECT_EQ(s.members(3), (std::vector<int64_t>{4}));
  EXPECT_EQ(s.size(), 8);
}

TEST(EquiBatchSampler, RareClassesAreOversampledAndCommonOnesSubsampled) {
  // Class 0: 200 indices, class 1: 3 indices; pool size 40, batches of 8 use the whole pool.
  Labels labels(203, std::vector<int64_t>{0});
  for (size_t i = 200; i < 203; ++i) labels[i] = {1};
  EquiBatchSamplerOptions o;
  o.balanced_coef = 40;
  o.seed = 11;
  EquiBatchSampler sampler(labels, 8, o);
  for (int e = 0; e < 3; ++e) {
    std::map<int64_t, std::vector<int64_t>> per_class;
    for (const auto& b : one_pass(sampler)) {
      auto& drawn = per_class[labels[static_cast<size_t>(b[0])][0]];
      drawn.insert(drawn.end(), b.begin(), b.end());
    }
    ASSERT_EQ(per_class[0].size(), 40u);
    ASSERT_EQ(per_class[1].size(), 40u);
    EXPECT_EQ(std::set<int64_t>(per_class[0].begin(), per_class[0].end()).size(), 40u) << "subsampled without repeats";
    EXPECT_EQ(std::set<int64_t>(per_class[1].begin(), per_class[1].end()), (std::set<int64_t>{200, 201, 202}))
        << "every member of a rare class is in its pool";
  }
}

TEST(EquiBatchSampler, RanksSplitEachBatchOfTheSingleReplicaSampler) {
  PythonRandom data(17);
  const Labels labels = random_labels(data, 150, 5, 2);
  const int64_t batch_size = 7, replicas = 3;
  EquiBatchSampler whole(labels, batch_size, 1, 0, 30, 2024);
  std::vector<std::unique_ptr<EquiBatchSampler>> ranks;
  for (int64_t r = 0; r < replicas; ++r)
    ranks.push_back(std::make_unique<EquiBatchSampler>(labels, batch_size, replicas, r, 30, 2024));
  for (int e = 0; e < 2; ++e) {
    const Epoch full = one_pass(whole);
    std::vector<Epoch> parts;
    for (auto& s : ranks) parts.push_back(one_pass(*s));
    for (size_t t = 0; t < full.size(); ++t)
      for (int64_t r = 0; r < replicas; ++r) {
        IndexBatch expected;
        for (int64_t j = r; j < batch_size; j += replicas) expected.push_back(full[t][static_cast<size_t>(j)]);
        ASSERT_EQ(parts[static_cast<size_t>(r)].at(t), expected) << "epoch " << e << ", batch " << t << ", rank " << r;
      }
    EXPECT_EQ(parts[0].at(0).size(), 3u);
    EXPECT_EQ(parts[2].at(0).size(), 2u);
  }
}

TEST(EquiBatchSampler, TheStreamContinuesFromOneEpochToTheNext) {
  const Labels labels = {{0}, {1}, {0, 1}, {2}, {0}, {2}, {1}, {0}};
  auto shared = std::make_shared<PythonRandom>(3);
  EquiBatchSamplerOptions o;
  o.balanced_coef = 6;
  o.generator = shared;
  EquiBatchSampler a(labels, 2, o);
  one_pass(a);  // epoch 0 draws from the shared stream ...
  EquiBatchSampler b(labels, 2, o);
  EquiBatchSampler own(labels, 2, with_coef(6, /*seed=*/3));
  const Epoch own0 = one_pass(own), own1 = one_pass(own);
  EXPECT_EQ(one_pass(b), own1) << "... so the next sampler on it gets what a seed-3 sampler draws for epoch 1";
  EXPECT_NE(own0, own1);
}

TEST(EquiBatchSampler, LenIsComputedWithoutDrawing) {
  PythonRandom data(8);
  const Labels labels = random_labels(data, 60, 4, 2);
  for (int64_t batch_size : {1, 3, 5, 7, 20, 21}) {
    auto rng = std::make_shared<PythonRandom>(77);
    EquiBatchSamplerOptions o;
    o.balanced_coef = 20;
    o.generator = rng;
    EquiBatchSampler s(labels, batch_size, o);
    const auto n = s.size();
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(*n, s.num_classes() * (20 / batch_size)) << "batch_size " << batch_size;
    EXPECT_EQ(rng->getrandbits(64), PythonRandom(77).getrandbits(64)) << "size() drew from the generator";
    EXPECT_EQ(static_cast<int64_t>(one_pass(s).size()), *n) << "batch_size " << batch_size;
  }
}

TEST(EquiBatchSampler, RejectsBadArgumentsWithMessagesThatSayWhat) {
  const Labels ok = {{0}, {1}};
  auto message = [](auto&& make) -> std::string {
    try {
      make();
    } catch (const ValueError& e) {
      return e.what();
    }
    return "(no ValueError)";
  };
  EXPECT_EQ(message([&] { EquiBatchSampler(ok, 0); }), "batch_size should be a positive integer value, but got batch_size=0");
  EXPECT_EQ(message([&] { EquiBatchSampler(ok, -3); }), "batch_size should be a positive integer value, but got batch_size=-3");
  EXPECT_EQ(message([&] { EquiBatchSampler(ok, 4, 3, 3); }), "Invalid rank 3, rank should be in the interval [0, 2]");
  EXPECT_EQ(message([&] { EquiBatchSampler(ok, 4, 3, -1); }), "Invalid rank -1, rank should be in the interval [0, 2]");
  EXPECT_NE(message([&] { EquiBatchSampler(ok, 4, 1, 0, 0); }).find("balanced_coef should be a positive integer value"),
            std::string::npos);
  EXPECT_NE(message([&] { EquiBatchSampler(ok, 4, 0, 0); }).find("num_replicas should be a positive integer value"),
            std::string::npos);
  EXPECT_NE(message([&] { EquiBatchSampler(ok, 2, 3, 0); }).find("batch_size=2 is smaller than num_replicas=3"),
            std::string::npos);
  EXPECT_NE(message([&] { EquiBatchSampler(Labels{}, 2); }).find("idx2labels is empty"), std::string::npos);
  EXPECT_NE(message([&] { EquiBatchSampler(Labels{{0}, {1}, {}, {0}}, 2); }).find("index 2 has no labels"),
            std::string::npos);
}

}  // namespace
}  // namespace loader
