// Cursor::skip(k) of every sampler's pass against pulling k elements (what a resumed epoch
// relies on: TaskSource::fast_forward skips the batches its checkpoint had consumed), and
// IndexShuffleSampler, whose skip is a jump.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "loader/error.h"
#include "loader/samplers.h"

namespace loader {
namespace {

/// A sampler and the generators of its own that it draws from (the default generator is
/// compared as well).
template <class T>
struct Built {
  std::shared_ptr<SamplerOf<T>> sampler;
  std::vector<std::shared_ptr<Generator>> generators;
};

template <class T>
using Make = std::function<Built<T>()>;

/// What a pass looks like after its first k elements were skipped or pulled.
template <class T>
struct Outcome {
  size_t dropped = 0;
  std::vector<std::string> states_after;  // right after the skip or the pulls
  std::vector<T> rest;                    // the rest of the pass
  std::vector<std::string> states_end;    // after the pass ended
  std::vector<T> next_pass;               // the pass after it
};

template <class T>
std::vector<std::string> states(const Built<T>& b) {
  std::vector<std::string> out;
  for (const auto& g : b.generators) out.push_back(g->state());
  out.push_back(default_generator().state());
  return out;
}

template <class T>
std::vector<T> one_pass(SamplerOf<T>& sampler) {
  std::vector<T> out;
  auto cursor = sampler.iter();
  while (auto v = cursor->next()) out.push_back(*v);
  return out;
}

/// Builds a fresh sampler (the default generator seeded the same each time), runs
/// `passes_before` whole passes, then a pass whose first k elements are skipped (skip)
/// or pulled and dropped.
template <class T>
Outcome<T> run(const Make<T>& make, size_t k, bool use_skip, int passes_before) {
  manual_seed(2024);
  Built<T> b = make();
  for (int p = 0; p < passes_before; ++p) one_pass(*b.sampler);
  auto cursor = b.sampler->iter();
  Outcome<T> o;
  if (use_skip) {
    o.dropped = cursor->skip(k);
  } else {
    while (o.dropped < k && cursor->next()) ++o.dropped;
  }
  o.states_after = states(b);
  while (auto v = cursor->next()) o.rest.push_back(*v);
  o.states_end = states(b);
  o.next_pass = one_pass(*b.sampler);
  return o;
}

/// skip(k) then next() is pulling k then next(), for k from 0 to past the pass's end (all
/// of them for short passes), in the first and in the second pass, with the generators in
/// the same states afterwards.
template <class T>
void expect_skip_is_pull(const Make<T>& make, const std::string& what) {
  manual_seed(2024);
  Built<T> probe = make();
  const size_t len = one_pass(*probe.sampler).size();
  std::set<size_t> ks;
  if (len <= 80) {
    for (size_t k = 0; k <= len + 2; ++k) ks.insert(k);
  } else {
    for (size_t k : {size_t{0}, size_t{1}, size_t{2}, len / 3, len / 2 + 1, len - 1, len, len + 1, len + 100}) ks.insert(k);
  }
  for (int passes_before : {0, 1}) {
    for (size_t k : ks) {
      const std::string at = what + ", pass " + std::to_string(passes_before + 1) + ", k=" + std::to_string(k);
      Outcome<T> pulled = run(make, k, false, passes_before);
      Outcome<T> skipped = run(make, k, true, passes_before);
      EXPECT_EQ(skipped.dropped, pulled.dropped) << at;
      EXPECT_EQ(skipped.dropped, std::min(k, len)) << at;
      EXPECT_TRUE(skipped.states_after == pulled.states_after) << at << ": the generators' states after the skip differ";
      EXPECT_EQ(skipped.rest, pulled.rest) << at;
      EXPECT_TRUE(skipped.states_end == pulled.states_end) << at << ": the generators' states at the pass's end differ";
      EXPECT_EQ(skipped.next_pass, pulled.next_pass) << at;
    }
  }
}

std::shared_ptr<Generator> gen(uint64_t seed) { return std::make_shared<Generator>(seed); }

Make<int64_t> random_sampler(int64_t n, bool replacement, std::optional<int64_t> num_samples, bool own_generator) {
  return [=] {
    auto g = own_generator ? gen(7) : nullptr;
    Built<int64_t> b{std::make_shared<RandomSampler>(n, replacement, num_samples, g), {}};
    if (g) b.generators.push_back(g);
    return b;
  };
}

TEST(SamplerSkip, SequentialSampler) {
  expect_skip_is_pull<int64_t>([] { return Built<int64_t>{std::make_shared<SequentialSampler>(13), {}}; },
                               "SequentialSampler(13)");
  expect_skip_is_pull<int64_t>([] { return Built<int64_t>{std::make_shared<SequentialSampler>(0), {}}; },
                               "SequentialSampler(0)");
}

TEST(SamplerSkip, RandomSamplerWithoutReplacement) {
  expect_skip_is_pull(random_sampler(13, false, std::nullopt, true), "RandomSampler(13)");
  expect_skip_is_pull(random_sampler(1, false, std::nullopt, true), "RandomSampler(1)");
  expect_skip_is_pull(random_sampler(1000, false, std::nullopt, true), "RandomSampler(1000)");
  // Without a generator: a seed drawn from the default generator at the first next() (or skip).
  expect_skip_is_pull(random_sampler(13, false, std::nullopt, false), "RandomSampler(13, generator=None)");
}

TEST(SamplerSkip, RandomSamplerWithNumSamples) {
  // Two whole permutations and a partial one; an exact multiple (the trailing randperm(n)[:0]
  // drawn at the end); fewer than n.
  expect_skip_is_pull(random_sampler(10, false, 25, true), "RandomSampler(10, num_samples=25)");
  expect_skip_is_pull(random_sampler(10, false, 20, true), "RandomSampler(10, num_samples=20)");
  expect_skip_is_pull(random_sampler(10, false, 4, true), "RandomSampler(10, num_samples=4)");
  expect_skip_is_pull(random_sampler(300, false, 700, true), "RandomSampler(300, num_samples=700)");
}

TEST(SamplerSkip, RandomSamplerWithReplacement) {
  // Blocks of 32 randint draws and a tail block.
  expect_skip_is_pull(random_sampler(10, true, std::nullopt, true), "RandomSampler(10, replacement)");
  expect_skip_is_pull(random_sampler(10, true, 70, true), "RandomSampler(10, replacement, num_samples=70)");
  expect_skip_is_pull(random_sampler(10, true, 64, true), "RandomSampler(10, replacement, num_samples=64)");
  expect_skip_is_pull(random_sampler(50, true, 500, false),
                      "RandomSampler(50, replacement, num_samples=500, generator=None)");
}

TEST(SamplerSkip, BatchSamplerBothDropLast) {
  for (bool drop_last : {false, true}) {
    const std::string dl = drop_last ? ", drop_last" : "";
    for (int64_t batch : {1, 3, 4, 5}) {
      const std::string b = ", " + std::to_string(batch) + dl + ")";
      expect_skip_is_pull<IndexBatch>(
          [=] {
            auto g = gen(3);
            return Built<IndexBatch>{
                std::make_shared<BatchSampler>(std::make_shared<RandomSampler>(10, false, 25, g), batch, drop_last),
                {g}};
          },
          "BatchSampler(RandomSampler(10, num_samples=25)" + b);
      expect_skip_is_pull<IndexBatch>(
          [=] {
            auto g = gen(3);
            return Built<IndexBatch>{
                std::make_shared<BatchSampler>(std::make_shared<RandomSampler>(10, true, 70, g), batch, drop_last),
                {g}};
          },
          "BatchSampler(RandomSampler(10, replacement, num_samples=70)" + b);
      expect_skip_is_pull<IndexBatch>(
          [=] {
            return Built<IndexBatch>{
                std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(10), batch, drop_last), {}};
          },
          "BatchSampler(SequentialSampler(10)" + b);
      expect_skip_is_pull<IndexBatch>(
          [=] {
            return Built<IndexBatch>{
                std::make_shared<BatchSampler>(std::make_shared<RandomSampler>(20), batch, drop_last), {}};
          },
          "BatchSampler(RandomSampler(20, generator=None)" + b);
    }
  }
}

TEST(SamplerSkip, DistributedSampler) {
  for (bool shuffle : {true, false})
    for (bool drop_last : {false, true})
      for (int64_t rank : {0, 2}) {
        const std::string what = std::string("DistributedSampler(11, 3 replicas, rank ") + std::to_string(rank) +
                                 (shuffle ? ", shuffle" : "") + (drop_last ? ", drop_last" : "") + ")";
        expect_skip_is_pull<int64_t>(
            [=] {
              auto s = std::make_shared<DistributedSampler>(11, 3, rank, shuffle, 5, drop_last);
              s->set_epoch(4);
              return Built<int64_t>{s, {}};
            },
            what);
      }
  expect_skip_is_pull<IndexBatch>(
      [] {
        return Built<IndexBatch>{
            std::make_shared<BatchSampler>(std::make_shared<DistributedSampler>(101, 2, 1), 8, false), {}};
      },
      "BatchSampler(DistributedSampler(101, 2 replicas, rank 1), 8)");
}

TEST(SamplerSkip, SubsetRandomSampler) {
  const std::vector<int64_t> indices = {40, 3, 17, 8, 99, 21, 5};
  expect_skip_is_pull<int64_t>(
      [&] {
        auto g = gen(11);
        return Built<int64_t>{std::make_shared<SubsetRandomSampler>(indices, g), {g}};
      },
      "SubsetRandomSampler(generator)");
  expect_skip_is_pull<int64_t>([&] { return Built<int64_t>{std::make_shared<SubsetRandomSampler>(indices), {}}; },
                               "SubsetRandomSampler(generator=None)");
}

TEST(SamplerSkip, WeightedRandomSampler) {
  const std::vector<double> w = {0.1, 2.0, 0.5, 0.0, 1.5};
  expect_skip_is_pull<int64_t>([&] { return Built<int64_t>{std::make_shared<WeightedRandomSampler>(w, 9), {}}; },
                               "WeightedRandomSampler(w, 9)");
  expect_skip_is_pull<int64_t>(
      [&] {
        auto g = gen(13);
        return Built<int64_t>{std::make_shared<WeightedRandomSampler>(w, 3, false, g), {g}};
      },
      "WeightedRandomSampler(w, 3, replacement=False, generator)");
}

TEST(SamplerSkip, ListSamplersJump) {
  expect_skip_is_pull<int64_t>(
      [] { return Built<int64_t>{std::make_shared<ListSampler>(std::vector<int64_t>{5, 3, 8, 1}), {}}; },
      "ListSampler");
  expect_skip_is_pull<IndexBatch>(
      [] {
        return Built<IndexBatch>{
            std::make_shared<ListBatchSampler>(std::vector<IndexBatch>{{1, 2}, {3}, {4, 5, 6}}), {}};
      },
      "ListBatchSampler");
}

TEST(SamplerSkip, IndexShuffleSampler) {
  for (int64_t n : {1, 2, 3, 17, 64, 1000}) {
    expect_skip_is_pull<int64_t>(
        [=] {
          auto g = gen(21);
          return Built<int64_t>{std::make_shared<IndexShuffleSampler>(n, g), {g}};
        },
        "IndexShuffleSampler(" + std::to_string(n) + ")");
  }
  expect_skip_is_pull<IndexBatch>(
      [] {
        auto g = gen(21);
        return Built<IndexBatch>{std::make_shared<BatchSampler>(std::make_shared<IndexShuffleSampler>(103, g), 10, true),
                                 {g}};
      },
      "BatchSampler(IndexShuffleSampler(103), 10, drop_last)");
}

// ------------------------------------------------------------------ IndexShuffleSampler
TEST(IndexShuffleSampler, EachPassIsAPermutationOfRangeN) {
  for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{7}, int64_t{13},
                    int64_t{31}, int64_t{97}, int64_t{101}, int64_t{256}, int64_t{257}, int64_t{1000},
                    int64_t{1024}, int64_t{4093}, int64_t{65536}, int64_t{65537}}) {
    IndexShuffleSampler s(n, uint64_t{5});
    EXPECT_EQ(s.size(), n);
    std::vector<int64_t> want(static_cast<size_t>(n));
    std::iota(want.begin(), want.end(), int64_t{0});
    for (int pass = 0; pass < 3; ++pass) {
      std::vector<int64_t> got = one_pass(s);
      std::sort(got.begin(), got.end());
      EXPECT_EQ(got, want) << "n=" << n << ", pass " << pass;
    }
  }
}

TEST(IndexShuffleSampler, ShufflesAndEachPassHasItsOwnOrder) {
  IndexShuffleSampler s(1000, uint64_t{5});
  std::vector<int64_t> first = one_pass(s), second = one_pass(s);
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), int64_t{0});
  EXPECT_NE(first, identity);
  EXPECT_NE(first, second);
  // The same seed gives the same passes; another seed others.
  IndexShuffleSampler same(1000, uint64_t{5}), other(1000, uint64_t{6});
  EXPECT_EQ(one_pass(same), first);
  EXPECT_NE(one_pass(other), first);
  // The key is drawn at the pass's first next(), not at iter(): one random64() per pass.
  auto g = std::make_shared<Generator>(9);
  IndexShuffleSampler lazy(10, g);
  Generator expect(9);
  auto pass = lazy.iter();
  EXPECT_EQ(g->state(), expect.state());
  pass->next();
  expect.random64();
  EXPECT_EQ(g->state(), expect.state());
}

TEST(IndexShuffleSampler, SkipIsAJumpAlsoForAHugeN) {
  // No timing: a pass over 2^62 + 5 indices skipped to near its end answers at once (a
  // pull-and-drop skip would not end).
  const int64_t n = (int64_t{1} << 62) + 5;
  auto g = std::make_shared<Generator>(1);
  IndexShuffleSampler s(n, g);
  auto pass = s.iter();
  const size_t k = static_cast<size_t>(n - 3);
  EXPECT_EQ(pass->skip(k), k);
  std::set<int64_t> last;
  while (auto i = pass->next()) {
    EXPECT_GE(*i, 0);
    EXPECT_LT(*i, n);
    last.insert(*i);
  }
  EXPECT_EQ(last.size(), 3u);
  EXPECT_EQ(pass->skip(10), 0u);
  // The k-th index alone is the one the pass gives there.
  Generator again(1);
  const uint64_t key = again.random64();
  auto pass2 = IndexShuffleSampler(n, std::make_shared<Generator>(1)).iter();
  pass2->skip(k);
  EXPECT_EQ(*pass2->next(), IndexShuffleSampler::index_at(key, n, static_cast<int64_t>(k)));
  const int64_t max = std::numeric_limits<int64_t>::max();
  const int64_t at = IndexShuffleSampler::index_at(key, max, max - 1);
  EXPECT_GE(at, 0);
  EXPECT_LT(at, max);
  EXPECT_NE(IndexShuffleSampler::index_at(key, max, 0), IndexShuffleSampler::index_at(key, max, 1));
  EXPECT_THROW(IndexShuffleSampler::index_at(key, 10, 10), ValueError);
  EXPECT_THROW(IndexShuffleSampler::index_at(key, 10, -1), ValueError);
}

TEST(IndexShuffleSampler, AnEmptySourceGivesAnEmptyPass) {
  IndexShuffleSampler s(0, uint64_t{1});
  EXPECT_EQ(s.size(), 0);
  EXPECT_TRUE(one_pass(s).empty());
  EXPECT_EQ(s.iter()->skip(4), 0u);
}

}  // namespace
}  // namespace loader
