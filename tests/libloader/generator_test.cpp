// Generator (PyTorch's CPU mt19937 draws) against golden data and, where this machine
// has PyTorch, against torch itself for seeds that are not in the golden files.
#include "loader/generator.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "loader/mt19937.h"
#include "loader/samplers.h"
#include "test_util.h"

namespace loader {
namespace {

using nlohmann::json;

/// Runs `script` with /usr/bin/python3; its stdout, or nullopt when it failed.
std::optional<std::string> run_python(const std::string& script) {
  char path[] = "/tmp/loader_generator_test_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return std::nullopt;
  {
    std::ofstream out(path);
    out << script;
  }
  close(fd);
  std::string command = std::string("/usr/bin/python3 ") + path + " 2>/dev/null";
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  if (pipe) {
    char buffer[4096];
    size_t n;
    while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  }
  int status = pipe ? pclose(pipe) : -1;
  std::remove(path);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return output;
}

bool torch_available() { return run_python("import torch\n").has_value(); }

TEST(Generator, SeedsWithTheLow32BitsAndKeepsTheFullSeed) {
  json golden = json::parse(testing::read_file(testing::golden_path("random_sampler.json")));
  int checked = 0;
  for (const auto& c : golden.at("seed_congruence")) {
    const uint64_t seed = c.at("seed");
    Generator g(seed);
    EXPECT_EQ(g.initial_seed(), c.at("initial_seed").get<uint64_t>());
    EXPECT_EQ(randperm(10, g), c.at("randperm10").get<std::vector<int64_t>>()) << "seed " << seed;
    ++checked;
  }
  std::cout << "[ golden   ] random_sampler.seed_congruence: " << checked << " cases checked, 0 skipped\n";
  RecordProperty("seed_congruence_checked", checked);
  ASSERT_GT(checked, 0);
}

TEST(Mt19937, SameOutputsAsTheStandardEngineAcrossManyRegenerations) {
  for (uint32_t seed : {0u, 1u, 5489u, 42u, 0x80000000u, 0xffffffffu}) {
    std::mt19937 reference(seed);
    Mt19937 engine(seed);
    for (int i = 0; i < 624 * 7 + 5; ++i) ASSERT_EQ(engine(), static_cast<uint32_t>(reference())) << "seed " << seed << " output " << i;
  }
}

TEST(Mt19937, DiscardSkipsExactlyThatManyOutputs) {
  // Skips inside one block of 624, up to its end, and across several regenerations.
  for (uint64_t k : {0ull, 1ull, 100ull, 623ull, 624ull, 625ull, 5000ull, 250000ull}) {
    std::mt19937 reference(7);
    Mt19937 engine(7);
    for (int warm = 0; warm < 300; ++warm) ASSERT_EQ(engine(), static_cast<uint32_t>(reference()));
    reference.discard(k);
    engine.discard(k);
    for (int i = 0; i < 1300; ++i) ASSERT_EQ(engine(), static_cast<uint32_t>(reference())) << "discard " << k;
  }
}

TEST(Generator, DefaultGeneratorIsSharedUnlessAThreadScopesItsOwn) {
  manual_seed(42);
  EXPECT_EQ(default_generator().initial_seed(), 42u);
  const uint32_t expected_next = Generator(default_generator()).random();
  uint64_t unscoped_seed = 0;
  uint64_t scoped_seed = 0;
  std::thread t([&] {
    unscoped_seed = default_generator().initial_seed();  // the process-wide one, like torch's
    Generator own(7);
    DefaultGeneratorScope scope(own);                    // e.g. an in-process worker thread
    scoped_seed = default_generator().initial_seed();
    for (int i = 0; i < 10; ++i) default_generator().random();  // must not disturb the shared one
  });
  t.join();
  EXPECT_EQ(unscoped_seed, 42u);
  EXPECT_EQ(scoped_seed, 7u);
  EXPECT_EQ(default_generator().random(), expected_next);
  manual_seed(42);
  Generator fresh(42);
  EXPECT_EQ(default_generator().random64(), fresh.random64());
}

TEST(Generator, MatchesTorchDrawsForSeedsNotInTheGoldenFiles) {
  const std::string script = R"PY(
import json, torch
g = torch.Generator().manual_seed(987654321123)
out = {}
out["int64"] = [int(torch.empty((), dtype=torch.int64).random_(generator=g)) for _ in range(3)]
out["randint7"] = torch.randint(high=7, size=(10,), generator=g).tolist()
out["randint_big"] = torch.randint(high=2**33 + 5, size=(4,), generator=g).tolist()
out["rand"] = torch.rand(5, dtype=torch.float64, generator=g).tolist()
out["exponential"] = torch.empty(5, dtype=torch.float64).exponential_(generator=g).tolist()
out["randperm"] = torch.randperm(20, generator=g).tolist()
w = [0.0, 1.0, 0.0, 2.0, 0.5, 0.0, 0.0, 3.0]
out["multinomial_ties"] = torch.multinomial(torch.tensor(w, dtype=torch.float64), 8, False, generator=g).tolist()
w2 = [((i * 31) % 17) / 7.0 for i in range(300)]
out["w2"] = w2
out["multinomial_partial_sort"] = torch.multinomial(torch.tensor(w2, dtype=torch.float64), 4, False, generator=g).tolist()
out["multinomial_k1"] = torch.multinomial(torch.tensor(w2, dtype=torch.float64), 1, False, generator=g).tolist()
out["multinomial_repl"] = torch.multinomial(torch.tensor(w2, dtype=torch.float64), 50, True, generator=g).tolist()
print(json.dumps(out))
)PY";
  auto text = run_python(script);
  if (!text && !torch_available()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: no live cross-check";
  ASSERT_TRUE(text) << "the torch script failed";
  json want = json::parse(*text);

  Generator g(987654321123ULL);
  std::vector<int64_t> int64s;
  for (int i = 0; i < 3; ++i) int64s.push_back(g.random_int64());
  EXPECT_EQ(int64s, want["int64"].get<std::vector<int64_t>>());
  std::vector<int64_t> small, big;
  for (int i = 0; i < 10; ++i) small.push_back(g.randint(7));
  for (int i = 0; i < 4; ++i) big.push_back(g.randint((int64_t{1} << 33) + 5));
  EXPECT_EQ(small, want["randint7"].get<std::vector<int64_t>>());
  EXPECT_EQ(big, want["randint_big"].get<std::vector<int64_t>>());
  std::vector<double> uniform, exponential;
  for (int i = 0; i < 5; ++i) uniform.push_back(g.uniform_double());
  // The CPU exponential_ of a non-MKL build, used by multinomial without replacement.
  for (int i = 0; i < 5; ++i) exponential.push_back(-std::log(1.0 - g.uniform_double()));
  EXPECT_EQ(uniform, want["rand"].get<std::vector<double>>());
  EXPECT_EQ(exponential, want["exponential"].get<std::vector<double>>());
  EXPECT_EQ(randperm(20, g), want["randperm"].get<std::vector<int64_t>>());
  // Zero weights tie: torch.topk's nth_element/sort decide their order; we must agree.
  EXPECT_EQ(multinomial({0.0, 1.0, 0.0, 2.0, 0.5, 0.0, 0.0, 3.0}, 8, false, g),
            want["multinomial_ties"].get<std::vector<int64_t>>());
  const auto w2 = want["w2"].get<std::vector<double>>();
  EXPECT_EQ(multinomial(w2, 4, false, g), want["multinomial_partial_sort"].get<std::vector<int64_t>>());
  EXPECT_EQ(multinomial(w2, 1, false, g), want["multinomial_k1"].get<std::vector<int64_t>>());
  EXPECT_EQ(multinomial(w2, 50, true, g), want["multinomial_repl"].get<std::vector<int64_t>>());
}

// ------------------------------------------------------------------ LazyPermutation

std::vector<int64_t> lazy_all(int64_t n, Generator& g) {
  LazyPermutation p(n, g);
  std::vector<int64_t> out;
  while (p.remaining() > 0) out.push_back(p.next());
  return out;
}

TEST(LazyPermutation, SameElementsAndLeavesTheGeneratorWhereRandpermDoes) {
  for (int64_t n : {0, 1, 2, 3, 10, 1000, 250000})
    for (uint64_t seed : {0ULL, 42ULL, 67280421310721ULL}) {
      Generator eager(seed), lazy(seed);
      const std::vector<int64_t> want = randperm(n, eager);
      ASSERT_EQ(lazy_all(n, lazy), want) << "n=" << n << " seed=" << seed;
      // Repaid when the last draw was made: the stream continues alike, nothing owed.
      EXPECT_EQ(lazy.random(), eager.random()) << "n=" << n;
    }
}

TEST(LazyPermutation, ADrawFromTheGeneratorMidPassSeesThePassAsMadeAtItsStart) {
  // PyTorch draws the whole randperm at once: a draw from the same generator half-way
  // through the consumer's pass comes after every draw of the pass.
  Generator eager(7), lazy(7);
  const std::vector<int64_t> want = randperm(500, eager);
  const uint32_t after = eager.random();
  LazyPermutation p(500, lazy);
  std::vector<int64_t> got;
  for (int i = 0; i < 100; ++i) got.push_back(p.next());
  EXPECT_EQ(lazy.random(), after);  // settles the loan: discards the 499 owed draws
  while (p.remaining() > 0) got.push_back(p.next());
  EXPECT_EQ(got, want);              // the permutation itself is unaffected
  EXPECT_EQ(lazy.random(), eager.random());  // and its late repay changes nothing
}

// Takes the elements of two passes over one generator alternately, one each while both
// last, as a consumer interleaving two samplers would.
static void take_interleaved(LazyPermutation& a, LazyPermutation& b, std::vector<int64_t>& got_a,
                             std::vector<int64_t>& got_b) {
  while (a.remaining() > 0 || b.remaining() > 0) {
    if (a.remaining() > 0) got_a.push_back(a.next());
    if (b.remaining() > 0) got_b.push_back(b.next());
  }
}

TEST(LazyPermutation, TwoPassesOverOneGeneratorInterleaved) {
  Generator eager(3), lazy(3);
  const std::vector<int64_t> want_a = randperm(300, eager);
  const std::vector<int64_t> want_b = randperm(200, eager);
  LazyPermutation a(300, lazy);
  std::vector<int64_t> got_a, got_b;
  got_a.push_back(a.next());
  LazyPermutation b(200, lazy);  // settles a's loan first, as PyTorch had drawn it
  take_interleaved(a, b, got_a, got_b);
  EXPECT_EQ(got_a, want_a);
  EXPECT_EQ(got_b, want_b);
  EXPECT_EQ(lazy.random(), eager.random());
}

TEST(LazyPermutation, FinishMakesTheRestOfThePassAndSaveStateSettles) {
  Generator eager(11), lazy(11);
  const std::vector<int64_t> want = randperm(1000, eager);
  {
    LazyPermutation p(1000, lazy);
    // save_state while the loan is open: the state after the whole pass.
    unsigned char owed[Generator::kStateBytes], made[Generator::kStateBytes];
    lazy.save_state(owed);
    eager.save_state(made);
    EXPECT_EQ(std::memcmp(owed, made, sizeof owed), 0);
    std::vector<int64_t> first;
    for (int i = 0; i < 10; ++i) first.push_back(p.next());
    EXPECT_EQ(first, std::vector<int64_t>(want.begin(), want.begin() + 10));
    p.finish();  // randperm(n)[:10]
  }
  EXPECT_EQ(lazy.random(), eager.random());
  // A permutation dropped half-way leaves the loan to be settled by the next use.
  Generator eager2(12), lazy2(12);
  randperm(77, eager2);
  {
    LazyPermutation p(77, lazy2);
    p.next();
  }
  EXPECT_EQ(lazy2.random(), eager2.random());
  // manual_seed drops the loan, as re-seeding drops every earlier draw.
  Generator g(5);
  LazyPermutation p(50, g);
  g.manual_seed(9);
  EXPECT_EQ(g.random(), Generator(9).random());
}

TEST(LazyPermutation, RandomSamplerSharingItsGeneratorWithAnotherUser) {
  // torch: g = Generator().manual_seed(1); it = iter(RandomSampler(range(40), generator=g));
  // next(it) draws randperm(40) and, num_samples % n == 0, nothing else until the pass
  // ends; a draw from g after the first index comes after those 39 draws.
  auto g = std::make_shared<Generator>(1);
  Generator model(1);
  const std::vector<int64_t> perm = randperm(40, model);
  const uint32_t after_perm = model.random();
  RandomSampler s(40, g);
  auto it = s.iter();
  std::vector<int64_t> got{*it->next()};
  EXPECT_EQ(g->random(), after_perm);
  while (auto i = it->next()) got.push_back(*i);
  EXPECT_EQ(got, perm);
}


TEST(LazyPermutation, TakeInBulkEqualsNextOneByOne) {
  for (int64_t n : {1, 2, 17, 1000, 100000}) {
    Generator eager(21), lazy(21);
    const std::vector<int64_t> want = randperm(n, eager);
    LazyPermutation p(n, lazy);
    std::vector<int64_t> got;
    size_t chunk = 1;
    while (p.remaining() > 0) {  // chunks of 1, 2, 3, ... mixed with single next() calls
      p.take(got, std::min<size_t>(chunk++, static_cast<size_t>(p.remaining())));
      if (p.remaining() > 0) got.push_back(p.next());
    }
    EXPECT_EQ(got, want) << "n=" << n;
    EXPECT_EQ(lazy.random(), eager.random()) << "n=" << n;
  }
}

TEST(LazyPermutation, PassesReusingTheSlotsOfEarlierOnesGiveRandpermsElements) {
  // Large passes hand their slots on to the next pass (zeroed when given back): a pass
  // after a larger one, after a smaller one, after one stopped early, and two at once.
  Generator eager(9), lazy(9);
  for (int64_t n : {100000, 60000, 150000, 100000}) {
    const std::vector<int64_t> want = randperm(n, eager);
    LazyPermutation p(n, lazy);
    std::vector<int64_t> got;
    p.take(got, static_cast<size_t>(n));
    EXPECT_EQ(got, want) << "n=" << n;
  }
  {
    const std::vector<int64_t> want = randperm(120000, eager);
    LazyPermutation p(120000, lazy);
    std::vector<int64_t> got;
    p.take(got, 5000);
    p.finish();  // randperm(n)[:5000]
    EXPECT_EQ(got, std::vector<int64_t>(want.begin(), want.begin() + 5000));
    EXPECT_EQ(p.remaining(), 0);
  }
  const std::vector<int64_t> want_a = randperm(90000, eager);
  const std::vector<int64_t> want_b = randperm(80000, eager);
  LazyPermutation a(90000, lazy);
  LazyPermutation b(80000, lazy);
  std::vector<int64_t> got_a, got_b;
  take_interleaved(a, b, got_a, got_b);
  EXPECT_EQ(got_a, want_a);
  EXPECT_EQ(got_b, want_b);
  EXPECT_EQ(lazy.random(), eager.random());
}

// Resident memory of this process in bytes (/proc/self/statm).
static uint64_t resident_bytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

TEST(LazyPermutation, TheFirstElementsOfALargePassTouchOnlyThePagesTheyUse) {
  // A pass over 50 M elements keeps 200 MB of slots; its first elements must not cost a
  // write over all of them (the first batch of an epoch waits for them).  16 elements
  // touch at most 32 places: a few pages, 2 MB each even where huge pages are on.
  const int64_t n = 50'000'000;
  Generator eager(5), lazy(5);
  const std::vector<int64_t> want = randperm(n, eager);
  const uint64_t before = resident_bytes();
  LazyPermutation p(n, lazy);
  std::vector<int64_t> got;
  p.take(got, 16);
  const uint64_t grown = resident_bytes() - std::min(before, resident_bytes());
  EXPECT_LT(grown, uint64_t{100} << 20) << "the slots were written before the first element";
  EXPECT_EQ(got, std::vector<int64_t>(want.begin(), want.begin() + 16));
}

TEST(SamplerCursor, NextManyYieldsWhatNextYields) {
  // Every RandomSampler shape (with and without replacement, num_samples below, equal to
  // and above n, with a tail) and the list cursor: bulk reads in uneven chunks, mixed with
  // next(), give the same stream, end at the same place, and leave the generator alike.
  struct Case {
    int64_t n;
    bool replacement;
    std::optional<int64_t> num_samples;
  };
  for (const Case& c : {Case{10, false, std::nullopt}, Case{10, false, 25}, Case{10, false, 3},
                        Case{1000, false, std::nullopt}, Case{7, true, std::nullopt}, Case{7, true, 70},
                        Case{1, false, 5}}) {
    auto g1 = std::make_shared<Generator>(5), g2 = std::make_shared<Generator>(5);
    RandomSampler a(c.n, c.replacement, c.num_samples, g1), b(c.n, c.replacement, c.num_samples, g2);
    std::vector<int64_t> one, many;
    for (auto it = a.iter(); auto v = it->next();) one.push_back(*v);
    auto it = b.iter();
    for (size_t k = 1;; ++k) {
      const size_t got = it->next_many(many, k % 9);
      if (got < k % 9) break;
      if (auto v = it->next()) many.push_back(*v);
      else break;
    }
    EXPECT_EQ(many, one) << "n=" << c.n << " replacement=" << c.replacement;
    EXPECT_EQ(it->next_many(many, 4), 0u);
    EXPECT_EQ(g1->random(), g2->random());
  }
  ListSampler l({4, 2, 9, 1, 1});
  auto lc = l.iter();
  std::vector<int64_t> got;
  EXPECT_EQ(lc->next_many(got, 2), 2u);
  EXPECT_EQ(lc->next_many(got, 10), 3u);
  EXPECT_EQ(lc->next_many(got, 1), 0u);
  EXPECT_EQ(got, (std::vector<int64_t>{4, 2, 9, 1, 1}));
}

}  // namespace
}  // namespace loader
