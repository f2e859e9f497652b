// `loader gpu-check`: host-to-device bandwidth from our pinned shared-memory slabs vs
// pageable memory, and the loader's end-to-end batches/s with one device copy per
// batch.  One JSON line per measurement on stdout, a summary on stderr.  Without a
// usable CUDA device it prints "no CUDA device: <reason>" and exits with 77.
// bench/gpu_check.sh runs it next to PyTorch's pin_memory=True DataLoader; see
// docs/gpu.md.
//
//   loader gpu-check                          # W2 images, N = 4096, 2 workers
//   loader gpu-check --workers 4 --n 20000 --mb 256 --repeats 50
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "bench_workloads.h"
#include "command.h"
#include "loader/cuda_copy.h"
#include "loader/dataloader.h"
#include "loader/detail/cuda.h"
#include "loader/error.h"
#include "loader/pinned.h"
#include "loader/runtime/os/shm.h"

namespace loader::tool {

namespace {
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

constexpr int kNoDevice = 77;  // "skipped", as automake and ctest read it

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void emit(const Json& j) { std::cout << j.dump() << std::endl; }

Json bandwidth_row(const std::string& source, const void* host, size_t bytes, int repeats, CudaStream& stream,
                   const std::string& note = "") {
  detail::CopyTiming t = detail::time_host_to_device(host, bytes, repeats, stream);
  Json j;
  j["check"] = "h2d_bandwidth";
  j["source"] = source;
  j["bytes"] = bytes;
  j["repeats"] = repeats;
  j["seconds"] = t.seconds;
  j["GB_per_s"] = t.gb_per_s;
  j["wall_seconds"] = t.wall_seconds;
  if (!note.empty()) j["note"] = note;
  std::cerr << "[gpu-check] H2D from " << std::left << std::setw(28) << source << std::right << std::fixed
            << std::setprecision(2) << t.gb_per_s << " GB/s" << (note.empty() ? "" : "  (" + note + ")") << "\n";
  return j;
}

struct EpochResult {
  int64_t batches = 0, samples = 0, label_sum = 0;
  uint64_t bytes = 0;
  double seconds = 0, wait_s = 0;
  double next_s = 0;     ///< in DataLoader::Iterator::next()
  double submit_s = 0;   ///< in to_device_async (allocation and queued copies)
  double release_s = 0;  ///< destroying the previous DeviceBatch (its host batch and device buffer)
  double check_s = 0;    ///< the first batch copied back and compared: not counted in `seconds`
  int64_t inline_batches = 0, waits = 0;
  bool pinned = false, verified = true;
};

/// One epoch; with `stream` every batch is copied to the device while the next loads.
EpochResult run_epoch(DataLoader& dl, CudaStream* stream) {
  EpochResult r;
  std::optional<DeviceBatch> in_flight;
  auto t0 = Clock::now();
  auto it = dl.iter();
  auto n0 = Clock::now();
  while (auto batch = it.next()) {
    r.next_s += seconds_since(n0);
    const Tensor& images = (*batch)[0].to_tensor();
    const Tensor& labels = (*batch)[1].to_tensor();
    if (r.batches == 0) r.pinned = images.is_pinned();
    for (int64_t v : labels.to_int64_vector()) r.label_sum += v;
    r.samples += labels.size(0);
    ++r.batches;
    if (!stream) {
      r.bytes += images.nbytes() + labels.nbytes();
      n0 = Clock::now();
      continue;
    }
    auto s0 = Clock::now();
    DeviceBatch d = to_device_async(*batch, *stream);
    r.submit_s += seconds_since(s0);
    r.bytes += d.bytes();
    if (r.batches == 1) {
      // The copy is exact: the first batch's images come back from the device unchanged
      // (a check, not part of the epoch: its time is taken out).
      auto c0 = Clock::now();
      r.verified = d.to_host(0).equal(images);
      r.check_s = seconds_since(c0);
    }
    if (in_flight) {
      auto w0 = Clock::now();
      in_flight->wait();
      r.wait_s += seconds_since(w0);
    }
    auto f0 = Clock::now();
    in_flight = std::move(d);
    r.release_s += seconds_since(f0);
    n0 = Clock::now();
  }
  if (in_flight) {
    auto w0 = Clock::now();
    in_flight->wait();
    r.wait_s += seconds_since(w0);
  }
  r.seconds = seconds_since(t0) - r.check_s;
  const EpochStats st = it.stats();
  r.waits = st.waits;
  for (const auto& w : st.workers) r.inline_batches += w.inline_batches;
  return r;
}

struct GpuCheckOptions {
  bool quick = false;
  std::optional<int64_t> n, mb, repeats, epochs;  // defaults by --quick
  int64_t batch_size = 64, workers = 2, device = 0;
};

int run_gpu_check(const GpuCheckOptions& args) {
  const bool quick = args.quick;
  const int64_t n = args.n.value_or(quick ? 1024 : 4096);
  const int64_t b = args.batch_size;
  const int workers = static_cast<int>(args.workers);
  const int64_t mb = args.mb.value_or(quick ? 16 : 64);
  const int repeats = static_cast<int>(args.repeats.value_or(quick ? 5 : 20));
  const int epochs = static_cast<int>(args.epochs.value_or(quick ? 1 : 2));
  const int device = static_cast<int>(args.device);
  if (n <= 0 || b <= 0 || mb <= 0 || repeats <= 0 || epochs <= 0 || workers < 0)
    throw UsageError("--n, --batch-size, --mb, --repeats and --epochs must be positive, --workers >= 0");

  // ---- the device
  std::string why;
  Json dev;
  dev["check"] = "device";
  dev["built_with_cuda"] = built_with_cuda();
  if (!cuda_device_available(&why)) {
    dev["ok"] = false;
    dev["reason"] = "no CUDA device: " + why;
    emit(dev);
    std::cerr << "[gpu-check] no CUDA device: " << why << "\n"
              << "[gpu-check] nothing measured (exit status " << kNoDevice << "); see docs/gpu.md\n";
    return kNoDevice;
  }
  CudaDeviceInfo info = cuda_device_info(device);
  dev["ok"] = true;
  dev["device"] = info.device;
  dev["name"] = info.name;
  dev["total_memory_gib"] = static_cast<double>(info.total_memory) / (1 << 30);
  dev["compute_capability"] = std::to_string(info.compute_major) + "." + std::to_string(info.compute_minor);
  dev["driver_cuda_version"] = info.driver_version;
  dev["runtime_cuda_version"] = info.runtime_version;
  emit(dev);
  std::cerr << "[gpu-check] device " << info.device << ": " << info.name << ", driver CUDA " << info.driver_version
            << ", runtime CUDA " << info.runtime_version << "\n";
  CudaStream stream(device);

  // ---- raw host-to-device bandwidth from each kind of host memory
  const size_t bytes = static_cast<size_t>(mb) << 20;
  {
    auto pageable = Storage::allocate(bytes);
    std::memset(pageable->data(), 1, bytes);
    emit(bandwidth_row("pageable (heap)", pageable->data(), bytes, repeats, stream));
  }
  {
    PinResult how;
    auto pinned = allocate_pinned(bytes, &how);
    if (pinned) {
      std::memset(pinned->data(), 1, bytes);
      emit(bandwidth_row("cudaHostAlloc", pinned->data(), bytes, repeats, stream));
    } else {
      emit(Json{{"check", "h2d_bandwidth"}, {"source", "cudaHostAlloc"}, {"error", how.reason}});
    }
  }
  {
    // A slab exactly as the runtime makes one: POSIX shared memory, then cudaHostRegister.
    auto seg = runtime::ShmSegment::create(bytes);
    std::memset(seg->data(), 1, bytes);
    emit(bandwidth_row("shm slab, not registered", seg->data(), bytes, repeats, stream));
    PinResult r = pin_region(seg->data(), bytes);
    Json row = bandwidth_row(std::string("shm slab, pinned (") + pin_backend_name(r.backend) + ")", seg->data(), bytes,
                             repeats, stream, r.reason);
    row["pin_backend"] = pin_backend_name(r.backend);
    emit(row);
    unpin_region(seg->data(), bytes, r.backend);
  }

  // ---- the loader end to end: W2 images, with and without a device copy per batch
  const auto& wl = bench::workload_info("W2");
  const int64_t want_sum = bench::label_sum(n);
  int status = 0;
  for (bool pin : {false, true}) {
    DataLoaderOptions o;
    o.batch_size = b;
    o.num_workers = workers;
    o.pin_memory = pin;
    o.shuffle = true;
    o.generator = std::make_shared<Generator>(0);
    o.persistent_workers = workers > 0;
    DataLoader dl(bench::make_bench_dataset("W2", n, "gen"), o);
    for (bool copy : {false, true}) {
      for (int e = 1; e <= epochs; ++e) {
        EpochResult r = run_epoch(dl, copy ? &stream : nullptr);
        const PinStatus ps = dl.pin_memory_status();
        Json j;
        j["check"] = "loader_end_to_end";
        j["workload"] = wl.name;
        j["n"] = n;
        j["batch_size"] = b;
        j["workers"] = workers;
        j["pin_memory"] = pin;
        j["device_copy"] = copy;
        j["epoch"] = e;
        j["batches"] = r.batches;
        j["epoch_s"] = r.seconds;
        j["batches_per_s"] = static_cast<double>(r.batches) / r.seconds;
        j["GB_per_s"] = static_cast<double>(r.bytes) / r.seconds / 1e9;
        j["next_s"] = r.next_s;
        j["next_waits"] = r.waits;
        j["inline_batches"] = r.inline_batches;
        if (copy) {
          j["copy_wait_s"] = r.wait_s;
          j["submit_s"] = r.submit_s;
          j["release_s"] = r.release_s;
          j["check_s"] = r.check_s;
        }
        j["pinned"] = r.pinned;
        if (pin) {
          j["pin_backend"] = ps.backend_name();
          if (ps.backend != PinBackend::Cuda) j["pin_reason"] = ps.reason;
        }
        const bool ok = r.label_sum == want_sum && r.samples == n && r.verified;
        j["ok"] = ok;
        if (!ok) status = 1;
        emit(j);
        std::cerr << "[gpu-check] W2 w" << workers << (pin ? " pin_memory" : " pageable")
                  << (copy ? " + device copy" : " (no copy)   ") << " epoch " << e << ": " << std::fixed
                  << std::setprecision(1) << static_cast<double>(r.batches) / r.seconds << " batches/s, "
                  << std::setprecision(2) << static_cast<double>(r.bytes) / r.seconds / 1e9 << " GB/s"
                  << (pin ? std::string(", pin_backend ") + ps.backend_name() : std::string())
                  << (ok ? "" : "  CHECK FAILED") << "\n";
      }
    }
  }
  return status;
}

}  // namespace

void add_gpu_check_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("gpu-check", "Host-to-device bandwidth and end-to-end batches/s with a device copy "
                                              "(exit 77: no CUDA device); see docs/gpu.md");
  auto o = std::make_shared<GpuCheckOptions>();
  cmd->add_option("--n", o->n, "W2 dataset length (default 4096, --quick 1024)")->check(kInt64);
  cmd->add_option("--batch-size", o->batch_size, "batch size (default 64)")->check(kInt64);
  cmd->add_option("--workers", o->workers, "num_workers (default 2)")->check(kInt64);
  cmd->add_option("--epochs", o->epochs, "epochs per configuration (default 2, --quick 1)")->check(kInt64);
  cmd->add_option("--mb", o->mb, "MiB per bandwidth transfer (default 64, --quick 16)")->check(kInt64);
  cmd->add_option("--repeats", o->repeats, "transfers per bandwidth row (default 20, --quick 5)")->check(kInt64);
  cmd->add_option("--device", o->device, "CUDA device (default 0)")->check(kInt64);
  cmd->add_flag("--quick", o->quick, "smaller defaults");
  on_run(cmd, [o] { return run_gpu_check(*o); });
}

}  // namespace loader::tool
