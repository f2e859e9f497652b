// Datasets: map-style (`get(index)`, `size()`) and iterable-style (a stream).
//
// Worker processes cannot receive a C++ object, so a dataset that is to be loaded
// with num_workers > 0 is built from a *handle*: a registered type name plus its
// parameters.  The child process calls the same factory with the same parameters
// (the C++ counterpart of pickling the dataset for `spawn`).
//
//   class Squares : public loader::Dataset {
//    public:
//     explicit Squares(int64_t n) : n_(n) {}
//     loader::Value get(int64_t i) override { return loader::Value(i * i); }
//     int64_t size() const override { return n_; }
//    private:
//     int64_t n_;
//   };
//   LOADER_REGISTER_DATASET("squares", [](const loader::Value& p) {
//     return std::make_shared<Squares>(p.at("n").to_int()); });
//
//   auto ds = loader::make_dataset({"squares", loader::Value::dict({{"n", 100}})});
//
// Built-in types need no registration: the registry adds them on its first use
// ("range", "range_iterable", "counting", "subset", "concat", "chain",
// "pt_tensor_dataset", and "fashion_mnist" when the program links loader_datasets, as
// loader::loader does).  A registration macro in a static library of yours is kept
// only if that library is linked whole: see registration.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loader/registration.h"
#include "loader/sampler.h"
#include "loader/value.h"

namespace loader {

/// A registered dataset type plus its parameters: what a worker needs to rebuild it.
struct DatasetHandle {
  std::string type;
  Value params;  ///< usually a string-keyed dict; must contain no custom objects
};

/// Where Dataset::get_batch_into writes a batch: row r of the k-th tensor of
/// sample_spec() starts at `base[k] + r * row_bytes[k]` (contiguous rows).
struct BatchRows {
  std::vector<uint8_t*> base;
  std::vector<size_t> row_bytes;
  size_t leaves() const noexcept { return base.size(); }
  void* row(size_t k, size_t r) const noexcept { return base[k] + r * row_bytes[k]; }
};

/// Common base: remembers the handle the dataset was made from (if any).
class DatasetBase {
 public:
  virtual ~DatasetBase() = default;
  const std::optional<DatasetHandle>& handle() const noexcept { return handle_; }
  void set_handle(DatasetHandle h) { handle_ = std::move(h); }

 private:
  std::optional<DatasetHandle> handle_;
};

/// Map-style dataset (PyTorch's Dataset with __getitem__ and __len__).
class Dataset : public DatasetBase {
 public:
  virtual Value get(int64_t index) = 0;
  virtual int64_t size() const = 0;
  /// Fetches a whole batch of samples (PyTorch's optional __getitems__).  The
  /// default calls get() for each index; override it when a batch can be read
  /// faster than its samples one by one.
  virtual std::vector<Value> get_batch(const IndexBatch& indices);

  /// Optional fast path for fixed-layout samples.  A dataset whose samples all have
  /// the same structure, dtypes and shapes may describe one sample here: a Value
  /// whose tensors give dtype and shape (their contents are ignored; numbers must
  /// be given as 0-dim tensors).  With the default collate, the batch tensors are
  /// then allocated once (in a worker: in its shared-memory slab) and get_into()
  /// writes each sample straight into its row: no per-sample tensors, one write.
  /// The batch must equal default_collate of get() for the same indices.
  virtual std::optional<Value> sample_spec() const { return std::nullopt; }
  /// Writes sample `index` into `leaves[k]`, the contiguous row of the k-th tensor
  /// of sample_spec() (in Value::for_each_tensor order).  Called only when
  /// sample_spec() returns a value.
  virtual void get_into(int64_t index, void* const* leaves);
  /// The whole batch at once (get_into's counterpart of get_batch, PyTorch's
  /// __getitems__): writes sample `indices[r]` into `rows.row(k, r)` for every tensor
  /// k of sample_spec().  The default calls get_into() for each index; override it
  /// when rows can be gathered faster together (no virtual call per sample, the next
  /// rows fetched while one is copied).  Called only when sample_spec() returns a value.
  virtual void get_batch_into(const IndexBatch& indices, const BatchRows& rows);
};

/// Iterable-style dataset (PyTorch's IterableDataset).  Inside a worker,
/// get_worker_info() tells which share of the stream this copy should produce.
///
/// State hooks (optional; torchdata's StatefulDataLoader calls its datasets'
/// state_dict() / load_state_dict() the same way).  A dataset whose state() returns a
/// value lets a DataLoader checkpoint resume its epoch mid-way without running the
/// stream again: each stream (each worker's copy, or with num_workers=0 the loader's
/// own) is asked for state() just before its iter() as its epoch starts; a checkpoint
/// stores that state and how many results of the stream were taken; the resumed copy
/// gets load_state(state) before its iter() and then skips those results (skip() when
/// offered, else it builds them and drops them, in the worker).  docs/api.md,
/// "IterableDataset state hooks".  A dataset without them is resumed by replaying its
/// epoch from the start (one warning says how many results it replays).
class IterableDataset : public DatasetBase {
 public:
  virtual std::unique_ptr<Cursor<Value>> iter() = 0;
  /// __len__, when the stream knows its length (used by len(DataLoader)).
  virtual std::optional<int64_t> size() const { return std::nullopt; }
  /// The copy's state, from which load_state() makes the next iter() give the stream
  /// this copy's next iter() would give (an epoch counter, a seed, a shard's file
  /// offset...).  nullopt (the default): no state hooks.  It must return a value in every
  /// copy or in none.  The bytes go into the checkpoint as a 1-D uint8 tensor.
  virtual std::optional<std::string> state() const { return std::nullopt; }
  /// Sets the copy to a state() it returned (possibly in another process, another run);
  /// throws ValueError for bytes that are not one.  Called only on a dataset whose
  /// state() returns a value; the default throws NotImplementedError.
  virtual void load_state(const std::string& state);
  /// Optional: moves `stream`, a cursor this copy's iter() just made, past its first
  /// `samples` samples without building them, exactly as if they had been pulled and
  /// dropped (the same draws from the same generators, the same state afterwards), and
  /// returns how many it passed (fewer only when the stream ended).  nullopt (the
  /// default): not offered, and a resumed stream builds the results it skips.
  virtual std::optional<int64_t> skip(Cursor<Value>& stream, int64_t samples) {
    (void)stream;
    (void)samples;
    return std::nullopt;
  }
};

// ------------------------------------------------------------------ registry
using MapDatasetFactory = std::function<std::shared_ptr<Dataset>(const Value& params)>;
using IterableDatasetFactory = std::function<std::shared_ptr<IterableDataset>(const Value& params)>;

/// Registers a dataset type.  Registering a name twice replaces the factory.
void register_dataset(const std::string& type, MapDatasetFactory factory);
void register_iterable_dataset(const std::string& type, IterableDatasetFactory factory);
bool is_registered_dataset(const std::string& type);
bool is_registered_iterable_dataset(const std::string& type);
/// Builds a dataset from its handle and records the handle on it.  Throws
/// ValueError naming the type (and the registered ones) when it is unknown, or
/// wrapping the factory's own error when the parameters are bad.
std::shared_ptr<Dataset> make_dataset(const DatasetHandle& handle);
std::shared_ptr<IterableDataset> make_iterable_dataset(const DatasetHandle& handle);
/// Names of all registered dataset types, sorted.
std::vector<std::string> registered_dataset_types();

namespace detail {
struct DatasetRegistrar {
  DatasetRegistrar(const char* type, MapDatasetFactory f) { register_dataset(type, std::move(f)); }
  DatasetRegistrar(const char* type, IterableDatasetFactory f) {
    register_iterable_dataset(type, std::move(f));
  }
};
}  // namespace detail

/// Registers a map-style dataset factory at static-initialisation time.  In a static
/// library the registration survives only if the library is linked whole (registration.h).
#define LOADER_REGISTER_DATASET(type, ...)                                                \
  static ::loader::detail::DatasetRegistrar LOADER_UNIQUE_NAME(loader_dataset_registrar_)( \
      type, ::loader::MapDatasetFactory(__VA_ARGS__))
/// Registers an iterable dataset factory at static-initialisation time.
#define LOADER_REGISTER_ITERABLE_DATASET(type, ...)                                       \
  static ::loader::detail::DatasetRegistrar LOADER_UNIQUE_NAME(loader_dataset_registrar_)( \
      type, ::loader::IterableDatasetFactory(__VA_ARGS__))

}  // namespace loader
