// `loader sampler ...` and `loader split`: print the index sequences of the samplers and
// of random_split as JSON, to compare with PyTorch from a shell:
//
//   loader sampler random --n 10 --seed 0 --epochs 2     {"epochs":[[4,1,7,...],[...]]}
//   loader sampler index-shuffle --n 10 --seed 0         IndexShuffleSampler (loader's own order)
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
#include <optional>
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

std::shared_ptr<Generator> seeded_generator(const std::string& seed) {
  return std::make_shared<Generator>(parse_seed(seed));
}

void check_epochs(int64_t epochs) {
  if (epochs < 0) throw UsageError("--epochs must be >= 0, got " + std::to_string(epochs));
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

struct RandomOptions {
  int64_t n = 0;
  std::string seed;
  bool replacement = false;
  std::optional<int64_t> num_samples;
  int64_t epochs = 1;
};

int run_random(const RandomOptions& o) {
  check_epochs(o.epochs);
  auto generator = seeded_generator(o.seed);
  auto sampler = rejecting_bad_values([&] { return RandomSampler(o.n, o.replacement, o.num_samples, generator); });
  return print_epochs(sampler, o.epochs);
}

struct IndexShuffleOptions {
  int64_t n = 0;
  std::string seed;
  int64_t epochs = 1;
};

int run_index_shuffle(const IndexShuffleOptions& o) {
  check_epochs(o.epochs);
  auto generator = seeded_generator(o.seed);
  auto sampler = rejecting_bad_values([&] { return IndexShuffleSampler(o.n, generator); });
  return print_epochs(sampler, o.epochs);
}

struct SubsetOptions {
  std::string indices, seed;
  int64_t epochs = 1;
};

int run_subset(const SubsetOptions& o) {
  std::vector<int64_t> indices = parse_int_list(o.indices, "--indices");
  auto generator = seeded_generator(o.seed);
  check_epochs(o.epochs);
  SubsetRandomSampler sampler(std::move(indices), generator);
  return print_epochs(sampler, o.epochs);
}

struct WeightedOptions {
  std::string weights, seed;
  int64_t num_samples = 0;
  bool no_replacement = false;
  int64_t epochs = 1;
};

int run_weighted(const WeightedOptions& o) {
  std::vector<double> weights = parse_double_list(o.weights, "--weights");
  auto generator = seeded_generator(o.seed);
  check_epochs(o.epochs);
  auto sampler = rejecting_bad_values(
      [&] { return WeightedRandomSampler(std::move(weights), o.num_samples, !o.no_replacement, generator); });
  return print_epochs(sampler, o.epochs);
}

struct DistributedOptions {
  int64_t n = 0, num_replicas = 0, rank = 0, epoch = 0;
  std::string seed;
  bool no_shuffle = false, drop_last = false;
};

int run_distributed(const DistributedOptions& o) {
  DistributedSamplerOptions options;
  options.num_replicas = o.num_replicas;
  options.rank = o.rank;
  options.seed = static_cast<int64_t>(parse_seed(o.seed));
  options.shuffle = !o.no_shuffle;
  options.drop_last = o.drop_last;
  auto sampler = rejecting_bad_values([&] { return DistributedSampler(o.n, options); });
  sampler.set_epoch(o.epoch);
  return print_epochs(sampler, 1);
}

struct BatchOptions {
  int64_t n = 0, batch_size = 0;
  bool drop_last = false, shuffle = false;
  std::string seed;
  int64_t epochs = 1;
};

int run_batch(const BatchOptions& o) {
  std::shared_ptr<Generator> generator;
  if (o.shuffle) generator = seeded_generator(o.seed);  // --shuffle and --seed need each other
  check_epochs(o.epochs);
  auto sampler = rejecting_bad_values([&] {
    std::shared_ptr<Sampler> inner;
    if (o.shuffle) {
      inner = std::make_shared<RandomSampler>(o.n, generator);
    } else {
      inner = std::make_shared<SequentialSampler>(o.n);
    }
    return BatchSampler(inner, o.batch_size, o.drop_last);
  });
  return print_epochs(sampler, o.epochs);
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

struct EquibatchOptions {
  std::string labels, seed;
  int64_t batch_size = 0, balanced_coef = 0;
  std::optional<int64_t> num_replicas, rank;  // both or neither
  int64_t epochs = 1;
};

int run_equibatch(const EquibatchOptions& o) {
  const auto labels = read_labels(o.labels);
  EquiBatchSamplerOptions options;
  options.balanced_coef = o.balanced_coef;
  if (o.num_replicas) {  // --rank comes with it
    options.num_replicas = *o.num_replicas;
    options.rank = *o.rank;
  }
  // Python's random.seed takes any integer: no 64-bit limit here.
  options.generator = rejecting_bad_values([&] { return std::make_shared<PythonRandom>(PythonRandom::from_decimal(o.seed)); });
  check_epochs(o.epochs);
  auto sampler = rejecting_bad_values([&] { return EquiBatchSampler(labels, o.batch_size, options); });
  return print_epochs(sampler, o.epochs);
}

/// "3,7" are integer lengths; "0.3,0.7" (any part that is not an integer) fractions.
SplitLengths parse_lengths(const std::string& text) {
  try {
    return SplitLengths(parse_int_list(text, "--lengths"));
  } catch (const UsageError&) {
    return SplitLengths(parse_double_list(text, "--lengths"));
  }
}

struct SplitOptions {
  int64_t n = 0;
  std::string lengths, seed;
};

int run_split(const SplitOptions& o) {
  SplitLengths lengths = parse_lengths(o.lengths);
  auto generator = seeded_generator(o.seed);
  auto splits = rejecting_bad_values([&] { return random_split(o.n, lengths, generator); });
  json out = json::object();
  out["splits"] = splits;
  std::cout << out.dump() << "\n";
  return 0;
}

CLI::Option* add_seed(CLI::App* cmd, std::string& seed, bool required = true) {
  auto* opt = cmd->add_option("--seed", seed, "the generator's seed (torch.Generator().manual_seed(S))");
  if (required) opt->required();
  return opt;
}

void add_epochs(CLI::App* cmd, int64_t& epochs) {
  cmd->add_option("--epochs", epochs, "passes over the sampler, from the same generator (default 1)")->check(kInt64);
}

}  // namespace

void add_sampler_commands(CLI::App& app) {
  CLI::App* sampler = app.add_subcommand("sampler", "Print a sampler's index sequences as JSON, as PyTorch draws them");
  require_subcommand(sampler);

  {
    auto* cmd = sampler->add_subcommand("random", "RandomSampler(range(N), replacement, num_samples, generator)");
    auto o = std::make_shared<RandomOptions>();
    cmd->add_option("--n", o->n, "dataset length")->check(kInt64)->required();
    add_seed(cmd, o->seed);
    cmd->add_flag("--replacement", o->replacement, "draw with replacement");
    cmd->add_option("--num-samples", o->num_samples, "samples per epoch (default N)")->check(kInt64);
    add_epochs(cmd, o->epochs);
    on_run(cmd, [o] { return run_random(*o); });
  }
  {
    auto* cmd = sampler->add_subcommand(
        "index-shuffle", "IndexShuffleSampler(range(N), generator): a keyed bijection, O(1) per index (not PyTorch's)");
    auto o = std::make_shared<IndexShuffleOptions>();
    cmd->add_option("--n", o->n, "dataset length")->check(kInt64)->required();
    add_seed(cmd, o->seed);
    add_epochs(cmd, o->epochs);
    on_run(cmd, [o] { return run_index_shuffle(*o); });
  }
  {
    auto* cmd = sampler->add_subcommand("subset", "SubsetRandomSampler(indices, generator)");
    auto o = std::make_shared<SubsetOptions>();
    cmd->add_option("--indices", o->indices, "the indices, comma-separated: i,j,k")->required();
    add_seed(cmd, o->seed);
    add_epochs(cmd, o->epochs);
    on_run(cmd, [o] { return run_subset(*o); });
  }
  {
    auto* cmd = sampler->add_subcommand("weighted", "WeightedRandomSampler(weights, num_samples, replacement, generator)");
    auto o = std::make_shared<WeightedOptions>();
    cmd->add_option("--weights", o->weights, "the weights, comma-separated: w1,w2,...")->required();
    cmd->add_option("--num-samples", o->num_samples, "samples per epoch")->check(kInt64)->required();
    add_seed(cmd, o->seed);
    cmd->add_flag("--no-replacement", o->no_replacement, "draw without replacement");
    add_epochs(cmd, o->epochs);
    on_run(cmd, [o] { return run_weighted(*o); });
  }
  {
    auto* cmd = sampler->add_subcommand("distributed", "DistributedSampler: the indices of one rank in one epoch");
    auto o = std::make_shared<DistributedOptions>();
    cmd->add_option("--n", o->n, "dataset length")->check(kInt64)->required();
    cmd->add_option("--num-replicas", o->num_replicas, "number of ranks")->check(kInt64)->required();
    cmd->add_option("--rank", o->rank, "this rank")->check(kInt64)->required();
    cmd->add_option("--seed", o->seed, "the sampler's seed")->required();
    cmd->add_flag("--no-shuffle", o->no_shuffle, "shuffle=False");
    cmd->add_flag("--drop-last", o->drop_last, "drop_last=True");
    cmd->add_option("--epoch", o->epoch, "set_epoch(E)")->check(kInt64)->required();
    on_run(cmd, [o] { return run_distributed(*o); });
  }
  {
    auto* cmd = sampler->add_subcommand(
        "batch", "BatchSampler over SequentialSampler (or RandomSampler with --shuffle --seed S)");
    auto o = std::make_shared<BatchOptions>();
    cmd->add_option("--n", o->n, "dataset length")->check(kInt64)->required();
    cmd->add_option("--batch-size", o->batch_size, "batch size")->check(kInt64)->required();
    cmd->add_flag("--drop-last", o->drop_last, "drop_last=True");
    auto* shuffle = cmd->add_flag("--shuffle", o->shuffle, "batches of a RandomSampler (needs --seed)");
    auto* seed = add_seed(cmd, o->seed, false);
    shuffle->needs(seed);
    seed->needs(shuffle);
    add_epochs(cmd, o->epochs);
    on_run(cmd, [o] { return run_batch(*o); });
  }
  {
    auto* cmd = sampler->add_subcommand("equibatch", "EquiBatchSampler: label-balanced batches (Python's random)");
    auto o = std::make_shared<EquibatchOptions>();
    cmd->add_option("--labels", o->labels, "FILE.json: per index, the list of its labels")->required();
    cmd->add_option("--batch-size", o->batch_size, "batch size")->check(kInt64)->required();
    cmd->add_option("--balanced-coef", o->balanced_coef, "balanced_coef")->check(kInt64)->required();
    cmd->add_option("--seed", o->seed, "random.seed(S): any integer")->required();
    auto* replicas = cmd->add_option("--num-replicas", o->num_replicas, "number of ranks (with --rank)")->check(kInt64);
    auto* rank = cmd->add_option("--rank", o->rank, "this rank (with --num-replicas)")->check(kInt64);
    replicas->check(kInt64)->needs(rank);
    rank->check(kInt64)->needs(replicas);
    add_epochs(cmd, o->epochs);
    on_run(cmd, [o] { return run_equibatch(*o); });
  }
  {
    auto* cmd = app.add_subcommand("split", "random_split(range(N), lengths, generator): the index lists as JSON");
    auto o = std::make_shared<SplitOptions>();
    cmd->add_option("--n", o->n, "dataset length")->check(kInt64)->required();
    cmd->add_option("--lengths", o->lengths, "a,b,c: integers, or fractions summing to 1")->required();
    add_seed(cmd, o->seed);
    on_run(cmd, [o] { return run_split(*o); });
  }
}

}  // namespace loader::tool
