#include "bench_workloads.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "loader/batch_copy.h"
#include "loader/error.h"
#include "loader/generator.h"
#include "loader/image/image_folder.h"
#include "loader/worker_info.h"

namespace loader::bench {

namespace {
// name, N, suite N, quick N, B, iterable, bytes/sample, dataset type
const WorkloadInfo kWorkloads[] = {
    {"W1", 1000000, 250000, 50000, 256, false, 16 * 4 + 8, "bench_w1"},
    {"W2", 20000, 20000, 2000, 64, false, kImageBytes + 8, "bench_w2"},
    {"W3", 5000, 5000, 500, 64, false, kImageBytes * 4 + 8, "bench_w3"},
    {"W4", 1000000, 250000, 50000, 256, true, 8, "bench_w4"},
    {"W5", 3000, 3000, 640, 64, false, kImageBytes * 4 + 8, "image_folder"},
};

// W3 constants (WORKLOADS.md): M = 255 * ImageNet mean, R = (float)(1 / (255 * std)).
const float kW3Mean[3] = {123.675f, 116.28f, 103.53f};
const float kW3Recip[3] = {static_cast<float>(1.0 / 58.395), static_cast<float>(1.0 / 57.12),
                           static_cast<float>(1.0 / 57.375)};

constexpr int64_t kPlane = 224 * 224;
}  // namespace

const WorkloadInfo& workload_info(const std::string& name) {
  std::string up = name;
  for (auto& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const auto& w : kWorkloads)
    if (up == w.name) return w;
  throw ValueError("unknown workload '" + name + "': expected W1, W2, W3, W4 or W5 (defined in bench/WORKLOADS.md of the loader repository)");
}

int64_t label_sum(int64_t n) {
  int64_t r = n % 10;
  return 45 * (n / 10) + r * (r - 1) / 2;
}

std::pair<int64_t, int64_t> w4_shard(int64_t n, int worker, int num_workers) {
  if (num_workers <= 1) return {0, n};
  int64_t per = (n + num_workers - 1) / num_workers;
  int64_t lo = std::min<int64_t>(worker * per, n);
  return {lo, std::min<int64_t>(lo + per, n)};
}

// ------------------------------------------------------------------ sample kernels
void w1_features(int64_t i, float* out16) {
  int64_t k = (i * 16) % 1000;
  for (int j = 0; j < 16; ++j) {
    int64_t v = k + j;
    if (v >= 1000) v -= 1000;
    out16[j] = static_cast<float>(v) / 1000.0f;
  }
}

void w2_image(int64_t i, uint8_t* out) {
  const auto s = static_cast<uint8_t>((i * 31) & 0xFF);
#if defined(__x86_64__)
  // 16 bytes at a time: (s + k) wraps mod 256 in each byte lane.  kImageBytes is a
  // multiple of 16.
  __m128i v = _mm_add_epi8(_mm_set1_epi8(static_cast<char>(s)),
                           _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __m128i step = _mm_set1_epi8(16);
  for (int64_t k = 0; k < kImageBytes; k += 16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k), v);
    v = _mm_add_epi8(v, step);
  }
#else
  for (int64_t k = 0; k < kImageBytes; ++k) out[k] = static_cast<uint8_t>(s + k);
#endif
}

namespace {
// One row of 224 pixels of channel c: out[w] = ((float)src[w'] - M) * R, with
// w' = 223 - w when `flip`.  Two roundings, no FMA.
void w3_row_scalar(const uint8_t* src, float* out, float m, float r, bool flip) {
  for (int w = 0; w < 224; ++w) {
    float x = static_cast<float>(src[flip ? 223 - w : w]);
    float y = x - m;
    out[w] = y * r;
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void w3_image_avx2(const uint8_t* src, float* out, bool flip,
                                                    const uint8_t* (*row_src)(const uint8_t*, int64_t, uint8_t*),
                                                    int64_t i) {
  alignas(32) uint8_t tmp[224];
  const __m128i reverse8 = _mm_setr_epi8(7, 6, 5, 4, 3, 2, 1, 0, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int c = 0; c < 3; ++c) {
    const __m256 m = _mm256_set1_ps(kW3Mean[c]);
    const __m256 r = _mm256_set1_ps(kW3Recip[c]);
    for (int h = 0; h < 224; ++h) {
      const int64_t row = c * kPlane + h * 224;
      const uint8_t* s = row_src ? row_src(src, i * 31 + row, tmp) : src + row;
      float* o = out + row;
      if (!flip) {
        for (int w = 0; w < 224; w += 8) {
          __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + w));
          __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
          _mm256_storeu_ps(o + w, _mm256_mul_ps(_mm256_sub_ps(x, m), r));
        }
      } else {
        for (int w = 0; w < 224; w += 8) {
          // out[w..w+7] = s[223-w .. 216-w]: load s[216-w .. 223-w] and reverse.
          __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + 216 - w));
          b = _mm_shuffle_epi8(b, reverse8);
          __m256 x = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
          _mm256_storeu_ps(o + w, _mm256_mul_ps(_mm256_sub_ps(x, m), r));
        }
      }
    }
  }
}

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

// Generates the 224 source bytes of the row starting at flat byte (i*31 + k0) into tmp.
const uint8_t* generated_row(const uint8_t* /*unused*/, int64_t start, uint8_t* tmp) {
  const auto s = static_cast<uint8_t>(start & 0xFF);
#if defined(__x86_64__)
  __m128i v = _mm_add_epi8(_mm_set1_epi8(static_cast<char>(s)),
                           _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const __m128i step = _mm_set1_epi8(16);
  for (int k = 0; k < 224; k += 16) {
    _mm_store_si128(reinterpret_cast<__m128i*>(tmp + k), v);
    v = _mm_add_epi8(v, step);
  }
#else
  for (int k = 0; k < 224; ++k) tmp[k] = static_cast<uint8_t>(s + k);
#endif
  return tmp;
}
}  // namespace

void w3_image(int64_t i, const uint8_t* src, float* out) {
  const bool flip = (i & 1) != 0;
#if defined(__x86_64__)
  if (have_avx2()) {
    w3_image_avx2(src, out, flip, src ? nullptr : &generated_row, i);
    return;
  }
#endif
  alignas(32) uint8_t tmp[224];
  for (int c = 0; c < 3; ++c)
    for (int h = 0; h < 224; ++h) {
      const int64_t row = c * kPlane + h * 224;
      const uint8_t* s = src ? src + row : generated_row(nullptr, i * 31 + row, tmp);
      w3_row_scalar(s, out + row, kW3Mean[c], kW3Recip[c], flip);
    }
}

// ------------------------------------------------------------------ the data file
namespace {
constexpr char kMagic[8] = {'L', 'D', 'R', 'B', 'E', 'N', 'C', 'H'};
constexpr uint64_t kAlign = 4096;

struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t workload;  // 1..3
  int64_t n;
  uint64_t features_offset, features_bytes, labels_offset, labels_bytes, total_bytes;
};

uint64_t align_up(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

FileHeader layout(int workload, int64_t n) {
  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = 1;
  h.workload = static_cast<uint32_t>(workload);
  h.n = n;
  const uint64_t row = workload == 1 ? 16 * sizeof(float) : static_cast<uint64_t>(kImageBytes);
  h.features_offset = kAlign;
  h.features_bytes = row * static_cast<uint64_t>(n);
  h.labels_offset = align_up(h.features_offset + h.features_bytes);
  h.labels_bytes = 8 * static_cast<uint64_t>(n);
  h.total_bytes = align_up(h.labels_offset + h.labels_bytes);
  return h;
}

int workload_number(const std::string& name) { return workload_info(name).name[1] - '0'; }

std::string errno_text() { return std::strerror(errno); }

/// A read-only (or read-write) shared mapping of a whole file, and (optionally) the
/// file's descriptor; unmapped and closed on destruction.
class Mapping {
 public:
  Mapping(void* p, size_t len, int fd = -1) : p_(p), len_(len), fd_(fd) {}
  ~Mapping() {
    if (p_ != nullptr && p_ != MAP_FAILED) ::munmap(p_, len_);
    if (fd_ >= 0) ::close(fd_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  uint8_t* data() const noexcept { return static_cast<uint8_t*>(p_); }
  size_t size() const noexcept { return len_; }
  int fd() const noexcept { return fd_; }

 private:
  void* p_;
  size_t len_;
  int fd_;
};

std::shared_ptr<Mapping> map_file_uncached(const std::string& path, int workload, int64_t n);

/// The dataset file's mapping, kept for the life of a worker process: a worker
/// re-initialised for a new epoch (fresh dataset from its handle) finds its pages
/// already mapped instead of faulting every page in again (about 1.7 us per 4 KiB
/// page on these machines).  Keyed by the file's identity, so a changed file is
/// mapped anew.  Only in worker processes: the main process maps per dataset.
std::shared_ptr<Mapping> map_file(const std::string& path, int workload, int64_t n) {
  if (!get_worker_info()) return map_file_uncached(path, workload, n);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return map_file_uncached(path, workload, n);
  const std::string key = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" +
                          std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
                          std::to_string(st.st_mtim.tv_nsec) + ":" + std::to_string(workload) + ":" +
                          std::to_string(n);
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<Mapping>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& m = cache[key];
  if (!m) m = map_file_uncached(path, workload, n);
  return m;
}

std::shared_ptr<Mapping> map_file_uncached(const std::string& path, int workload, int64_t n) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw ValueError("bench dataset W" + std::to_string(workload) + ": cannot open data file '" + path +
                     "': " + errno_text() + " (the file is made by loader::bench::MaterializedFile in the "
                     "main process and must outlive the DataLoader)");
  struct stat st {};
  ::fstat(fd, &st);
  const auto want = layout(workload, n);
  if (static_cast<uint64_t>(st.st_size) != want.total_bytes) {
    ::close(fd);
    throw ValueError("bench dataset W" + std::to_string(workload) + ": data file '" + path + "' has " +
                     std::to_string(st.st_size) + " bytes, expected " + std::to_string(want.total_bytes) +
                     " for n=" + std::to_string(n) + ": make it with MaterializedFile(\"W" +
                     std::to_string(workload) + "\", " + std::to_string(n) + ")");
  }
  void* p = ::mmap(nullptr, want.total_bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    std::string why = errno_text();
    ::close(fd);
    throw RuntimeError("bench dataset: mmap of '" + path + "' (" + std::to_string(want.total_bytes) +
                       " bytes) failed: " + why);
  }
  auto m = std::make_shared<Mapping>(p, want.total_bytes, fd);
  FileHeader got{};
  std::memcpy(&got, m->data(), sizeof got);
  if (std::memcmp(got.magic, kMagic, sizeof kMagic) != 0 || got.version != 1 ||
      got.workload != want.workload || got.n != n)
    throw ValueError("bench dataset W" + std::to_string(workload) + ": '" + path +
                     "' is not a bench data file for this workload and n=" + std::to_string(n));
  return m;
}
}  // namespace

MaterializedFile::MaterializedFile(const std::string& workload, int64_t n) {
  const int wl = workload_number(workload);
  if (wl < 1 || wl > 3)
    throw ValueError("MaterializedFile: workload " + workload + " has no in-memory variant (W1, W2, W3 only)");
  if (n <= 0) throw ValueError("MaterializedFile: n must be positive, got " + std::to_string(n));
  const auto h = layout(wl, n);
  const std::string name = "loader-bench-W" + std::to_string(wl);
  fd_ = ::memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd_ < 0) throw RuntimeError("MaterializedFile: memfd_create failed: " + errno_text());
  if (::ftruncate(fd_, static_cast<off_t>(h.total_bytes)) != 0) {
    std::string why = errno_text();
    ::close(fd_);
    throw RuntimeError("MaterializedFile: cannot size the data file to " + std::to_string(h.total_bytes) +
                       " bytes: " + why);
  }
  bytes_ = h.total_bytes;
  void* p = ::mmap(nullptr, h.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    std::string why = errno_text();
    ::close(fd_);
    throw RuntimeError("MaterializedFile: mmap of " + std::to_string(h.total_bytes) + " bytes failed: " + why);
  }
  Mapping m(p, h.total_bytes);
  uint8_t* base = m.data();
  std::memcpy(base, &h, sizeof h);
  auto* labels = reinterpret_cast<int64_t*>(base + h.labels_offset);
  for (int64_t i = 0; i < n; ++i) labels[i] = label_of(i);
  auto fill = [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      if (wl == 1) w1_features(i, reinterpret_cast<float*>(base + h.features_offset) + i * 16);
      else w2_image(i, base + h.features_offset + static_cast<uint64_t>(i) * kImageBytes);
    }
  };
  // Two threads: materialisation is not timed, but 3 GB should not take long.
  std::thread other(fill, n / 2, n);
  fill(0, n / 2);
  other.join();
  path_ = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd_);
}

MaterializedFile::~MaterializedFile() {
  if (fd_ >= 0) ::close(fd_);
}

// ------------------------------------------------------------------ map-style datasets
namespace {

/// W1, W2 and W3 in both variants: "gen" computes each sample from its index;
/// "tensor" reads it from the shared memory-mapped file.
class MapWorkload final : public Dataset {
 public:
  MapWorkload(int workload, int64_t n, bool in_memory, const std::string& path, bool aug = false)
      : wl_(workload), n_(n), aug_(aug) {
    if (n <= 0) throw ValueError("n must be positive, got " + std::to_string(n));
    if (in_memory) {
      mapping_ = map_file(path, workload, n);
      const auto h = layout(workload, n);
      features_ = mapping_->data() + h.features_offset;
      labels_ = reinterpret_cast<const int64_t*>(mapping_->data() + h.labels_offset);
      std::shared_ptr<const void> owner = mapping_;
      auto storage = [&](uint64_t off, uint64_t len) {
        return Storage::wrap(mapping_->data() + off, len, owner, MemoryKind::FileMapping);
      };
      Dims shape = wl_ == 1 ? Dims{n, 16} : Dims{n, 3, 224, 224};
      features_tensor_ = Tensor(storage(h.features_offset, h.features_bytes),
                                wl_ == 1 ? DType::Float32 : DType::UInt8, shape, contiguous_strides(shape), 0);
      labels_tensor_ = Tensor(storage(h.labels_offset, h.labels_bytes), DType::Int64, Dims{n}, Dims{1}, 0);
    }
    spec_ = Value::tuple({Tensor::empty(sample_shape(), sample_dtype()), Tensor::empty(Dims{}, DType::Int64)});
  }

  int64_t size() const override { return n_; }

  Value get(int64_t i) override {
    check(i);
    if (mapping_) {
      if (wl_ != 3) return Value::tuple({features_tensor_[i], labels_tensor_[i]});
      Tensor out = Tensor::empty(sample_shape(), DType::Float32);
      w3_image(i, features_ + static_cast<uint64_t>(i) * kImageBytes, out.data<float>());
      return Value::tuple({out, labels_tensor_[i]});
    }
    Tensor out = Tensor::empty(sample_shape(), sample_dtype());
    switch (wl_) {
      case 1: w1_features(i, out.data<float>()); break;
      case 2: w2_image(i, out.data<uint8_t>()); break;
      default: w3_image(i, nullptr, out.data<float>()); break;
    }
    if (aug_) augment(out.data<uint8_t>());
    return Value::tuple({out, Value(label_of(i))});  // the label as a plain int, as a Python user would
  }

  std::optional<Value> sample_spec() const override { return spec_; }

  void get_into(int64_t i, void* const* leaves) override {
    check(i);
    auto* label = static_cast<int64_t*>(leaves[1]);
    if (mapping_) {
      // Every process copies its samples straight out of its mapping of the data file
      // (map_file: one mapping per worker process, kept across epochs).  Measured against
      // pread into the batch on this machine (2026-11-25, 2 workers, 2 x 4 epochs
      // alternated): W2 49-52 k -> 55-65 k samples/s warm and 31-32 k -> 34 k in the
      // first epoch, W3 15-17 k -> 20-23 k; a worker's first read of a page costs a
      // fault, but pread's per-page kernel copy costs more on every read.
      const uint8_t* src = features_ + static_cast<uint64_t>(i) * (wl_ == 1 ? 64 : kImageBytes);
      switch (wl_) {
        case 1: std::memcpy(leaves[0], src, 64); break;
        case 2: copy_into_batch(leaves[0], src, kImageBytes); break;
        default: w3_image(i, src, static_cast<float*>(leaves[0]));
      }
      *label = labels_[i];
      return;
    }
    switch (wl_) {
      case 1: w1_features(i, static_cast<float*>(leaves[0])); break;
      case 2: w2_image(i, static_cast<uint8_t*>(leaves[0])); break;
      default: w3_image(i, nullptr, static_cast<float*>(leaves[0])); break;
    }
    if (aug_) augment(static_cast<uint8_t*>(leaves[0]));
    *label = label_of(i);
  }

  /// W1 from memory gathers its rows in one loop, the row 8 ahead prefetched (what
  /// libtorch's `tensor_batched` variant does with one index_select per batch).
  void get_batch_into(const IndexBatch& indices, const BatchRows& rows) override {
    if (!mapping_ || wl_ != 1) return Dataset::get_batch_into(indices, rows);
    for (int64_t i : indices) check(i);
    auto* features = rows.base[0];
    auto* labels = reinterpret_cast<int64_t*>(rows.base[1]);
    constexpr size_t kAhead = 8;
    const size_t n = indices.size();
    for (size_t r = 0; r < n; ++r) {
      if (r + kAhead < n) {
        __builtin_prefetch(features_ + indices[r + kAhead] * 64);
        __builtin_prefetch(labels_ + indices[r + kAhead]);
      }
      std::memcpy(features + r * 64, features_ + indices[r] * 64, 64);
      labels[r] = labels_[indices[r]];
    }
  }

 private:
  void check(int64_t i) const {
    if (i < 0 || i >= n_)
      throw IndexError("bench_w" + std::to_string(wl_) + ": index " + std::to_string(i) +
                       " is out of range for a dataset of " + std::to_string(n_) + " samples");
  }
  Dims sample_shape() const { return wl_ == 1 ? Dims{16} : Dims{3, 224, 224}; }

  /// W2's "aug" variant: a random horizontal flip (probability 1/2) and a random
  /// brightness offset (0..255, added mod 256) per sample, drawn from the default
  /// generator, i.e. the worker's, as a torchvision transform would: the batches depend
  /// on how that generator is seeded (DataLoaderOptions::worker_seeding).
  static void augment(uint8_t* image) {
    Generator& g = default_generator();
    const bool flip = (g.random64() & 1) != 0;
    const auto offset = static_cast<uint8_t>(g.random64() % 256);
    for (int row = 0; row < 3 * 224; ++row) {
      uint8_t* p = image + row * 224;
      if (flip) std::reverse(p, p + 224);
      for (int w = 0; w < 224; ++w) p[w] = static_cast<uint8_t>(p[w] + offset);
    }
  }
  DType sample_dtype() const { return wl_ == 2 ? DType::UInt8 : DType::Float32; }

  int wl_;
  int64_t n_;
  bool aug_;
  std::shared_ptr<Mapping> mapping_;
  const uint8_t* features_ = nullptr;
  const int64_t* labels_ = nullptr;
  Tensor features_tensor_, labels_tensor_;
  Value spec_;
};

// ------------------------------------------------------------------ W4
/// The PyTorch docs' IterableDataset example: worker w of W yields its shard
/// [w*per, min((w+1)*per, n)) in order.  "gen" yields one int per sample (batch it
/// with batch_size = B); "batched" yields int64 tensors of up to B consecutive values
/// (use batch_size = None).
class W4Iterable final : public IterableDataset {
 public:
  W4Iterable(int64_t n, bool batched, int64_t batch_size) : n_(n), batched_(batched), b_(batch_size) {
    if (n <= 0) throw ValueError("n must be positive, got " + std::to_string(n));
    if (batched && b_ <= 0) throw ValueError("batch_size must be positive, got " + std::to_string(b_));
  }

  std::unique_ptr<Cursor<Value>> iter() override {
    const WorkerInfo* info = get_worker_info();
    auto [lo, hi] = info ? w4_shard(n_, info->id, info->num_workers) : std::make_pair(int64_t{0}, n_);
    if (!batched_)
      return make_cursor<Value>([i = lo, end = hi]() mutable -> std::optional<Value> {
        if (i >= end) return std::nullopt;
        return Value(i++);
      });
    return make_cursor<Value>([i = lo, end = hi, b = b_]() mutable -> std::optional<Value> {
      if (i >= end) return std::nullopt;
      int64_t m = std::min(b, end - i);
      Tensor t = Tensor::empty(Dims{m}, DType::Int64);
      auto* p = t.data<int64_t>();
      for (int64_t k = 0; k < m; ++k) p[k] = i + k;
      i += m;
      return Value(std::move(t));
    });
  }

  std::optional<int64_t> size() const override {
    return batched_ ? (n_ + b_ - 1) / b_ : n_;
  }

 private:
  int64_t n_;
  bool batched_;
  int64_t b_;
};

int64_t param_n(const Value& p, int wl) {
  const int64_t def = kWorkloads[wl - 1].n;
  return p.is_dict() ? p.get("n", Value(def)).to_int() : def;
}

std::string param_string(const Value& p, const std::string& key, const std::string& def) {
  return p.is_dict() ? p.get(key, Value(def)).to_string() : def;
}

std::shared_ptr<Dataset> make_map_workload(int wl, const Value& p) {
  const std::string variant = param_string(p, "variant", "gen");
  if (variant == "aug" && wl == 2) return std::make_shared<MapWorkload>(wl, param_n(p, wl), false, "", true);
  if (variant != "gen" && variant != "tensor")
    throw ValueError("variant must be 'gen' (generate from the index), 'tensor' (memory-mapped file) or, for W2, "
                     "'aug' (generated, then a random flip and offset per sample), got '" + variant + "'");
  const std::string path = param_string(p, "path", "");
  if (variant == "tensor" && path.empty())
    throw ValueError("variant 'tensor' needs 'path': the data file made by MaterializedFile");
  return std::make_shared<MapWorkload>(wl, param_n(p, wl), variant == "tensor", path);
}

}  // namespace

LOADER_REGISTER_DATASET("bench_w1", [](const Value& p) { return make_map_workload(1, p); });
LOADER_REGISTER_DATASET("bench_w2", [](const Value& p) { return make_map_workload(2, p); });
LOADER_REGISTER_DATASET("bench_w3", [](const Value& p) { return make_map_workload(3, p); });
LOADER_REGISTER_ITERABLE_DATASET("bench_w4", [](const Value& p) -> std::shared_ptr<IterableDataset> {
  const std::string variant = param_string(p, "variant", "gen");
  if (variant != "gen" && variant != "batched")
    throw ValueError("variant must be 'gen' (one int per sample) or 'batched' (int64 tensors of "
                     "batch_size values), got '" + variant + "'");
  const int64_t b = p.is_dict() ? p.get("batch_size", Value(int64_t{256})).to_int() : 256;
  return std::make_shared<W4Iterable>(param_n(p, 4), variant == "batched", b);
});

std::shared_ptr<Dataset> make_bench_dataset(const std::string& workload, int64_t n, const std::string& variant,
                                            const std::string& path) {
  const auto& info = workload_info(workload);
  if (info.iterable) throw ValueError("make_bench_dataset: " + workload + " is an iterable workload");
  if (std::string(info.name) == "W5") throw ValueError("make_bench_dataset: W5 is made by make_w5_dataset");
  std::vector<std::pair<Value, Value>> params = {{Value("n"), Value(n)}, {Value("variant"), Value(variant)}};
  if (!path.empty()) params.emplace_back(Value("path"), Value(path));
  return make_dataset({info.dataset_type, Value::dict(std::move(params))});
}

// ------------------------------------------------------------------ W5
std::shared_ptr<Dataset> make_w5_dataset(const std::string& root, const std::string& transform, bool decode_scaling) {
  if (transform != "train" && transform != "eval")
    throw ValueError("W5: transform must be train or eval, got '" + transform + "'");
  return make_dataset({"image_folder", Value::dict({{"root", root},
                                                    {"transform", transform},
                                                    {"size", int64_t{224}},
                                                    {"decode_scaling", decode_scaling}})});
}

W5Files w5_files(const Dataset& dataset) {
  const auto* images = dynamic_cast<const image::ImageDataset*>(&dataset);
  if (!images) throw TypeError("w5_files: not an image dataset (make it with make_w5_dataset)");
  W5Files f;
  std::error_code ec;
  for (const auto& s : images->samples()) {
    const auto size = std::filesystem::file_size(s.path, ec);
    if (ec) throw RuntimeError("W5: cannot stat " + s.path + ": " + ec.message());
    f.bytes += static_cast<int64_t>(size);
    f.label_sum += s.target;
    f.classes = std::max(f.classes, s.target + 1);
  }
  return f;
}

}  // namespace loader::bench
