// The Fashion-MNIST demo trainer end to end: it trains from the real data with
// worker processes, writes a .pt state_dict, and real PyTorch (/usr/bin/python3,
// demos/check_checkpoint.py) loads that file strictly into
//   nn.Sequential(Flatten(), Linear(784,256), ReLU(), Linear(256,128), ReLU(), Linear(128,10))
// and measures the same test accuracy.  The trainer also resumes from its own files
// and from files torch.save wrote, and starts from PyTorch's initial weights.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

const std::string kTrainer = std::string(LOADER_BINARY_DIR) + "/demos/fashion_mnist_train";
const std::string kCheckScript = std::string(LOADER_SOURCE_DIR) + "/demos/check_checkpoint.py";
const std::string kPython = "/usr/bin/python3";
const std::string kData = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

struct ProcessResult {
  int status = -1;     // exit status (-1: did not exit normally)
  std::string output;  // stdout and stderr
  std::string last_line() const {
    size_t end = output.find_last_not_of('\n');
    if (end == std::string::npos) return "";
    size_t begin = output.rfind('\n', end);
    return output.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1) + 1);
  }
  nlohmann::json json() const { return nlohmann::json::parse(last_line(), nullptr, false); }
};

// Runs a shell command under `timeout` (a deadline: a hung child fails the test).
ProcessResult run(const std::string& cmd, int deadline_s = 150) {
  ProcessResult r;
  std::string full = "timeout -k 5 " + std::to_string(deadline_s) + " " + cmd + " 2>&1";
  FILE* p = ::popen(full.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  int st = ::pclose(p);
  if (WIFEXITED(st)) r.status = WEXITSTATUS(st);
  return r;
}

class FashionMnistTrainer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!exists(kTrainer)) GTEST_SKIP() << kTrainer << " was not built (LOADER_BUILD_DEMOS=OFF?)";
    if (!exists(kData)) GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)";
    static const bool have_torch = exists(kPython) && run(kPython + " -c 'import torch'").status == 0;
    if (!have_torch)
      GTEST_SKIP() << "PyTorch is not available to " << kPython << " (apt-get install python3-torch)";
    char tmpl[] = "/tmp/demo_checkpoint_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) run("rm -rf '" + dir_ + "'");
  }

  ProcessResult train(const std::string& args) { return run(kTrainer + " --no-progress " + args); }
  ProcessResult check(const std::string& pt, const std::string& extra = "") {
    return run(kPython + " " + kCheckScript + " '" + pt + "' --json " + extra);
  }

  std::string dir_;
};

TEST_F(FashionMnistTrainer, CheckpointLoadsStrictlyInPyTorchWithTheSameAccuracy) {
  const std::string pt = dir_ + "/fashion_mlp.pt";
  ProcessResult t = train("--epochs 2 --workers 2 --seed 0 --out " + pt);
  ASSERT_EQ(t.status, 0) << t.output;
  auto res = t.json();
  ASSERT_FALSE(res.is_discarded()) << "last line is not JSON: " << t.last_line();
  for (const char* key : {"test_accuracy", "epochs", "seconds", "samples_per_s"})
    EXPECT_TRUE(res.contains(key)) << key << " missing from " << t.last_line();
  EXPECT_EQ(res["epochs"].get<int>(), 2);
  EXPECT_EQ(res["workers"].get<int>(), 2);
  const double cpp_acc = res["test_accuracy"].get<double>();
  EXPECT_GE(cpp_acc, 0.84) << t.output;
  ASSERT_TRUE(exists(pt)) << t.output;

  ProcessResult c = check(pt);
  ASSERT_EQ(c.status, 0) << c.output;  // torch.load(weights_only=True) + load_state_dict(strict=True)
  auto py = c.json();
  ASSERT_FALSE(py.is_discarded()) << c.output;
  EXPECT_TRUE(py["strict_load"].get<bool>());
  EXPECT_TRUE(py["keys_in_order"].get<bool>()) << c.output;
  EXPECT_EQ(py["keys"], nlohmann::json({"1.weight", "1.bias", "3.weight", "3.bias", "5.weight", "5.bias"}));
  EXPECT_EQ(py["shapes"]["1.weight"], nlohmann::json({256, 784}));
  EXPECT_EQ(py["shapes"]["5.bias"], nlohmann::json({10}));
  EXPECT_EQ(py["total"].get<int>(), 10000);
  EXPECT_NEAR(py["test_accuracy"].get<double>(), cpp_acc, 0.002) << c.output;

  // Resuming from the file with no further training gives back the same model.
  ProcessResult r = train("--epochs 0 --workers 0 --resume " + pt);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_DOUBLE_EQ(r.json()["test_accuracy"].get<double>(), cpp_acc) << r.output;
}

TEST_F(FashionMnistTrainer, WorkerCountDoesNotChangeTheResult) {
  // The shuffle has its own generator and batches are identical with or without
  // worker processes, so one epoch trains the same weights either way.
  ProcessResult a = train("--epochs 1 --workers 0 --seed 3");
  const std::string log = dir_ + "/train.jsonl";
  ProcessResult b = train("--epochs 1 --workers 2 --seed 3 --log " + log);
  ASSERT_EQ(a.status, 0) << a.output;
  ASSERT_EQ(b.status, 0) << b.output;
  EXPECT_EQ(a.json()["train_loss"], b.json()["train_loss"]) << a.last_line() << "\n" << b.last_line();
  EXPECT_EQ(a.json()["test_accuracy"], b.json()["test_accuracy"]);

  // --log: one JSON line per epoch, which scripts/plot_training.py draws.
  std::ifstream in(log);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    auto j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    EXPECT_EQ(j["epoch"].get<int>(), lines);
    for (const char* key : {"loss", "train_accuracy", "test_accuracy", "samples_per_s", "data_wait_s", "epoch_s"})
      EXPECT_TRUE(j.contains(key)) << key << " missing from " << line;
    EXPECT_EQ(j["test_accuracy"], b.json()["test_accuracy"]);
    EXPECT_GT(j["train_accuracy"].get<double>(), 0.5) << line;
  }
  EXPECT_EQ(lines, 1);
  if (run(kPython + " -c 'import matplotlib'").status == 0) {
    const std::string png = dir_ + "/train.png";
    ProcessResult p = run(kPython + " " + std::string(LOADER_SOURCE_DIR) + "/scripts/plot_training.py " + log +
                          " --out " + png);
    ASSERT_EQ(p.status, 0) << p.output;
    std::ifstream f(png, std::ios::binary);
    char sig[8] = {};
    f.read(sig, 8);
    EXPECT_EQ(std::string(sig + 1, 3), "PNG") << p.output;
  }
}

TEST_F(FashionMnistTrainer, InitialWeightsAreThoseOfPyTorchForTheSameSeed) {
  const std::string pt = dir_ + "/init.pt";
  ProcessResult t = train("--epochs 0 --workers 0 --seed 5 --out " + pt);
  ASSERT_EQ(t.status, 0) << t.output;
  ProcessResult c = check(pt, "--compare-init 5");
  ASSERT_EQ(c.status, 0) << c.output;
  EXPECT_TRUE(c.json()["init_equal"].get<bool>()) << c.output;
  EXPECT_NEAR(c.json()["test_accuracy"].get<double>(), t.json()["test_accuracy"].get<double>(), 0.002);
  // A different seed gives different weights (the comparison can fail).
  ProcessResult other = check(pt, "--compare-init 6");
  EXPECT_EQ(other.status, 1) << other.output;
  EXPECT_FALSE(other.json()["init_equal"].get<bool>());
}

TEST_F(FashionMnistTrainer, ResumesFromAStateDictSavedByPyTorch) {
  const std::string pt = dir_ + "/from_torch.pt";
  const std::string script = dir_ + "/save.py";
  std::ofstream(script) << "import sys, torch\nfrom torch import nn\n"
                           "torch.manual_seed(11)\n"
                           "m = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),\n"
                           "                  nn.ReLU(), nn.Linear(128, 10))\n"
                           "with torch.no_grad():\n"
                           "    for p in m.parameters(): p.mul_(3.0)\n"
                           "torch.save(m.state_dict(), sys.argv[1])\n";
  ProcessResult s = run(kPython + " " + script + " " + pt);
  ASSERT_EQ(s.status, 0) << s.output;
  ProcessResult c = check(pt);
  ASSERT_EQ(c.status, 0) << c.output;
  ProcessResult t = train("--epochs 0 --workers 0 --resume " + pt);
  ASSERT_EQ(t.status, 0) << t.output;
  EXPECT_NE(t.output.find("resumed from"), std::string::npos) << t.output;
  EXPECT_NEAR(t.json()["test_accuracy"].get<double>(), c.json()["test_accuracy"].get<double>(), 0.002)
      << t.output << c.output;
}

TEST_F(FashionMnistTrainer, ResumeRejectsACheckpointOfAnotherShape) {
  const std::string pt = dir_ + "/small.pt";
  ProcessResult t = train("--epochs 0 --workers 0 --hidden 64 --out " + pt);
  ASSERT_EQ(t.status, 0) << t.output;
  ProcessResult r = train("--epochs 0 --workers 0 --resume " + pt);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("size mismatch for 1.weight"), std::string::npos) << r.output;
}

}  // namespace
