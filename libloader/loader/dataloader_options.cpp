#include "loader/dataloader_options.h"

#include <sched.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <string>

#include "loader/error.h"

namespace loader {

std::optional<int> pin_device_index(const std::string& device) {
  auto refuse = [&] {
    throw ValueError("pin_memory_device='" + device +
                     "' is not a device loader can pin for: use \"cuda\" or \"cuda:N\" (N a device index), "
                     "or leave it empty; loader page-locks memory for CUDA devices only");
  };
  if (device == "cuda") return std::nullopt;
  const std::string prefix = "cuda:";
  if (device.size() <= prefix.size() || device.compare(0, prefix.size(), prefix) != 0) refuse();
  const std::string digits = device.substr(prefix.size());
  if (digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos) refuse();
  return std::stoi(digits);
}

const char* worker_seeding_name(WorkerSeeding s) {
  return s == WorkerSeeding::PerTask ? "per-task" : "per-worker";
}

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

bool resolve_auto_workers(DataLoaderOptions& o) {
  if (o.num_workers != kAutoWorkers) return false;
  AutotuneOptions& a = o.autotune;
  if (a.max_workers < 0 || a.min_workers < 0)
    throw ValueError("autotune: min_workers and max_workers must be non-negative, got min_workers=" +
                     std::to_string(a.min_workers) + ", max_workers=" + std::to_string(a.max_workers));
  if (a.max_workers == 0) a.max_workers = usable_cpus();
  if (a.min_workers > a.max_workers)
    throw ValueError("autotune: min_workers=" + std::to_string(a.min_workers) + " is above max_workers=" +
                     std::to_string(a.max_workers) + " (0: the CPUs this process may use); lower min_workers or raise max_workers");
  if (a.max_prefetch_factor < 1)
    throw ValueError("autotune: max_prefetch_factor must be at least 1, got " + std::to_string(a.max_prefetch_factor));
  if (a.max_prefetch_factor > 64) a.max_prefetch_factor = 64;
  if (!o.remote_workers.empty())
    throw ValueError("num_workers=auto tunes local worker processes; it cannot be combined with remote_workers "
                     "(give num_workers a number)");
  if (o.worker_mode == WorkerMode::InProcess)
    throw ValueError("num_workers=auto tunes worker processes; worker_mode=InProcess is for debugging a fixed pool "
                     "(give num_workers a number)");
  o.num_workers = a.max_workers;
  if (o.prefetch_factor && *o.prefetch_factor > a.max_prefetch_factor) a.max_prefetch_factor = *o.prefetch_factor;
  return true;
}

void validate_options(const DataLoaderOptions& o, bool iterable) {
  if (o.num_workers == kAutoWorkers)
    throw ValueError("internal: num_workers=auto reached validate_options unresolved (resolve_auto_workers first)");
  if (o.num_workers < 0)
    throw ValueError("num_workers option should be non-negative; use num_workers=0 to disable multiprocessing.");
  if (o.timeout < 0) throw ValueError("timeout option should be non-negative");
  if (!(o.timeout == o.timeout) || o.timeout == std::numeric_limits<double>::infinity())
    throw ValueError("timeout option should be a finite number of seconds (0 waits forever), but got " +
                     std::to_string(o.timeout));
  if (o.pool_workers() == 0 && o.prefetch_factor.has_value())
    throw ValueError("prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 to enable multiprocessing.");
  if (o.prefetch_factor.has_value() && *o.prefetch_factor < 0)
    throw ValueError("prefetch_factor option should be non-negative");
  if (o.prefetch_factor.has_value() && *o.prefetch_factor == 0)
    throw ValueError("prefetch_factor=0 would never send a task to a worker (at most prefetch_factor * num_workers "
                     "tasks are in flight): use prefetch_factor >= 1");
  if (!o.pin_memory_device.empty()) pin_device_index(o.pin_memory_device);  // throws when malformed
  if (!o.worker_executable.empty() && o.pool_workers() == 0)
    throw ValueError("worker_executable can only be used with multi-process loading (num_workers > 0), but got num_workers=0");
  if (o.persistent_workers && o.pool_workers() == 0)
    throw ValueError("persistent_workers option needs num_workers > 0");
  if (!o.multiprocessing_context.empty()) {
    if (o.pool_workers() == 0)
      throw ValueError("multiprocessing_context can only be used with multi-process loading (num_workers > 0), but got num_workers=0");
    const auto& c = o.multiprocessing_context;
    if (c != "fork" && c != "spawn" && c != "forkserver")
      throw ValueError("multiprocessing_context option should specify a valid start method in ['fork', 'spawn', 'forkserver'], but got multiprocessing_context='" + c + "'");
  }
  if (iterable) {
    if (o.shuffle.value_or(false))
      throw ValueError("DataLoader with IterableDataset: expected unspecified shuffle option, but got shuffle=True");
    if (o.sampler)
      throw ValueError("DataLoader with IterableDataset: expected unspecified sampler option, but got sampler=<custom sampler>");
    if (o.batch_sampler)
      throw ValueError("DataLoader with IterableDataset: expected unspecified batch_sampler option, but got batch_sampler=<custom batch sampler>");
  }
  if (o.sampler && o.shuffle.value_or(false))
    throw ValueError("sampler option is mutually exclusive with shuffle");
  if (o.batch_sampler) {
    if (o.batch_size != std::optional<int64_t>(1) || o.shuffle.value_or(false) || o.sampler || o.drop_last)
      throw ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last");
  } else if (!o.batch_size.has_value()) {
    if (o.drop_last)
      throw ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last");
  } else if (*o.batch_size <= 0) {
    throw ValueError("batch_size should be a positive integer value, but got batch_size=" +
                     std::to_string(*o.batch_size));
  }
  if (o.collate_fn && !o.collate_fn_name.empty())
    throw ValueError("collate_fn and collate_fn_name are mutually exclusive: pass one of them");
  if (o.worker_init_fn && !o.worker_init_fn_name.empty())
    throw ValueError("worker_init_fn and worker_init_fn_name are mutually exclusive: pass one of them");
  if (o.pool_workers() > 0 && o.collate_fn)
    throw ValueError("collate_fn is a function object, which cannot run in worker processes; register it with LOADER_REGISTER_COLLATE_FN(\"name\", fn) and set collate_fn_name = \"name\" (or use num_workers=0)");
  if (o.pool_workers() > 0 && o.worker_init_fn)
    throw ValueError("worker_init_fn is a function object, which cannot run in worker processes; register it with LOADER_REGISTER_WORKER_INIT_FN(\"name\", fn) and set worker_init_fn_name = \"name\"");
  if (o.max_worker_restarts < 0)
    throw ValueError("max_worker_restarts should be non-negative, but got " + std::to_string(o.max_worker_restarts));
  if (o.worker_seeding == WorkerSeeding::PerTask && iterable)
    throw ValueError("worker_seeding=PerTask needs a map-style dataset: an IterableDataset's draws run on across a "
                     "worker's batches, so they cannot be seeded per index batch; use WorkerSeeding::PerWorker");
  if (!o.remote_workers.empty() && o.remote_token_file.empty())
    throw ValueError("remote_workers needs remote_token_file: the worker hosts serve only clients that present their "
                     "secret (loader serve --token-file)");
  if (o.remote_timeout_ms <= 0)
    throw ValueError("remote_timeout_ms should be positive, but got " + std::to_string(o.remote_timeout_ms));
  {
    const int tls = !o.remote_tls_cert.empty() + !o.remote_tls_key.empty() + !o.remote_tls_ca.empty();
    if (tls != 0 && tls != 3) throw ValueError("TLS to the worker hosts needs all of remote_tls_cert, remote_tls_key and remote_tls_ca");
  }
  if (!o.collate_fn_name.empty()) (void)find_collate_fn(o.collate_fn_name);
  if (!o.worker_init_fn_name.empty()) (void)find_worker_init_fn(o.worker_init_fn_name);
}

}  // namespace loader
