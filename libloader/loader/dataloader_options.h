// DataLoaderOptions: every knob of torch.utils.data.DataLoader, with PyTorch's
// names and defaults, validated once (validate()) with PyTorch's wording.
//
//   loader::DataLoaderOptions opts;
//   opts.batch_size = 64;
//   opts.shuffle = true;
//   opts.num_workers = 2;
//   loader::DataLoader dl(dataset, opts);
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <vector>
#include <string>

#include "loader/collate.h"
#include "loader/generator.h"
#include "loader/sampler.h"
#include "loader/worker_info.h"

namespace loader {

/// Where workers run: child processes (the product), or actors in this process
/// (same protocol and semantics without process isolation: for tests and for
/// stepping through a dataset in a debugger).
enum class WorkerMode { Process, InProcess };

/// How a worker's default generator is seeded (DataLoaderOptions::worker_seeding).
///   PerWorker: PyTorch's: worker k is seeded base_seed + k once, and its stream runs on
///              across its tasks, so the draws of a batch depend on which worker ran it
///              and on what that worker ran before (they change with num_workers).
///   PerTask:   the generator is seeded task_seed(base_seed, i) (generator.h) before the
///              epoch's i-th index batch, in a worker and with num_workers = 0 alike: a
///              batch's draws depend on (base_seed, i) only, so the batches are the same
///              for any num_workers and a checkpoint resumes byte for byte into another
///              num_workers (strict=false).  Every iter() draws base_seed, persistent
///              workers included (they get each epoch's base_seed before its first task;
///              their worker_init_fn and get_worker_info().seed keep the first epoch's).
enum class WorkerSeeding { PerWorker, PerTask };

/// "per-worker" / "per-task" (checkpoints, messages).
const char* worker_seeding_name(WorkerSeeding s);

/// DataLoaderOptions::num_workers = kAutoWorkers: the loader picks the number of worker
/// processes and the prefetch depth itself, while it runs (AutotuneOptions).  Not -1:
/// PyTorch's num_workers=-1 is a ValueError, and stays one.
inline constexpr int kAutoWorkers = std::numeric_limits<int>::min();

/// How num_workers = kAutoWorkers tunes the pool (docs/autotune.md).  From the stage
/// figures (EpochStats), every 100 ms on the pool actor's clock, it starts and retires
/// worker processes between min_workers (at least 1 in an epoch) and max_workers and,
/// with tune_prefetch, raises or lowers the prefetch depth; also in the middle of an
/// epoch.  Between epochs of a map-style dataset it may load in this process instead
/// (0 workers) when that measured or is estimated cheaper, if min_workers is 0.  The
/// batches do not change: the sampler's index batches are those of a fixed-worker run,
/// and with WorkerSeeding::PerTask their bytes too.  An IterableDataset keeps all
/// max_workers workers (each one's shard is its stream); only its prefetch is tuned.
/// Each decision (time, from, to, reason) is in EpochStats::autotune.
struct AutotuneOptions {
  /// Fewest workers; 0 lets whole epochs run in this process.  Default 0.
  int min_workers = 0;
  /// Most workers; 0 (default): the CPUs this process may use (sched_getaffinity).
  int max_workers = 0;
  /// Shared memory for batches in flight plus the workers' resident memory, in bytes:
  /// no worker is started and no prefetch raised beyond it.  0 (default): no budget
  /// (shm_limit_bytes and /dev/shm still bound the slabs).
  uint64_t memory_budget_bytes = 0;
  /// Tune prefetch_factor too (between 1 and max_prefetch_factor).  Default true.
  bool tune_prefetch = true;
  /// Highest prefetch_factor the tuner sets.  Default 8.
  int max_prefetch_factor = 8;
};

struct DataLoaderOptions {
  /// Samples per batch. nullopt disables automatic batching: the loader yields
  /// single samples (passed through collate_fn / default_convert).  Default 1.
  std::optional<int64_t> batch_size = 1;

  /// Reshuffle every epoch (a RandomSampler over the dataset, drawing from
  /// `generator`).  nullopt means "unspecified" (as None in PyTorch): iterable
  /// datasets reject shuffle=true but accept false.  Default: unspecified (= false).
  std::optional<bool> shuffle;

  /// Custom index order; mutually exclusive with shuffle.  Default: sequential.
  std::shared_ptr<Sampler> sampler;

  /// Custom batches of indices; mutually exclusive with batch_size (!= 1), shuffle,
  /// sampler and drop_last.
  std::shared_ptr<BatchSamplerBase> batch_sampler;

  /// Worker processes.  0 loads in the calling thread.  Each worker is a child
  /// process (fork+exec of this program) that rebuilds the dataset from its handle;
  /// more workers use more cores and memory.  Default 0.  kAutoWorkers: tuned while
  /// the loader runs (`autotune`); the loader's options() then say max_workers, the
  /// pool's worker slots (get_worker_info().num_workers).
  int num_workers = 0;
  /// Used with num_workers = kAutoWorkers.
  AutotuneOptions autotune;

  /// Turns samples into a batch.  Default: default_collate.  A function object runs
  /// only in this process; with num_workers > 0 register the function by name
  /// (LOADER_REGISTER_COLLATE_FN) and set collate_fn_name instead.
  CollateFn collate_fn;
  std::string collate_fn_name;

  /// Deliver batches page-locked for fast host-to-device copies.  With workers the
  /// runtime pins the shared-memory slabs themselves once (cudaHostRegister), so
  /// pinning costs no per-batch copy; without a CUDA device it falls back to mlock
  /// (is_pinned() stays false) and warns once.  With num_workers = 0 each batch is
  /// copied into CUDA pinned memory when a device exists (and custom batch types'
  /// pin_memory() hooks run), else returned unchanged.  DataLoader::pin_memory_status()
  /// tells which backend was used and why.  Default false.
  bool pin_memory = false;

  /// The device batches are pinned for (PyTorch's pin_memory_device): "" (default:
  /// CUDA), "cuda" or "cuda:N".  Pinned slabs are registered for every CUDA device
  /// (cudaHostRegisterPortable), so "cuda:N" pins as "cuda" does, once N is checked
  /// against the devices there are (ValueError otherwise, when CUDA is available).
  /// Other device types are refused (ValueError): loader pins for CUDA only.  Set
  /// without pin_memory it pins nothing and warns, as PyTorch does.
  std::string pin_memory_device;

  /// Drop the last incomplete batch.  Default false.
  bool drop_last = false;

  /// Seconds to wait for a batch from the workers before raising; 0 waits forever
  /// (while the workers are alive).  Must be finite and non-negative; values beyond
  /// 1e9 seconds (30 years) wait forever too.  Default 0.
  double timeout = 0;

  /// Called in each worker after seeding, before any data: fn(worker_id).  As with
  /// collate_fn, a function object works only in-process; register it by name
  /// (LOADER_REGISTER_WORKER_INIT_FN) and set worker_init_fn_name for workers.
  WorkerInitFn worker_init_fn;
  std::string worker_init_fn_name;

  /// Generator for the shuffle order and for base_seed.  Default: the thread's
  /// default generator.
  std::shared_ptr<Generator> generator;

  /// Batches loaded in advance per worker (prefetch_factor * num_workers tasks in
  /// flight).  Only valid with num_workers > 0 (PyTorch 2.x rule); default 2 then;
  /// at least 1 (0 would never load a batch).  More prefetch hides latency spikes
  /// and costs one slab of shared memory each (never more slabs than tasks a
  /// worker gets in an epoch).
  std::optional<int> prefetch_factor;

  /// Keep worker processes (and their shared-memory slabs) alive between epochs.
  /// Requires num_workers > 0.  Default false.
  bool persistent_workers = false;

  /// How each worker's default generator is seeded (WorkerSeeding above).  PerTask
  /// needs a map-style dataset (ValueError otherwise): an iterable stream's draws run on
  /// across a worker's batches.  Default PerWorker (PyTorch's).
  WorkerSeeding worker_seeding = WorkerSeeding::PerWorker;

  /// Deliver batches in sampler order (true) or as soon as they are ready (false).
  /// Default true.
  bool in_order = true;

  /// Accepted for compatibility: "", "spawn", "fork" or "forkserver".  Workers are
  /// always started by fork+exec (spawn semantics).  Requires num_workers > 0.
  std::string multiprocessing_context;

  /// Restart a worker that died (signal, exit) up to this many times per loader,
  /// re-issuing its unfinished tasks so the epoch completes with every batch
  /// exactly once, in order.  0 (default) raises an error naming the worker.
  int max_worker_restarts = 0;

  /// Child processes (default) or threads of this process running the same worker
  /// loop (debugging, tests; datasets must then be thread-safe).
  WorkerMode worker_mode = WorkerMode::Process;

  /// The program worker processes run.  Empty (default): this very program
  /// (/proc/self/exe), whose main() calls run_worker_if_requested first.  Set it when
  /// the host is not your program (a Python interpreter, a plugin host): a small
  /// binary that registers the datasets and calls run_worker_if_requested
  /// (loader/worker_main.h).  It must be built against the same loader.
  std::string worker_executable;

  /// Upper bound for the shared-memory pool of all workers, in bytes; 0 means
  /// "what /dev/shm has free".  Default 0.
  uint64_t shm_limit_bytes = 0;

  /// Workers on other hosts, each "HOST:PORT" of a worker host (`loader serve`,
  /// loader/serve.h, docs/remote.md).  They come after the num_workers local ones: local
  /// workers are ids 0..num_workers-1, remote ones num_workers..; seeds (base_seed + id),
  /// credits, round robin and in-order delivery are as for local workers, so 1 local +
  /// 1 remote worker yield the bytes of 2 local ones.  Their batches come back inline
  /// over the network (no shared memory).  Default none.
  std::vector<std::string> remote_workers;
  /// The file whose first line is the secret the worker hosts expect (required with
  /// remote_workers).
  std::string remote_token_file;
  /// A remote worker silent this long (no heartbeat), or a task of it without an answer
  /// this long, is lost: warned about once naming its host:port, and restarted on its
  /// host (max_worker_restarts) or the epoch fails naming it.  Default 10 s.
  int64_t remote_timeout_ms = 10000;
  /// TLS to the worker hosts (all three or none): our certificate and key, and the CA
  /// that signed the hosts' certificates (and that the hosts trust for ours).
  std::string remote_tls_cert, remote_tls_key, remote_tls_ca;

  /// The prefetch factor in effect: prefetch_factor or 2.
  int effective_prefetch_factor() const { return prefetch_factor.value_or(2); }
  /// The workers of a pool: the local ones and those on other hosts.
  int pool_workers() const { return num_workers + static_cast<int>(remote_workers.size()); }
};

/// Checks option combinations exactly as torch.utils.data.DataLoader.__init__ does,
/// throwing ValueError/TypeError with PyTorch's messages.  `iterable` says whether
/// the dataset is an IterableDataset.
void validate_options(const DataLoaderOptions& options, bool iterable);

/// num_workers = kAutoWorkers: checks `autotune`, fills max_workers (0: usable_cpus())
/// and sets num_workers to it (the pool's slots).  Returns false, changing nothing, for
/// any other num_workers.  Throws ValueError naming what is wrong.
bool resolve_auto_workers(DataLoaderOptions& options);

/// The CPUs this process may run on (sched_getaffinity), at least 1.
int usable_cpus();

/// The device index of a pin_memory_device ("cuda": nullopt, "cuda:N": N); throws
/// ValueError naming the value for anything else.
std::optional<int> pin_device_index(const std::string& device);

}  // namespace loader
