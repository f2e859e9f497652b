// Pinned memory without assumptions about the machine: every test asks the CUDA
// runtime (through cuda_pinning_available) whether a device is usable and checks
// the behaviour that follows, so the same tests hold on a GPU machine, on one
// without a driver (here: cudaGetDeviceCount says 35, cudaErrorInsufficientDriver)
// and in a build without CUDA.  Whether mlock succeeds is checked against the
// kernel's own count of locked memory (VmLck in /proc/self/status).
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "loader/cuda_copy.h"
#include "loader/pinned.h"

namespace loader {
namespace {

/// Locked memory of this process in bytes (VmLck), or -1 when unreadable.
int64_t locked_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmLck:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // "VmLck:  123 kB"
  return -1;
}

/// An anonymous mapping of `bytes`, unmapped by the destructor.
struct Mapping {
  explicit Mapping(size_t n) : bytes(n) {
    data = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED) data = nullptr;
  }
  ~Mapping() {
    if (data) munmap(data, bytes);
  }
  void* data = nullptr;
  size_t bytes;
};

std::string cuda_reason() {
  std::string why;
  cuda_pinning_available(&why);
  return why;
}

TEST(PinnedMemory, CudaAvailabilityComesWithAReasonWhenAbsent) {
  std::string why;
  const bool ok = cuda_pinning_available(&why);
  if (ok) {
    EXPECT_TRUE(built_with_cuda());
    EXPECT_EQ(why, "");
  } else if (!built_with_cuda()) {
    EXPECT_EQ(why.rfind("built without CUDA", 0), 0u) << why;
  } else {
    // The CUDA runtime's own words: the call, the error number and its name.
    EXPECT_EQ(why.rfind("cudaGetDeviceCount", 0), 0u) << why;
    EXPECT_NE(why.find("runtime CUDA"), std::string::npos) << why;
  }
  // Cached: the same answer every time.
  std::string again;
  EXPECT_EQ(cuda_pinning_available(&again), ok);
  EXPECT_EQ(again, why);
}

TEST(PinnedMemory, PinRegionReportsTheBackendTheKernelAndCudaAgreeWith) {
  const size_t n = 4 << 20;
  Mapping m(n);
  ASSERT_NE(m.data, nullptr);
  std::memset(m.data, 1, n);
  const int64_t before = locked_bytes();
  PinResult r = pin_region(m.data, n);
  const int64_t during = locked_bytes();
  EXPECT_EQ(r.pinned, r.backend == PinBackend::Cuda);
  switch (r.backend) {
    case PinBackend::Cuda:
      EXPECT_TRUE(cuda_pinning_available());
      EXPECT_EQ(r.reason, "");
      break;
    case PinBackend::Mlock:
      EXPECT_NE(r.reason.find(cuda_reason()), std::string::npos) << r.reason;
      EXPECT_NE(r.reason.find("page-locked with mlock instead"), std::string::npos) << r.reason;
      EXPECT_GE(during - before, static_cast<int64_t>(n)) << "mlock reported success but VmLck did not grow";
      break;
    case PinBackend::None:
      EXPECT_NE(r.reason.find(cuda_reason()), std::string::npos) << r.reason;
      EXPECT_NE(r.reason.find("mlock failed too"), std::string::npos) << r.reason;
      EXPECT_EQ(during, before);
      break;
  }
  unpin_region(m.data, n, r.backend);
  EXPECT_EQ(locked_bytes(), before);
}

// The other outcome of mlock, forced: a child process without CAP_IPC_LOCK and with
// RLIMIT_MEMLOCK 0 cannot lock, so pin_region must say so and pin nothing.
TEST(PinnedMemory, PinRegionFallsBackToNothingWhenMlockIsRefused) {
  if (cuda_pinning_available())
    GTEST_SKIP() << "a CUDA device is usable: the child of a forked CUDA process may not use CUDA";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    if (syscall(SYS_capget, &hdr, data) != 0) _exit(10);
    data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    if (syscall(SYS_capset, &hdr, data) != 0) _exit(11);
    rlimit lim{0, 0};
    if (setrlimit(RLIMIT_MEMLOCK, &lim) != 0) _exit(12);
    Mapping m(1 << 20);
    if (!m.data) _exit(13);
    PinResult r = pin_region(m.data, m.bytes);
    if (r.backend != PinBackend::None || r.pinned) _exit(14);
    if (r.reason.find("mlock failed too (Cannot allocate memory") == std::string::npos &&
        r.reason.find("mlock failed too (Operation not permitted") == std::string::npos)
      _exit(15);
    if (r.reason.find(cuda_reason()) == std::string::npos) _exit(16);
    if (locked_bytes() != 0) _exit(17);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10-13: setup failed, 14: wrong backend, 15: reason does not name the "
                                       "mlock error, 16: reason lacks the CUDA reason, 17: memory was locked";
}

TEST(PinnedMemory, MergeKeepsTheWeakestBackendAndItsReason) {
  PinResult all{PinBackend::Cuda, true, ""};
  merge_pin_result(all, PinResult{PinBackend::Cuda, true, ""});
  EXPECT_EQ(all.backend, PinBackend::Cuda);
  EXPECT_TRUE(all.pinned);
  merge_pin_result(all, PinResult{PinBackend::Mlock, false, "m"});
  EXPECT_EQ(all.backend, PinBackend::Mlock);
  EXPECT_EQ(all.reason, "m");
  merge_pin_result(all, PinResult{PinBackend::None, false, "n"});
  merge_pin_result(all, PinResult{PinBackend::Mlock, false, "m2"});
  merge_pin_result(all, PinResult{PinBackend::Cuda, true, ""});
  EXPECT_EQ(all.backend, PinBackend::None);
  EXPECT_EQ(all.reason, "n");
  EXPECT_FALSE(all.pinned);
  EXPECT_STREQ(pin_backend_name(PinBackend::Cuda), "cuda");
  EXPECT_STREQ(pin_backend_name(PinBackend::Mlock), "mlock");
  EXPECT_STREQ(pin_backend_name(PinBackend::None), "none");
}

TEST(PinTracker, SignalsTheFirstUnpinnedOutcomeExactlyOnce) {
  PinTracker t;
  PinStatus s0 = t.status();
  EXPECT_TRUE(s0.requested);
  EXPECT_EQ(s0.regions, 0);
  EXPECT_STREQ(s0.backend_name(), "none");
  EXPECT_FALSE(t.record(PinResult{PinBackend::Cuda, true, ""}));
  EXPECT_STREQ(t.status().backend_name(), "cuda");
  EXPECT_TRUE(t.status().pinned);
  EXPECT_TRUE(t.record(PinResult{PinBackend::Mlock, false, "why"}));
  EXPECT_FALSE(t.record(PinResult{PinBackend::None, false, "worse"}));
  EXPECT_FALSE(t.record(PinResult{PinBackend::Mlock, false, "why"}));
  PinStatus s = t.status();
  EXPECT_EQ(s.backend, PinBackend::None);
  EXPECT_FALSE(s.pinned);
  EXPECT_EQ(s.reason, "worse");
  EXPECT_EQ(s.regions, 4);

  PinTracker off(false);
  EXPECT_FALSE(off.status().requested);
  EXPECT_EQ(off.status().reason, "pin_memory is false");
}

TEST(PinMemoryTensor, CopiesIntoCudaPinnedMemoryOrLeavesTheTensorAlone) {
  Tensor t = Tensor::arange(24, DType::Int64).view({4, 6}).transpose(0, 1);  // non-contiguous
  PinResult how;
  Tensor p = pin_memory(t, &how);
  EXPECT_TRUE(p.equal(t));
  if (cuda_pinning_available()) {
    EXPECT_TRUE(p.is_pinned());
    EXPECT_TRUE(p.is_contiguous());
    EXPECT_NE(p.storage(), t.storage());
    EXPECT_EQ(how.backend, PinBackend::Cuda);
    // Already pinned: returned as is.
    Tensor again = pin_memory(p);
    EXPECT_EQ(again.storage(), p.storage());
  } else {
    EXPECT_FALSE(p.is_pinned());
    EXPECT_EQ(p.storage(), t.storage()) << "without CUDA the tensor is not copied";
    EXPECT_EQ(how.backend, PinBackend::None);
    EXPECT_NE(how.reason.find(cuda_reason()), std::string::npos) << how.reason;
  }
}

TEST(PinMemoryTensor, PinnedAllocationFailsCleanlyWithoutCuda) {
  PinResult how;
  auto s = allocate_pinned(1000, &how);
  PinnedHostAllocator alloc;
  Tensor t = Tensor::empty({10, 10}, DType::Float64, &alloc);
  ASSERT_TRUE(t.defined());
  if (cuda_pinning_available()) {
    ASSERT_NE(s, nullptr);
    EXPECT_TRUE(s->is_pinned());
    EXPECT_TRUE(t.is_pinned());
    EXPECT_EQ(alloc.result().backend, PinBackend::Cuda);
  } else {
    EXPECT_EQ(s, nullptr);
    EXPECT_EQ(how.backend, PinBackend::None);
    EXPECT_NE(how.reason.find(cuda_reason()), std::string::npos);
    EXPECT_FALSE(t.is_pinned());  // heap fallback
    EXPECT_EQ(alloc.result().backend, PinBackend::None);
  }
}

// Pinning batch after batch page-locks memory once (PyTorch's caching host allocator):
// a pinned copy that went back is handed out again for the next tensor of its size.
TEST(PinMemoryTensor, RepeatedPinningReusesPageLockedBlocks) {
  Tensor images = Tensor::arange(3 * 1000 * 1000, DType::Int32);  // 12 MB: a 16 MiB block
  const PinnedCacheStats before = pinned_cache_stats();
  if (!cuda_pinning_available()) {
    EXPECT_FALSE(pin_memory(images).is_pinned());
    const PinnedCacheStats after = pinned_cache_stats();
    EXPECT_EQ(after.hits + after.misses, before.hits + before.misses);  // nothing was allocated
    return;
  }
  const void* first = nullptr;
  for (int batch = 0; batch < 5; ++batch) {
    Tensor pinned = pin_memory(images);
    ASSERT_TRUE(pinned.is_pinned());
    ASSERT_TRUE(pinned.equal(images));
    if (batch == 0) first = pinned.data_ptr();
    else EXPECT_EQ(pinned.data_ptr(), first) << "batch " << batch << " got another block";
  }
  const PinnedCacheStats after = pinned_cache_stats();
  EXPECT_GE(after.hits - before.hits, 4u);
  EXPECT_LE(after.misses - before.misses, 1u);
  EXPECT_GE(after.cached_bytes, uint64_t{16} << 20);
  empty_pinned_cache();
  EXPECT_EQ(pinned_cache_stats().cached_bytes, 0u);
}

/// PyTorch's SimpleCustomBatch: a batch type with its own pin_memory().
class SimpleCustomBatch : public CustomObject {
 public:
  SimpleCustomBatch(Tensor inp, Tensor tgt) : inp(std::move(inp)), tgt(std::move(tgt)) {}
  std::string type_name() const override { return "SimpleCustomBatch"; }
  std::shared_ptr<CustomObject> pin_memory() override {
    ++hook_calls;
    inp = loader::pin_memory(inp);
    tgt = loader::pin_memory(tgt);
    return nullptr;  // "return self"
  }
  std::vector<Tensor> tensors() const override { return {inp, tgt}; }
  Tensor inp, tgt;
  int hook_calls = 0;
};

/// A batch type whose hook returns a different object.
class Replacing : public CustomObject {
 public:
  std::string type_name() const override { return "Replacing"; }
  std::shared_ptr<CustomObject> pin_memory() override { return std::make_shared<SimpleCustomBatch>(Tensor(), Tensor()); }
};

TEST(PinMemoryValue, KeepsTheStructureAndCallsCustomHooks) {
  auto custom = std::make_shared<SimpleCustomBatch>(Tensor::arange(6, DType::Float32), Tensor::arange(3));
  Value batch = Value::dict({
      {"list", Value::list({Value(Tensor::arange(4)), Value("text"), Value(int64_t{7})})},
      {"tuple", Value::tuple({Value(Tensor::arange(2)), Value(1.5)})},
      {"point", Value::namedtuple("Point", {"x", "y"}, {Value(Tensor::arange(1)), Value(int64_t{2})})},
      {"custom", Value::object(custom)},
      {"replaced", Value::object(std::make_shared<Replacing>())},
  });
  PinResult how;
  Value out = pin_memory(batch, &how);
  EXPECT_EQ(out.at("list").kind(), Value::Kind::List);
  EXPECT_EQ(out.at("list")[1].to_string(), "text");
  EXPECT_EQ(out.at("list")[2].to_int(), 7);
  EXPECT_TRUE(out.at("list")[0].to_tensor().equal(Tensor::arange(4)));
  EXPECT_EQ(out.at("tuple").kind(), Value::Kind::Tuple);
  EXPECT_DOUBLE_EQ(out.at("tuple")[1].to_double(), 1.5);
  EXPECT_EQ(out.at("point").type_name(), "Point");
  EXPECT_EQ(out.at("point").field_names(), (std::vector<std::string>{"x", "y"}));
  // The hook ran once and its object ("self") is the one delivered.
  EXPECT_EQ(custom->hook_calls, 1);
  EXPECT_EQ(out.at("custom").to_object(), custom);
  EXPECT_EQ(out.at("replaced").to_object()->type_name(), "SimpleCustomBatch");

  const bool cuda = cuda_pinning_available();
  EXPECT_EQ(custom->inp.is_pinned(), cuda);
  EXPECT_EQ(custom->tgt.is_pinned(), cuda);
  out.for_each_tensor([&](const Tensor& t) {
    if (t.defined()) {
      EXPECT_EQ(t.is_pinned(), cuda);
    }
  });
  EXPECT_EQ(how.pinned, cuda);
  EXPECT_EQ(how.backend, cuda ? PinBackend::Cuda : PinBackend::None);
  if (!cuda) {
    EXPECT_NE(how.reason.find(cuda_reason()), std::string::npos) << how.reason;
  }
}

TEST(PinMemoryValue, ReportsAHookThatLeavesTensorsUnpinned) {
  class Lazy : public CustomObject {
   public:
    std::string type_name() const override { return "Lazy"; }
    std::vector<Tensor> tensors() const override { return {Tensor::arange(3)}; }
  };
  PinResult how;
  pin_memory(Value::list({Value::object(std::make_shared<Lazy>())}), &how);
  EXPECT_EQ(how.backend, PinBackend::None);
  EXPECT_FALSE(how.pinned);
  if (cuda_pinning_available()) {
    EXPECT_NE(how.reason.find("pin_memory() hook of Lazy"), std::string::npos);
  }
}

TEST(CudaCopy, NoDeviceIsACleanErrorAndADeviceCopiesBatchesExactly) {
  std::string why;
  if (!cuda_device_available(&why)) {
    try {
      CudaStream stream;
      FAIL() << "CudaStream was made without a CUDA device";
    } catch (const CudaUnavailable& e) {
      EXPECT_EQ(std::string(e.what()), "no CUDA device: " + why);
    }
    EXPECT_THROW(cuda_device_info(), CudaUnavailable);
    return;
  }
  CudaStream stream;
  Tensor a = Tensor::arange(1000, DType::Float32);
  Tensor b = Tensor::arange(60, DType::Int64).view({6, 10}).transpose(0, 1);  // non-contiguous
  Value batch = Value::list({Value(pin_memory(a)), Value(b), Value("label")});
  DeviceBatch d = to_device_async(batch, stream);
  batch = Value();  // the DeviceBatch keeps the host tensors alive
  d.wait();
  EXPECT_TRUE(d.ready());
  ASSERT_EQ(d.tensors().size(), 2u);
  EXPECT_FALSE(d.from_pinned());  // b was not pinned
  EXPECT_EQ(d.bytes(), a.nbytes() + b.nbytes());
  EXPECT_TRUE(d.to_host(0).equal(a));
  EXPECT_TRUE(d.to_host(1).equal(b));
  EXPECT_THROW(d.to_host(2), IndexError);
}

}  // namespace
}  // namespace loader
