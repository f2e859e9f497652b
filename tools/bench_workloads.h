// The standard DataLoader workloads W1-W4 (bench/WORKLOADS.md) as
// registered dataset types, written the way a C++ user would write them.
//
//   // "gen": every sample is generated from its index.
//   auto w1 = loader::make_dataset({"bench_w1", loader::Value::dict({{"n", 1000000}})});
//   // "tensor": the samples live in a memory-mapped file that every worker maps
//   // (one copy in memory, however many workers).
//   loader::bench::MaterializedFile file("W2", 20000);       // memfd, unlinked
//   auto w2 = loader::make_dataset({"bench_w2", loader::Value::dict(
//       {{"n", 20000}, {"variant", "tensor"}, {"path", file.path()}})});
//   // W4: an IterableDataset sharded by get_worker_info(), as the PyTorch docs do.
//   auto w4 = loader::make_iterable_dataset({"bench_w4", loader::Value::dict({{"n", 1000000}})});
//
// Types and parameters (all registered in this file's translation unit, which is
// linked into the `loader` tool, the worker binary):
//   bench_w1, bench_w2, bench_w3: {n, variant = "gen" | "tensor", path (tensor only)}
//                                 W2 also "aug": generated, then a random horizontal flip and
//                                 brightness offset per sample from the default generator
//   bench_w4 (iterable):          {n, variant = "gen" (int samples) | "batched" (int64[B]
//                                  tensors, for batch_size = None), batch_size (batched)}
// Map-style workloads implement sample_spec()/get_into(), so with the default
// collate each sample is written once, straight into its row of the batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "loader/dataset.h"

namespace loader::bench {

/// One workload's fixed definition.
struct WorkloadInfo {
  const char* name;            ///< "W1".."W4"
  int64_t n;                   ///< N of the definition
  int64_t suite_n;             ///< N the timed suite runs (peer_torch.py's benchN)
  int64_t quick_n;             ///< N for --quick
  int64_t batch_size;          ///< B
  bool iterable;               ///< W4
  size_t bytes_per_sample;     ///< payload bytes per sample (all batch tensors)
  const char* dataset_type;    ///< registered type name, "bench_w1".."bench_w4"
};

/// The workload called `name` ("W1".."W4", case-insensitive); ValueError otherwise.
const WorkloadInfo& workload_info(const std::string& name);

constexpr int64_t kImageBytes = 3 * 224 * 224;  // 150528

// ---- the sample definitions, as plain functions (the datasets and tests use them)
/// W1: features[j] = ((i*16 + j) mod 1000) / 1000.0f, j < 16.
void w1_features(int64_t i, float* out16);
/// W2: flat byte k = (i*31 + k) & 0xFF, k < 150528.
void w2_image(int64_t i, uint8_t* out);
/// W3: out[c,h,w] = ((float)src[c,h,w'] - M[c]) * R[c], w' = 223 - w for odd i.
/// `src` is the W2 image of index i (generated when null).
void w3_image(int64_t i, const uint8_t* src, float* out);
/// The label of sample i (all map-style workloads): i mod 10.
inline int64_t label_of(int64_t i) { return i % 10; }
/// Sum of labels over [0, n): 45*(n div 10) + r*(r-1)/2.
int64_t label_sum(int64_t n);
/// W4's shard of worker w of W (W <= 1: everything): [begin, end).
std::pair<int64_t, int64_t> w4_shard(int64_t n, int worker, int num_workers);

/// A workload's samples materialised in an anonymous memory file (memfd), unlinked
/// from the start so nothing is left behind.  path() names it for other processes
/// ("/proc/<pid>/fd/<fd>"), valid while this object lives.  Layout: a 4096-byte
/// header, the features (W1: float32[n,16]; W2/W3: uint8[n,3,224,224]), the labels
/// (int64[n]), each starting on a 4096-byte boundary.
class MaterializedFile {
 public:
  MaterializedFile(const std::string& workload, int64_t n);
  ~MaterializedFile();
  MaterializedFile(const MaterializedFile&) = delete;
  MaterializedFile& operator=(const MaterializedFile&) = delete;
  const std::string& path() const noexcept { return path_; }
  uint64_t bytes() const noexcept { return bytes_; }

 private:
  int fd_ = -1;
  uint64_t bytes_ = 0;
  std::string path_;
};

/// Creates the dataset of `workload` ("W1".."W3") with the given variant; `path` is
/// required for "tensor".  Equivalent to make_dataset({"bench_wK", params}).
std::shared_ptr<Dataset> make_bench_dataset(const std::string& workload, int64_t n,
                                            const std::string& variant,
                                            const std::string& path = "");

}  // namespace loader::bench
