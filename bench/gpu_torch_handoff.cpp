// The libtorch hand-off of pinned batches, on a GPU (docs/gpu.md, "Handing pinned batches
// to other libraries"): batches from 2 worker processes with pin_memory = true become
// torch tensors with loader::to_torch (no copy), libtorch sees them as pinned, and
// `.to(kCUDA, non_blocking=true)` copies them to the device exactly.  The same loop
// without pin_memory is the comparison.  One JSON line per epoch on stdout; exit status
// 0 when every check held, 1 when one failed, 77 without a CUDA device.
//
// Built against a CUDA build of libtorch (bench/gpu_bundle.sh builds it on the GPU
// machine with the PyTorch wheel's headers and libraries):
//
//   gpu_torch_handoff [--n 2048] [--workers 2] [--epochs 2]
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <string>

#include "loader/dataloader.h"
#include "loader/torch.h"
#include "loader/worker_main.h"

namespace {

constexpr int64_t kImage = 3 * 224 * 224;

/// W2's image: byte k of sample i is (i*31 + k) & 0xFF; label i % 10.
class HandoffImages : public loader::Dataset {
 public:
  explicit HandoffImages(int64_t n) : n_(n) {}
  loader::Value get(int64_t i) override {
    loader::Tensor img = loader::Tensor::empty({3, 224, 224}, loader::DType::UInt8);
    auto* p = img.data<uint8_t>();
    const auto base = static_cast<uint8_t>((i * 31) & 0xFF);
    for (int64_t k = 0; k < kImage; ++k) p[k] = static_cast<uint8_t>(base + static_cast<uint8_t>(k & 0xFF));
    return loader::Value::tuple({loader::Value(img), loader::Value(int64_t{i % 10})});
  }
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};
LOADER_REGISTER_DATASET("handoff_images",
                        [](const loader::Value& p) { return std::make_shared<HandoffImages>(p.at("n").to_int()); });

int64_t arg_int(int argc, char** argv, const std::string& name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (name == argv[i]) return std::stoll(argv[i + 1]);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
  const int64_t n = arg_int(argc, argv, "--n", 2048);
  const int workers = static_cast<int>(arg_int(argc, argv, "--workers", 2));
  const int epochs = static_cast<int>(arg_int(argc, argv, "--epochs", 2));
  if (!torch::cuda::is_available()) {
    std::cout << R"({"check":"torch_handoff","ok":false,"reason":"torch::cuda::is_available() is false"})" << "\n";
    return 77;
  }
  int status = 0;
  for (bool pin : {true, false}) {
    loader::DataLoaderOptions o;
    o.batch_size = 64;
    o.num_workers = workers;
    o.pin_memory = pin;
    o.persistent_workers = workers > 0;
    loader::DataLoader dl(loader::make_dataset({"handoff_images", loader::Value::dict({{"n", n}})}), o);
    for (int e = 1; e <= epochs; ++e) {
      int64_t batches = 0, label_sum = 0;
      int64_t torch_unpinned = 0, first_torch_unpinned = -1;  // batches libtorch called unpinned
      bool no_copy = true, loader_pinned = true, exact = true;
      double copy_s = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (auto it = dl.iter(); auto batch = it.next();) {
        const loader::Tensor& images = (*batch)[0].to_tensor();
        at::Tensor x = loader::to_torch(images);  // the slab's bytes, no copy
        at::Tensor y = loader::to_torch((*batch)[1].to_tensor());
        no_copy = no_copy && x.data_ptr() == images.data_ptr();
        if (!x.is_pinned()) {
          if (torch_unpinned++ == 0) first_torch_unpinned = batches;
        }
        loader_pinned = loader_pinned && images.is_pinned();
        const auto c0 = std::chrono::steady_clock::now();
        at::Tensor d = x.to(torch::kCUDA, /*non_blocking=*/true);
        at::Tensor l = y.to(torch::kCUDA, /*non_blocking=*/true);
        // The host batch must outlive the copies that read it: wait before it goes.
        torch::cuda::synchronize();
        copy_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
        if (batches == 0 || batches % 16 == 0) exact = exact && torch::equal(d.cpu(), x) && torch::equal(l.cpu(), y);
        label_sum += l.sum().item<int64_t>();
        ++batches;
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const int64_t want = 45 * (n / 10) + (n % 10) * (n % 10 - 1) / 2;
      // libtorch answers is_pinned() false while its CUDA context does not exist yet
      // (before the first copy of the process), so the first batch may say so.
      const bool torch_agrees = pin ? torch_unpinned <= (first_torch_unpinned == 0 ? 1 : 0) : torch_unpinned == batches;
      const bool ok = exact && no_copy && label_sum == want && loader_pinned == pin && torch_agrees;
      if (!ok) status = 1;
      std::cout << "{\"check\":\"torch_handoff\",\"torch\":\"" << TORCH_VERSION << "\",\"pin_memory\":" << pin
                << ",\"workers\":" << workers << ",\"epoch\":" << e << ",\"batches\":" << batches
                << ",\"epoch_s\":" << s << ",\"batches_per_s\":" << static_cast<double>(batches) / s
                << ",\"copy_s\":" << copy_s << ",\"to_torch_no_copy\":" << no_copy
                << ",\"torch_unpinned_batches\":" << torch_unpinned << ",\"first_torch_unpinned\":" << first_torch_unpinned
                << ",\"loader_is_pinned\":" << loader_pinned
                << ",\"device_copy_exact\":" << exact << ",\"label_sum_ok\":" << (label_sum == want)
                << ",\"pin_backend\":\"" << dl.pin_memory_status().backend_name() << "\",\"ok\":" << ok << "}\n";
    }
  }
  return status;
}
