// The fault suite: real worker processes killed, crashed, frozen and slowed; a
// too-small shared-memory budget; the parent interrupted and killed.  After each,
// no shared-memory segment and no child process may remain.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "loader/dataloader.h"
#include "loader/error.h"
#include "loader/runtime/shm.h"
#include "loader/samplers.h"
#include "loader/worker_info.h"
#include "sanitizers.h"
#include "test_util.h"

extern char** environ;

namespace loader {
namespace {

/// Sample i: float32[64] filled with i, and label i.  Misbehaves on request: at
/// index `at`, action "segv" raises SIGSEGV, "exit" exits with status 3, "sleep"
/// sleeps `sleep_ms`; every sample sleeps `delay_ms` (to keep tasks in flight).
class FaultyDataset : public Dataset {
 public:
  FaultyDataset(int64_t n, int64_t at, std::string action, int64_t delay_ms, int64_t sleep_ms)
      : n_(n), at_(at), action_(std::move(action)), delay_ms_(delay_ms), sleep_ms_(sleep_ms) {}
  Value get(int64_t i) override {
    if (i < 0 || i >= n_)
      throw IndexError("FaultyDataset index " + std::to_string(i) + " out of range [0, " + std::to_string(n_) + ")");
    if (delay_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    if (i == at_ && get_worker_info()) {
      if (action_ == "segv") std::raise(SIGSEGV);
      if (action_ == "exit") _exit(3);
      if (action_ == "sleep") std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
      if (action_ == "shape") return Value::tuple({Value(Tensor::zeros({65}, DType::Float32)), Value(i)});
    }
    std::vector<float> v(64, static_cast<float>(i));
    return Value::tuple({Value(Tensor::from_vector(v)), Value(i)});
  }
  int64_t size() const override { return n_; }

 private:
  int64_t n_, at_;
  std::string action_;
  int64_t delay_ms_, sleep_ms_;
};
LOADER_REGISTER_DATASET("test_faulty", [](const Value& p) {
  return std::make_shared<FaultyDataset>(p.at("n").to_int(), p.get("at", Value(int64_t{-1})).to_int(),
                                         p.get("action", Value("")).to_string(), p.get("delay_ms", Value(0)).to_int(),
                                         p.get("sleep_ms", Value(0)).to_int());
});

LOADER_REGISTER_WORKER_INIT_FN("test_init_throws", [](int worker_id) {
  if (worker_id == 1) throw ValueError("init failed in worker " + std::to_string(worker_id));
});

std::shared_ptr<Dataset> faulty(int64_t n, int64_t at = -1, const std::string& action = "", int64_t delay_ms = 0,
                                int64_t sleep_ms = 0) {
  return make_dataset({"test_faulty", Value::dict({{"n", n}, {"at", at}, {"action", action},
                                                   {"delay_ms", delay_ms}, {"sleep_ms", sleep_ms}})});
}

std::set<std::string> segments_with_prefix(const std::string& prefix) {
  std::set<std::string> out;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) out.insert(e->d_name);
    closedir(d);
  }
  return out;
}

/// Live (non-zombie) processes whose parent is `parent`; zombies are counted separately.
std::pair<int, int> children_of(int parent) {
  int live = 0, zombies = 0;
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream in("/proc/" + name + "/stat");
      std::string stat;
      std::getline(in, stat);
      auto rp = stat.rfind(')');
      if (rp == std::string::npos) continue;
      std::istringstream rest(stat.substr(rp + 2));
      std::string state;
      int ppid = 0;
      rest >> state >> ppid;
      if (ppid != parent) continue;
      (state == "Z" ? zombies : live)++;
    }
    closedir(d);
  }
  return {live, zombies};
}

/// Processes whose command line starts with "loader-worker-" and whose
/// LOADER parent was `parent` (they may have been re-parented).
int workers_spawned_by(int parent) {
  int n = 0;
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      std::string name = e->d_name;
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream cmd("/proc/" + name + "/cmdline");
      std::string argv0;
      std::getline(cmd, argv0, '\0');
      if (argv0.rfind("loader-worker-", 0) != 0) continue;
      std::ifstream st("/proc/" + name + "/stat");
      std::string stat;
      std::getline(st, stat);
      auto rp = stat.rfind(')');
      if (rp != std::string::npos && stat[rp + 2] == 'Z') continue;
      // Workers keep no environment marker after start; count those whose parent is
      // `parent` or that were orphaned (re-parented) since.
      std::istringstream rest(stat.substr(rp + 2));
      std::string state;
      int ppid = 0;
      rest >> state >> ppid;
      if (ppid == parent || ppid == 1 || parent == 0) ++n;
    }
    closedir(d);
  }
  return n;
}

void expect_nothing_left() {
  EXPECT_TRUE(segments_with_prefix(runtime::shm_name_prefix()).empty());
  auto [live, zombies] = children_of(getpid());
  EXPECT_EQ(live, 0) << "worker processes still running";
  EXPECT_EQ(zombies, 0) << "zombie worker processes";
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

std::vector<Value> all_batches(DataLoader& dl) {
  std::vector<Value> out;
  for (Value& b : dl) out.push_back(b);
  return out;
}

TEST(WorkerDeath, KilledWorkerIsReportedWithIdPidSignalAndTasks) {
  DataLoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  {
    DataLoader dl(faulty(400, -1, "", 5), o);
    auto it = dl.iter();
    ASSERT_TRUE(it.next());
    auto pids = it.worker_pids();
    ASSERT_EQ(pids.size(), 2u);
    ASSERT_EQ(kill(pids[1], SIGKILL), 0);
    auto t0 = std::chrono::steady_clock::now();
    std::string msg = error_of([&] {
      while (it.next()) {
      }
    });
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "[ info ] worker death surfaced after " << seconds << " s: " << msg << "\n";
    EXPECT_NE(msg.find("DataLoader worker 1 (pid " + std::to_string(pids[1]) + ")"), std::string::npos) << msg;
    EXPECT_NE(msg.find("SIGKILL"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unfinished task"), std::string::npos) << msg;
  }
  expect_nothing_left();
}

TEST(WorkerDeath, SegfaultAndExitStatusAreNamed) {
  DataLoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  {
    DataLoader dl(faulty(40, 9, "segv"), o);
    std::string msg = error_of([&] { all_batches(dl); });
#if defined(__SANITIZE_ADDRESS__)
    // AddressSanitizer catches the SIGSEGV in the worker, reports it and exits(1).
    EXPECT_NE(msg.find("exited with status 1"), std::string::npos) << msg;
#else
    if (testing::kThreadSanitizer) {
      // So does ThreadSanitizer ("ThreadSanitizer:DEADLYSIGNAL"), with its exitcode:
      // 66 unless TSAN_OPTIONS says otherwise.
      EXPECT_NE(msg.find("exited with status 66"), std::string::npos) << msg;
    } else {
      EXPECT_NE(msg.find("SIGSEGV"), std::string::npos) << msg;
    }
#endif
    EXPECT_NE(msg.find("task 2: [8, 9, 10, 11]"), std::string::npos) << msg;
  }
  {
    DataLoader dl(faulty(40, 5, "exit"), o);
    std::string msg = error_of([&] { all_batches(dl); });
    EXPECT_NE(msg.find("exited with status 3"), std::string::npos) << msg;
  }
  expect_nothing_left();
}

TEST(WorkerDeath, RestartedWorkerGivesTheSameBatchesAsARunWithoutTheFault) {
  DataLoaderOptions o;
  o.batch_size = 5;
  o.num_workers = 2;
  o.shuffle = true;
  o.generator = std::make_shared<Generator>(3);
  DataLoader clean(faulty(200, -1, "", 1), o);
  auto expected = all_batches(clean);
  ASSERT_EQ(expected.size(), 40u);

  o.generator = std::make_shared<Generator>(3);
  o.max_worker_restarts = 2;
  DataLoader dl(faulty(200, -1, "", 1), o);
  std::vector<Value> got;
  {
    auto it = dl.iter();
    while (auto b = it.next()) {
      got.push_back(*b);
      if (got.size() == 3) {
        auto pids = it.worker_pids();
        ASSERT_EQ(kill(pids[0], SIGKILL), 0);
      }
    }
  }
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i][0].to_tensor().bitwise_equal(expected[i][0].to_tensor())) << "batch " << i;
    EXPECT_TRUE(got[i][1].to_tensor().equal(expected[i][1].to_tensor())) << "batch " << i;
  }
  expect_nothing_left();
}

TEST(Hangs, FrozenWorkerIsDetectedWithoutATimeout) {
  DataLoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  {
    DataLoader dl(faulty(400, -1, "", 5), o);
    auto it = dl.iter();
    ASSERT_TRUE(it.next());
    auto pids = it.worker_pids();
    ASSERT_EQ(kill(pids[0], SIGSTOP), 0);
    std::string msg = error_of([&] {
      while (it.next()) {
      }
    });
    EXPECT_NE(msg.find("DataLoader worker 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("frozen"), std::string::npos) << msg;
  }
  expect_nothing_left();
}

TEST(Hangs, TimeoutNamesTheSecondsAndTheWorker) {
  DataLoaderOptions o;
  o.batch_size = 2;
  o.num_workers = 2;
  // 1 s (3 s under TSan, where starting a worker alone can take a second on a busy
  // machine); the stuck sample sleeps 4 times that.
  o.timeout = testing::kSlowdown;
  {
    DataLoader dl(faulty(20, 3, "sleep", 0, 4000 * testing::kSlowdown), o);
    std::string msg = error_of([&] { all_batches(dl); });
    EXPECT_NE(msg.find("DataLoader timed out after " + std::to_string(testing::kSlowdown) + " seconds"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("from DataLoader worker 1 (pid "), std::string::npos) << msg;
  }
  expect_nothing_left();
}

TEST(SharedMemory, TooSmallABudgetFailsBeforeTheFirstBatchWithTheNumbers) {
  DataLoaderOptions o;
  o.batch_size = 64;
  o.num_workers = 2;
  o.shm_limit_bytes = 100000;  // a batch alone is 64*64*4 + 64*8 = 16896 bytes; the pool more
  {
    DataLoader dl(faulty(1000), o);
    auto it = dl.iter();
    std::string msg = error_of([&] { it.next(); });
    EXPECT_NE(msg.find("shared memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("needs"), std::string::npos) << msg;
    EXPECT_NE(msg.find("shm_limit_bytes is 100000 bytes"), std::string::npos) << msg;
  }
  expect_nothing_left();
}

TEST(SharedMemory, SegmentsOfDeadOwnersAreSwept) {
  // A pid that cannot be alive: beyond pid_max.
  std::string name = "/dev/shm/loader_2147483646_0";
  { std::ofstream(name) << "x"; }
  ASSERT_TRUE(segments_with_prefix("loader_2147483646_").size() == 1);
  EXPECT_GE(runtime::sweep_dead_segments(), 1);
  EXPECT_TRUE(segments_with_prefix("loader_2147483646_").empty());
}

TEST(BadInput, IndexOutOfRangeRaisesIndexErrorForThatBatchAndTheRestArrive) {
  DataLoaderOptions o;
  o.num_workers = 2;
  o.batch_size = std::nullopt;
  o.batch_sampler = std::make_shared<ListBatchSampler>(std::vector<std::vector<int64_t>>{{0, 1}, {2, 99}, {4, 5}});
  o.batch_size = 1;
  {
    DataLoader dl(faulty(10), o);
    auto it = dl.iter();
    EXPECT_TRUE(it.next());
    std::string msg;
    try {
      it.next();
    } catch (const IndexError& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find("Caught IndexError in DataLoader worker process 1."), std::string::npos) << msg;
    EXPECT_NE(msg.find("index 99 out of range"), std::string::npos) << msg;
    auto last = it.next();
    ASSERT_TRUE(last);
    EXPECT_EQ((*last)[1].to_tensor().to_int64_vector(), (std::vector<int64_t>{4, 5}));
    EXPECT_FALSE(it.next());
  }
  expect_nothing_left();
}

TEST(BadInput, CollateOfMismatchedShapesRaisesForThatBatch) {
  DataLoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  {
    DataLoader dl(faulty(12, 6, "shape"), o);
    auto it = dl.iter();
    EXPECT_TRUE(it.next());
    std::string msg = error_of([&] { it.next(); });
    EXPECT_NE(msg.find("stack expects each tensor to be equal size"), std::string::npos) << msg;
    EXPECT_TRUE(it.next());
    EXPECT_FALSE(it.next());
  }
  expect_nothing_left();
}

TEST(BadInput, WorkerInitFnExceptionClosesTheLoaderCleanly) {
  DataLoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  o.worker_init_fn_name = "test_init_throws";
  {
    DataLoader dl(faulty(40), o);
    std::string msg = error_of([&] { all_batches(dl); });
    EXPECT_NE(msg.find("DataLoader worker 1 failed to start"), std::string::npos) << msg;
    EXPECT_NE(msg.find("init failed in worker 1"), std::string::npos) << msg;
  }
  expect_nothing_left();
}

TEST(BadInput, UnknownDatasetTypeAndBadParametersAreClearErrors) {
  std::string msg = error_of([] { make_dataset({"no_such_dataset", Value::dict({})}); });
  EXPECT_NE(msg.find("unknown map-style dataset type 'no_such_dataset'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test_faulty"), std::string::npos) << "lists the registered types: " << msg;
  msg = error_of([] { make_dataset({"test_faulty", Value::dict({{"n", "ten"}})}); });
  EXPECT_NE(msg.find("dataset 'test_faulty' rejected its parameters"), std::string::npos) << msg;
}

TEST(NothingLeftBehind, ExceptionInTheApplicationLoopAndDestroyingMidEpoch) {
  DataLoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  EXPECT_THROW(
      {
        DataLoader dl(faulty(400), o);
        for (Value& b : dl) {
          (void)b;
          throw std::runtime_error("application error");
        }
      },
      std::runtime_error);
  expect_nothing_left();
  {
    auto dl = std::make_unique<DataLoader>(faulty(400), o);
    auto it = dl->iter();
    ASSERT_TRUE(it.next());
    Value kept = *it.next();  // a batch the application keeps past the loader
    dl.reset();
    it = DataLoader::Iterator(std::move(it));
    EXPECT_EQ(kept[1].to_tensor().to_int64_vector(), (std::vector<int64_t>{4, 5, 6, 7}));
  }
  expect_nothing_left();
}

/// Starts `loader bench` (workers > 0, long enough to be interrupted) in a child,
/// waits until its workers run, sends `sig` to it, and checks that its workers
/// and segments are gone.
void interrupt_parent_with(int sig) {
  std::string exe = std::string(LOADER_BINARY_DIR) + "/loader";
  if (access(exe.c_str(), X_OK) != 0) GTEST_SKIP() << "the loader tool is not built at " << exe;
  std::vector<std::string> args = {exe, "bench", "--workload", "W1", "--workers", "2", "--epochs", "1000", "--n", "200000"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20 * testing::kSlowdown);
  while (children_of(pid).first < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GE(children_of(pid).first, 2) << "the bench process never started its workers";
  ASSERT_EQ(kill(pid, sig), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  // Its workers notice within a second (socket EOF, parent-death signal).
  deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5 * testing::kSlowdown);
  while (children_of(pid).first + workers_spawned_by(pid) > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(children_of(pid).first, 0) << "workers outlived their parent";
  EXPECT_TRUE(segments_with_prefix("loader_" + std::to_string(pid) + "_").empty());
}

TEST(NothingLeftBehind, ParentInterruptedBySigint) { interrupt_parent_with(SIGINT); }
TEST(NothingLeftBehind, ParentTerminatedBySigterm) { interrupt_parent_with(SIGTERM); }
TEST(NothingLeftBehind, ParentKilledBySigkill) { interrupt_parent_with(SIGKILL); }

}  // namespace
}  // namespace loader
