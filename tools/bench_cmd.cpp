// `loader bench`: the standard workloads W1-W5 (bench/WORKLOADS.md) through
// loader::DataLoader, one JSON line per epoch on stdout, progress on stderr.
//
//   loader bench --workload W2 --workers 2                 # 3 epochs, N = 20,000
//   loader bench --workload W1 --workers 2 --verify        # + checksum of every byte, in order
//   loader bench --workload W4 --workers 2 --persistent --epochs 4
//   loader bench --workload W1 --n 1000000 --epochs 1 --checkpoint --checkpoint-at 0.99 [--sampler index-shuffle]
//   loader bench --workload W1 --n 20000 --ranks 2 --checkpoint-at 0.4 --resume-ranks 3 [--uneven] --dump-indices F.json
//   loader bench --workload W2 --variant aug --n 2000 --verify --seeding per-task --workers 2 --checkpoint --resume-workers 3
//   loader bench --workload W5 --workers 2 --epochs 2 --verify   # JPEG files (generated once, cached),
//                                                         # the ImageNet train transform, per-task seeding
//   loader bench --workload W5 --root /data/train --workers 2 [--decode-scaling] [--kill-worker-after 3]
//   loader bench --memcpy                                  # this machine's copy bandwidth
//
// The consumer does what WORKLOADS.md says and nothing more: it adds labels.sum()
// (W4: batch.sum()) to a running int64 total and drops the batch.  With --verify it
// also reads every byte of every batch (the timings are then not comparable).

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "bench_workloads.h"
#include "command.h"
#include "images_make.h"
#include "loader/dataloader.h"
#include "loader/error.h"
#include "loader/samplers.h"
#include "loader/serialization/pt.h"
#include "proc_tree.h"

namespace loader::tool {

namespace {
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ------------------------------------------------------------------ checksums
/// Sum of the bytes as unsigned 8-bit values.
uint64_t byte_sum(const uint8_t* p, size_t n) {
  uint64_t total = 0;
  size_t k = 0;
#if defined(__x86_64__)
  __m128i acc = _mm_setzero_si128();
  const __m128i zero = _mm_setzero_si128();
  for (; k + 16 <= n; k += 16)
    acc = _mm_add_epi64(acc, _mm_sad_epu8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + k)), zero));
  total = static_cast<uint64_t>(_mm_cvtsi128_si64(acc)) +
          static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc)));
#endif
  for (; k < n; ++k) total += p[k];
  return total;
}

uint64_t tensor_byte_sum(const Tensor& t) {
  if (t.is_contiguous()) return byte_sum(static_cast<const uint8_t*>(t.data_ptr()), t.nbytes());
  Tensor c = t.contiguous();
  return byte_sum(static_cast<const uint8_t*>(c.data_ptr()), c.nbytes());
}

/// Sum over the tensors of a batch, in structure order, of their byte sums.
uint64_t batch_byte_sum(const Value& batch) {
  uint64_t s = 0;
  batch.for_each_tensor([&](const Tensor& t) { s += tensor_byte_sum(t); });
  return s;
}

/// W2's "aug" variant: a random flip and brightness offset (mod 256) leave a byte sum as
/// it was (nearly all of W2's byte values occur in every row), so its checksum weighs each
/// byte by its position (1 + position mod 65521) and sees both.
uint64_t batch_position_sum(const Value& batch) {
  uint64_t s = 0;
  batch.for_each_tensor([&](const Tensor& t) {
    Tensor c = t.is_contiguous() ? t : t.contiguous();
    const auto* p = static_cast<const uint8_t*>(c.data_ptr());
    uint64_t w = 1;
    for (size_t k = 0, n = c.nbytes(); k < n; ++k) {
      s += w * p[k];
      if (++w == 65522) w = 1;
    }
  });
  return s;
}

int64_t sum_int64(const Tensor& t) {
  if (t.dtype() != DType::Int64)
    throw TypeError(std::string("bench consumer: expected int64 labels, got ") + dtype_name(t.dtype()));
  int64_t s = 0;
  if (t.is_contiguous()) {
    const int64_t* p = t.data<int64_t>();
    for (int64_t k = 0, m = t.numel(); k < m; ++k) s += p[k];
  } else {
    for (int64_t v : t.to_int64_vector()) s += v;
  }
  return s;
}

uint64_t int64_byte_sum(int64_t v) {
  uint64_t s = 0;
  auto u = static_cast<uint64_t>(v);
  for (int b = 0; b < 8; ++b) s += (u >> (8 * b)) & 0xFF;
  return s;
}

/// W4's checksum from its definition: shards per worker, each cut into batches of B,
/// delivered round-robin over the workers that still have batches (PyTorch's order
/// with in_order=true).
uint64_t w4_expected_checksum(int64_t n, int64_t b, int workers) {
  const int w = std::max(workers, 1);
  std::vector<std::pair<int64_t, int64_t>> shard;
  for (int k = 0; k < w; ++k) shard.push_back(bench::w4_shard(n, k, workers));
  uint64_t sum = 0, k = 0;
  bool any = true;
  while (any) {
    any = false;
    for (auto& [lo, hi] : shard) {
      if (lo >= hi) continue;
      any = true;
      uint64_t bs = 0;
      for (int64_t v = lo, e = std::min(lo + b, hi); v < e; ++v) bs += int64_byte_sum(v);
      lo = std::min(lo + b, hi);
      sum += (++k) * bs;
    }
  }
  return sum;
}

int64_t expected_batches(const bench::WorkloadInfo& wl, int64_t n, int64_t b, int workers) {
  if (!wl.iterable || workers <= 1) return (n + b - 1) / b;
  int64_t total = 0;
  for (int k = 0; k < workers; ++k) {
    auto [lo, hi] = bench::w4_shard(n, k, workers);
    total += (hi - lo + b - 1) / b;
  }
  return total;
}

// ------------------------------------------------------------------ memcpy limit
/// Bytes per second that `threads` threads reach together, best of `reps`.
///   kind "stream": one memcpy of a large buffer into another (glibc then uses
///                  non-temporal stores)
///   kind "chunks": the same bytes copied as 150,528-byte memcpys (W2's sample size;
///                  glibc then uses ordinary stores): both buffers still far larger
///                  than the caches, so this is streaming too
///   kind "rows":   150,528-byte memcpys from a large buffer into a ring of two 9.6 MB
///                  "slabs" (the destination stays in the last-level cache)
///   kind "write":  memset of a large buffer (the generated variants only write)
double copy_bandwidth(const std::string& kind, int threads, size_t bytes_per_thread, int reps) {
  struct Buffers {
    std::vector<uint8_t> src, dst;
  };
  std::vector<Buffers> buf(static_cast<size_t>(threads));
  const size_t slab = 64 * static_cast<size_t>(bench::kImageBytes);
  for (auto& b : buf) {
    b.src.assign(bytes_per_thread, 1);
    b.dst.assign(kind == "rows" ? 2 * slab : bytes_per_thread, 2);
  }
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<double> secs(static_cast<size_t>(threads));
    auto body = [&](int t) {
      auto& b = buf[static_cast<size_t>(t)];
      ready.fetch_add(1);
      while (!go.load()) {
      }
      auto t0 = Clock::now();
      if (kind == "stream") {
        std::memcpy(b.dst.data(), b.src.data(), bytes_per_thread);
      } else if (kind == "chunks") {
        const size_t row = static_cast<size_t>(bench::kImageBytes);
        for (size_t s = 0; s + row <= bytes_per_thread; s += row) std::memcpy(b.dst.data() + s, b.src.data() + s, row);
      } else if (kind == "write") {
        std::memset(b.dst.data(), r & 0xFF, bytes_per_thread);
      } else {
        const size_t row = static_cast<size_t>(bench::kImageBytes);
        size_t d = 0;
        for (size_t s = 0; s + row <= bytes_per_thread; s += row) {
          if (d + row > b.dst.size()) d = 0;
          std::memcpy(b.dst.data() + d, b.src.data() + s, row);
          d += row;
        }
      }
      secs[static_cast<size_t>(t)] = seconds_since(t0);
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
    while (ready.load() < threads - 1) {
    }
    go = true;
    body(0);
    for (auto& th : pool) th.join();
    double slowest = *std::max_element(secs.begin(), secs.end());
    size_t moved = kind == "rows" || kind == "chunks" ? bytes_per_thread / static_cast<size_t>(bench::kImageBytes) *
                                        static_cast<size_t>(bench::kImageBytes)
                                  : bytes_per_thread;
    best = std::max(best, static_cast<double>(moved) * threads / slowest);
  }
  return best;
}

struct BenchOptions {
  std::string workload;
  std::string variant;  // "": the workload's default
  int64_t workers = 0;
  std::string workers_text = "0";  // --workers N or auto
  bool auto_workers = false;        // --workers auto: num_workers = kAutoWorkers
  int64_t max_workers = 0;          // --max-workers (auto; 0: the CPUs this process may use)
  std::optional<int64_t> min_workers;  // --min-workers (auto; default 0)
  std::optional<int64_t> epochs, n, batch_size, prefetch_factor;  // defaults by workload and --quick
  bool persistent = false, pin_memory = false, in_order = false, no_in_order = false;
  bool quick = false, verify = false, checkpoint = false;
  double checkpoint_at = 0.5;  // --checkpoint, --ranks: the share of the epoch's batches consumed before it
  int64_t ranks = 0, resume_ranks = 0;  // --ranks: elastic resume from that many ranks to --resume-ranks
  bool uneven = false;                  // --ranks: rank r consumes r batches more than rank 0
  std::string dump_indices;             // --ranks: where to write the indices each rank took
  std::string sampler = "random";  // map-style workloads: random (RandomSampler) or index-shuffle
  std::string seeding;  // DataLoaderOptions::worker_seeding; "": per-task for W5, per-worker otherwise
  std::optional<int64_t> resume_workers;  // --checkpoint: the resumed loader's num_workers (strict=false)
  int64_t max_worker_restarts = 0;
  int64_t kill_worker_after = 0;  // map-style, workers > 0: SIGKILL worker 0 after this many batches of each epoch
  double timeout = 0;
  double step_ms = 0;  // --step-ms: the consumer spends this long per batch (a sleep, as a training step on a GPU)
  std::string root;               // W5: an image folder (default: the generated one)
  std::vector<std::string> remote;  // --remote HOST:PORT: workers on other hosts (loader serve)
  std::string token_file;           // --token-file: their secret
  int64_t remote_timeout_ms = 10000;
  std::string tls_cert, tls_key, tls_ca;
  bool decode_scaling = false;    // W5: JPEG DCT-scaled decoding
  bool memcpy = false;
  int64_t memcpy_mb = 256;
  int64_t reps = 5;
};

int run_memcpy(const BenchOptions& o) {
  const int64_t mb = o.memcpy_mb, reps = o.reps;
  if (mb <= 0 || reps <= 0) throw UsageError("--memcpy-mb and --reps must be positive");
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  for (const char* kind : {"stream", "chunks", "rows", "write"})
    for (int threads : {1, 2}) {
      double bps = copy_bandwidth(kind, threads, static_cast<size_t>(mb) << 20, static_cast<int>(reps));
      Json j;
      j["memcpy"] = kind;
      j["threads"] = threads;
      j["bytes_per_thread"] = static_cast<int64_t>(mb) << 20;
      j["GB_per_s"] = bps / 1e9;
      j["MB_per_s"] = bps / 1e6;
      j["cpus"] = hw;
      std::cout << j.dump() << std::endl;
      std::cerr << "[loader bench] memcpy " << kind << " x" << threads << ": " << std::fixed
                << std::setprecision(2) << bps / 1e9 << " GB/s\n";
    }
  return 0;
}

// ------------------------------------------------------------------ checkpoints
/// --checkpoint: what a mid-epoch checkpoint costs.  One epoch is stopped after the share
/// `at` of its batches (--checkpoint-at, default half-way): Iterator::state_dict() is
/// timed, the dict written with pt::save_bytes; the rest of the epoch is checksummed.  A
/// new loader then loads the checkpoint and resumes: load_state_dict + iter() + the first
/// batch are timed (the replay of the sampler and, without persistent workers' pool, the
/// workers' start; for W4, an IterableDataset, the epoch's first part run again), and the
/// rest of the epoch must have the same checksum (in_order=false: the same samples).
/// `resume_workers` other than `workers` (--resume-workers): the new loader has that many
/// workers and loads with strict=false, which gives the same bytes only with per-task
/// seeding (or a dataset that draws nothing).
int run_checkpoint(const std::function<std::unique_ptr<DataLoader>(int workers)>& make, int64_t batches, double at,
                   const std::string& tag, int workers, int resume_workers, bool in_order,
                   uint64_t (*sum_of)(const Value&) = batch_byte_sum) {
  // in_order: the rest of the epoch, batch k weighted by k, must be the same bytes.
  // in_order=false: batches come in the workers' order, so the resumed epoch must give
  // the same samples: the same label sum and sample count as the checkpointed
  // iterator's rest (every remaining sample exactly once).
  auto add = [in_order, sum_of](uint64_t& sum, uint64_t& count, int64_t k, const Value& b) {
    if (in_order) {
      sum += static_cast<uint64_t>(k) * sum_of(b);
      return;
    }
    const Tensor& labels = b[1].to_tensor();
    sum += static_cast<uint64_t>(sum_int64(labels));
    count += static_cast<uint64_t>(labels.dim() == 0 ? 1 : labels.size(0));
  };
  uint64_t rest_count = 0, resumed_count = 0;
  const int64_t half = std::clamp<int64_t>(static_cast<int64_t>(static_cast<double>(batches) * at), 1,
                                           std::max<int64_t>(batches - 1, 1));
  std::string bytes;
  double state_s = 0, save_s = 0;
  uint64_t rest_sum = 0;
  {
    std::unique_ptr<DataLoader> loader = make(workers);
    DataLoader& dl = *loader;
    DataLoader::Iterator it = dl.iter();
    for (int64_t k = 0; k < half; ++k) it.next();
    auto t0 = Clock::now();
    Value state = it.state_dict();
    state_s = seconds_since(t0);
    t0 = Clock::now();
    bytes = pt::save_bytes(state);
    save_s = seconds_since(t0);
    for (int64_t k = half; std::optional<Value> b = it.next(); ++k) add(rest_sum, rest_count, k, *b);
  }
  uint64_t resumed_sum = 0;
  double load_s = 0, first_s = 0, rest_s = 0;
  {
    std::unique_ptr<DataLoader> loader = make(resume_workers);
    DataLoader& dl = *loader;
    auto t0 = Clock::now();
    // Into another num_workers: strict=false (the same index batches; the same bytes only
    // with per-task seeding, or where the workers draw nothing).
    dl.load_state_dict(pt::load_bytes(bytes), /*strict=*/resume_workers == workers);
    load_s = seconds_since(t0);
    t0 = Clock::now();
    DataLoader::Iterator it = dl.iter();
    int64_t k = half;
    for (std::optional<Value> b = it.next(); b; b = it.next(), ++k) {
      if (k == half) first_s = seconds_since(t0);
      add(resumed_sum, resumed_count, k, *b);
    }
    rest_s = seconds_since(t0);
  }
  Json j;
  j["checkpoint"] = tag;
  j["checkpoint_at"] = at;
  j["workers"] = workers;
  j["resume_workers"] = resume_workers;
  j["batches_before"] = half;
  j["state_dict_s"] = state_s;
  j["save_bytes_s"] = save_s;
  j["state_bytes"] = static_cast<int64_t>(bytes.size());
  j["load_state_dict_s"] = load_s;
  j["resume_first_batch_s"] = first_s;
  j["resume_rest_s"] = rest_s;
  const bool ok = rest_sum == resumed_sum && rest_count == resumed_count;
  if (in_order) {
    j["checksum_rest"] = rest_sum;
    j["checksum_resumed"] = resumed_sum;
  } else {
    j["label_sum_rest"] = rest_sum;
    j["label_sum_resumed"] = resumed_sum;
    j["samples_rest"] = rest_count;
    j["samples_resumed"] = resumed_count;
  }
  j["ok"] = ok;
  std::cout << j.dump() << std::endl;
  std::cerr << "[loader bench] " << tag << " checkpoint after " << half << " batches: state_dict " << std::fixed
            << std::setprecision(3) << state_s * 1e3 << " ms, " << bytes.size() << " bytes; resumed, first batch "
            << first_s * 1e3 << " ms; "
            << (ok ? (in_order ? "same bytes" : "same samples") : (in_order ? "CHECK FAILED: other bytes" : "CHECK FAILED: other samples"))
            << "\n";
  return ok ? 0 : 1;
}

// ------------------------------------------------------------------ elastic ranks
/// A map-style dataset whose samples carry their index last, so that the bench sees
/// which indices each rank took (0 workers: the wrapper is not rebuilt in workers).
class IndexedDataset : public Dataset {
 public:
  explicit IndexedDataset(std::shared_ptr<Dataset> inner) : inner_(std::move(inner)) {}
  Value get(int64_t index) override {
    Value sample = inner_->get(index);
    std::vector<Value> items;
    for (const Value& item : sample.items()) items.push_back(item);
    items.emplace_back(index);
    return Value::tuple(std::move(items));
  }
  int64_t size() const override { return inner_->size(); }

 private:
  std::shared_ptr<Dataset> inner_;
};

/// How many of the first `taken` entries of rank `rank`'s stripe of `m` samples among
/// `replicas` are DistributedSampler's padding (repeats of the first samples).
int64_t padding_in(int64_t m, int64_t replicas, int64_t rank, int64_t taken) {
  int64_t pad = 0;
  for (int64_t k = 0; k < taken; ++k)
    if (rank + k * replicas >= m) ++pad;
  return pad;
}

/// --ranks R --resume-ranks R2: elastic ranks.  R loaders (DistributedSampler, rank r of
/// R, shuffle, seed 0, epoch 1), one after another in this process, each take the share
/// --checkpoint-at of their batches (--uneven: rank r takes r more) and save
/// state_dict(); merge_checkpoints merges them (all of them with --uneven, rank 0's
/// alone otherwise: equal counts); R2 new loaders load the result with strict=false and
/// run the rest of the epoch.  Checked: every sample taken, before or after, exactly
/// once, DistributedSampler's padding repeats aside (counted per rank in the dump).
int run_elastic(const std::shared_ptr<Dataset>& ds, const DataLoaderOptions& base, const BenchOptions& o,
                const std::string& tag) {
  const int64_t n = ds->size();
  const int64_t epoch = 1;
  auto indexed = std::make_shared<IndexedDataset>(ds);
  auto make = [&](int64_t replicas, int64_t rank) {
    DataLoaderOptions opts = base;
    opts.shuffle.reset();
    opts.generator.reset();
    auto sampler = std::make_shared<DistributedSampler>(indexed, replicas, rank, /*shuffle=*/true, /*seed=*/0);
    sampler->set_epoch(epoch);
    opts.sampler = sampler;
    return std::make_unique<DataLoader>(indexed, opts);
  };
  auto indices_of = [](const Value& batch, std::vector<int64_t>& out) {
    const Tensor& t = batch[batch.size() - 1].to_tensor();
    const int64_t* p = static_cast<const int64_t*>(t.data_ptr());
    for (int64_t i = 0; i < t.numel(); ++i) out.push_back(p[i]);
  };
  Json dump;
  dump["n"] = n;
  dump["batch_size"] = base.batch_size.value_or(-1);
  dump["epoch"] = epoch;
  dump["shuffle"] = true;
  dump["drop_last"] = false;
  std::vector<int64_t> count(static_cast<size_t>(n), 0);
  int64_t padding = 0, taken_before = 0;
  std::vector<Value> states;
  Json old_ranks = Json::array();
  for (int64_t r = 0; r < o.ranks; ++r) {
    std::unique_ptr<DataLoader> dl = make(o.ranks, r);
    const int64_t len = dl->size();
    const int64_t want = std::min<int64_t>(len, static_cast<int64_t>(static_cast<double>(len) * o.checkpoint_at) +
                                                    (o.uneven ? r : 0));
    std::vector<int64_t> got;
    DataLoader::Iterator it = dl->iter();
    for (int64_t k = 0; k < want; ++k) {
      std::optional<Value> b = it.next();
      if (!b) break;
      indices_of(*b, got);
    }
    states.push_back(pt::load_bytes(pt::save_bytes(it.state_dict())));  // through the file format
    const int64_t pad = padding_in(n, o.ranks, r, static_cast<int64_t>(got.size()));
    padding += pad;
    taken_before += static_cast<int64_t>(got.size());
    for (int64_t i : got) ++count[static_cast<size_t>(i)];
    old_ranks.push_back({{"rank", r}, {"num_replicas", o.ranks}, {"batches", want}, {"padding", pad}, {"indices", got}});
  }
  // Equal counts: one rank's checkpoint is enough (the rule docs/api.md states).
  std::vector<Value> merge_from = o.uneven ? states : std::vector<Value>{states[0]};
  const Value merged = pt::load_bytes(pt::save_bytes(merge_checkpoints(merge_from)));
  int64_t remaining = 0;
  for (int64_t c : count) remaining += c == 0 ? 1 : 0;
  Json new_ranks = Json::array();
  for (int64_t r = 0; r < o.resume_ranks; ++r) {
    std::unique_ptr<DataLoader> dl = make(o.resume_ranks, r);
    dl->load_state_dict(merged, /*strict=*/false);
    std::vector<int64_t> got;
    int64_t batches = 0;
    DataLoader::Iterator it = dl->iter();
    while (std::optional<Value> b = it.next()) {
      indices_of(*b, got);
      ++batches;
    }
    const int64_t pad = padding_in(remaining, o.resume_ranks, r, static_cast<int64_t>(got.size()));
    padding += pad;
    for (int64_t i : got) ++count[static_cast<size_t>(i)];
    new_ranks.push_back(
        {{"rank", r}, {"num_replicas", o.resume_ranks}, {"batches", batches}, {"padding", pad}, {"indices", got}});
  }
  int64_t missing = 0, extra = 0, taken = 0;
  for (int64_t c : count) {
    taken += c;
    if (c == 0) ++missing;
    if (c > 1) extra += c - 1;
  }
  // Exactly once: no sample missing, and the only repeats are DistributedSampler's
  // padding (the entries counted as padding, which repeat the first samples).
  const bool ok = missing == 0 && extra == padding;
  dump["old_ranks"] = std::move(old_ranks);
  dump["merged_from"] = static_cast<int64_t>(merge_from.size());
  dump["new_ranks"] = std::move(new_ranks);
  dump["check"] = {{"samples", n},       {"taken", taken},   {"padding", padding},
                   {"missing", missing}, {"repeats", extra}, {"exactly_once", ok}};
  if (!o.dump_indices.empty()) {
    std::ofstream f(o.dump_indices);
    f << dump.dump() << "\n";
    if (!f)
      throw RuntimeError("loader bench --dump-indices: cannot write " + o.dump_indices +
                         ": check that its folder exists and is writable");
  }
  Json j;
  j["elastic"] = tag;
  j["ranks"] = o.ranks;
  j["resume_ranks"] = o.resume_ranks;
  j["uneven"] = o.uneven;
  j["checkpoint_at"] = o.checkpoint_at;
  j["taken_before"] = taken_before;
  j["merged_from"] = static_cast<int64_t>(merge_from.size());
  j["check"] = dump["check"];
  j["ok"] = ok;
  std::cout << j.dump() << std::endl;
  std::cerr << "[loader bench] " << tag << " elastic " << o.ranks << " -> " << o.resume_ranks << " ranks: " << taken
            << " indices taken, " << padding << " padding, " << missing << " missing, " << extra << " repeats: "
            << (ok ? "every sample exactly once" : "CHECK FAILED") << "\n";
  return ok ? 0 : 1;
}

// ------------------------------------------------------------------ W5
std::string cache_root() {
  if (const char* d = std::getenv("LOADER_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/loader";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/loader";
  return "/tmp/loader-cache";
}

/// W5's generated folder: `n` images of `loader images make --classes 10 --seed seed`,
/// made once into the cache folder and reused: $LOADER_CACHE_DIR, else
/// $XDG_CACHE_HOME/loader, else ~/.cache/loader, subfolder w5-n<N>-c10-s<seed>-q90-g1
/// (g1: the generator's version; bench/side_by_side.py computes the same path).  It is
/// written under a temporary name and renamed, so a folder there is always complete.
std::string w5_generated_folder(int64_t n, uint64_t seed = 0) {
  namespace fs = std::filesystem;
  if (n <= 0) throw ValueError("W5: n must be positive, got " + std::to_string(n));
  const fs::path base(cache_root());
  const std::string name = "w5-n" + std::to_string(n) + "-c" + std::to_string(bench::kW5Classes) + "-s" +
                           std::to_string(seed) + "-q90-g1";
  const fs::path dir = base / name;
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return dir.string();
  fs::create_directories(base, ec);
  if (ec)
    throw RuntimeError("W5: cannot create the cache folder " + base.string() + ": " + ec.message() +
                       " (set LOADER_CACHE_DIR to a writable folder, or pass --root)");
  const fs::path tmp = base / (name + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  std::cerr << "[loader bench] W5: generating " << n << " JPEG images into " << dir.string()
            << " (once; `loader images make --n " << n << " --classes " << bench::kW5Classes << " --seed " << seed << "`)"
            << std::endl;
  MakeImagesOptions o;
  o.out = tmp.string();
  o.n = n;
  o.classes = bench::kW5Classes;
  o.seed = seed;
  const ImageFolderSummary s = make_image_folder(o);
  fs::rename(tmp, dir, ec);
  if (ec) {  // another run made it meanwhile: use that one
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    if (!fs::is_directory(dir, ignored))
      throw RuntimeError("W5: cannot rename " + tmp.string() + " to " + dir.string() + ": " + ec.message());
  }
  std::cerr << "[loader bench] W5: " << s.files << " files, " << s.bytes / 1000000.0 << " MB in " << s.seconds
            << " s" << std::endl;
  return dir.string();
}

// ------------------------------------------------------------------ workloads
int run_bench(const BenchOptions& given) {
  BenchOptions o = given;
  if (o.workers_text == "auto") {
    o.auto_workers = true;
    if (o.max_workers < 0) throw UsageError("--max-workers must be >= 0 (0: the CPUs this process may use)");
    o.workers = o.max_workers > 0 ? o.max_workers : usable_cpus();  // the pool's slots
  } else {
    try {
      size_t used = 0;
      o.workers = std::stoll(o.workers_text, &used);
      if (used != o.workers_text.size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw UsageError("--workers must be a number or auto, got '" + o.workers_text + "'");
    }
    if (o.max_workers != 0 || o.min_workers) throw UsageError("--max-workers and --min-workers go with --workers auto");
  }
  if (o.memcpy) return run_memcpy(o);
  if (o.workload.empty()) throw UsageError("--workload is required (or --memcpy)");
  const bench::WorkloadInfo* found = nullptr;
  try {
    found = &bench::workload_info(o.workload);
  } catch (const ValueError& e) {
    throw UsageError(std::string("--workload: ") + e.what());
  }
  const auto& wl = *found;
  const bool quick = o.quick;
  const bool verify = o.verify;
  const bool persistent = o.persistent;
  const bool pin = o.pin_memory;
  const bool no_in_order = o.no_in_order;  // --in-order (the default) and --no-in-order exclude each other
  // Local workers and those on other hosts: one pool (ids 0..L-1 local, L.. remote).
  const int workers = static_cast<int>(o.workers) + static_cast<int>(o.remote.size());
  const int epochs = static_cast<int>(o.epochs.value_or(quick ? 2 : 3));
  const bool w5 = std::string(wl.name) == "W5";
  int64_t n = o.n.value_or(quick ? wl.quick_n : wl.n);
  const int64_t b = o.batch_size.value_or(wl.batch_size);
  const int restarts = static_cast<int>(o.max_worker_restarts);
  const double timeout = o.timeout;
  const std::string variant = !o.variant.empty() ? o.variant : (wl.iterable ? "gen" : w5 ? "train" : "tensor");
  const std::string seeding = !o.seeding.empty() ? o.seeding : (w5 ? "per-task" : "per-worker");
  if (o.workers < 0) throw UsageError("--workers must be >= 0");
  if (!o.remote.empty() && o.token_file.empty()) throw UsageError("--remote needs --token-file");
  if (epochs <= 0) throw UsageError("--epochs must be positive");
  if (n <= 0 || b <= 0) throw UsageError("--n and --batch-size must be positive");
  if (!(o.checkpoint_at > 0 && o.checkpoint_at < 1))
    throw UsageError("--checkpoint-at must be a share of the epoch strictly between 0 and 1, got " +
                     std::to_string(o.checkpoint_at));
  if (o.sampler != "random" && o.sampler != "index-shuffle")
    throw UsageError("--sampler must be random or index-shuffle, got '" + o.sampler + "'");
  if (wl.iterable && o.sampler != "random")
    throw UsageError(std::string("--sampler: ") + wl.name + " is an IterableDataset, which has no sampler");
  const bool aug = !wl.iterable && std::string(wl.name) == "W2" && variant == "aug";
  if (w5 ? (variant != "train" && variant != "eval")
         : wl.iterable ? (variant != "gen" && variant != "batched") : (variant != "gen" && variant != "tensor" && !aug))
    throw UsageError(std::string("--variant for ") + wl.name + " must be " +
                     (w5 ? "train (the ImageNet training transform; default) or eval (Resize(256), CenterCrop(224))"
                      : wl.iterable ? "gen or batched" : std::string(wl.name) == "W2" ? "tensor, gen or aug" : "tensor or gen"));
  if (seeding != "per-worker" && seeding != "per-task")
    throw UsageError("--seeding must be per-worker (PyTorch's base_seed + k per worker; default but for W5) or "
                     "per-task (W5's default), got '" + seeding + "'");
  if (!w5 && (!o.root.empty() || o.decode_scaling))
    throw UsageError("--root and --decode-scaling are W5's (JPEG files)");
  if (w5 && !o.root.empty() && o.n)
    throw UsageError("--n: with --root, W5's N is the number of files in the folder");
  if (o.kill_worker_after < 0) throw UsageError("--kill-worker-after must be >= 0");
  if (o.kill_worker_after > 0 && (wl.iterable || workers == 0 || o.max_worker_restarts < 1))
    throw UsageError("--kill-worker-after: a map-style workload with --workers >= 1 and --max-worker-restarts >= 1 "
                     "(the killed worker is restarted and its batches loaded again)");
  const int resume_workers = static_cast<int>(o.resume_workers.value_or(workers));
  if (resume_workers < 0) throw UsageError("--resume-workers must be >= 0");

  if (o.ranks < 0 || o.resume_ranks < 0) throw UsageError("--ranks and --resume-ranks must be positive");
  if ((o.ranks > 0) != (o.resume_ranks > 0)) throw UsageError("--ranks and --resume-ranks go together");
  if (o.ranks > 0 && (wl.iterable || o.sampler != "random" || workers != 0 || o.checkpoint))
    throw UsageError("--ranks: a map-style workload (W1-W3) with --workers 0, the default sampler and no --checkpoint "
                     "(the ranks run one after another in this process, a DistributedSampler each)");
  if ((o.uneven || !o.dump_indices.empty()) && o.ranks == 0) throw UsageError("--uneven and --dump-indices need --ranks");

  bench::ProcessTreeSampler mem;  // the system-wide baseline is taken here, before the dataset
  mem.start();
  const std::string tag = std::string(wl.name) + "/" + variant + "/w" +
                          (o.auto_workers ? "auto" + std::to_string(workers) : std::to_string(workers)) +
                          (persistent ? "/persistent" : "") + (o.sampler != "random" ? "/" + o.sampler : "") +
                          (seeding != (w5 ? "per-task" : "per-worker") ? "/" + seeding : "") +
                          (o.decode_scaling ? "/decode-scaling" : "");

  // ---- the dataset (materialisation is not timed)
  auto t_setup = Clock::now();
  std::unique_ptr<bench::MaterializedFile> file;
  std::shared_ptr<Dataset> map_ds;
  std::shared_ptr<IterableDataset> iter_ds;
  std::string w5_root;
  bench::W5Files w5_files;
  if (w5) {
    // The folder: --root, or the generated one (made once, then reused from the cache).
    w5_root = !o.root.empty() ? o.root : w5_generated_folder(n);
    try {
      map_ds = bench::make_w5_dataset(w5_root, variant, o.decode_scaling);
    } catch (const Error& e) {
      throw RuntimeError("W5: cannot use the image folder " + w5_root + ": " + e.what());
    }
    w5_files = bench::w5_files(*map_ds);
    if (o.root.empty() && (map_ds->size() != n || w5_files.label_sum != generated_label_sum(n, bench::kW5Classes)))
      throw RuntimeError("W5: the cached folder " + w5_root + " holds " + std::to_string(map_ds->size()) +
                         " images, not the " + std::to_string(n) + " it was made with: remove it (it is made again)");
    n = map_ds->size();
  } else if (wl.iterable) {
    iter_ds = make_iterable_dataset(
        {wl.dataset_type, Value::dict({{"n", n}, {"variant", variant}, {"batch_size", b}})});
  } else {
    if (variant == "tensor") file = std::make_unique<bench::MaterializedFile>(wl.name, n);
    map_ds = bench::make_bench_dataset(wl.name, n, variant, file ? file->path() : "");
  }
  const double setup_s = seconds_since(t_setup);

  DataLoaderOptions opts;
  const bool batched_iterable = wl.iterable && variant == "batched";
  if (batched_iterable) opts.batch_size = std::nullopt;
  else opts.batch_size = b;
  if (!wl.iterable) {
    opts.generator = std::make_shared<Generator>(0);  // same order for any number of workers
    if (o.sampler == "index-shuffle") opts.sampler = std::make_shared<IndexShuffleSampler>(map_ds, uint64_t{0});
    else opts.shuffle = true;
  }
  opts.num_workers = static_cast<int>(o.workers);
  if (o.auto_workers) {
    opts.num_workers = kAutoWorkers;
    opts.autotune.max_workers = static_cast<int>(o.workers);
    if (o.min_workers) opts.autotune.min_workers = static_cast<int>(*o.min_workers);
  }
  opts.remote_workers = o.remote;
  opts.remote_token_file = o.token_file;
  opts.remote_timeout_ms = o.remote_timeout_ms;
  opts.remote_tls_cert = o.tls_cert;
  opts.remote_tls_key = o.tls_key;
  opts.remote_tls_ca = o.tls_ca;
  if (o.prefetch_factor) opts.prefetch_factor = static_cast<int>(*o.prefetch_factor);
  opts.persistent_workers = persistent;
  opts.pin_memory = pin;
  opts.in_order = !no_in_order;
  opts.timeout = timeout;
  opts.max_worker_restarts = restarts;
  opts.worker_seeding = seeding == "per-task" ? WorkerSeeding::PerTask : WorkerSeeding::PerWorker;
  if (o.ranks > 0) {
    const int status = run_elastic(map_ds, opts, o, tag);
    mem.stop();
    return status;
  }
  std::unique_ptr<DataLoader> dl = wl.iterable ? std::make_unique<DataLoader>(iter_ds, opts)
                                               : std::make_unique<DataLoader>(map_ds, opts);

  const int64_t want_sum = wl.iterable ? n * (n - 1) / 2 : w5 ? w5_files.label_sum : bench::label_sum(n);
  // W5's random crops and flips, and W2 aug's flips, leave byte sums nearly as they were:
  // their checksum weighs each byte by its position.
  const bool position_sum = aug || w5;
  const int64_t want_batches = expected_batches(wl, n, b, workers);
  const double payload = static_cast<double>(n) * static_cast<double>(wl.bytes_per_sample);
  int status = 0;
  for (int e = 1; e <= epochs; ++e) {
    mem.new_window();
    mem.sample_now();
    int64_t total = 0, samples = 0, batches = 0, first_n = 0;
    uint64_t checksum = 0;
    int killed_pid = 0;
    double first_s = 0;
    bool batch_pinned = false;
    const double sampler_cpu0 = mem.thread_cpu_s();
    bench::CpuClock cpu;
    auto t0 = Clock::now();
    EpochStats stages;
    {
      DataLoader::Iterator it = dl->iter();
      while (std::optional<Value> batch = it.next()) {
        const Tensor& labels = wl.iterable ? batch->to_tensor() : (*batch)[1].to_tensor();
        total += sum_int64(labels);
        const int64_t m = labels.dim() == 0 ? 1 : labels.size(0);
        samples += m;
        if (batches == 0) {
          first_s = seconds_since(t0);
          first_n = m;
          batch_pinned = (wl.iterable ? labels : (*batch)[0].to_tensor()).is_pinned();
        }
        ++batches;
        if (verify)
          checksum += static_cast<uint64_t>(batches) * (position_sum ? batch_position_sum : batch_byte_sum)(*batch);
        if (o.kill_worker_after > 0 && batches == o.kill_worker_after) {
          // A worker dies mid-epoch: the pool restarts it and loads its batches again
          // (with per-task seeding, the same bytes).
          const std::vector<int> pids = it.worker_pids();
          if (!pids.empty() && pids[0] > 0 && ::kill(pids[0], SIGKILL) == 0) killed_pid = pids[0];
        }
        if (o.step_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.step_ms));
      }
      stages = it.stats();
    }
    const double epoch_s = seconds_since(t0);
    const bench::CpuUse used = cpu.since();
    const double sampler_cpu = mem.thread_cpu_s() - sampler_cpu0;
    mem.sample_now();
    const auto win = mem.window_peak();
    const auto run = mem.run_peak();

    Json j;
    j["workload"] = wl.name;
    j["variant"] = variant;
    if (o.auto_workers) {
      j["workers"] = "auto";
      j["max_workers"] = workers;
      j["workers_now"] = stages.workers_now;
      j["autotune"] = Json::parse(stages.to_json())["autotune"];
    } else {
      j["workers"] = workers;
    }
    j["epoch"] = e;
    j["samples"] = samples;
    j["batches"] = batches;
    j["epoch_s"] = epoch_s;
    j["first_batch_s"] = first_s;
    j["samples_per_s"] = static_cast<double>(samples) / epoch_s;
    j["MB_per_s"] = payload / epoch_s / 1e6;
    j["steady_samples_per_s"] =
        epoch_s > first_s ? static_cast<double>(samples - first_n) / (epoch_s - first_s) : 0.0;
    j["peak_rss_mb"] = run.rss_mb;
    j["epoch_peak_rss_mb"] = win.rss_mb;
    j["peak_anon_mb"] = run.anon_mb;
    j["peak_main_anon_mb"] = run.root_anon_mb;
    j["peak_file_mb"] = run.file_mb;
    j["peak_shm_mb"] = run.shm_mb;
    j["peak_mem_mb"] = run.mem_mb;
    j["epoch_peak_mem_mb"] = win.mem_mb;
    j["peak_sys_delta_mb"] = run.sys_mb;
    j["max_processes"] = run.processes;
    j["dataset_mb"] = file ? static_cast<double>(file->bytes()) / 1e6 : 0.0;
    // Where the epoch's CPU went: the main process (minus the memory sampler's
    // thread) and the worker processes; voluntary context switches of the main
    // process (each is a wait for a message or a batch).
    j["main_cpu_s"] = std::max(0.0, used.main_s - sampler_cpu);
    j["workers_cpu_s"] = used.descendants_s;
    j["sampler_cpu_s"] = sampler_cpu;
    j["main_ctx_switches"] = used.main_voluntary_switches;
    // The same per delivered batch (the parent's cost of the batch path).
    const double per_batch = batches > 0 ? 1.0 / static_cast<double>(batches) : 0.0;
    j["main_cpu_us_per_batch"] = std::max(0.0, used.main_s - sampler_cpu) * 1e6 * per_batch;
    j["ctx_switches_per_batch"] = static_cast<double>(used.main_voluntary_switches) * per_batch;
    // The loader's own per-stage figures (EpochStats): the index sampler's time on the
    // application thread, and each worker's time on its delivered tasks.
    double busy = 0;
    for (const auto& w : stages.workers) busy += w.busy_s;
    j["stage_sampler_s"] = stages.sampler_s;
    j["stage_workers_busy_s"] = busy;
    j["workers_busy_share"] = workers > 0 && epoch_s > 0 ? busy / (epoch_s * workers) : 0.0;
    j["stage_next_s"] = stages.next_s;
    j["stage_waits"] = stages.waits;
    // The epoch's EpochStats as the library writes it (samples, first batch, wait
    // percentiles, occupancy, slab pool, per-worker fetch/collate/CPU/faults, diagnosis).
    j["stats"] = Json::parse(stages.to_json());
    if (o.step_ms > 0) j["step_ms"] = o.step_ms;
    j["label_sum"] = total;
    j["label_sum_expected"] = want_sum;
    j["ok"] = total == want_sum && samples == n && batches == want_batches;
    if (verify) {
      j["checksum"] = checksum;
      if (wl.iterable && !batched_iterable && b == wl.batch_size) {
        // W4 batches differ by worker count (each worker batches its own shard), so
        // its checksum is checked against the definition instead of against --workers 0.
        const uint64_t want = w4_expected_checksum(n, b, workers);
        j["checksum_expected"] = want;
        if (checksum != want && opts.in_order) j["ok"] = false;
      }
    }
    j["n"] = n;
    j["batch_size"] = b;
    if (!wl.iterable) j["sampler"] = o.sampler;
    j["prefetch_factor"] = o.auto_workers ? stages.prefetch_now : workers > 0 ? opts.effective_prefetch_factor() : 0;
    j["persistent"] = persistent;
    j["in_order"] = opts.in_order;
    j["pin_memory"] = pin;
    if (pin) {
      // What the runtime says it did, and what the delivered batch says of itself.
      const PinStatus ps = dl->pin_memory_status();
      j["pin_backend"] = ps.backend_name();
      j["pinned"] = ps.pinned;
      j["batch_is_pinned"] = batch_pinned;
      if (ps.backend != PinBackend::Cuda) j["pin_reason"] = ps.reason;
    }
    j["setup_s"] = setup_s;
    j["quick"] = quick;
    j["verify"] = verify;
    if (verify) j["checksum_kind"] = position_sum ? "position-weighted bytes" : "bytes";
    j["seeding"] = seeding;
    if (o.kill_worker_after > 0) {
      int64_t worker_restarts = 0;
      for (const auto& w : stages.workers) worker_restarts += w.restarts;
      j["killed_worker_pid"] = killed_pid;
      j["worker_restarts"] = worker_restarts;
    }
    if (w5) {
      // JPEG bytes read per second, and the folder.
      j["root"] = w5_root;
      j["generated"] = o.root.empty();
      j["decode_scaling"] = o.decode_scaling;
      j["jpeg_bytes"] = w5_files.bytes;
      j["jpeg_MB_per_s"] = static_cast<double>(w5_files.bytes) / epoch_s / 1e6;
      j["images_per_s"] = static_cast<double>(samples) / epoch_s;
      j["classes"] = w5_files.classes;
    }
    std::cout << j.dump() << std::endl;

    std::ostringstream line;
    line << "[loader bench] " << tag << " epoch " << e << "/" << epochs << ": " << std::fixed
         << std::setprecision(0) << static_cast<double>(samples) / epoch_s << " samples/s, "
         << std::setprecision(1) << payload / epoch_s / 1e6 << " MB/s, first batch " << std::setprecision(2)
         << first_s * 1e3 << " ms, epoch " << epoch_s * 1e3 << " ms, tree RSS " << std::setprecision(0)
         << run.rss_mb << " MB";
    if (w5) line << ", JPEG " << std::setprecision(1) << static_cast<double>(w5_files.bytes) / epoch_s / 1e6 << " MB/s";
    if (killed_pid > 0) line << ", killed worker " << killed_pid;
    if (verify) line << ", checksum " << checksum;
    line << "; " << stages.diagnosis();
    std::cerr << line.str() << std::endl;
    if (!j["ok"].get<bool>()) {
      std::cerr << "[loader bench] " << tag << " epoch " << e << ": CHECK FAILED: label sum " << total
                << " (expected " << want_sum << "), " << samples << " samples (expected " << n << "), "
                << batches << " batches (expected " << want_batches << ")"
                << (j.contains("checksum_expected") ? ", checksum vs definition" : "") << "\n";
      status = 1;
    }
  }
  dl.reset();
  if (o.checkpoint && status == 0) {
    auto make = [&](int num_workers) {
      DataLoaderOptions with = opts;
      with.num_workers = o.auto_workers && num_workers == workers ? kAutoWorkers : num_workers;
      if (num_workers == 0) {  // refused without workers
        with.prefetch_factor.reset();
        with.persistent_workers = false;
      }
      return wl.iterable ? std::make_unique<DataLoader>(iter_ds, with) : std::make_unique<DataLoader>(map_ds, with);
    };
    status = run_checkpoint(make, want_batches, o.checkpoint_at,
                            resume_workers == workers ? tag : tag + "->w" + std::to_string(resume_workers), workers,
                            resume_workers, opts.in_order || wl.iterable,
                            position_sum ? batch_position_sum : batch_byte_sum);
  }
  mem.stop();
  return status;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Run a standard workload (bench/WORKLOADS.md) through the DataLoader: "
                                          "one JSON line per epoch on stdout");
  auto o = std::make_shared<BenchOptions>();
  auto* workload = cmd->add_option("--workload", o->workload, "W1, W2, W3, W4 or W5");
  cmd->add_option("--variant", o->variant, "tensor or gen (W1-W3; default tensor), gen or batched (W4; default gen), "
                                           "train or eval (W5's transform; default train)");
  cmd->add_option("--workers", o->workers_text,
                  "num_workers (default 0), or auto: tuned while it runs (DataLoaderOptions::autotune)");
  cmd->add_option("--max-workers", o->max_workers, "--workers auto: the most workers (default: the CPUs)")
      ->check(kInt64);
  cmd->add_option("--min-workers", o->min_workers, "--workers auto: the fewest (default 0: an epoch may load in "
                                                   "the main process)")
      ->check(kInt64);
  cmd->add_option("--epochs", o->epochs, "epochs (default 3, --quick 2)")->check(kInt64);
  cmd->add_option("--n", o->n, "dataset length (default: the workload's)")->check(kInt64);
  cmd->add_option("--batch-size", o->batch_size, "batch size (default: the workload's)")->check(kInt64);
  cmd->add_option("--prefetch-factor", o->prefetch_factor, "batches in flight per worker")->check(kInt64);
  cmd->add_flag("--persistent", o->persistent, "persistent_workers=True");
  cmd->add_flag("--pin-memory", o->pin_memory, "pin_memory=True");
  auto* in_order = cmd->add_flag("--in-order", o->in_order, "in_order=True (the default)");
  auto* no_in_order = cmd->add_flag("--no-in-order", o->no_in_order, "in_order=False");
  in_order->excludes(no_in_order);
  cmd->add_flag("--quick", o->quick, "a small N and 2 epochs");
  cmd->add_flag("--verify", o->verify, "also checksum every byte of every batch (timings not comparable)");
  auto* checkpoint = cmd->add_flag("--checkpoint", o->checkpoint,
                "then time a mid-epoch checkpoint (state_dict) and its resume in a new loader, checking that the "
                "resumed batches are the same bytes (W4, an IterableDataset, resumes by running its epoch again)");
  auto* at = cmd->add_option("--checkpoint-at", o->checkpoint_at,
                             "--checkpoint, --ranks: the share of the epoch's batches consumed before it, 0 < F < 1 "
                             "(default 0.5)");
  cmd->add_option("--ranks", o->ranks,
                  "elastic ranks: this many DistributedSampler ranks take --checkpoint-at of their epoch and save, "
                  "the merged checkpoint resumes in --resume-ranks ranks (0 workers, one process)")
      ->check(kInt64);
  cmd->add_option("--resume-ranks", o->resume_ranks, "--ranks: the new number of ranks")->check(kInt64);
  cmd->add_flag("--uneven", o->uneven, "--ranks: rank r consumes r batches more than rank 0 before the checkpoint");
  cmd->add_option("--dump-indices", o->dump_indices,
                  "--ranks: write the indices each old rank took before and each new rank after, and the "
                  "exactly-once check, to this JSON file");
  cmd->add_option("--sampler", o->sampler,
                  "W1-W3: random (RandomSampler, PyTorch's order; default) or index-shuffle (IndexShuffleSampler: "
                  "O(1) resume)");
  cmd->add_option("--root", o->root,
                  "W5: an image folder (ImageFolder layout; default: a generated one of --n images, made once by "
                  "`loader images make` into ~/.cache/loader or $LOADER_CACHE_DIR)");
  cmd->add_flag("--decode-scaling", o->decode_scaling, "W5: JPEG DCT-scaled decoding where a crop shrinks 2x or more");
  cmd->add_option("--step-ms", o->step_ms,
                  "the consumer spends this many ms per batch (sleeps, as a training step waiting for its GPU; "
                  "default 0)");
  cmd->add_option("--kill-worker-after", o->kill_worker_after,
                  "SIGKILL worker 0 after this many batches of every epoch (needs --max-worker-restarts >= 1)")
      ->check(kInt64);
  cmd->add_option("--seeding", o->seeding,
                  "worker_seeding: per-worker (PyTorch's base_seed + k; default but for W5) or per-task (W5's default; "
                  "seeded from base_seed "
                  "and the batch's index in the epoch: the same batches for any --workers)");
  cmd->add_option("--resume-workers", o->resume_workers,
                  "--checkpoint: the resumed loader's num_workers, loaded with strict=false (default --workers)")
      ->check(kInt64)
      ->needs(checkpoint);
  cmd->add_option("--max-worker-restarts", o->max_worker_restarts, "max_worker_restarts (default 0)")->check(kInt64);
  cmd->add_option("--remote", o->remote,
                  "HOST:PORT of a worker host (`loader serve`), repeatable: remote workers after the --workers local "
                  "ones (docs/remote.md)");
  cmd->add_option("--token-file", o->token_file, "--remote: the file with the worker hosts' secret");
  cmd->add_option("--remote-timeout-ms", o->remote_timeout_ms,
                  "--remote: a host silent this long, or a task of it unanswered this long, is lost (default 10000)")
      ->check(kInt64);
  cmd->add_option("--tls-cert", o->tls_cert, "--remote over TLS: this client's certificate");
  cmd->add_option("--tls-key", o->tls_key, "--remote over TLS: its key");
  cmd->add_option("--tls-ca", o->tls_ca, "--remote over TLS: the CA of the hosts' certificates");
  cmd->add_option("--timeout", o->timeout, "timeout in seconds (default 0: none)");
  auto* memcpy = cmd->add_flag("--memcpy", o->memcpy, "measure this machine's copy bandwidth instead");
  auto* mb = cmd->add_option("--memcpy-mb", o->memcpy_mb, "--memcpy: MiB per thread (default 256)")->check(kInt64);
  auto* reps = cmd->add_option("--reps", o->reps, "--memcpy: repetitions, the best counts (default 5)")->check(kInt64);
  mb->needs(memcpy);
  reps->needs(memcpy);
  memcpy->excludes(workload);
  on_run(cmd, [o, at] {
    if (at->count() > 0 && !o->checkpoint && o->ranks == 0) throw UsageError("--checkpoint-at needs --checkpoint or --ranks");
    return run_bench(*o);
  });
}

}  // namespace loader::tool
