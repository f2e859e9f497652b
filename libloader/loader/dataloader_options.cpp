#include "loader/dataloader_options.h"

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

void validate_options(const DataLoaderOptions& o, bool iterable) {
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
