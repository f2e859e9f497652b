// DataLoader(pin_memory=true): the pin-memory actor page-locks the workers' slabs
// once, batches report is_pinned() truthfully, the loader says once why it could
// not CUDA-pin, and pin_memory_status() agrees with all of it.  The checks hold
// whichever backend this machine gives (cuda with a GPU; here no driver, so mlock
// as root with CAP_IPC_LOCK, or nothing without it): each outcome is checked
// against the others and against the kernel's count of locked memory (VmLck).
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "loader/dataloader.h"
#include "loader/error.h"
#include "loader/pinned.h"
#include "loader/warnings.h"

namespace loader {
namespace {

constexpr int64_t kElems = 4096;  // float32 per sample: 16 KiB

/// Sample i: (float32[kElems] all equal to i, int64 i).
class RampDataset : public Dataset {
 public:
  explicit RampDataset(int64_t n) : n_(n) {}
  Value get(int64_t i) override {
    if (i < 0 || i >= n_) throw IndexError("index " + std::to_string(i) + " out of range for RampDataset");
    Tensor t = Tensor::empty({kElems}, DType::Float32);
    float* p = t.data<float>();
    for (int64_t k = 0; k < kElems; ++k) p[k] = static_cast<float>(i);
    return Value::tuple({Value(t), Value(i)});
  }
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};
LOADER_REGISTER_DATASET("pin_test_ramp", [](const Value& p) { return std::make_shared<RampDataset>(p.at("n").to_int()); });

std::shared_ptr<Dataset> ramp(int64_t n) { return make_dataset({"pin_test_ramp", Value::dict({{"n", n}})}); }

const std::string kWarning = "pin_memory=true but batches are not CUDA-pinned: ";

std::vector<std::string> pin_warnings(const WarningCapture& capture) {
  std::vector<std::string> out;
  for (const auto& m : capture.messages())
    if (m.rfind(kWarning, 0) == 0) out.push_back(m);
  return out;
}

std::string cuda_reason() {
  std::string why;
  cuda_pinning_available(&why);
  return why;
}

int64_t locked_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmLck:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return -1;
}

/// The warning list and the status tell the same story.
void expect_consistent(const PinStatus& s, const std::vector<std::string>& warnings) {
  EXPECT_EQ(s.pinned, s.backend == PinBackend::Cuda);
  if (s.pinned) {
    EXPECT_TRUE(cuda_pinning_available());
    EXPECT_TRUE(warnings.empty());
    EXPECT_EQ(s.reason, "");
    return;
  }
  ASSERT_EQ(warnings.size(), 1u) << "the loader must say once that batches are not CUDA-pinned";
  EXPECT_EQ(warnings[0], kWarning + s.reason) << "the warning and pin_memory_status() disagree";
  EXPECT_NE(s.reason.find(cuda_reason()), std::string::npos) << "the reason must quote the CUDA runtime: " << s.reason;
  if (s.backend == PinBackend::Mlock) {
    EXPECT_NE(s.reason.find("page-locked with mlock instead"), std::string::npos);
  }
}

class PinMemoryWorkers : public ::testing::TestWithParam<WorkerMode> {};

TEST_P(PinMemoryWorkers, BatchesArriveAndTellTheTruthAboutPinning) {
  const int64_t n = 50, b = 8;
  DataLoaderOptions o;
  o.batch_size = b;
  o.num_workers = 2;
  o.pin_memory = true;
  o.worker_mode = GetParam();
  WarningCapture capture;
  const int64_t locked_before = locked_bytes();
  {
  DataLoader dl(ramp(n), o);
  EXPECT_TRUE(dl.pin_memory_status().requested);
  EXPECT_EQ(dl.pin_memory_status().regions, 0);
  for (int epoch = 0; epoch < 2; ++epoch) {  // two pools: non-persistent workers
    auto it = dl.iter();
    int64_t next_label = 0;
    while (auto batch = it.next()) {
      const PinStatus s = dl.pin_memory_status();
      ASSERT_GE(s.regions, 1) << "a batch arrived from a slab the pin-memory actor never saw";
      const Tensor& x = (*batch)[0].to_tensor();
      const Tensor& y = (*batch)[1].to_tensor();
      EXPECT_EQ(x.is_pinned(), s.pinned);
      EXPECT_EQ(y.is_pinned(), s.pinned);
      const int64_t locked_now = locked_bytes();
      if (s.backend == PinBackend::Mlock) {
        EXPECT_GE(locked_now - locked_before, static_cast<int64_t>(x.nbytes()))
            << "the status says mlock, but the kernel counts no locked slab";
      } else if (s.backend == PinBackend::None) {
        EXPECT_EQ(locked_now, locked_before);
      }
      for (int64_t r = 0; r < y.size(0); ++r, ++next_label) {
        ASSERT_EQ(y.at<int64_t>({r}), next_label);
        ASSERT_EQ(x.at<float>({r, kElems - 1}), static_cast<float>(next_label));
      }
    }
    EXPECT_EQ(next_label, n);
  }
  const PinStatus s = dl.pin_memory_status();
  std::cout << "  pin_memory_status: backend=" << s.backend_name() << " pinned=" << s.pinned
            << " regions=" << s.regions << " reason=" << s.reason << "\n";
  // Slabs are made (and pinned) once per loader: the second pool reuses them.
  EXPECT_GE(s.regions, 2) << "each of 2 workers needs at least one slab";
  EXPECT_LE(s.regions, 2 * 4) << "the second epoch's pool pinned new slabs instead of reusing the loader's";
  expect_consistent(s, pin_warnings(capture));
  }
  // Every page-lock is released with the loader.
  EXPECT_EQ(locked_bytes(), locked_before);
}

TEST_P(PinMemoryWorkers, PersistentWorkersPinTheirSlabsOnce) {
  DataLoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  o.pin_memory = true;
  o.persistent_workers = true;
  o.worker_mode = GetParam();
  WarningCapture capture;
  DataLoader dl(ramp(16), o);
  int64_t after_first = 0;
  for (int epoch = 0; epoch < 6; ++epoch) {
    int64_t batches = 0;
    for (auto& batch : dl) {
      EXPECT_EQ(batch[0].to_tensor().is_pinned(), dl.pin_memory_status().pinned);
      ++batches;
    }
    EXPECT_EQ(batches, 4);
    if (epoch == 0) after_first = dl.pin_memory_status().regions;
  }
  EXPECT_GE(after_first, 2);
  // How many slabs the pool needs depends on when each batch is dropped (a later epoch
  // may need one more than the first did), but never more than its bound: 2 workers x
  // (prefetch 2 + 2) slabs.  Re-pinning every epoch would register 4 more per epoch.
  EXPECT_GE(dl.pin_memory_status().regions, after_first);
  EXPECT_LE(dl.pin_memory_status().regions, 2 * (2 + 2)) << "slabs of persistent workers are pinned once";
  expect_consistent(dl.pin_memory_status(), pin_warnings(capture));
}

TEST_P(PinMemoryWorkers, WithoutPinMemoryNothingIsPinnedOrSaid) {
  DataLoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  o.worker_mode = GetParam();
  WarningCapture capture;
  DataLoader dl(ramp(8), o);
  for (auto& batch : dl) EXPECT_FALSE(batch[0].to_tensor().is_pinned());
  const PinStatus s = dl.pin_memory_status();
  EXPECT_FALSE(s.requested);
  EXPECT_EQ(s.backend, PinBackend::None);
  EXPECT_EQ(s.reason, "pin_memory is false");
  EXPECT_EQ(s.regions, 0);
  EXPECT_TRUE(pin_warnings(capture).empty());
}

// The other outcome of mlock for the whole loader: this test binary again, in a child
// without CAP_IPC_LOCK (dropped from the bounding set, so exec cannot give it back)
// and with RLIMIT_MEMLOCK 0, runs the test above; there every slab must fall back to
// "none", and the batches still arrive.
TEST(PinMemoryWithoutMlock, BatchesArriveUnpinnedWhenNothingCanLock) {
  if (cuda_pinning_available()) GTEST_SKIP() << "a CUDA device is usable: slabs are CUDA-pinned, mlock is not tried";
  char out_path[] = "/tmp/loader_pin_test_XXXXXX";
  int out = mkstemp(out_path);
  ASSERT_GE(out, 0);
  unlink(out_path);
  std::string self = "/proc/self/exe";
  std::string filter = "--gtest_filter=ProcessAndInProcess/PinMemoryWorkers.BatchesArriveAndTellTheTruthAboutPinning/*";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    (void)prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK, 0, 0, 0);
    rlimit lim{0, 0};
    if (setrlimit(RLIMIT_MEMLOCK, &lim) != 0) _exit(120);
    dup2(out, 1);
    dup2(out, 2);
    // The child runs its own filter in full: not a shard of it (seen on a machine that
    // ran the suite in 8 shards, where the child ran 0 tests), and writes no report of
    // the parent's.
    for (const char* v : {"GTEST_TOTAL_SHARDS", "GTEST_SHARD_INDEX", "GTEST_SHARD_STATUS_FILE", "GTEST_OUTPUT"})
      unsetenv(v);
    char* argv[] = {self.data(), filter.data(), nullptr};
    execv("/proc/self/exe", argv);
    _exit(121);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  std::string text(static_cast<size_t>(lseek(out, 0, SEEK_END)), '\0');
  ASSERT_EQ(pread(out, text.data(), text.size(), 0), static_cast<ssize_t>(text.size()));
  close(out);
  ASSERT_TRUE(WIFEXITED(status)) << text;
  ASSERT_EQ(WEXITSTATUS(status), 0) << text;
  if (text.find("backend=mlock") != std::string::npos)
    GTEST_SKIP() << "CAP_IPC_LOCK could not be dropped here (no CAP_SETPCAP?), so mlock still worked";
  EXPECT_NE(text.find("backend=none"), std::string::npos) << text;
  EXPECT_NE(text.find("mlock failed too"), std::string::npos) << text;
  EXPECT_NE(text.find("[  PASSED  ] 2 tests"), std::string::npos) << text;
}

INSTANTIATE_TEST_SUITE_P(ProcessAndInProcess, PinMemoryWorkers,
                         ::testing::Values(WorkerMode::Process, WorkerMode::InProcess),
                         [](const auto& p) { return p.param == WorkerMode::Process ? "Process" : "InProcess"; });

/// PyTorch's SimpleCustomBatch (torch.utils.data docs, "Memory Pinning").
class SimpleCustomBatch : public CustomObject {
 public:
  explicit SimpleCustomBatch(std::vector<Value>& samples) {
    std::vector<Value> xs, ys;
    for (auto& s : samples) {
      xs.push_back(s[0]);
      ys.push_back(s[1]);
    }
    inp = default_collate(xs).to_tensor();
    tgt = default_collate(ys).to_tensor();
  }
  std::string type_name() const override { return "SimpleCustomBatch"; }
  std::shared_ptr<CustomObject> pin_memory() override {
    ++hook_calls;
    inp = loader::pin_memory(inp);
    tgt = loader::pin_memory(tgt);
    return nullptr;  // return self
  }
  std::vector<Tensor> tensors() const override { return {inp, tgt}; }
  Tensor inp, tgt;
  int hook_calls = 0;
};

TEST(PinMemorySingleProcess, CustomBatchTypesPinThemselves) {
  DataLoaderOptions o;
  o.batch_size = 2;
  o.pin_memory = true;
  o.collate_fn = [](std::vector<Value>& samples) { return Value::object(std::make_shared<SimpleCustomBatch>(samples)); };
  WarningCapture capture;
  DataLoader dl(std::make_shared<RampDataset>(10), o);
  const bool cuda = cuda_pinning_available();
  for (int epoch = 0; epoch < 2; ++epoch) {
    int64_t batches = 0;
    for (auto& batch : dl) {
      auto custom = std::dynamic_pointer_cast<SimpleCustomBatch>(batch.to_object());
      ASSERT_NE(custom, nullptr);
      EXPECT_EQ(custom->hook_calls, 1);
      EXPECT_EQ(custom->inp.is_pinned(), cuda);
      EXPECT_EQ(custom->tgt.is_pinned(), cuda);
      EXPECT_EQ(custom->tgt.at<int64_t>({1}), 2 * batches + 1);
      ++batches;
    }
    EXPECT_EQ(batches, 5);
  }
  const PinStatus s = dl.pin_memory_status();
  EXPECT_EQ(s.regions, 10);
  EXPECT_EQ(s.backend, cuda ? PinBackend::Cuda : PinBackend::None);
  expect_consistent(s, pin_warnings(capture));
}

TEST(PinMemorySingleProcess, DefaultCollatedBatchesArePinnedWhenCudaCan) {
  DataLoaderOptions o;
  o.batch_size = 3;
  o.pin_memory = true;
  WarningCapture capture;
  DataLoader dl(std::make_shared<RampDataset>(7), o);
  const bool cuda = cuda_pinning_available();
  int64_t seen = 0;
  for (auto& batch : dl) {
    EXPECT_EQ(batch.kind(), Value::Kind::List);
    const Tensor& y = batch[1].to_tensor();
    EXPECT_EQ(batch[0].to_tensor().is_pinned(), cuda);
    EXPECT_EQ(y.is_pinned(), cuda);
    for (int64_t r = 0; r < y.size(0); ++r) EXPECT_EQ(y.at<int64_t>({r}), seen++);
  }
  EXPECT_EQ(seen, 7);
  expect_consistent(dl.pin_memory_status(), pin_warnings(capture));
}

// PyTorch's test_pin_memory_device / test_pin_memory_with_only_device (D112).
const std::string kDeviceWithoutPin =
    "pin memory device is set and pin_memory flag is not used then device pinned memory won't be used"
    "please set pin_memory to true, if you need to use the device pin memory";

TEST(PinMemoryDevice, CudaAsTheDevicePinsAsPinMemoryDoes) {
  for (int workers : {0, 2}) {
    for (const char* device : {"cuda", "cuda:0"}) {
      DataLoaderOptions o;
      o.batch_size = 4;
      o.num_workers = workers;
      o.pin_memory = true;
      o.pin_memory_device = device;
      WarningCapture capture;
      DataLoader dl(ramp(10), o);
      int64_t seen = 0;
      for (auto& batch : dl) {
        const PinStatus s = dl.pin_memory_status();
        EXPECT_EQ(batch[0].to_tensor().is_pinned(), s.pinned) << device;
        EXPECT_EQ(batch[0].to_tensor().is_pinned(), cuda_pinning_available()) << device;
        const Tensor& y = batch[1].to_tensor();
        for (int64_t r = 0; r < y.size(0); ++r) EXPECT_EQ(y.at<int64_t>({r}), seen++);
      }
      EXPECT_EQ(seen, 10);
      EXPECT_TRUE(dl.pin_memory_status().requested);
      for (const auto& m : capture.messages()) EXPECT_NE(m, kDeviceWithoutPin);
      expect_consistent(dl.pin_memory_status(), pin_warnings(capture));
    }
  }
}

TEST(PinMemoryDevice, ADeviceWithoutPinMemoryPinsNothingAndWarns) {
  for (int workers : {0, 2}) {
    DataLoaderOptions o;
    o.batch_size = 4;
    o.num_workers = workers;
    o.pin_memory_device = "cuda";
    WarningCapture capture;
    DataLoader dl(ramp(10), o);
    int64_t seen = 0;
    for (auto& batch : dl) {
      EXPECT_FALSE(batch[0].to_tensor().is_pinned());
      EXPECT_FALSE(batch[1].to_tensor().is_pinned());
      seen += batch[1].to_tensor().size(0);
    }
    EXPECT_EQ(seen, 10);
    EXPECT_FALSE(dl.pin_memory_status().requested);
    EXPECT_EQ(dl.pin_memory_status().regions, 0);
    int said = 0;
    for (const auto& m : capture.messages()) said += m == kDeviceWithoutPin;
    EXPECT_EQ(said, 1) << "PyTorch's warning, once, at construction";
    EXPECT_TRUE(pin_warnings(capture).empty());
  }
}

TEST(PinMemoryDevice, OtherDevicesAreRefusedNamingTheValue) {
  for (const char* device : {"xpu", "cpu", "mps", "cuda:", "cuda:x", "cuda:-1", "cuda0", " cuda", "CUDA", "cuda:123456"}) {
    DataLoaderOptions o;
    o.batch_size = 4;
    o.pin_memory = true;
    o.pin_memory_device = device;
    try {
      DataLoader dl(ramp(10), o);
      ADD_FAILURE() << "pin_memory_device='" << device << "' was accepted";
    } catch (const ValueError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(std::string("pin_memory_device='") + device + "'"), std::string::npos) << m;
      EXPECT_NE(m.find("\"cuda:N\""), std::string::npos) << m;
    }
  }
}

TEST(PinMemoryDevice, AnIndexBeyondTheDevicesIsRefusedWhereCudaCanTell) {
  DataLoaderOptions o;
  o.batch_size = 4;
  o.pin_memory = true;
  o.pin_memory_device = "cuda:4096";
  if (!cuda_pinning_available()) {
    // Without CUDA no device index can be checked: it pins as pin_memory does (the fallback, said once).
    WarningCapture capture;
    DataLoader dl(ramp(10), o);
    int64_t n = 0;
    for (auto& batch : dl) n += batch[1].to_tensor().size(0);
    EXPECT_EQ(n, 10);
    expect_consistent(dl.pin_memory_status(), pin_warnings(capture));
    return;
  }
  try {
    DataLoader dl(ramp(10), o);
    ADD_FAILURE() << "cuda:4096 was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("names no CUDA device of this machine"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loader
