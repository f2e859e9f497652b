// The libtorch demo trainer end to end (demos/fashion_mnist_libtorch.cpp): torch::nn
// modules and a torch::optim optimizer fed by the loader with 2 worker processes reach
// at least 0.88 test accuracy on Fashion-MNIST, the batches reach libtorch without a
// copy, and real PyTorch (/usr/bin/python3, demos/check_libtorch_checkpoint.py) loads
// the checkpoint strictly into the equivalent torch.nn model with the same accuracy.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

namespace {

#ifdef LOADER_TORCH_DEMO
const std::string kTrainer = LOADER_TORCH_DEMO;
#else
const std::string kTrainer;
#endif
const std::string kCheckScript = std::string(LOADER_SOURCE_DIR) + "/demos/check_libtorch_checkpoint.py";
const std::string kPython = "/usr/bin/python3";
const std::string kData = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";

bool exists(const std::string& p) {
  struct stat st {};
  return !p.empty() && ::stat(p.c_str(), &st) == 0;
}

struct ProcessResult {
  int status = -1;     // exit status (-1: did not exit normally)
  std::string output;  // stdout and stderr
  std::string last_line() const {
    size_t end = output.find_last_not_of('\n');
    if (end == std::string::npos) return "";
    size_t begin = output.rfind('\n', end);
    begin = begin == std::string::npos ? 0 : begin + 1;
    return output.substr(begin, end - begin + 1);
  }
  nlohmann::json json() const { return nlohmann::json::parse(last_line(), nullptr, false); }
};

// Runs a shell command under `timeout` (a deadline: a hung child fails the test).
ProcessResult run(const std::string& cmd, int deadline_s) {
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

TEST(LibtorchDemo, TrainsTo088WithWorkersAndPyTorchLoadsTheCheckpointWithTheSameAccuracy) {
  if (!exists(kTrainer)) GTEST_SKIP() << "demos/fashion_mnist_libtorch was not built (LOADER_BUILD_DEMOS=OFF?)";
  if (!exists(kData)) GTEST_SKIP() << "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)";
  if (!exists(kPython) || run(kPython + " -c 'import torch'", 60).status != 0)
    GTEST_SKIP() << "PyTorch is not available to " << kPython << " (apt-get install python3-torch)";
  char tmpl[] = "/tmp/libtorch_demo_test_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, pt = dir + "/fashion_libtorch.pt";

  ProcessResult t = run(kTrainer + " --epochs 10 --workers 2 --seed 0 --out " + pt, 280);
  ASSERT_EQ(t.status, 0) << t.output;
  auto res = t.json();
  ASSERT_FALSE(res.is_discarded()) << "last line is not JSON: " << t.last_line();
  EXPECT_EQ(res["epochs"].get<int>(), 10);
  EXPECT_EQ(res["workers"].get<int>(), 2);
  EXPECT_TRUE(res["zero_copy"].get<bool>()) << "the first batch did not reach libtorch as a view of its slab";
  const double cpp_acc = res["test_accuracy"].get<double>();
  EXPECT_GE(cpp_acc, 0.88) << t.output;
  for (int e = 1; e <= 10; ++e)
    EXPECT_NE(t.output.find("epoch " + std::to_string(e) + "/10 "), std::string::npos) << "no line for epoch " << e;
  ASSERT_TRUE(exists(pt)) << t.output;

  char expect[32];
  std::snprintf(expect, sizeof expect, "%.4f", cpp_acc);
  ProcessResult c = run(kPython + " " + kCheckScript + " '" + pt + "' --json --expect " + expect, 120);
  ASSERT_EQ(c.status, 0) << c.output;  // torch.load(weights_only=True) + load_state_dict(strict=True) + same accuracy
  auto py = c.json();
  ASSERT_FALSE(py.is_discarded()) << c.output;
  EXPECT_TRUE(py["strict_load"].get<bool>());
  EXPECT_TRUE(py["matches_expected"].get<bool>()) << c.output;
  EXPECT_EQ(py["keys"], nlohmann::json({"1.weight", "1.bias", "3.weight", "3.bias", "5.weight", "5.bias"}));
  EXPECT_EQ(py["dtypes"], nlohmann::json({"torch.float32"}));
  EXPECT_EQ(py["total"].get<int>(), 10000);
  EXPECT_NEAR(py["test_accuracy"].get<double>(), cpp_acc, 0.0005) << c.output;
  run("rm -rf '" + dir + "'", 30);
}

}  // namespace
