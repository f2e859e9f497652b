// loader::PythonRandom against CPython's random.Random (tests/golden/python_random.json,
// recorded by tests/golden/make_python_random.py), and its seeding rules.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loader/error.h"
#include "loader/python_random.h"
#include "test_util.h"

namespace loader {
namespace {

using nlohmann::json;

json load_golden() {
  return json::parse(loader::testing::read_file(loader::testing::golden_path("python_random.json")));
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(i);
  return v;
}

/// Applies one recorded operation; returns its result in the golden file's form.
json apply(PythonRandom& rng, const json& op) {
  const std::string name = op.at(0);
  if (name == "getrandbits") return rng.getrandbits(op.at(1).get<int>());
  if (name == "random") {
    const double x = rng.random();
    char hex[64];
    std::snprintf(hex, sizeof hex, "%a", x);
    return json{{"hex", hex}, {"value", x}};
  }
  if (name == "randbelow") return rng.randbelow(op.at(1).get<uint64_t>());
  if (name == "randint") return rng.randint(op.at(1).get<int64_t>(), op.at(2).get<int64_t>());
  if (name == "shuffle") {
    auto v = iota(op.at(1).get<int64_t>());
    rng.shuffle(v);
    return v;
  }
  if (name == "choice") return rng.choice(iota(op.at(1).get<int64_t>()));
  if (name == "sample") return rng.sample(op.at(1).get<int64_t>(), op.at(2).get<int64_t>());
  if (name == "skip") {
    for (int64_t i = 0; i < op.at(1).get<int64_t>(); ++i) rng.getrandbits(32);
    return nullptr;
  }
  ADD_FAILURE() << "unknown operation " << op;
  return nullptr;
}

/// C's %a and Python's float.hex spell some values differently (0x1.8p-1 vs 0x1.8000000000000p-1);
/// compare the numbers they denote.
bool same_hex(const std::string& a, const std::string& b) { return std::strtod(a.c_str(), nullptr) == std::strtod(b.c_str(), nullptr); }

TEST(PythonRandom, EveryRecordedCPythonOperationMatches) {
  const json golden = load_golden();
  int ops = 0, seeds = 0;
  for (const json& c : golden.at("cases")) {
    const std::string seed = c.at("seed");
    PythonRandom rng = PythonRandom::from_decimal(seed);
    size_t k = 0;
    for (const json& step : c.at("ops")) {
      const json got = apply(rng, step.at("op"));
      const json& want = step.at("result");
      const std::string where = "seed " + seed + ", operation " + std::to_string(k++) + " " + step.at("op").dump();
      if (want.is_object()) {  // random(): exact bits
        EXPECT_TRUE(same_hex(got.at("hex"), want.at("hex"))) << where << ": " << got << " vs " << want;
        EXPECT_EQ(got.at("value").get<double>(), want.at("value").get<double>()) << where;
      } else {
        ASSERT_EQ(got, want) << where;
      }
      ++ops;
    }
    ++seeds;
  }
  std::cout << "[ golden   ] python_random.json: " << ops << " operations over " << seeds << " seeds\n";
  EXPECT_EQ(seeds, 14);
  EXPECT_GT(ops, 14 * 60);
}

TEST(PythonRandom, Uint64SeedsAgreeWithTheirDecimalSpelling) {
  const json golden = load_golden();
  int checked = 0;
  for (const json& c : golden.at("cases")) {
    const std::string seed = c.at("seed");
    if (seed[0] == '-' || seed.size() > 20) continue;
    const unsigned long long value = std::stoull(seed);
    if (std::to_string(value) != seed) continue;  // beyond 2^64 - 1
    PythonRandom a(value), b = PythonRandom::from_decimal(seed);
    for (int i = 0; i < 700; ++i) ASSERT_EQ(a.next_uint32(), b.next_uint32()) << "seed " << seed << ", draw " << i;
    ++checked;
  }
  EXPECT_GE(checked, 11);  // 0, 1, 42, 2^31+5, 2^32-1, 2^32, 2^32+1, 123456789, 2^53+7, 2^63, 2^64-1
}

TEST(PythonRandom, SeedsAsPythonIntegersNotAsBitPatterns) {
  auto first = [](PythonRandom r) { return r.getrandbits(64); };
  // Python seeds with |n|, and the integer's value, not its width, decides the key.
  EXPECT_EQ(first(PythonRandom::from_decimal("-42")), first(PythonRandom(42)));
  EXPECT_EQ(first(PythonRandom::from_decimal("+42")), first(PythonRandom(42)));
  EXPECT_EQ(first(PythonRandom::from_decimal("000042")), first(PythonRandom(42)));
  PythonRandom words(0);
  words.seed_words({42, 0, 0});
  EXPECT_EQ(first(words), first(PythonRandom(42)));
  words.seed_words({});
  EXPECT_EQ(first(words), first(PythonRandom(0)));
  // 2^32 is the key [0, 1], not [0]: it must differ from seed 0 (a 32-bit truncation would not).
  // Values from CPython 3.11: random.Random(s).getrandbits(64).
  EXPECT_EQ(first(PythonRandom(42)), 2053695854357871005ULL);
  EXPECT_EQ(first(PythonRandom(uint64_t{1} << 32)), 6480552028864852439ULL);
  EXPECT_EQ(first(PythonRandom(0)), 7106521602475165645ULL);
}

TEST(PythonRandom, ReseedingRestartsTheStreamAndCopiesContinueIndependently) {
  PythonRandom a(7);
  std::vector<uint32_t> head;
  for (int i = 0; i < 5; ++i) head.push_back(a.next_uint32());
  PythonRandom copy = a;
  const uint64_t next_a = a.getrandbits(64);
  EXPECT_EQ(copy.getrandbits(64), next_a) << "a copy continues from the same point";
  a.seed(7);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(a.next_uint32(), head[static_cast<size_t>(i)]) << "draw " << i << " after re-seeding";
}

TEST(PythonRandom, RejectsWhatPythonRejects) {
  PythonRandom r(1);
  EXPECT_THROW(r.getrandbits(-1), ValueError);
  EXPECT_THROW(r.getrandbits(65), ValueError);
  EXPECT_THROW(r.randbelow(0), ValueError);
  try {
    r.randint(5, 3);
    ADD_FAILURE() << "randint(5, 3) did not throw";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "empty range for randrange() (5, 4, -1)");  // Python 3.11's words
  }
  try {
    r.choice(std::vector<int>{});
    ADD_FAILURE() << "choice([]) did not throw";
  } catch (const IndexError& e) {
    EXPECT_STREQ(e.what(), "Cannot choose from an empty sequence");
  }
  EXPECT_THROW(r.sample(3, 4), ValueError);
  EXPECT_THROW(r.sample(3, -1), ValueError);
  EXPECT_THROW(PythonRandom::from_decimal("12a"), ValueError);
  EXPECT_THROW(PythonRandom::from_decimal("-"), ValueError);
  EXPECT_THROW(PythonRandom::from_decimal(""), ValueError);
}

TEST(PythonRandom, RandbelowIsUniformOverItsRange) {
  PythonRandom r(2024);
  std::vector<int> counts(5, 0);
  for (int i = 0; i < 50000; ++i) ++counts[static_cast<size_t>(r.randbelow(5))];
  for (int c : counts) EXPECT_NEAR(c, 10000, 400);  // > 4 sigma
  for (int i = 0; i < 1000; ++i) EXPECT_LT(r.randbelow(uint64_t{1} << 63 | 1), (uint64_t{1} << 63 | 1));
  EXPECT_EQ(r.randint(INT64_MAX, INT64_MAX), INT64_MAX);
}

}  // namespace
}  // namespace loader
