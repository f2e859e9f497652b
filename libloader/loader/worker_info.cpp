#include "loader/worker_info.h"

#include <map>
#include <mutex>

#include "loader/dataset.h"
#include "loader/error.h"

namespace loader {

namespace {
thread_local const WorkerInfo* tls_worker_info = nullptr;

struct InitRegistry {
  std::mutex mu;
  std::map<std::string, WorkerInitFn> fns;
};
InitRegistry& init_registry() {
  static InitRegistry r;
  return r;
}
}  // namespace

std::string WorkerInfo::repr() const {
  std::string ds = "None";
  const DatasetBase* base = dataset ? static_cast<const DatasetBase*>(dataset.get())
                                    : static_cast<const DatasetBase*>(iterable_dataset.get());
  if (base) ds = base->handle() ? "<" + base->handle()->type + ">" : "<dataset>";
  return "WorkerInfo(id=" + std::to_string(id) + ", num_workers=" + std::to_string(num_workers) +
         ", seed=" + std::to_string(seed) + ", dataset=" + ds + ")";
}

const WorkerInfo* get_worker_info() { return tls_worker_info; }

WorkerInfoScope::WorkerInfoScope(const WorkerInfo* info) : previous_(tls_worker_info) {
  tls_worker_info = info;
}
WorkerInfoScope::~WorkerInfoScope() { tls_worker_info = previous_; }

void register_worker_init_fn(const std::string& name, WorkerInitFn fn) {
  auto& r = init_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.fns[name] = std::move(fn);
}

WorkerInitFn find_worker_init_fn(const std::string& name) {
  auto& r = init_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.fns.find(name);
  if (it != r.fns.end()) return it->second;
  std::string known;
  for (const auto& kv : r.fns) known += (known.empty() ? "" : ", ") + kv.first;
  throw ValueError("unknown worker_init_fn '" + name + "'; registered: " + (known.empty() ? "none" : known) +
                   ". " +
                   detail::registration_hint("LOADER_REGISTER_WORKER_INIT_FN", "loader::register_worker_init_fn"));
}

}  // namespace loader
