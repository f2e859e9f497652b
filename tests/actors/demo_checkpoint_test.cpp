// The Fashion-MNIST demo trainer end to end: it trains from the real data with
// worker processes, writes a .pt state_dict, and real PyTorch (/usr/bin/python3,
// demos/check_checkpoint.py) loads that file strictly into
//   nn.Sequential(Flatten(), Linear(784,256), ReLU(), Linear(256,128), ReLU(), Linear(128,10))
// and measures the same test accuracy.  The trainer also resumes from its own files
// and from files torch.save wrote, and starts from PyTorch's initial weights.  Its
// training checkpoints (--checkpoint) survive SIGKILL at any step: the resumed run
// writes the bytes of an uninterrupted one.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

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

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The trainer started in the background (no shell in between: `pid` is the trainer's,
// whose worker processes die with it), stdout and stderr to files.
struct Background {
  pid_t pid = -1;
  std::string out_path, err_path;

  Background(const std::vector<std::string>& args, const std::string& out, const std::string& err)
      : out_path(out), err_path(err) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    if (::posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~Background() {
    if (pid > 0) {  // a test that failed half-way leaves no trainer behind
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  bool running() {
    int st = 0;
    if (pid <= 0) return false;
    const pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == 0) return true;
    status = r == pid ? st : -1;
    pid = -1;
    return false;
  }
  /// Waits for the end (killing it at the deadline); the wait status.
  int wait(std::chrono::seconds deadline) {
    const auto end = std::chrono::steady_clock::now() + deadline;
    while (running() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      pid = -1;
    }
    return status;
  }
  std::string output() const { return read_file(out_path) + read_file(err_path); }
  int status = -1;  // the wait status once it ended
};

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

// SIGKILL at a random step, then the same command plus --resume: the weights written
// are those of a run that was never interrupted, byte for byte, with and without
// workers.  Everything the rest of the run depends on must be in the checkpoint (Adam's
// moments and step count, the schedule's step, the shuffle and default generators, the
// place in the epoch); leaving any of it out changes the bytes.
TEST_F(FashionMnistTrainer, KilledAtARandomStepResumesToTheSameWeights) {
  // 3 epochs of 50 batches of the documented model (seconds); a checkpoint every 5 steps
  // lands mid-epoch and on epoch ends.
  const std::vector<std::string> common = {"--no-progress", "--epochs",     "3",  "--train-samples", "3200",
                                           "--batch-size",  "64",           "--seed", "7"};
  // The kill moments are random but reproducible: LOADER_TEST_KILL_SEED picks others.
  const char* seed_env = std::getenv("LOADER_TEST_KILL_SEED");
  const unsigned seed = seed_env ? static_cast<unsigned>(std::strtoul(seed_env, nullptr, 10)) : 31u;
  std::mt19937 rng(seed);
  for (int workers : {0, 2}) {
    SCOPED_TRACE("--workers " + std::to_string(workers) + ", LOADER_TEST_KILL_SEED=" + std::to_string(seed));
    const std::string base = dir_ + "/w" + std::to_string(workers);
    ASSERT_EQ(::mkdir(base.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((base + "/ref").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((base + "/run").c_str(), 0755), 0);
    auto command = [&](const std::string& out, std::vector<std::string> extra) {
      std::vector<std::string> args = {kTrainer};
      args.insert(args.end(), common.begin(), common.end());
      for (const std::string& a : {std::string("--workers"), std::to_string(workers), std::string("--out"), out})
        args.push_back(a);
      args.insert(args.end(), extra.begin(), extra.end());
      return args;
    };

    // The uninterrupted run (no checkpoints at all).
    const std::string ref_out = base + "/ref/weights.pt";
    const auto t0 = std::chrono::steady_clock::now();
    Background ref(command(ref_out, {}), base + "/ref.stdout", base + "/ref.stderr");
    ASSERT_GT(ref.pid, 0);
    const int ref_status = ref.wait(std::chrono::seconds(120));
    const double ref_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(WIFEXITED(ref_status) && WEXITSTATUS(ref_status) == 0) << ref.output();
    const std::string reference = read_file(ref_out);
    ASSERT_GT(reference.size(), 10000u) << ref.output();
    auto ref_json = nlohmann::json::parse(ProcessResult{0, ref.output()}.last_line(), nullptr, false);
    ASSERT_FALSE(ref_json.is_discarded()) << ref.output();
    const double train_s = ref_json["train_seconds"].get<double>();

    // Killed some time after its first checkpoint, before its end.  A kill that comes too
    // late (the run had finished) is tried again with a shorter delay.
    const std::string out = base + "/run/weights.pt", ck = base + "/run/ck.pt";
    const std::vector<std::string> with_ck = {"--checkpoint", ck, "--checkpoint-every", "5"};
    bool killed = false;
    double max_delay_s = 0.7 * train_s;
    for (int attempt = 0; attempt < 3 && !killed; ++attempt, max_delay_s /= 3) {
      ::unlink(ck.c_str());
      ::unlink(out.c_str());
      const double delay_s = std::uniform_real_distribution<double>(0, max_delay_s)(rng);
      Background run(command(out, with_ck), base + "/killed.stdout", base + "/killed.stderr");
      ASSERT_GT(run.pid, 0);
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60) +
                            std::chrono::duration_cast<std::chrono::seconds>(std::chrono::duration<double>(ref_s));
      struct stat st {};
      while (::stat(ck.c_str(), &st) != 0 && run.running() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      ASSERT_EQ(::stat(ck.c_str(), &st), 0) << "no checkpoint " << ck << " appeared:\n" << run.output();
      std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
      if (run.running()) {
        ::kill(run.pid, SIGKILL);
        const int status = run.wait(std::chrono::seconds(30));
        killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
      } else {
        ASSERT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.output();
      }
      std::printf("[          ] --workers %d: attempt %d, killed %.3f s after the first checkpoint: %s\n", workers,
                  attempt + 1, delay_s, killed ? "killed" : "it had finished");
    }
    ASSERT_TRUE(killed) << "the trainer finished before every kill (the delays come from the uninterrupted run's "
                        << train_s << " s of training)";
    ::unlink(out.c_str());  // whatever the killed run wrote does not count

    // The same command plus --resume.
    std::vector<std::string> resume_args = with_ck;
    resume_args.push_back("--resume");
    resume_args.push_back(ck);
    Background resumed(command(out, resume_args), base + "/resumed.stdout", base + "/resumed.stderr");
    ASSERT_GT(resumed.pid, 0);
    const int status = resumed.wait(std::chrono::seconds(120));
    const std::string output = resumed.output();
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
    ASSERT_NE(output.find("resumed from " + ck + ": epoch "), std::string::npos) << output;
    const std::string resumed_line = output.substr(output.find("resumed from"));
    std::printf("[          ] --workers %d: %s\n", workers, resumed_line.substr(0, resumed_line.find('\n')).c_str());
    const std::string weights = read_file(out);
    EXPECT_EQ(weights.size(), reference.size()) << output;
    EXPECT_TRUE(weights == reference) << "the resumed run's --out differs from the uninterrupted run's:\n" << output;
    // The last epoch's figures come from sums the checkpoint carries across the kill.
    auto json = nlohmann::json::parse(ProcessResult{0, output}.last_line(), nullptr, false);
    ASSERT_FALSE(json.is_discarded()) << output;
    EXPECT_EQ(json["train_loss"], ref_json["train_loss"]) << output;
    EXPECT_EQ(json["test_accuracy"], ref_json["test_accuracy"]) << output;
  }
}

// A training checkpoint only continues the run it came from: another batch size would
// give neither run's weights, so --resume refuses it, naming the option and both values.
TEST_F(FashionMnistTrainer, ResumeRefusesACheckpointOfAnotherBatchSize) {
  const std::string ck = dir_ + "/ck.pt";
  const std::string small = "--epochs 1 --workers 0 --train-samples 640 --hidden 16 --seed 2 --checkpoint " + ck;
  ProcessResult t = train(small + " --batch-size 64 --checkpoint-every 4");
  ASSERT_EQ(t.status, 0) << t.output;
  const std::string saved = read_file(ck);
  ASSERT_FALSE(saved.empty()) << t.output;

  const std::string out = dir_ + "/refused.pt";
  std::vector<std::string> args = {kTrainer, "--no-progress", "--batch-size", "32", "--resume", ck, "--out", out};
  std::istringstream words(small);
  for (std::string w; words >> w;) args.push_back(w);
  Background r(args, dir_ + "/refused.stdout", dir_ + "/refused.stderr");
  ASSERT_GT(r.pid, 0);
  const int status = r.wait(std::chrono::seconds(120));
  const std::string stderr_text = read_file(r.err_path);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << r.output();
  EXPECT_NE(stderr_text.find("--batch-size 64"), std::string::npos) << stderr_text;
  EXPECT_NE(stderr_text.find("--batch-size 32"), std::string::npos) << stderr_text;
  EXPECT_FALSE(exists(out)) << "a refused checkpoint trained anyway";
  EXPECT_TRUE(read_file(ck) == saved) << "the refused run overwrote the checkpoint";

  // With the checkpoint's own options it resumes (the refusal was about --batch-size).
  ProcessResult ok = train(small + " --batch-size 64 --resume " + ck);
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_NE(ok.output.find("resumed from " + ck + ": epoch 1, step 8 of 10"), std::string::npos) << ok.output;
}

}  // namespace
