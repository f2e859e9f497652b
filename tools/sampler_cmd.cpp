// `loader sampler ...` and `loader split`: print the index sequences of the samplers and
// of random_split as JSON, to compare with PyTorch from a shell:
//
//   loader sampler random --n 10 --seed 0 --epochs 2     {"epochs":[[4,1,7,...],[...]]}
//   loader split --n 10 --lengths 0.3,0.7 --seed 1       {"splits":[[...],[...]]}
//   loader sampler equibatch --labels labels.json --batch-size 4 --balanced-coef 12 --seed 0
//                                                        {"epochs":[[[5,0,7,2],...]]}
//
// Every epoch draws from the same generator object, seeded once with --seed, as the
// Python loop `g = torch.Generator().manual_seed(S); for e in range(E): list(sampler)`.
// (`sampler equibatch` draws from Python's `random` instead: random.seed(S) once, then
// bless() and one pass per epoch.)  Bad arguments, including values the samplers reject,
// exit with status 2.
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.h"
#include "loader/equibatch_sampler.h"
#include "loader/error.h"
#include "loader/python_random.h"
#include "loader/random_split.h"
#include "loader/samplers.h"

namespace loader::tool {
namespace {

using nlohmann::json;

/// A seed as torch.Generator.manual_seed takes it: 0..2^64-1, or a negative int64
/// (two's complement).
uint64_t parse_seed(const std::string& text) {
  if (!text.empty() && text[0] == '-') return static_cast<uint64_t>(parse_int(text, "--seed"));
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || end == text.c_str() || *end != '\0')
    throw UsageError("--seed: expected an integer in [-2^63, 2^64), got '" + text + "'");
  return v;
}

std::shared_ptr<Generator> seeded_generator(Args& args) {
  return std::make_shared<Generator>(parse_seed(args.require("seed")));
}

int64_t epochs_option(Args& args) {
  int64_t epochs = args.get_int("epochs", 1);
  if (epochs < 0) throw UsageError("--epochs must be >= 0, got " + std::to_string(epochs));
  return epochs;
}

/// Runs `fn`; a rejection by the library (ValueError, TypeError, RuntimeError: what a
/// sampler says about its arguments) becomes a usage error.
template <class F>
auto rejecting_bad_values(F fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const ValueError& e) {
    throw UsageError(std::string("ValueError: ") + e.what());
  } catch (const TypeError& e) {
    throw UsageError(std::string("TypeError: ") + e.what());
  } catch (const RuntimeError& e) {
    throw UsageError(std::string("RuntimeError: ") + e.what());
  }
}

template <class T>
std::vector<T> one_pass(SamplerOf<T>& sampler) {
  std::vector<T> out;
  if (auto n = sampler.size()) out.reserve(static_cast<size_t>(*n));
  auto cursor = sampler.iter();
  while (auto v = cursor->next()) out.push_back(std::move(*v));
  return out;
}

template <class T>
int print_epochs(SamplerOf<T>& sampler, int64_t epochs) {
  json out = json::object();
  out["epochs"] = json::array();
  for (int64_t e = 0; e < epochs; ++e) out["epochs"].push_back(rejecting_bad_values([&] { return one_pass(sampler); }));
  std::cout << out.dump() << "\n";
  return 0;
}

int run_random(Args& args) {
  const int64_t n = args.require_int("n");
  auto generator = seeded_generator(args);
  const bool replacement = args.flag("replacement");
  std::optional<int64_t> num_samples;
  if (args.get("num-samples")) num_samples = args.require_int("num-samples");
  const int64_t epochs = epochs_option(args);
  args.finish();
  auto sampler = rejecting_bad_values([&] { return RandomSampler(n, replacement, num_samples, generator); });
  return print_epochs(sampler, epochs);
}

int run_subset(Args& args) {
  args.require("indices");
  std::vector<int64_t> indices = args.get_int_list("indices");
  auto generator = seeded_generator(args);
  const int64_t epochs = epochs_option(args);
  args.finish();
  SubsetRandomSampler sampler(std::move(indices), generator);
  return print_epochs(sampler, epochs);
}

int run_weighted(Args& args) {
  args.require("weights");
  std::vector<double> weights = args.get_double_list("weights");
  const int64_t num_samples = args.require_int("num-samples");
  auto generator = seeded_generator(args);
  const bool replacement = !args.flag("no-replacement");
  const int64_t epochs = epochs_option(args);
  args.finish();
  auto sampler = rejecting_bad_values(
      [&] { return WeightedRandomSampler(std::move(weights), num_samples, replacement, generator); });
  return print_epochs(sampler, epochs);
}

int run_distributed(Args& args) {
  const int64_t n = args.require_int("n");
  DistributedSamplerOptions options;
  options.num_replicas = args.require_int("num-replicas");
  options.rank = args.require_int("rank");
  options.seed = static_cast<int64_t>(parse_seed(args.require("seed")));
  options.shuffle = !args.flag("no-shuffle");
  options.drop_last = args.flag("drop-last");
  const int64_t epoch = args.require_int("epoch");
  args.finish();
  auto sampler = rejecting_bad_values([&] { return DistributedSampler(n, options); });
  sampler.set_epoch(epoch);
  return print_epochs(sampler, 1);
}

int run_batch(Args& args) {
  const int64_t n = args.require_int("n");
  const int64_t batch_size = args.require_int("batch-size");
  const bool drop_last = args.flag("drop-last");
  const bool shuffle = args.flag("shuffle");
  std::shared_ptr<Generator> generator;
  if (shuffle) {
    generator = seeded_generator(args);
  } else if (args.get("seed")) {
    throw UsageError("--seed only applies with --shuffle");
  }
  const int64_t epochs = epochs_option(args);
  args.finish();
  auto sampler = rejecting_bad_values([&] {
    std::shared_ptr<Sampler> inner;
    if (shuffle) {
      inner = std::make_shared<RandomSampler>(n, generator);
    } else {
      inner = std::make_shared<SequentialSampler>(n);
    }
    return BatchSampler(inner, batch_size, drop_last);
  });
  return print_epochs(sampler, epochs);
}

/// --labels FILE: a JSON list with, per dataset index, the list of its labels (a bare
/// integer is one label).
std::vector<std::vector<int64_t>> read_labels(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw UsageError("--labels: cannot open '" + path + "'");
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::exception& e) {
    throw UsageError("--labels: '" + path + "' is not valid JSON: " + e.what());
  }
  const std::string expected = "--labels: '" + path + "' must be a JSON list with, per dataset index, the list of its "
                               "integer labels, e.g. [[0], [1, 2], [0]]";
  if (!doc.is_array()) throw UsageError(expected + "; the top level is not a list");
  std::vector<std::vector<int64_t>> labels;
  labels.reserve(doc.size());
  for (size_t i = 0; i < doc.size(); ++i) {
    const json& item = doc[i];
    std::vector<int64_t> mine;
    if (item.is_number_integer()) {
      mine.push_back(item.get<int64_t>());
    } else if (item.is_array()) {
      for (const json& l : item) {
        if (!l.is_number_integer())
          throw UsageError(expected + "; index " + std::to_string(i) + " has the label " + l.dump());
        mine.push_back(l.get<int64_t>());
      }
    } else {
      throw UsageError(expected + "; index " + std::to_string(i) + " is " + item.dump());
    }
    labels.push_back(std::move(mine));
  }
  return labels;
}

int run_equibatch(Args& args) {
  const auto labels = read_labels(args.require("labels"));
  const int64_t batch_size = args.require_int("batch-size");
  EquiBatchSamplerOptions options;
  options.balanced_coef = args.require_int("balanced-coef");
  const bool has_replicas = args.get("num-replicas").has_value(), has_rank = args.get("rank").has_value();
  if (has_replicas != has_rank) throw UsageError("--num-replicas and --rank go together: give both or neither");
  if (has_replicas) {
    options.num_replicas = args.require_int("num-replicas");
    options.rank = args.require_int("rank");
  }
  // Python's random.seed takes any integer: no 64-bit limit here.
  const std::string seed = args.require("seed");
  options.generator = rejecting_bad_values([&] { return std::make_shared<PythonRandom>(PythonRandom::from_decimal(seed)); });
  const int64_t epochs = epochs_option(args);
  args.finish();
  auto sampler = rejecting_bad_values([&] { return EquiBatchSampler(labels, batch_size, options); });
  return print_epochs(sampler, epochs);
}

/// "3,7" are integer lengths; "0.3,0.7" (any part that is not an integer) fractions.
SplitLengths parse_lengths(const std::string& text) {
  std::vector<int64_t> ints;
  bool all_integers = true;
  size_t start = 0;
  std::vector<std::string> parts;
  while (true) {
    size_t comma = text.find(',', start);
    parts.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (text.empty()) parts.clear();
  for (const auto& p : parts) {
    try {
      ints.push_back(parse_int(p, "--lengths"));
    } catch (const UsageError&) {
      all_integers = false;
    }
  }
  if (all_integers) return SplitLengths(ints);
  std::vector<double> fractions;
  for (const auto& p : parts) fractions.push_back(parse_double(p, "--lengths"));
  return SplitLengths(fractions);
}

int run_split(Args& args) {
  const int64_t n = args.require_int("n");
  SplitLengths lengths = parse_lengths(args.require("lengths"));
  auto generator = seeded_generator(args);
  args.finish();
  auto splits = rejecting_bad_values([&] { return random_split(n, lengths, generator); });
  json out = json::object();
  out["splits"] = splits;
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace

LOADER_TOOL_COMMAND("sampler random",
                    "sampler random --n N --seed S [--replacement] [--num-samples K] [--epochs E]",
                    ({"replacement"}), run_random);
LOADER_TOOL_COMMAND("sampler subset", "sampler subset --indices i,j,k --seed S [--epochs E]", ({}), run_subset);
LOADER_TOOL_COMMAND("sampler weighted",
                    "sampler weighted --weights w1,w2,... --num-samples K --seed S [--no-replacement] [--epochs E]",
                    ({"no-replacement"}), run_weighted);
LOADER_TOOL_COMMAND("sampler distributed",
                    "sampler distributed --n N --num-replicas R --rank r --seed S [--no-shuffle] [--drop-last] "
                    "--epoch E",
                    ({"no-shuffle", "drop-last"}), run_distributed);
LOADER_TOOL_COMMAND("sampler batch",
                    "sampler batch --n N --batch-size B [--drop-last] [--shuffle --seed S] [--epochs E]",
                    ({"drop-last", "shuffle"}), run_batch);
LOADER_TOOL_COMMAND("sampler equibatch",
                    "sampler equibatch --labels FILE.json --batch-size B --balanced-coef C --seed S "
                    "[--num-replicas R --rank r] [--epochs E]   (FILE.json: per index, the list of its labels)",
                    ({}), run_equibatch);
LOADER_TOOL_COMMAND("split", "split --n N --lengths a,b,c (integers or fractions) --seed S", ({}), run_split);

}  // namespace loader::tool
