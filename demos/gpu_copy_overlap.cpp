// Overlapping host-to-device copies with loading: the C++ form of
//
//   loader = DataLoader(ds, batch_size=64, num_workers=2, pin_memory=True)
//   for images, labels in loader:
//       images = images.to('cuda', non_blocking=True)
//
// Worker processes collate image batches straight into shared-memory slabs that the
// pin-memory actor registered with CUDA once, so every batch arrives pinned; the
// copy of batch k runs on a CUDA stream while batch k+1 is being loaded, and the
// host waits for it only when it needs batch k on the device.
//
//   gpu_copy_overlap [--n 4096] [--batch-size 64] [--workers 2] [--no-pin]
//
// Without a CUDA device it says "no CUDA device: <reason>" and exits with 77.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>

#include "loader/cuda_copy.h"
#include "loader/dataloader.h"
#include "loader/error.h"
#include "loader/worker_main.h"

namespace {

constexpr int64_t kImage = 3 * 224 * 224;

/// Sample i: (uint8[3,224,224] with byte k = (i*31 + k) & 0xFF, int64 i % 10): the
/// W2 image of bench/WORKLOADS.md.
class ImageDataset : public loader::Dataset {
 public:
  explicit ImageDataset(int64_t n) : n_(n) {}
  loader::Value get(int64_t i) override {
    if (i < 0 || i >= n_) throw loader::IndexError("index " + std::to_string(i) + " out of range for ImageDataset");
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
LOADER_REGISTER_DATASET("gpu_demo_images",
                        [](const loader::Value& p) { return std::make_shared<ImageDataset>(p.at("n").to_int()); });

int64_t arg_int(int argc, char** argv, const std::string& name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (name == argv[i]) return std::stoll(argv[i + 1]);
  return fallback;
}

bool arg_flag(int argc, char** argv, const std::string& name) {
  for (int i = 1; i < argc; ++i)
    if (name == argv[i]) return true;
  return false;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = loader::runtime::run_worker_if_requested(argc, argv)) return *rc;
  const int64_t n = arg_int(argc, argv, "--n", 4096);
  const int64_t batch_size = arg_int(argc, argv, "--batch-size", 64);
  const int workers = static_cast<int>(arg_int(argc, argv, "--workers", 2));
  const bool pin = !arg_flag(argc, argv, "--no-pin");

  std::optional<loader::CudaStream> stream;
  try {
    stream.emplace();
  } catch (const loader::CudaUnavailable& e) {
    std::cerr << e.what() << "\n";
    return 77;
  }

  loader::DataLoaderOptions opts;
  opts.batch_size = batch_size;
  opts.num_workers = workers;
  opts.pin_memory = pin;
  loader::DataLoader dl(loader::make_dataset({"gpu_demo_images", loader::Value::dict({{"n", n}})}), opts);

  auto t0 = std::chrono::steady_clock::now();
  double waited = 0;
  int64_t batches = 0;
  uint64_t bytes = 0;
  bool all_pinned = true, exact = true;
  std::optional<loader::DeviceBatch> in_flight;  // batch k, copying while k+1 loads
  auto it = dl.iter();
  while (auto batch = it.next()) {
    const loader::Tensor& images = (*batch)[0].to_tensor();
    all_pinned = all_pinned && images.is_pinned();
    loader::DeviceBatch copy = loader::to_device_async(*batch, *stream);  // returns at once
    bytes += copy.bytes();
    if (batches == 0) exact = copy.to_host(0).equal(images);  // a check, once
    if (in_flight) {
      auto w0 = std::chrono::steady_clock::now();
      in_flight->wait();  // batch k is on the device: a training step would run here
      waited += since(w0);
    }
    in_flight = std::move(copy);  // the host batch may go: the DeviceBatch holds its slab
    ++batches;
  }
  if (in_flight) in_flight->wait();
  const double s = since(t0);

  const loader::PinStatus ps = dl.pin_memory_status();
  std::cout << "batches: " << batches << ", " << static_cast<double>(batches) / s << " batches/s, "
            << static_cast<double>(bytes) / s / 1e9 << " GB/s to the device\n"
            << "host waited for copies: " << waited << " s of " << s << " s\n"
            << "pin_memory: " << (pin ? "true" : "false") << ", backend " << ps.backend_name()
            << ", batches pinned: " << (all_pinned ? "yes" : "no") << (ps.reason.empty() ? "" : " (" + ps.reason + ")")
            << "\n"
            << "first batch identical on the device: " << (exact ? "yes" : "NO") << "\n";
  return exact ? 0 : 1;
}
