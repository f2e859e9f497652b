// `loader sampler ...` / `loader split`: the built tool against golden cases, bad
// arguments (exit status 2), and real PyTorch for seeds and sizes not in the golden files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using nlohmann::json;

struct Result {
  int status = -1;  ///< exit status, or -1 when the command did not exit normally
  std::string output;
};

/// Runs a shell command, returning its exit status and stdout.
Result run_shell(const std::string& command) {
  Result r;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) r.output.append(buffer, n);
  int status = pclose(pipe);
  if (status != -1 && WIFEXITED(status)) r.status = WEXITSTATUS(status);
  return r;
}

std::string tool() { return std::string(LOADER_BINARY_DIR) + "/loader"; }

/// `loader <args>` with stderr discarded; its stdout parsed as JSON.
json run_tool_json(const std::string& args) {
  Result r = run_shell(tool() + " " + args + " 2>/dev/null");
  EXPECT_EQ(r.status, 0) << "loader " << args;
  if (r.status != 0) return json();
  return json::parse(r.output);
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

json load_golden(const std::string& name) {
  return json::parse(loader::testing::read_file(loader::testing::golden_path(name)));
}

TEST(SamplerCli, PrintsPyTorchSequencesForGoldenCases) {
  int checked = 0;
  {
    const json golden = load_golden("random_sampler.json");
    const json& cases = golden.at("cases");
    for (size_t i : {size_t{3}, size_t{20}, size_t{57}, cases.size() - 1}) {
      const json& c = cases.at(i);
      std::string args = "sampler random --n " + std::to_string(c.at("n").get<int64_t>()) +
                         " --seed " + std::to_string(c.at("seed").get<uint64_t>()) + " --epochs 2";
      if (c.at("replacement").get<bool>()) args += " --replacement";
      if (!c.at("num_samples").is_null()) args += " --num-samples " + std::to_string(c.at("num_samples").get<int64_t>());
      EXPECT_EQ(run_tool_json(args), (json{{"epochs", {c.at("epoch0"), c.at("epoch1")}}})) << args;
      ++checked;
    }
  }
  {
    const json golden = load_golden("subset_random_sampler.json");
    const json& c = golden.at("cases").at(2);
    std::string args = "sampler subset --indices " + join(c.at("indices").get<std::vector<int64_t>>()) + " --seed " +
                       std::to_string(c.at("seed").get<uint64_t>()) + " --epochs 2";
    EXPECT_EQ(run_tool_json(args), (json{{"epochs", {c.at("epoch0"), c.at("epoch1")}}})) << args;
    ++checked;
  }
  {
    const json golden = load_golden("weighted_random_sampler.json");
    for (const json& c : golden.at("cases")) {
      if (c.at("weights").size() != 6 || c.at("num_samples").get<int64_t>() != 5 || c.at("seed").get<int>() != 42)
        continue;
      std::string weights;
      for (const auto& w : c.at("weights")) weights += (weights.empty() ? "" : ",") + w.dump();
      std::string args = "sampler weighted --weights " + weights + " --num-samples 5 --seed 42 --epochs 2";
      if (!c.at("replacement").get<bool>()) args += " --no-replacement";
      EXPECT_EQ(run_tool_json(args), (json{{"epochs", {c.at("epoch0"), c.at("epoch1")}}})) << args;
      ++checked;
    }
  }
  {
    const json golden = load_golden("distributed_sampler.json");
    for (const json& c : golden.at("cases")) {
      if (c.at("n") != 11 || c.at("num_replicas") != 3) continue;
      for (int rank = 0; rank < 3; ++rank) {
        std::string args = "sampler distributed --n 11 --num-replicas 3 --rank " + std::to_string(rank) +
                           " --seed " + c.at("seed").dump() + " --epoch " + c.at("epoch").dump();
        if (!c.at("shuffle").get<bool>()) args += " --no-shuffle";
        if (c.at("drop_last").get<bool>()) args += " --drop-last";
        EXPECT_EQ(run_tool_json(args), (json{{"epochs", {c.at("per_rank").at(rank)}}})) << args;
      }
      ++checked;
    }
  }
  {
    const json golden = load_golden("batch_sampler.json");
    for (const json& c : golden.at("over_random_sampler")) {
      std::string args = "sampler batch --n 10 --batch-size 3 --shuffle --seed " + c.at("seed").dump() + " --epochs 2";
      if (c.at("drop_last").get<bool>()) args += " --drop-last";
      EXPECT_EQ(run_tool_json(args), (json{{"epochs", {c.at("epoch0"), c.at("epoch1")}}})) << args;
      ++checked;
    }
    const json& c = golden.at("sequential").at(40);
    std::string args = "sampler batch --n " + c.at("n").dump() + " --batch-size " + c.at("batch_size").dump();
    if (c.at("drop_last").get<bool>()) args += " --drop-last";
    EXPECT_EQ(run_tool_json(args), (json{{"epochs", {c.at("batches")}}})) << args;
    ++checked;
  }
  {
    const json golden = load_golden("random_split.json");
    for (const json& c : golden.at("cases")) {
      std::string lengths;
      for (const auto& l : c.at("lengths")) lengths += (lengths.empty() ? "" : ",") + l.dump();
      std::string args = "split --n " + c.at("n").dump() + " --lengths " + lengths + " --seed " + c.at("seed").dump();
      EXPECT_EQ(run_tool_json(args), (json{{"splits", c.at("splits")}})) << args;
      ++checked;
    }
  }
  std::cout << "[ golden   ] sampler CLI: " << checked << " golden cases checked through the tool\n";
  RecordProperty("cli_golden_checked", checked);
  ASSERT_GT(checked, 0);
}

TEST(SamplerCli, SplitWarnsOnStderrForAnEmptySplit) {
  Result r = run_shell(tool() + " split --n 1 --lengths 0.5,0.5 --seed 0 2>&1 >/dev/null");
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.output, "UserWarning: Length of split at index 1 is 0. This might result in an empty dataset.\n");
}

TEST(SamplerCli, BadArgumentsExitWithStatus2AndAMessage) {
  const std::vector<std::string> bad = {
      "sampler random --n 10",                                     // missing --seed
      "sampler random --n ten --seed 1",                           // not an integer
      "sampler random --n 10 --seed 1 --bogus 1",                  // unknown option
      "sampler random --n 0 --seed 1",                             // num_samples=0
      "sampler random --n 10 --seed 1 --num-samples -3",           // num_samples < 0
      "sampler random --n 10 --seed 1 --epochs -1",                // epochs < 0
      "sampler subset --seed 1",                                   // missing --indices
      "sampler weighted --weights 1,2 --seed 1",                   // missing --num-samples
      "sampler weighted --weights 1,-2 --num-samples 2 --seed 1",  // negative weight
      "sampler weighted --weights 0,0 --num-samples 2 --seed 1",   // all zero
      "sampler weighted --weights 1,x --num-samples 2 --seed 1",   // not a number
      "sampler weighted --weights 1,2 --num-samples 3 --no-replacement --seed 1",  // k > n
      "sampler distributed --n 10 --num-replicas 3 --rank 3 --seed 0 --epoch 0",   // invalid rank
      "sampler distributed --n 10 --num-replicas 3 --rank 0 --seed 0",             // missing --epoch
      "sampler batch --n 10 --batch-size 0",                       // batch_size=0
      "sampler batch --n 10 --batch-size 2 --seed 4",              // --seed without --shuffle
      "sampler batch --n 10 --batch-size 2 --shuffle",             // --shuffle without --seed
      "split --n 4 --lengths 1,2 --seed 0",                        // sum != n
      "split --n 4 --lengths -0.5,1.5 --seed 0",                   // fraction out of range
      "split --n 4 --lengths 2.0,2.0 --seed 0",                    // float counts
      "sampler nonsense --n 3",                                    // unknown sub-command
  };
  for (const auto& args : bad) {
    Result r = run_shell(tool() + " " + args + " 2>&1");
    EXPECT_EQ(r.status, 2) << "loader " << args << "\n" << r.output;
    EXPECT_FALSE(r.output.empty()) << "loader " << args << " printed no message";
    EXPECT_EQ(r.output.find("{\"epochs\""), std::string::npos) << "loader " << args;
  }
}

TEST(SamplerCli, MatchesLivePyTorchForSeedsNotInTheGoldenFiles) {
  const std::string script = R"PY(
import json, torch
from torch.utils.data import (RandomSampler, SubsetRandomSampler, WeightedRandomSampler,
                              DistributedSampler, BatchSampler, random_split)
def gen(s): return torch.Generator().manual_seed(s)
def epochs(s, e): return {"epochs": [list(s) for _ in range(e)]}
cases = []
for seed, n in [(7, 37), (123456789, 1000), (2**40 + 3, 5), (2**64 - 5, 64)]:
    cases.append([f"sampler random --n {n} --seed {seed} --epochs 2", epochs(RandomSampler(range(n), generator=gen(seed)), 2)])
    cases.append([f"sampler random --n {n} --seed {seed} --replacement --num-samples 70 --epochs 2",
                  epochs(RandomSampler(range(n), True, 70, generator=gen(seed)), 2)])
    cases.append([f"sampler random --n {n} --seed {seed} --num-samples {2 * n + 3} --epochs 2",
                  epochs(RandomSampler(range(n), num_samples=2 * n + 3, generator=gen(seed)), 2)])
cases.append(["sampler subset --indices 9,4,17,2,30,11 --seed 99 --epochs 3",
              epochs(SubsetRandomSampler([9, 4, 17, 2, 30, 11], gen(99)), 3)])
w = [0.5, 2.0, 0.0, 1.25, 3.5, 0.75, 0.0, 1.0]
ws = ",".join(repr(x) for x in w)
cases.append([f"sampler weighted --weights {ws} --num-samples 12 --seed 31337 --epochs 2",
              epochs(WeightedRandomSampler(w, 12, True, gen(31337)), 2)])
cases.append([f"sampler weighted --weights {ws} --num-samples 8 --no-replacement --seed 31337 --epochs 2",
              epochs(WeightedRandomSampler(w, 8, False, gen(31337)), 2)])
for n, r, rank, shuffle, drop, seed, epoch in [(23, 3, 2, True, False, 5, 4), (23, 3, 0, True, True, 5, 4),
                                               (7, 4, 3, False, False, 0, 0), (3, 5, 4, True, False, 11, 9)]:
    s = DistributedSampler(list(range(n)), r, rank, shuffle, seed, drop)
    s.set_epoch(epoch)
    args = f"sampler distributed --n {n} --num-replicas {r} --rank {rank} --seed {seed} --epoch {epoch}"
    args += "" if shuffle else " --no-shuffle"
    args += " --drop-last" if drop else ""
    cases.append([args, {"epochs": [list(s)]}])
for drop in [False, True]:
    b = BatchSampler(RandomSampler(range(25), generator=gen(77)), 4, drop)
    cases.append([f"sampler batch --n 25 --batch-size 4 --shuffle --seed 77 --epochs 2" + (" --drop-last" if drop else ""),
                  epochs(b, 2)])
for n, lengths, seed in [(57, [0.2, 0.5, 0.3], 8), (57, [20, 37], 8), (1000, [0.001, 0.999], 2**33)]:
    sp = random_split(range(n), lengths, generator=gen(seed))
    cases.append([f"split --n {n} --lengths {','.join(repr(x) for x in lengths)} --seed {seed}",
                  {"splits": [list(s) for s in sp]}])
print(json.dumps(cases))
)PY";
  char path[] = "/tmp/loader_sampler_cli_test_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  {
    std::ofstream out(path);
    out << script;
  }
  close(fd);
  Result py = run_shell(std::string("/usr/bin/python3 ") + path + " 2>/dev/null");
  std::remove(path);
  if (py.status != 0) {
    Result probe = run_shell("/usr/bin/python3 -c 'import torch' 2>/dev/null");
    if (probe.status != 0) GTEST_SKIP() << "/usr/bin/python3 cannot import torch: no live cross-check";
    FAIL() << "the PyTorch reference script failed";
  }
  json cases = json::parse(py.output);
  int checked = 0;
  for (const auto& c : cases) {
    const std::string args = c.at(0);
    EXPECT_EQ(run_tool_json(args), c.at(1)) << "loader " << args;
    ++checked;
  }
  std::cout << "[ pytorch  ] sampler CLI: " << checked << " live PyTorch cases checked\n";
  RecordProperty("cli_live_pytorch_checked", checked);
  ASSERT_GT(checked, 0);
}

/// A file in /tmp holding `text`, removed when the object goes away.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char name[] = "/tmp/loader_sampler_cli_test_XXXXXX";
    int fd = mkstemp(name);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = name;
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(SamplerCli, EquibatchPrintsTheDocumentsBatchesForEveryGoldenCaseAndRank) {
  const json golden = load_golden("equibatch.json");
  int checked = 0;
  for (const json& c : golden.at("cases")) {
    TempFile labels(c.at("idx2labels").dump());
    std::string args = "sampler equibatch --labels " + labels.path() + " --batch-size " + c.at("batch_size").dump() +
                       " --balanced-coef " + c.at("balanced_coef").dump() + " --seed " + c.at("seed").dump() +
                       " --epochs " + c.at("epochs").dump();
    if (c.at("num_replicas") != 1 || checked % 2)  // the single-replica cases with and without the options
      args += " --num-replicas " + c.at("num_replicas").dump() + " --rank " + c.at("rank").dump();
    EXPECT_EQ(run_tool_json(args), (json{{"epochs", c.at("batches")}})) << args;
    ++checked;
  }
  std::cout << "[ golden   ] sampler CLI: " << checked << " equibatch.json cases checked through the tool\n";
  EXPECT_EQ(checked, 14);
}

TEST(SamplerCli, EquibatchTakesSeedsOfAnySizeAsPythonDoes) {
  TempFile labels("[[0], [1], [0, 1], 2, [2], [0]]");
  const std::string base = "sampler equibatch --labels " + labels.path() + " --batch-size 2 --balanced-coef 4";
  // random.seed(-n) is random.seed(n); beyond 2^64 the tool still seeds as Python does.
  EXPECT_EQ(run_tool_json(base + " --seed -12345"), run_tool_json(base + " --seed 12345"));
  const json huge = run_tool_json(base + " --seed 340282366920938463463374607431768211457 --epochs 2");
  ASSERT_EQ(huge.at("epochs").size(), 2u);
  EXPECT_EQ(huge.at("epochs").at(0).size(), 6u);
  EXPECT_NE(huge, run_tool_json(base + " --seed 1 --epochs 2"));
}

TEST(SamplerCli, EquibatchRejectsBadArgumentsWithStatus2) {
  TempFile labels("[[0], [1], [0, 1], [2]]");
  TempFile unlabelled("[[0], [], [1]]");
  TempFile not_a_list("{\"0\": [1]}");
  TempFile bad_label("[[0], [\"cat\"]]");
  TempFile not_json("[[0], [1]");
  const std::string l = " --labels " + labels.path();
  const std::vector<std::string> bad = {
      "sampler equibatch" + l + " --batch-size 0 --balanced-coef 4 --seed 0",                     // batch_size=0
      "sampler equibatch" + l + " --batch-size 2 --balanced-coef 0 --seed 0",                     // coef < 1
      "sampler equibatch" + l + " --batch-size 2 --balanced-coef 4 --seed 0 --num-replicas 2 --rank 2",  // rank
      "sampler equibatch" + l + " --batch-size 2 --balanced-coef 4 --seed 0 --num-replicas 2",   // no --rank
      "sampler equibatch" + l + " --batch-size 2 --balanced-coef 4",                              // no --seed
      "sampler equibatch" + l + " --batch-size 2 --balanced-coef 4 --seed 4x",                    // bad seed
      "sampler equibatch --labels /nonexistent.json --batch-size 2 --balanced-coef 4 --seed 0",  // no file
      "sampler equibatch --labels " + unlabelled.path() + " --batch-size 2 --balanced-coef 4 --seed 0",
      "sampler equibatch --labels " + not_a_list.path() + " --batch-size 2 --balanced-coef 4 --seed 0",
      "sampler equibatch --labels " + bad_label.path() + " --batch-size 2 --balanced-coef 4 --seed 0",
      "sampler equibatch --labels " + not_json.path() + " --batch-size 2 --balanced-coef 4 --seed 0",
  };
  for (const auto& args : bad) {
    Result r = run_shell(tool() + " " + args + " 2>&1");
    EXPECT_EQ(r.status, 2) << "loader " << args << "\n" << r.output;
    EXPECT_FALSE(r.output.empty()) << "loader " << args << " printed no message";
    EXPECT_EQ(r.output.find("{\"epochs\""), std::string::npos) << "loader " << args;
  }
  Result r = run_shell(tool() + " sampler equibatch --labels " + unlabelled.path() +
                       " --batch-size 2 --balanced-coef 4 --seed 0 2>&1");
  EXPECT_NE(r.output.find("index 1 has no labels"), std::string::npos) << r.output;
}

}  // namespace
