// random_split against PyTorch 1.13: every case in tests/golden/random_split.json.
#include "loader/random_split.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loader/error.h"
#include "loader/warnings.h"
#include "test_util.h"

namespace loader {
namespace {

using nlohmann::json;
using Splits = std::vector<std::vector<int64_t>>;

json load_golden() {
  std::string text = testing::read_file(testing::golden_path("random_split.json"));
  if (text.empty()) throw std::runtime_error("cannot read " + testing::golden_path("random_split.json"));
  return json::parse(text);
}

/// Python's lengths list: all ints stay integers, any float makes them fractions.
SplitLengths lengths_of(const json& lengths) {
  bool all_integers = std::all_of(lengths.begin(), lengths.end(), [](const json& v) { return v.is_number_integer(); });
  if (all_integers) return SplitLengths(lengths.get<std::vector<int64_t>>());
  return SplitLengths(lengths.get<std::vector<double>>());
}

TEST(RandomSplit, MatchesPyTorchForEveryGoldenCase) {
  json golden = load_golden();
  int checked = 0;
  for (const auto& c : golden.at("cases")) {
    ASSERT_TRUE(c.at("ok").get<bool>()) << "golden cases are all successful splits";
    WarningCapture warnings;
    auto g = std::make_shared<Generator>(c.at("seed").get<uint64_t>());
    Splits got = random_split(c.at("n").get<int64_t>(), lengths_of(c.at("lengths")), g);
    std::string ctx = c.dump().substr(0, 120);
    EXPECT_EQ(got, c.at("splits").get<Splits>()) << ctx;
    std::vector<int64_t> sizes;
    for (const auto& s : got) sizes.push_back(static_cast<int64_t>(s.size()));
    EXPECT_EQ(sizes, c.at("split_lengths").get<std::vector<int64_t>>()) << ctx;
    EXPECT_EQ(warnings.messages(), c.at("warnings").get<std::vector<std::string>>()) << ctx;
    for (const auto& w : warnings.warnings()) EXPECT_EQ(w.category, "UserWarning");
    ++checked;
  }
  std::cout << "[ golden   ] random_split.cases: " << checked << " cases checked, 0 skipped\n";
  RecordProperty("cases_checked", checked);
  ASSERT_GT(checked, 0);
  EXPECT_EQ(checked, static_cast<int>(golden.at("cases").size()));
}

TEST(RandomSplit, ErrorsMatchPyTorchMessages) {
  json golden = load_golden();
  int checked = 0;
  for (const auto& c : golden.at("errors")) {
    ASSERT_EQ(c.at("error_type"), "ValueError");
    std::string ctx = c.dump();
    try {
      random_split(c.at("n").get<int64_t>(), lengths_of(c.at("lengths")), std::make_shared<Generator>(0));
      ADD_FAILURE() << ctx << ": expected ValueError";
    } catch (const ValueError& e) {
      EXPECT_EQ(std::string(e.what()), c.at("error_message").get<std::string>()) << ctx;
    }
    ++checked;
  }
  std::cout << "[ golden   ] random_split.errors: " << checked << " cases checked, 0 skipped\n";
  RecordProperty("errors_checked", checked);
  ASSERT_GT(checked, 0);
}

TEST(RandomSplit, WithoutGeneratorUsesTheDefaultGeneratorDirectly) {
  json golden = load_golden();
  int checked = 0;
  for (const auto& c : golden.at("default_generator_cases")) {
    manual_seed(c.at("global_seed").get<uint64_t>());
    EXPECT_EQ(random_split(c.at("n").get<int64_t>(), lengths_of(c.at("lengths"))), c.at("splits").get<Splits>());
    ++checked;
  }
  std::cout << "[ golden   ] random_split.default_generator_cases: " << checked << " cases checked, 0 skipped\n";
  ASSERT_GT(checked, 0);
  // test_splits_generator: an explicit generator leaves the default one alone.
  manual_seed(3);
  Generator before(default_generator());
  random_split(10, {3, 7}, std::make_shared<Generator>(1));
  EXPECT_EQ(default_generator().random(), before.random());
}

TEST(RandomSplit, BracedListsPickIntegersOrFractions) {
  auto g1 = std::make_shared<Generator>(0);
  auto g2 = std::make_shared<Generator>(0);
  EXPECT_EQ(random_split(10, {3, 7}, g1), random_split(10, {0.3, 0.7}, g2));
  EXPECT_THROW(random_split(6, {2.0, 4.0}), TypeError) << "float lengths that sum to n are not counts";
}

TEST(RandomSplit, IntegerLengthsSummingToOneTakeTheFractionPath) {
  // Python quirk kept: random_split(range(1), [0, 1]) treats [0, 1] as fractions and warns.
  WarningCapture warnings;
  auto splits = random_split(1, {0, 1}, std::make_shared<Generator>(0));
  EXPECT_EQ(splits, (Splits{{}, {0}}));
  EXPECT_EQ(warnings.messages(),
            std::vector<std::string>{"Length of split at index 0 is 0. This might result in an empty dataset."});
  EXPECT_THROW(random_split(1, {2, -1}), ValueError);  // "Fraction at index 0 is not between 0 and 1"
}

TEST(RandomSplit, SplitsAreMutuallyExclusiveAndCoverTheData) {
  for (const SplitLengths& lengths : {SplitLengths{0.33, 0.67}, SplitLengths{0.25, 0.75}, SplitLengths{3, 7}}) {
    auto splits = random_split(10, lengths, std::make_shared<Generator>(5));
    std::vector<int64_t> all;
    for (const auto& s : splits) all.insert(all.end(), s.begin(), s.end());
    std::sort(all.begin(), all.end());
    std::vector<int64_t> expected(10);
    for (int64_t i = 0; i < 10; ++i) expected[static_cast<size_t>(i)] = i;
    EXPECT_EQ(all, expected);
  }
}

TEST(Warnings, DefaultPrinterShowsEachMessageOnce) {
  reset_warning_registry();
  ::testing::internal::CaptureStderr();
  warn("loader test warning A");
  warn("loader test warning A");
  warn("loader test warning B");
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "UserWarning: loader test warning A\nUserWarning: loader test warning B\n");
}

TEST(Warnings, CaptureRecordsEveryCallAndRestoresThePreviousHandler) {
  std::vector<std::string> outer;
  WarningHandler previous = set_warning_handler([&outer](const Warning& w) { outer.push_back(w.message); });
  {
    WarningCapture capture;
    warn("x");
    warn("x");
    warn_as("RuntimeWarning", "y");
    ASSERT_EQ(capture.warnings().size(), 3u);
    EXPECT_EQ(capture.warnings()[2].category, "RuntimeWarning");
  }
  warn("after");
  set_warning_handler(std::move(previous));
  EXPECT_EQ(outer, std::vector<std::string>{"after"});
}

}  // namespace
}  // namespace loader
