// get_worker_info() and worker_init_fn, as in torch.utils.data.
//
// Inside a worker (a child process, or an in-process worker in tests) the worker
// info names the worker, the number of workers, the worker's seed (base_seed + id)
// and the worker's own copy of the dataset.  In the main process it is null.
//
//   auto* info = loader::get_worker_info();
//   if (info) { /* split the stream: info->id of info->num_workers */ }
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "loader/registration.h"

namespace loader {

class Dataset;
class IterableDataset;

struct WorkerInfo {
  int id = 0;
  int num_workers = 0;
  uint64_t seed = 0;
  std::shared_ptr<Dataset> dataset;                   ///< map-style copy (or null)
  std::shared_ptr<IterableDataset> iterable_dataset;  ///< iterable copy (or null)
  std::string repr() const;  ///< "WorkerInfo(id=0, num_workers=2, seed=..., dataset=<type>)"
};

/// The calling worker's info, or nullptr in the main process.
const WorkerInfo* get_worker_info();

/// Installs `info` for the calling thread (used by the worker runtime).
class WorkerInfoScope {
 public:
  explicit WorkerInfoScope(const WorkerInfo* info);
  ~WorkerInfoScope();
  WorkerInfoScope(const WorkerInfoScope&) = delete;
  WorkerInfoScope& operator=(const WorkerInfoScope&) = delete;

 private:
  const WorkerInfo* previous_;
};

/// worker_init_fn(worker_id), run in each worker after seeding and before any data.
using WorkerInitFn = std::function<void(int worker_id)>;
void register_worker_init_fn(const std::string& name, WorkerInitFn fn);
/// ValueError naming the registered ones when `name` is unknown.
WorkerInitFn find_worker_init_fn(const std::string& name);

namespace detail {
struct WorkerInitRegistrar {
  WorkerInitRegistrar(const char* name, WorkerInitFn fn) { register_worker_init_fn(name, std::move(fn)); }
};
}  // namespace detail

/// Registers a worker_init_fn at static-initialisation time (see registration.h for
/// registrations in static libraries).
#define LOADER_REGISTER_WORKER_INIT_FN(name, ...)                                               \
  static ::loader::detail::WorkerInitRegistrar LOADER_UNIQUE_NAME(loader_winit_registrar_)( \
      name, ::loader::WorkerInitFn(__VA_ARGS__))

}  // namespace loader
