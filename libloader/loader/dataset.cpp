#include "loader/dataset.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "loader/datasets.h"
#include "loader/error.h"
#include "loader/serialization/pt_dataset.h"

// The datasets library (loader_datasets: Fashion-MNIST) defines this to register its
// types.  The reference is weak, so the core does not depend on that library: when it
// is linked (loader::loader names the symbol with --undefined, so the linker keeps it)
// the registry calls it on first use; otherwise the pointer is null.
extern "C" void loader_datasets_register_builtins() __attribute__((weak));

namespace loader {

std::vector<Value> Dataset::get_batch(const IndexBatch& indices) {
  std::vector<Value> out;
  out.reserve(indices.size());
  for (int64_t i : indices) out.push_back(get(i));
  return out;
}

void Dataset::get_into(int64_t index, void* const* /*leaves*/) {
  throw NotImplementedError("dataset returns a sample_spec() but does not implement get_into() (index " +
                            std::to_string(index) + ")");
}

void Dataset::get_batch_into(const IndexBatch& indices, const BatchRows& rows) {
  std::vector<void*> row(rows.leaves());
  for (size_t r = 0; r < indices.size(); ++r) {
    for (size_t k = 0; k < row.size(); ++k) row[k] = rows.row(k, r);
    get_into(indices[r], row.data());
  }
}

void IterableDataset::load_state(const std::string& /*state*/) {
  throw NotImplementedError(
      "IterableDataset " + (handle() ? handle()->type : std::string("(no handle)")) +
      " returns a state() but does not implement load_state(): a dataset with state hooks implements both");
}

namespace {
struct Registry {
  std::mutex mu;
  std::map<std::string, MapDatasetFactory> map_style;
  std::map<std::string, IterableDatasetFactory> iterable;
};

Registry& registry() {
  static Registry r;
  return r;
}

// Built-in types are added on first use of the registry (a lookup, a listing), not by
// static initialisers, which a static link drops.  They never replace a factory the
// program registered under the same name, whenever it did.  Calls made while the
// built-ins are being added (register_builtin_datasets asks is_registered_dataset)
// return at once instead of re-entering.
void ensure_builtins() {
  static std::once_flag once;
  thread_local bool adding = false;
  if (adding) return;
  std::call_once(once, [] {
    struct Flag {
      Flag() { adding = true; }
      ~Flag() { adding = false; }
    } flag;
    register_builtin_datasets();
    if (!is_registered_dataset("pt_tensor_dataset")) pt::register_pt_datasets();
    if (loader_datasets_register_builtins) loader_datasets_register_builtins();
  });
}

std::string known_types() {
  auto names = registered_dataset_types();
  if (names.empty()) return "none";
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

template <class Factory>
Factory find_factory(std::map<std::string, Factory>& m, const std::string& type) {
  ensure_builtins();
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = m.find(type);
  return it == m.end() ? Factory{} : it->second;
}

template <class Result, class Factory>
std::shared_ptr<Result> build(const Factory& f, const DatasetHandle& h, const char* kind) {
  if (!f) {
    const bool iterable = std::string(kind) == "iterable";
    throw ValueError(std::string("unknown ") + kind + " dataset type '" + h.type + "'; registered types: " +
                     known_types() + ". " +
                     detail::registration_hint(
                         iterable ? "LOADER_REGISTER_ITERABLE_DATASET" : "LOADER_REGISTER_DATASET",
                         iterable ? "loader::register_iterable_dataset" : "loader::register_dataset"));
  }
  std::shared_ptr<Result> ds;
  try {
    ds = f(h.params);
  } catch (const Error& e) {
    throw_error(e.python_type(), "dataset '" + h.type + "' rejected its parameters " +
                                     h.params.repr() + ": " + e.what());
  } catch (const std::exception& e) {
    throw ValueError("dataset '" + h.type + "' rejected its parameters " + h.params.repr() + ": " +
                     e.what());
  }
  if (!ds) throw ValueError("dataset factory '" + h.type + "' returned null");
  ds->set_handle(h);
  return ds;
}
}  // namespace

void register_dataset(const std::string& type, MapDatasetFactory factory) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.map_style[type] = std::move(factory);
}

void register_iterable_dataset(const std::string& type, IterableDatasetFactory factory) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.iterable[type] = std::move(factory);
}

bool is_registered_dataset(const std::string& type) {
  return static_cast<bool>(find_factory(registry().map_style, type));
}

bool is_registered_iterable_dataset(const std::string& type) {
  return static_cast<bool>(find_factory(registry().iterable, type));
}

std::shared_ptr<Dataset> make_dataset(const DatasetHandle& handle) {
  if (is_registered_iterable_dataset(handle.type) && !is_registered_dataset(handle.type))
    throw ValueError("dataset type '" + handle.type +
                     "' is iterable-style; use make_iterable_dataset");
  return build<Dataset>(find_factory(registry().map_style, handle.type), handle, "map-style");
}

std::shared_ptr<IterableDataset> make_iterable_dataset(const DatasetHandle& handle) {
  if (is_registered_dataset(handle.type) && !is_registered_iterable_dataset(handle.type))
    throw ValueError("dataset type '" + handle.type + "' is map-style; use make_dataset");
  return build<IterableDataset>(find_factory(registry().iterable, handle.type), handle, "iterable");
}

std::vector<std::string> registered_dataset_types() {
  ensure_builtins();
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> names;
  for (const auto& kv : r.map_style) names.push_back(kv.first);
  for (const auto& kv : r.iterable) names.push_back(kv.first);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

}  // namespace loader
