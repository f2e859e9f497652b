// Elastic ranks (merge_checkpoints): the ranks of one DistributedSampler epoch each save
// a checkpoint part-way, the merged checkpoint is loaded by every rank of another world
// size, and the indices taken before and after are the epoch's samples exactly once
// (DistributedSampler's padding repeats aside), the new ranks' shares being what a
// DistributedSampler over the remaining samples gives.  Checkpoints travel through .pt
// bytes as a user's would.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "loader/dataloader.h"
#include "loader/error.h"
#include "loader/samplers.h"
#include "loader/serialization/pt.h"
#include "checkpoint_util.h"

using namespace loader;
using loader::testing::through_pt;

namespace {

constexpr int64_t kBatch = 4;
constexpr int64_t kSeed = 5;
constexpr int64_t kEpoch = 2;

/// "test_random_draws" (faults_test.cpp): sample i = (float64[4] drawn at random, i).
std::shared_ptr<Dataset> draws(int64_t n) { return make_dataset({"test_random_draws", Value::dict({{"n", n}})}); }

struct World {
  int64_t n = 103;
  bool shuffle = true;
  bool drop_last = false;  // the DistributedSampler's
  bool batch_drop_last = false;  // the loader's
  int workers = 0;
  int64_t seed = kSeed;
  int64_t epoch = kEpoch;
};

std::unique_ptr<DataLoader> rank_loader(const World& s, int64_t replicas, int64_t rank) {
  DataLoaderOptions o;
  o.batch_size = kBatch;
  o.drop_last = s.batch_drop_last;
  o.num_workers = s.workers;
  o.timeout = 60;
  auto sampler = std::make_shared<DistributedSampler>(SampleSource(s.n), replicas, rank, s.shuffle, s.seed, s.drop_last);
  sampler->set_epoch(s.epoch);
  o.sampler = sampler;
  return std::make_unique<DataLoader>(draws(s.n), o);
}

void add_indices(const Value& batch, std::vector<int64_t>& out) {
  const Tensor& t = batch[1].to_tensor();
  const auto* p = static_cast<const int64_t*>(t.data_ptr());
  out.insert(out.end(), p, p + t.numel());
}

std::vector<int64_t> sampler_pass(Sampler& s) {
  std::vector<int64_t> out;
  auto c = s.iter();
  while (std::optional<int64_t> v = c->next()) out.push_back(*v);
  return out;
}

/// Old ranks take `batches[r]` batches and save; returns their checkpoints and indices.
std::vector<Value> take_before(const World& s, const std::vector<int64_t>& batches,
                               std::vector<std::vector<int64_t>>& taken) {
  const auto replicas = static_cast<int64_t>(batches.size());
  std::vector<Value> states;
  taken.assign(batches.size(), {});
  for (int64_t r = 0; r < replicas; ++r) {
    auto dl = rank_loader(s, replicas, r);
    auto it = dl->iter();
    for (int64_t k = 0; k < batches[static_cast<size_t>(r)]; ++k) {
      std::optional<Value> b = it.next();
      if (!b) break;
      add_indices(*b, taken[static_cast<size_t>(r)]);
    }
    states.push_back(through_pt(it.state_dict()));
  }
  return states;
}

/// Each new rank loads `merged` and runs the rest of the epoch.
std::vector<std::vector<int64_t>> take_after(const World& s, const Value& merged, int64_t replicas) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(replicas));
  for (int64_t r = 0; r < replicas; ++r) {
    auto dl = rank_loader(s, replicas, r);
    dl->load_state_dict(merged, /*strict=*/false);
    for (auto it = dl->iter(); std::optional<Value> b = it.next();) add_indices(*b, out[static_cast<size_t>(r)]);
  }
  return out;
}

/// Runs old -> new and checks the new ranks' shares against a DistributedSampler over
/// the remaining samples, and the union against the epoch.
void check_elastic(const World& s, const std::vector<int64_t>& batches, int64_t new_replicas, bool merge_all) {
  const auto old_replicas = static_cast<int64_t>(batches.size());
  std::vector<std::vector<int64_t>> before;
  std::vector<Value> states = take_before(s, batches, before);
  const Value merged = through_pt(merge_checkpoints(merge_all ? states : std::vector<Value>{states[0]}));
  const std::vector<std::vector<int64_t>> after = take_after(s, merged, new_replicas);

  // The epoch: the old ranks' stripes as a fresh DistributedSampler gives them.
  std::vector<std::vector<int64_t>> stripes;
  std::set<int64_t> epoch_samples;
  for (int64_t r = 0; r < old_replicas; ++r) {
    DistributedSampler d(SampleSource(s.n), old_replicas, r, s.shuffle, s.seed, s.drop_last);
    d.set_epoch(s.epoch);
    stripes.push_back(sampler_pass(d));
    epoch_samples.insert(stripes.back().begin(), stripes.back().end());
    const auto& b = before[static_cast<size_t>(r)];
    ASSERT_LE(b.size(), stripes.back().size());
    EXPECT_TRUE(std::equal(b.begin(), b.end(), stripes.back().begin())) << "old rank " << r << ": its stripe's start";
  }
  std::set<int64_t> consumed;
  for (const auto& b : before) consumed.insert(b.begin(), b.end());
  // The remaining samples in the epoch's order (one replica's pass is the permutation).
  DistributedSampler whole(SampleSource(s.n), 1, 0, s.shuffle, s.seed, false);
  whole.set_epoch(s.epoch);
  std::vector<int64_t> remaining;
  for (int64_t i : sampler_pass(whole))
    if (epoch_samples.count(i) && !consumed.count(i)) remaining.push_back(i);
  // New rank r: what DistributedSampler(len(remaining), W', r, no shuffle, drop_last) picks.
  std::map<int64_t, int64_t> count;
  for (const auto& b : before)
    for (int64_t i : b) ++count[i];
  size_t padded = 0;
  for (int64_t r = 0; r < new_replicas; ++r) {
    std::vector<int64_t> want;
    if (!remaining.empty()) {
      DistributedSampler d(SampleSource(static_cast<int64_t>(remaining.size())), new_replicas, r, false, 0,
                           s.drop_last);
      for (int64_t pos : sampler_pass(d)) want.push_back(remaining[static_cast<size_t>(pos)]);
    }
    // The loader's drop_last drops the stripe's short last batch, as in any epoch.
    if (s.batch_drop_last) want.resize(want.size() / kBatch * kBatch);
    EXPECT_EQ(after[static_cast<size_t>(r)], want) << "new rank " << r << " of " << new_replicas;
    for (int64_t i : after[static_cast<size_t>(r)]) ++count[i];
  }
  if (!s.drop_last) {
    padded = (remaining.size() + static_cast<size_t>(new_replicas) - 1) / static_cast<size_t>(new_replicas) *
                 static_cast<size_t>(new_replicas) -
             remaining.size();
    for (int64_t r = 0; r < old_replicas; ++r)  // old padding consumed: positions >= n
      for (size_t k = 0; k < before[static_cast<size_t>(r)].size(); ++k)
        if (r + static_cast<int64_t>(k) * old_replicas >= s.n) ++padded;
  }
  // Exactly once: every sample of the epoch (all of them without drop_last), repeated
  // only by padding; with drop_last, the new ranks' dropped tail (under W' samples) aside.
  size_t repeats = 0, missing = 0;
  for (int64_t i : epoch_samples) {
    if (!count.count(i)) ++missing;
    else repeats += static_cast<size_t>(count[i] - 1);
  }
  if (s.batch_drop_last) {
    // Short last batches dropped (padding among them, maybe): nothing beyond padding twice.
    EXPECT_LE(repeats, padded);
    return;
  }
  EXPECT_EQ(repeats, padded);
  if (s.drop_last) {
    EXPECT_EQ(missing, remaining.size() % static_cast<size_t>(new_replicas));
  } else {
    EXPECT_EQ(missing, 0u);
    EXPECT_EQ(epoch_samples.size(), static_cast<size_t>(s.n));
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Elastic, TwoRanksToThreeAndThreeToTwoEvenAndUnevenShuffleAndDropLast) {
  for (bool shuffle : {true, false})
    for (bool drop_last : {false, true}) {
      World s;
      s.shuffle = shuffle;
      s.drop_last = drop_last;
      SCOPED_TRACE(std::string("shuffle ") + (shuffle ? "on" : "off") + ", drop_last " + (drop_last ? "on" : "off"));
      {
        SCOPED_TRACE("2 -> 3, even, one checkpoint");
        check_elastic(s, {5, 5}, 3, /*merge_all=*/false);
      }
      {
        SCOPED_TRACE("2 -> 3, even, both checkpoints");
        check_elastic(s, {5, 5}, 3, true);
      }
      {
        SCOPED_TRACE("2 -> 3, uneven");
        check_elastic(s, {3, 6}, 3, true);
      }
      {
        SCOPED_TRACE("3 -> 2, even");
        check_elastic(s, {4, 4, 4}, 2, false);
      }
      {
        SCOPED_TRACE("3 -> 2, uneven, one rank finished (its padding consumed)");
        check_elastic(s, {1, 4, 9}, 2, true);
      }
      {
        SCOPED_TRACE("3 -> 5, none consumed");
        check_elastic(s, {0, 0, 0}, 5, false);
      }
    }
}

TEST(Elastic, TheLoadersDropLastDropsShortBatchesAndAFinishedRanksDroppedTailGoesOn) {
  // With the loader's drop_last, old rank 2 (35 samples, 8 full batches) finished having
  // consumed 32: its last 3 samples are among the remaining ones.
  for (bool sampler_drop_last : {false, true}) {
    World s;
    s.batch_drop_last = true;
    s.drop_last = sampler_drop_last;
    SCOPED_TRACE(std::string("sampler drop_last ") + (sampler_drop_last ? "on" : "off"));
    check_elastic(s, {1, 4, 9}, 2, true);
    check_elastic(s, {5, 5}, 3, false);
  }
}

TEST(Elastic, WithWorkersTheSameShares) {
  World s;
  s.workers = 2;
  check_elastic(s, {2, 5}, 3, true);
}

TEST(Elastic, TheEpochAfterTheStripeIsTheSamplersOwn) {
  World s;
  std::vector<std::vector<int64_t>> before;
  const Value merged = through_pt(merge_checkpoints(take_before(s, {3, 4}, before)));
  // What torch 1.13's torch.load(weights_only=True) opens: ints, bools, a list of ints.
  for (const auto& [key, value] : merged.dict_items()) {
    bool plain = value.is_int() || value.is_bool();
    if (value.is_list()) {
      plain = true;
      for (const Value& item : value.items()) plain = plain && item.is_int();
    }
    EXPECT_TRUE(plain) << key.to_string() << ": " << value.repr();
  }
  auto dl = rank_loader(s, 3, 1);
  dl->load_state_dict(merged, false);
  EXPECT_TRUE(dl->state_dict().at("elastic").is_int()) << "a pending elastic checkpoint is what state_dict() returns";
  {
    auto it = dl->iter();
    it.next();
    std::string why = error_of([&] { it.state_dict(); });
    EXPECT_NE(why.find("elastic checkpoint's stripe"), std::string::npos) << why;
    while (it.next()) {
    }
  }
  auto* sampler = static_cast<DistributedSampler*>(dl->sampler().get());
  EXPECT_EQ(sampler->epoch(), kEpoch);
  sampler->set_epoch(kEpoch + 1);
  std::vector<int64_t> got;
  for (auto it = dl->iter(); std::optional<Value> b = it.next();) add_indices(*b, got);
  DistributedSampler d(SampleSource(s.n), 3, 1, true, kSeed);
  d.set_epoch(kEpoch + 1);
  EXPECT_EQ(got, sampler_pass(d));
  EXPECT_NO_THROW(dl->state_dict()) << "after the stripe ended, checkpoints are the usual ones";
}

TEST(Elastic, RefusalsNameWhatIsWrong) {
  World s;
  std::vector<std::vector<int64_t>> before;
  std::vector<Value> uneven = take_before(s, {2, 3}, before);
  World other_epoch = s;
  other_epoch.epoch = kEpoch + 1;
  std::vector<Value> later = take_before(other_epoch, {2, 3}, before);
  World other_seed = s;
  other_seed.seed = kSeed + 1;
  std::vector<Value> reseeded = take_before(other_seed, {2, 3}, before);

  std::string why = error_of([&] { merge_checkpoints({uneven[0], later[1]}); });
  EXPECT_NE(why.find("rank 1) has epoch 3, checkpoint 0 (rank 0) has 2"), std::string::npos) << why;
  why = error_of([&] { merge_checkpoints({uneven[0], reseeded[1]}); });
  EXPECT_NE(why.find("has seed 6"), std::string::npos) << why;
  why = error_of([&] { merge_checkpoints({uneven[1], uneven[1]}); });
  EXPECT_NE(why.find("are both of rank 1"), std::string::npos) << why;
  why = error_of([&] { merge_checkpoints({uneven[0], uneven[0], uneven[1]}); });
  EXPECT_NE(why.find("both of rank 0"), std::string::npos) << why;
  // Rank 0 alone stands for rank 1 only when the counts are equal: here the merge of
  // one checkpoint assumes so, but two differing ones with a third rank missing cannot.
  World three = s;
  std::vector<Value> of3 = take_before(three, {2, 3, 3}, before);
  why = error_of([&] { merge_checkpoints({of3[0], of3[1]}); });
  EXPECT_NE(why.find("rank(s) 2 of 3 are missing"), std::string::npos) << why;
  EXPECT_NO_THROW(merge_checkpoints({of3[1], of3[2]})) << "equal counts: the missing rank consumed as much";
  why = error_of([] { merge_checkpoints({}); });
  EXPECT_NE(why.find("no checkpoints given"), std::string::npos) << why;

  // A checkpoint of a loader without a DistributedSampler.
  DataLoaderOptions plain;
  plain.batch_size = kBatch;
  plain.shuffle = true;
  DataLoader dl(draws(s.n), plain);
  {
    auto it = dl.iter();
    it.next();
    Value state = it.state_dict();
    why = error_of([&] { merge_checkpoints({state}); });
    EXPECT_NE(why.find("no DistributedSampler"), std::string::npos) << why;
  }
  const Value merged = through_pt(merge_checkpoints(uneven));
  why = error_of([&] { merge_checkpoints({merged}); });
  EXPECT_NE(why.find("is itself merged"), std::string::npos) << why;
  // Loading: strict, a loader without a DistributedSampler, another seed.
  auto rank0 = rank_loader(s, 3, 0);
  why = error_of([&] { rank0->load_state_dict(merged); });
  EXPECT_NE(why.find("strict=false"), std::string::npos) << why;
  why = error_of([&] { dl.load_state_dict(merged, false); });
  EXPECT_NE(why.find("DistributedSampler"), std::string::npos) << why;
  auto reseeded_rank = rank_loader(other_seed, 3, 0);
  why = error_of([&] { reseeded_rank->load_state_dict(merged, false); });
  EXPECT_NE(why.find("the DistributedSampler's seed 5, this loader has 6"), std::string::npos) << why;
  // Refused loads change nothing: the loader's next epoch is its own.
  std::vector<int64_t> got;
  for (auto it = reseeded_rank->iter(); std::optional<Value> b = it.next();) add_indices(*b, got);
  DistributedSampler d(SampleSource(s.n), 3, 0, true, kSeed + 1);
  d.set_epoch(kEpoch);
  EXPECT_EQ(got, sampler_pass(d));
}
