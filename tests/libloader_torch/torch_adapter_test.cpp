// The libtorch adapter (loader/torch.h): batches from worker processes become torch
// tensors over the very same shared-memory bytes, the slab stays lent to those tensors
// until the last one dies, pinned batches convert (and is_pinned() tells the truth),
// pinned tensors cross DLPack into libtorch, nested batches become IValues, and module
// weights go to .pt files that Python's PyTorch loads.
#include <sys/wait.h>

#include <ATen/Context.h>
#include <ATen/DLConvertor.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "actors/process_leaks.h"
#include "loader/dataloader.h"
#include "loader/error.h"
#include "loader/serialization/pt.h"
#include "loader/torch.h"
#include "loader/warnings.h"

namespace loader {
namespace {

using testing::LeakCheck;

constexpr int64_t kElems = 1024;  // float32 per sample: 4 KiB

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
LOADER_REGISTER_DATASET("torch_test_ramp", [](const Value& p) { return std::make_shared<RampDataset>(p.at("n").to_int()); });

std::shared_ptr<Dataset> ramp(int64_t n) { return make_dataset({"torch_test_ramp", Value::dict({{"n", n}})}); }

/// The torch tensors batch `k` of a ramp loader with batch size `b` must hold.
void expect_ramp_batch(const std::vector<at::Tensor>& xy, int64_t k, int64_t b) {
  ASSERT_EQ(xy.size(), 2u);
  at::Tensor want_y = torch::arange(k * b, (k + 1) * b, torch::kLong);
  EXPECT_TRUE(torch::equal(xy[1], want_y)) << "batch " << k << " labels " << xy[1];
  at::Tensor want_x = want_y.to(torch::kFloat).unsqueeze(1).expand({b, kElems});
  EXPECT_TRUE(torch::equal(xy[0], want_x)) << "batch " << k << " images differ";
}

TEST(TorchAdapter, EveryLoaderDTypeHasATorchTypeOfTheSameSize) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto d = static_cast<DType>(i);
    const c10::ScalarType s = to_torch_dtype(d);
    EXPECT_EQ(c10::elementSize(s), element_size(d)) << dtype_name(d);
    EXPECT_EQ(from_torch_dtype(s), d) << dtype_name(d);
  }
  EXPECT_EQ(to_torch_dtype(DType::Float32), torch::kFloat32);
  EXPECT_EQ(to_torch_dtype(DType::Complex64), torch::kComplexFloat);
  EXPECT_THROW(from_torch_dtype(torch::kComplexDouble), TypeError);
}

TEST(TorchAdapter, ToTorchViewsTheSameBytesAndHoldsTheStorage) {
  std::weak_ptr<Storage> storage;
  at::Tensor tt;
  void* data = nullptr;
  {
    // A strided view with an offset: rows 1..2 of a [3, 4] tensor, transposed.
    Tensor t = Tensor::arange(12, DType::Float32).view({3, 4}).slice(0, 1, 3).transpose(0, 1);
    storage = t.storage();
    data = t.data_ptr();
    tt = to_torch(t);
    EXPECT_EQ(tt.data_ptr(), t.data_ptr()) << "to_torch must not copy";
    EXPECT_EQ(tt.sizes().vec(), t.sizes().vec());
    EXPECT_EQ(tt.strides().vec(), t.strides().vec());
    EXPECT_EQ(tt.scalar_type(), torch::kFloat);
    EXPECT_EQ(tt.device(), torch::Device(torch::kCPU));
    EXPECT_FALSE(tt.requires_grad());
  }
  ASSERT_FALSE(storage.expired()) << "the torch tensor must keep the loader storage alive";
  EXPECT_EQ(tt.data_ptr(), data);
  EXPECT_TRUE(torch::equal(tt, torch::arange(12, torch::kFloat).view({3, 4}).slice(0, 1, 3).t()));
  at::Tensor view = tt[1];  // torch views share the torch storage, and so the loader storage
  tt.reset();
  EXPECT_FALSE(storage.expired());
  view.reset();
  EXPECT_TRUE(storage.expired()) << "the last torch view gone, the loader storage must go";
  EXPECT_THROW(to_torch(Tensor()), ValueError);
}

TEST(TorchAdapter, BatchFromTwoWorkerProcessesConvertsWithoutACopyAndHoldsItsSlab) {
  const int64_t n = 96, b = 8;  // 12 batches, 6 per worker
  DataLoaderOptions o;
  o.batch_size = b;
  o.num_workers = 2;
  o.worker_mode = WorkerMode::Process;
  LeakCheck leaks;
  std::vector<at::Tensor> held;                     // batch 0 as torch tensors
  std::vector<std::weak_ptr<Storage>> held_storage; // its loader storages
  std::set<int> pids;
  {
    DataLoader dl(ramp(n), o);
    auto it = dl.iter();
    int64_t k = 0;
    uint64_t held_slab = 0;
    while (auto batch = it.next()) {
      for (int pid : it.worker_pids()) pids.insert(pid);
      const Tensor& x = (*batch)[0].to_tensor();
      const Tensor& y = (*batch)[1].to_tensor();
      ASSERT_EQ(x.storage()->kind(), MemoryKind::SharedMemory) << "a worker batch lives in a slab";
      ASSERT_EQ(y.storage()->kind(), MemoryKind::SharedMemory);
      std::vector<at::Tensor> xy = to_torch_list(*batch);
      ASSERT_EQ(xy.size(), 2u);
      EXPECT_EQ(xy[0].data_ptr(), x.data_ptr()) << "batch " << k << ": images were copied";
      EXPECT_EQ(xy[1].data_ptr(), y.data_ptr()) << "batch " << k << ": labels were copied";
      EXPECT_EQ(xy[0].scalar_type(), torch::kFloat);
      EXPECT_EQ(xy[1].scalar_type(), torch::kLong);
      expect_ramp_batch(xy, k, b);
      if (k == 0) {
        held = xy;
        batch->for_each_tensor([&](const Tensor& t) { held_storage.push_back(t.storage()); });
        held_slab = x.storage()->placement().region;
        ASSERT_NE(held_slab, 0u);
      } else {
        EXPECT_NE(x.storage()->placement().region, held_slab)
            << "batch " << k << " was written into the slab a torch tensor still views";
        expect_ramp_batch(held, 0, b);  // still batch 0: its slab was not refilled
      }
      ++k;
    }
    EXPECT_EQ(k, n / b);
    for (const auto& w : held_storage)
      EXPECT_FALSE(w.expired()) << "the loader's batch is gone; the torch tensors must still hold its slab";
  }  // the loader, its workers and its pool are gone
  pids.erase(-1);
  EXPECT_EQ(pids.size(), 2u) << "the batches must come from 2 worker processes";
  EXPECT_EQ(leaks.new_children(), "");
  EXPECT_NE(leaks.new_segments(), "") << "the slab under the torch tensors must stay mapped while they live";
  expect_ramp_batch(held, 0, b);
  held.clear();
  for (const auto& w : held_storage)
    EXPECT_TRUE(w.expired()) << "destroying the torch tensors must release the batch (and with it the slab)";
  EXPECT_EQ(leaks.new_segments(), "") << "the last torch tensor gone, no slab may stay mapped";
}

TEST(TorchAdapter, PinnedBatchConvertsAndIsPinnedTellsTheTruth) {
  const int64_t n = 48, b = 8;
  DataLoaderOptions o;
  o.batch_size = b;
  o.num_workers = 2;
  o.pin_memory = true;
  LeakCheck leaks;
  WarningCapture capture;  // without CUDA the loader warns once; keep the test output clean
  {
    DataLoader dl(ramp(n), o);
    int64_t k = 0;
    for (Value& batch : dl) {
      const PinStatus s = dl.pin_memory_status();
      const Tensor& x = batch[0].to_tensor();
      EXPECT_EQ(x.is_pinned(), s.pinned) << "the loader's own answer must agree with its status";
      std::vector<at::Tensor> xy = to_torch_list(batch);
      EXPECT_EQ(xy[0].data_ptr(), x.data_ptr()) << "a pinned batch must convert without a copy too";
      expect_ramp_batch(xy, k, b);
      // torch asks the CUDA runtime about the pointer itself.  A libtorch without CUDA
      // cannot use page-locked memory and says false; with CUDA it finds the slab's
      // registration exactly when the loader made one.
      if (at::hasCUDA()) {
        EXPECT_EQ(xy[0].is_pinned(), x.is_pinned());
      } else {
        EXPECT_FALSE(xy[0].is_pinned());
      }
      if (!cuda_pinning_available()) {
        EXPECT_NE(s.backend, PinBackend::Cuda);
        EXPECT_FALSE(x.is_pinned()) << "mlock is not CUDA pinning (docs/gpu.md)";
        EXPECT_FALSE(xy[0].is_pinned());
      }
      ++k;
    }
    EXPECT_EQ(k, n / b);
    EXPECT_TRUE(dl.pin_memory_status().requested);
    RecordProperty("pin_backend", dl.pin_memory_status().backend_name());
  }
  EXPECT_EQ(leaks.new_children(), "");
  EXPECT_EQ(leaks.new_segments(), "");
}

TEST(TorchAdapter, PinnedTensorCrossesDLPackIntoLibtorchAsCpu) {
  // A storage flagged pinned, as a CUDA-registered slab is (the bytes are heap memory).
  auto heap = Storage::allocate(6 * sizeof(float));
  std::weak_ptr<Storage> alive = heap;
  Tensor t;
  {
    auto pinned = Storage::wrap(heap->data(), heap->nbytes(), heap, MemoryKind::External, {}, /*pinned=*/true);
    heap.reset();
    t = Tensor(pinned, DType::Float32, {2, 3}, {3, 1}, 0);
    auto* p = t.data<float>();
    for (int i = 0; i < 6; ++i) p[i] = static_cast<float>(i) + 0.5f;
  }
  ASSERT_TRUE(t.is_pinned());

  at::Tensor tt = at::fromDLPack(t.to_dlpack());  // default export: kDLCPU, as PyTorch's own
  EXPECT_EQ(tt.data_ptr(), t.data_ptr());
  EXPECT_TRUE(torch::equal(tt, torch::arange(6, torch::kFloat).add(0.5).view({2, 3})));

  // DLPack's own word for page-locked host memory, which libtorch 1.13 refuses: the
  // reason the default is kDLCPU.
  DLManagedTensor* host = t.to_dlpack(Tensor::DLPackDevice::CudaHostWhenPinned);
  EXPECT_EQ(host->dl_tensor.device.device_type, kDLCUDAHost);
#if TORCH_VERSION_MAJOR < 2
  try {
    at::Tensor refused = at::fromDLPack(host);
    ADD_FAILURE() << "libtorch 1.x was expected to refuse kDLCUDAHost";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Unsupported device_type"), std::string::npos) << e.what();
    host->deleter(host);  // fromDLPack threw before taking ownership
  }
#else
  host->deleter(host);
#endif

  t = Tensor();
  EXPECT_FALSE(alive.expired()) << "the DLPack tensor in libtorch holds the storage";
  tt.reset();
  EXPECT_TRUE(alive.expired()) << "libtorch must call the DLPack deleter";
}

TEST(TorchAdapter, NestedBatchBecomesAnIValue) {
  Tensor img = Tensor::arange(6, DType::Float32).view({2, 3});
  Value batch = Value::dict({
      {"image", img},
      {"pair", Value::list({Tensor::arange(2), Tensor::arange(3)})},
      {"meta", Value::tuple({Value(int64_t{7}), Value(2.5), Value("a"), Value(true), Value()})},
      {"mixed", Value::list({Tensor::arange(2), Value(int64_t{1})})},
  });
  c10::IValue iv = to_ivalue(batch);
  ASSERT_TRUE(iv.isGenericDict());
  auto dict = iv.toGenericDict();
  ASSERT_EQ(dict.size(), 4u);
  EXPECT_EQ(dict.begin()->key().toStringRef(), "image") << "the dict keeps its order";
  at::Tensor image = dict.at("image").toTensor();
  EXPECT_EQ(image.data_ptr(), img.data_ptr());
  ASSERT_TRUE(dict.at("pair").isTensorList());
  EXPECT_EQ(dict.at("pair").toTensorList().get(1).numel(), 3);
  ASSERT_TRUE(dict.at("meta").isTuple());
  const std::vector<c10::IValue> meta = dict.at("meta").toTupleRef().elements().asArrayRef().vec();
  ASSERT_EQ(meta.size(), 5u);
  EXPECT_EQ(meta[0].toInt(), 7);
  EXPECT_EQ(meta[1].toDouble(), 2.5);
  EXPECT_EQ(meta[2].toStringRef(), "a");
  EXPECT_TRUE(meta[3].toBool());
  EXPECT_TRUE(meta[4].isNone());
  ASSERT_TRUE(dict.at("mixed").isList());
  EXPECT_EQ(dict.at("mixed").toList().get(1).toInt(), 1);

  auto od = to_torch_dict(Value::dict({{"a", img}, {"b", Tensor::arange(2)}}));
  ASSERT_EQ(od.size(), 2u);
  EXPECT_EQ(od["a"].data_ptr(), img.data_ptr());
  EXPECT_EQ(od.keys(), (std::vector<std::string>{"a", "b"}));
}

TEST(TorchAdapter, ConvertersNameWhatTheyCannotHold) {
  try {
    to_torch_list(Value::list({Tensor::arange(2), Value("x")}));
    ADD_FAILURE() << "expected TypeError";
  } catch (const TypeError& e) {
    EXPECT_NE(std::string(e.what()).find("item 1 is a str"), std::string::npos) << e.what();
  }
  EXPECT_THROW(to_torch_list(Value::dict({{"a", Tensor::arange(1)}})), TypeError);
  EXPECT_THROW(to_torch_dict(Value::dict({{"a", Value(1)}})), TypeError);
  EXPECT_THROW(to_ivalue(Value::dict(std::vector<std::pair<Value, Value>>{{Value(1), Value(1)}, {Value("a"), Value(2)}})),
               TypeError);
  struct Custom : CustomObject {
    std::string type_name() const override { return "Custom"; }
  };
  EXPECT_THROW(to_ivalue(Value::list({Value::object(std::make_shared<Custom>())})), TypeError);
}

TEST(TorchAdapter, FromTorchViewsTheTorchStorageAndKeepsItAlive) {
  at::Tensor base = torch::arange(20, torch::kDouble).view({4, 5});
  at::Tensor view = base.slice(0, 1, 3).t();  // storage offset 5, strides [1, 5]
  Tensor t = from_torch(view);
  EXPECT_EQ(t.data_ptr(), view.data_ptr());
  EXPECT_EQ(t.dtype(), DType::Float64);
  EXPECT_EQ(t.sizes(), (Dims{5, 2}));
  EXPECT_EQ(t.strides(), (Dims{1, 5}));
  EXPECT_EQ(t.storage_offset(), 5);
  EXPECT_EQ(t.at<double>({4, 1}), 14.0);
  EXPECT_EQ(t.is_pinned(), view.is_pinned());
  base.reset();
  view.reset();
  EXPECT_EQ(t.at<double>({0, 0}), 5.0) << "the loader tensor must keep the torch storage alive";
  EXPECT_THROW(from_torch(at::Tensor()), ValueError);
  EXPECT_THROW(from_torch(torch::zeros({2}, torch::kComplexDouble)), TypeError);
}

torch::nn::Sequential small_model() {
  return torch::nn::Sequential(torch::nn::Linear(4, 3), torch::nn::ReLU(), torch::nn::BatchNorm1d(3),
                               torch::nn::Linear(3, 2));
}

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/loader_torch_test_" + std::to_string(getpid()) + "_" + name;
}

TEST(TorchAdapter, StateDictRoundTripsThroughAPtFile) {
  torch::manual_seed(1);
  auto model = small_model();
  Value sd = torch_state_dict(*model);
  ASSERT_TRUE(sd.is_dict());
  EXPECT_EQ(sd.type_name(), "collections.OrderedDict");
  std::vector<std::string> keys;
  for (const auto& kv : sd.dict_items()) keys.push_back(kv.first.to_string());
  // Python's order: each module's parameters, then its buffers, children in order.
  EXPECT_EQ(keys, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "2.running_mean",
                                            "2.running_var", "2.num_batches_tracked", "3.weight", "3.bias"}));
  EXPECT_EQ(pt::tensor_of(sd.at("0.weight")).data_ptr(), model[0]->as<torch::nn::Linear>()->weight.data_ptr())
      << "the state_dict must view the module's weights, not copy them";

  const std::string path = temp_path("sd.pt");
  pt::save(sd, path);
  torch::manual_seed(2);
  auto other = small_model();
  load_torch_state_dict(*other, pt::load(path));
  std::remove(path.c_str());
  auto a = model->named_parameters(), b2 = other->named_parameters();
  for (const auto& p : a) EXPECT_TRUE(torch::equal(p.value(), b2[p.key()])) << p.key();
  for (const auto& p : model->named_buffers()) EXPECT_TRUE(torch::equal(p.value(), other->named_buffers()[p.key()]));

  Value broken = Value::dict(std::vector<std::pair<Value, Value>>{}, "collections.OrderedDict");
  for (const auto& [k, v] : sd.dict_items())
    if (k.to_string() != "0.bias") broken.set(k, v);
  broken.set(Value("extra"), Value(Tensor::arange(1)));
  broken.set(Value("3.weight"), Value(Tensor::zeros({5, 3}, DType::Float32)));
  try {
    load_torch_state_dict(*other, broken);
    ADD_FAILURE() << "expected RuntimeError";
  } catch (const RuntimeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("Missing key(s) in state_dict: \"0.bias\"."), std::string::npos) << m;
    EXPECT_NE(m.find("Unexpected key(s) in state_dict: \"extra\"."), std::string::npos) << m;
    EXPECT_NE(m.find("size mismatch for 3.weight: copying a param with shape torch.Size([5, 3]) from checkpoint, "
                     "the shape in current model is torch.Size([2, 3])."),
              std::string::npos)
        << m;
  }
}

std::string run(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int st = ::pclose(p);
  *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

TEST(TorchAdapter, PythonPyTorchLoadsTheStateDictIntoTheSameModel) {
  const char* env = std::getenv("LOADER_PYTHON");
  const std::string python = env && *env ? env : "/usr/bin/python3";
  int status = -1;
  run(python + " -c 'import torch' 2>/dev/null", &status);
  if (status != 0) GTEST_SKIP() << "PyTorch not found (" << python << " -c 'import torch' failed; set LOADER_PYTHON)";

  torch::manual_seed(3);
  auto model = small_model();
  model->train();
  model->forward(torch::randn({16, 4}));  // moves the BatchNorm running statistics
  model->eval();
  at::Tensor x = torch::linspace(-2, 2, 12).view({3, 4});
  at::Tensor y = model->forward(x);
  const std::string path = temp_path("py.pt"), from_python = temp_path("from_python.pt");
  pt::save(torch_state_dict(*model), path);

  // Python loads our file into its model and prints that model's outputs (line 1); it
  // also saves a state_dict of its own (torch.save, with _metadata) and prints the
  // outputs of that model (line 2), which the C++ model must give after loading it.
  const std::string script =
      "import sys, torch\n"
      "from torch import nn\n"
      "def model():\n"
      "    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.BatchNorm1d(3), nn.Linear(3, 2))\n"
      "x = torch.linspace(-2, 2, 12).view(3, 4)\n"
      "m = model()\n"
      "m.load_state_dict(torch.load(sys.argv[1], weights_only=True), strict=True)\n"
      "m.eval()\n"
      "torch.manual_seed(7)\n"
      "p = model()\n"
      "p(torch.randn(16, 4))\n"
      "p.eval()\n"
      "torch.save(p.state_dict(), sys.argv[2])\n"
      "with torch.no_grad():\n"
      "    for y in (m(x), p(x)):\n"
      "        print(' '.join(repr(v) for v in y.flatten().tolist()))\n";
  const std::string script_path = temp_path("check.py");
  {
    std::FILE* f = std::fopen(script_path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(script.c_str(), f);
    std::fclose(f);
  }
  const std::string out = run(python + " " + script_path + " " + path + " " + from_python + " 2>&1", &status);
  std::remove(script_path.c_str());
  std::remove(path.c_str());
  ASSERT_EQ(status, 0) << out;
  std::istringstream in(out);
  std::vector<double> got;
  for (double v; in >> v;) got.push_back(v);
  ASSERT_EQ(got.size(), 12u) << out;
  at::Tensor yd = y.flatten().to(torch::kDouble);
  for (int i = 0; i < 6; ++i)
    EXPECT_NEAR(got[static_cast<size_t>(i)], yd[i].item<double>(), 1e-6) << "PyTorch with our weights, output " << i;

  auto back = small_model();
  load_torch_state_dict(*back, pt::load(from_python));
  std::remove(from_python.c_str());
  back->eval();
  at::Tensor yp = back->forward(x).flatten().to(torch::kDouble);
  for (int i = 0; i < 6; ++i)
    EXPECT_NEAR(got[static_cast<size_t>(6 + i)], yp[i].item<double>(), 1e-6) << "PyTorch's weights here, output " << i;
}

}  // namespace
}  // namespace loader
