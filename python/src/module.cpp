// loader._C: the Python binding of the C++ runtime (pybind11).  The pure-Python layer
// (python/loader/*.py) gives the signatures and docstrings; this file converts values,
// tensors and errors, and keeps the interpreter lock out of the runtime's way.
//
// Threads and the interpreter lock (GIL).  Every call into the runtime releases the GIL
// first (next(), iter(), len(), state_dict(), stats(), shutdown, destruction), and a batch
// tensor's last reference, when torch frees it, gives its slab back with the GIL released
// (DLPack deleter below).  So the only code that takes the GIL while holding a runtime lock
// is a Python sampler's draw (PyIndexCursor), and no Python thread waits for a runtime lock
// while holding the GIL: no lock-order cycle.
//
// Tensors cross without a copy both ways: a batch's tensors are DLPack views of the slab
// the worker wrote (torch._C._from_dlpack), a torch tensor given to the loader (a
// TensorDataset's, a sampler's weights, a checkpoint's states) is read through its own
// DLPack export.
#include <Python.h>
#include <dlfcn.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <dlpack/dlpack.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loader/dataloader.h"
#include "loader/datasets.h"
#include "loader/error.h"
#include "loader/generator.h"
#include "loader/image/image_folder.h"
#include "loader/interrupt.h"
#include "loader/samplers.h"
#include "loader/shared_tensors.h"
#include "loader/tensor.h"
#include "loader/value.h"
#include "loader/warnings.h"

namespace py = pybind11;
using loader::Value;

namespace {

// ------------------------------------------------------------------ errors
/// Thrown from the interrupt check after PyErr_CheckSignals set the error (KeyboardInterrupt):
/// the binding rethrows the pending Python error once the runtime call has unwound.
struct PythonErrorPending {};

PyObject* python_exception_type(const std::string& name) {
  static const std::map<std::string, PyObject*> types = {
      {"ValueError", PyExc_ValueError},         {"TypeError", PyExc_TypeError},
      {"IndexError", PyExc_IndexError},         {"KeyError", PyExc_KeyError},
      {"RuntimeError", PyExc_RuntimeError},     {"AssertionError", PyExc_AssertionError},
      {"NotImplementedError", PyExc_NotImplementedError}, {"StopIteration", PyExc_StopIteration},
      {"FileNotFoundError", PyExc_FileNotFoundError}, {"OSError", PyExc_OSError},
      {"PermissionError", PyExc_PermissionError}, {"IsADirectoryError", PyExc_IsADirectoryError},
      {"NotADirectoryError", PyExc_NotADirectoryError}, {"ZeroDivisionError", PyExc_ZeroDivisionError},
      {"OverflowError", PyExc_OverflowError},   {"AttributeError", PyExc_AttributeError},
      {"MemoryError", PyExc_MemoryError},       {"EOFError", PyExc_EOFError},
      {"UnicodeDecodeError", PyExc_ValueError}, {"KeyboardInterrupt", PyExc_KeyboardInterrupt},
      {"TimeoutError", PyExc_TimeoutError},     {"ArithmeticError", PyExc_ArithmeticError},
      {"LookupError", PyExc_LookupError},       {"Exception", PyExc_Exception},
  };
  auto it = types.find(name);
  return it == types.end() ? PyExc_RuntimeError : it->second;
}

/// A Python exception raised while the runtime called back into Python (a sampler):
/// carried through the runtime as a loader::Error of the same type name.
[[noreturn]] void rethrow_as_loader_error(py::error_already_set& e) {
  std::string type = "RuntimeError";
  try {
    type = py::str(e.type().attr("__name__"));
  } catch (...) {
  }
  const std::string what = py::str(e.value());
  throw loader::Error(type, what);
}

// ------------------------------------------------------------------ tensors
/// torch._C._from_dlpack and torch.utils.dlpack.to_dlpack, looked up once.
struct TorchFns {
  py::object from_dlpack, to_dlpack, tensor_type, bool_dtype, from_numpy, ndarray_type;
};
TorchFns& torch_fns() {
  static TorchFns* fns = [] {
    auto* f = new TorchFns();  // never freed: the interpreter owns the objects till exit
    py::module_ torch = py::module_::import("torch");
    f->from_dlpack = torch.attr("_C").attr("_from_dlpack");
    f->to_dlpack = py::module_::import("torch.utils.dlpack").attr("to_dlpack");
    f->tensor_type = torch.attr("Tensor");
    f->bool_dtype = torch.attr("bool");
    f->from_numpy = torch.attr("from_numpy");
    try {
      f->ndarray_type = py::module_::import("numpy").attr("ndarray");
    } catch (py::error_already_set&) {
      f->ndarray_type = py::none();
    }
    return f;
  }();
  return *fns;
}

/// The DLPack export of a batch tensor, wrapped so that its deleter (run by torch when
/// the last view goes, on whatever thread) gives the slab back with the GIL released.
struct GilFreeManaged {
  DLManagedTensor outer;
  DLManagedTensor* inner;
};

void gil_free_deleter(DLManagedTensor* self) {
  auto* w = reinterpret_cast<GilFreeManaged*>(self);
  DLManagedTensor* inner = w->inner;
  delete w;
  if (!inner || !inner->deleter) return;
  if (Py_IsInitialized() && PyGILState_Check()) {
    PyThreadState* saved = PyEval_SaveThread();
    inner->deleter(inner);
    PyEval_RestoreThread(saved);
  } else {
    inner->deleter(inner);
  }
}

void capsule_destructor(PyObject* capsule) {
  // A capsule torch never consumed (an error in between) still owns its tensor.
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (m && m->deleter) m->deleter(m);
  }
}

py::object tensor_to_python(const loader::Tensor& t) {
  DLManagedTensor* inner = t.to_dlpack();
  auto* w = new GilFreeManaged{*inner, inner};
  w->outer.manager_ctx = nullptr;
  w->outer.deleter = gil_free_deleter;
  // torch 1.13's from_dlpack ignores byte_offset (a view's offset in its storage): fold it
  // into the data pointer (CPU memory; DLPack's alignment advice is for devices).
  w->outer.dl_tensor.data = static_cast<char*>(w->outer.dl_tensor.data) + w->outer.dl_tensor.byte_offset;
  w->outer.dl_tensor.byte_offset = 0;
  PyObject* cap = PyCapsule_New(&w->outer, "dltensor", capsule_destructor);
  if (!cap) {
    gil_free_deleter(&w->outer);
    throw py::error_already_set();
  }
  py::object capsule = py::reinterpret_steal<py::object>(cap);
  py::object out = torch_fns().from_dlpack(capsule);
  if (t.dtype() == loader::DType::Bool) out = out.attr("view")(torch_fns().bool_dtype);  // DLPack 0.6: bool as uint8
  return out;
}

bool is_torch_tensor(const py::handle& h) { return py::isinstance(h, torch_fns().tensor_type); }

loader::Tensor tensor_from_python(const py::handle& obj) {
  py::object t = py::reinterpret_borrow<py::object>(obj);
  if (!is_torch_tensor(t)) {
    if (!torch_fns().ndarray_type.is_none() && py::isinstance(t, torch_fns().ndarray_type))
      t = torch_fns().from_numpy(t);
    else
      throw loader::TypeError("expected a torch.Tensor or numpy.ndarray, got " +
                              std::string(py::str(py::type::of(obj).attr("__name__"))));
  }
  if (t.attr("device").attr("type").cast<std::string>() != "cpu")
    throw loader::ValueError("loader reads CPU tensors; got one on " + std::string(py::str(t.attr("device"))) +
                             " (move it with .cpu() first)");
  if (t.attr("requires_grad").cast<bool>()) t = t.attr("detach")();
  const bool is_bool = py::object(t.attr("dtype")).is(torch_fns().bool_dtype);
  if (is_bool) t = t.attr("view")(py::module_::import("torch").attr("uint8"));
  py::object capsule = torch_fns().to_dlpack(t);
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (!m) throw py::error_already_set();
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  loader::Tensor out = loader::Tensor::from_dlpack(m);
  if (is_bool) out = loader::Tensor(out.storage(), loader::DType::Bool, out.sizes(), out.strides(), out.storage_offset());
  return out;
}

// ------------------------------------------------------------------ values
/// operator.index(h) as int64 (Python ints, numpy and torch integer scalars).
int64_t index_of(const py::handle& h) {
  PyObject* i = PyNumber_Index(h.ptr());
  if (!i) throw py::error_already_set();
  const long long v = PyLong_AsLongLong(i);
  Py_DECREF(i);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  return v;
}
double float_of(const py::handle& h) {
  const double d = PyFloat_AsDouble(h.ptr());
  if (d == -1.0 && PyErr_Occurred()) throw py::error_already_set();
  return d;
}

/// namedtuple classes for batches of namedtuples, made once per (name, fields).
py::object namedtuple_class(const std::string& name, const std::vector<std::string>& fields) {
  static std::map<std::pair<std::string, std::vector<std::string>>, py::object>* cache =
      new std::map<std::pair<std::string, std::vector<std::string>>, py::object>();
  auto key = std::make_pair(name, fields);
  auto it = cache->find(key);
  if (it != cache->end()) return it->second;
  std::string short_name = name;
  if (auto dot = short_name.rfind('.'); dot != std::string::npos) short_name = short_name.substr(dot + 1);
  py::object cls = py::module_::import("collections").attr("namedtuple")(short_name, py::cast(fields));
  cache->emplace(key, cls);
  return cls;
}

py::object to_python(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::None: return py::none();
    case Value::Kind::Bool: return py::bool_(v.to_bool());
    case Value::Kind::Int: return py::int_(v.to_int());
    case Value::Kind::Double: return py::float_(v.to_double());
    case Value::Kind::String: return py::str(v.to_string());
    case Value::Kind::Bytes: return py::bytes(v.to_string());
    case Value::Kind::Tensor: return tensor_to_python(v.to_tensor());
    case Value::Kind::List: {
      py::list out(v.items().size());
      for (size_t i = 0; i < v.items().size(); ++i) out[i] = to_python(v.items()[i]);
      return std::move(out);
    }
    case Value::Kind::Tuple: {
      py::tuple out(v.items().size());
      for (size_t i = 0; i < v.items().size(); ++i) out[i] = to_python(v.items()[i]);
      if (!v.field_names().empty()) return namedtuple_class(v.type_name(), v.field_names())(*out);
      return std::move(out);
    }
    case Value::Kind::Dict: {
      py::dict out;
      for (const auto& [k, x] : v.dict_items()) out[to_python(k)] = to_python(x);
      if (v.type_name() == "collections.OrderedDict")
        return py::module_::import("collections").attr("OrderedDict")(out);
      return std::move(out);
    }
    case Value::Kind::Object:
      throw loader::TypeError("a batch holds a C++ object of type '" + v.to_object()->type_name() +
                              "', which has no Python form");
  }
  return py::none();
}

Value from_python(const py::handle& obj) {
  if (obj.is_none()) return Value();
  if (PyBool_Check(obj.ptr())) return Value(obj.cast<bool>());
  if (PyLong_Check(obj.ptr())) return Value(static_cast<long long>(obj.cast<int64_t>()));
  if (PyFloat_Check(obj.ptr())) return Value(obj.cast<double>());
  if (PyUnicode_Check(obj.ptr())) return Value(obj.cast<std::string>());
  if (PyBytes_Check(obj.ptr())) return Value::bytes(obj.cast<std::string>());
  if (is_torch_tensor(obj) ||
      (!torch_fns().ndarray_type.is_none() && py::isinstance(obj, torch_fns().ndarray_type)))
    return Value(tensor_from_python(obj));
  if (PyTuple_Check(obj.ptr())) {
    std::vector<Value> items;
    for (const py::handle& x : py::reinterpret_borrow<py::tuple>(obj)) items.push_back(from_python(x));
    if (py::hasattr(obj, "_fields")) {
      std::vector<std::string> fields = obj.attr("_fields").cast<std::vector<std::string>>();
      return Value::namedtuple(py::str(py::type::of(obj).attr("__name__")), std::move(fields), std::move(items));
    }
    return Value::tuple(std::move(items));
  }
  if (PyList_Check(obj.ptr())) {
    std::vector<Value> items;
    for (const py::handle& x : py::reinterpret_borrow<py::list>(obj)) items.push_back(from_python(x));
    return Value::list(std::move(items));
  }
  if (PyDict_Check(obj.ptr())) {
    std::vector<std::pair<Value, Value>> items;
    for (const auto& kv : py::reinterpret_borrow<py::dict>(obj))
      items.emplace_back(from_python(kv.first), from_python(kv.second));
    return Value::dict(std::move(items));
  }
  if (PyObject_HasAttrString(obj.ptr(), "__index__")) return Value(static_cast<long long>(index_of(obj)));
  if (PyObject_HasAttrString(obj.ptr(), "__float__") && !PyObject_HasAttrString(obj.ptr(), "__len__"))
    return Value(float_of(obj));
  throw loader::TypeError("cannot pass a " + std::string(py::str(py::type::of(obj).attr("__name__"))) +
                          " to the C++ loader (it takes None, bool, int, float, str, bytes, tensors, "
                          "lists, tuples and dicts of these)");
}

std::vector<int64_t> int_list(const py::handle& obj) {
  std::vector<int64_t> out;
  if (is_torch_tensor(obj)) {
    py::object t = py::reinterpret_borrow<py::object>(obj).attr("tolist")();
    for (const py::handle& x : t) out.push_back(index_of(x));
    return out;
  }
  for (const py::handle& x : obj) out.push_back(index_of(x));
  return out;
}

// ------------------------------------------------------------------ generators
/// A loader::Generator that mirrors a torch.Generator (its state is read from and written
/// back to torch's by the Python layer); or, for torch.default_generator, the runtime's
/// default generator itself.
struct PyGenerator {
  std::shared_ptr<loader::Generator> gen;
  bool is_default = false;
  loader::Generator synced;  ///< this generator when last written to or read from torch

  loader::Generator& g() { return is_default ? loader::default_generator() : *gen; }
  void load_torch(const std::string& bytes) {
    g().set_torch_state(bytes);
    synced = g();
  }
  /// torch's state with our draws, or None when nothing was drawn since the last sync
  /// (checked after every batch: Generator::same_state, no settling of lent draws).
  py::object changed_torch_state(const py::bytes& base) {
    if (g().same_state(synced)) return py::none();
    synced = g();
    return py::bytes(g().torch_state(std::string(base)));
  }
};

// ------------------------------------------------------------------ samplers drawn in Python
/// A Python iterable of indices (or of index lists, for a batch sampler), drawn in the main
/// process: each pass calls iter() on it, each next() takes the GIL (the runtime calls it
/// from whichever thread runs the sampler stage; see the lock note at the top).
template <class T>
class PyIndexCursor final : public loader::Cursor<T> {
 public:
  explicit PyIndexCursor(py::object iterator) : it_(std::move(iterator)) {}
  ~PyIndexCursor() override {
    py::gil_scoped_acquire gil;
    it_ = py::object();
  }
  std::optional<T> next() override {
    py::gil_scoped_acquire gil;
    try {
      PyObject* item = PyIter_Next(it_.ptr());
      if (!item) {
        if (PyErr_Occurred()) throw py::error_already_set();
        return std::nullopt;
      }
      py::object x = py::reinterpret_steal<py::object>(item);
      if constexpr (std::is_same_v<T, int64_t>) {
        return index_of(x);
      } else {
        return int_list(x);
      }
    } catch (py::error_already_set& e) {
      rethrow_as_loader_error(e);
    } catch (py::cast_error&) {
      throw loader::TypeError("a sampler yielded something that is not an index");
    }
  }

 private:
  py::object it_;
};

template <class T>
class PySampler final : public loader::SamplerOf<T> {
 public:
  explicit PySampler(py::object iterable) : iterable_(std::move(iterable)) {}
  ~PySampler() override {
    py::gil_scoped_acquire gil;
    iterable_ = py::object();
  }
  std::unique_ptr<loader::Cursor<T>> iter() override {
    py::gil_scoped_acquire gil;
    try {
      return std::make_unique<PyIndexCursor<T>>(py::iter(iterable_));
    } catch (py::error_already_set& e) {
      rethrow_as_loader_error(e);
    }
  }
  std::optional<int64_t> size() const override {
    py::gil_scoped_acquire gil;
    if (!py::hasattr(iterable_, "__len__")) return std::nullopt;
    try {
      return py::len(iterable_);
    } catch (py::error_already_set&) {
      return std::nullopt;  // a __len__ that raises (TypeError): no length, as torch's len() would find
    }
  }

 private:
  py::object iterable_;
};

// ------------------------------------------------------------------ the loader
/// Runs `fn` with the GIL released and Ctrl-C checked every 20 ms; a pending Python error
/// (KeyboardInterrupt) raised from the check is rethrown with the GIL held again.
template <class F>
auto interruptible(F&& fn) {
  bool pending = false;
  try {
    py::gil_scoped_release release;
    loader::InterruptCheck check(
        [] {
          py::gil_scoped_acquire gil;
          if (PyErr_CheckSignals() != 0) throw PythonErrorPending{};
        },
        std::chrono::milliseconds(20));
    return fn();
  } catch (PythonErrorPending&) {
    pending = true;
  }
  if (pending) throw py::error_already_set();
  throw std::logic_error("unreachable");
}

struct PyIterator;

struct PyLoader {
  std::unique_ptr<loader::DataLoader> dl;
  std::mutex mu;  ///< one call into this loader at a time (Python threads may share it)
  ~PyLoader() {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu);
    dl.reset();
  }
};

struct PyIterator {
  std::shared_ptr<PyLoader> owner;
  std::optional<loader::DataLoader::Iterator> it;
  ~PyIterator() {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(owner->mu);
    it.reset();
  }
};

loader::WorkerSeeding seeding_from(const std::string& s) {
  if (s == "per-worker" || s == "per_worker") return loader::WorkerSeeding::PerWorker;
  if (s == "per-task" || s == "per_task") return loader::WorkerSeeding::PerTask;
  throw loader::ValueError("worker_seeding must be 'per-worker' or 'per-task', got '" + s + "'");
}

/// The options dict the Python layer built (python/loader/dataloader.py) into C++ options.
loader::DataLoaderOptions options_from(const py::dict& o) {
  loader::DataLoaderOptions opts;
  auto has = [&](const char* k) { return o.contains(k) && !o[k].is_none(); };
  opts.batch_size = has("batch_size") ? std::optional<int64_t>(o["batch_size"].cast<int64_t>()) : std::nullopt;
  if (has("shuffle")) opts.shuffle = o["shuffle"].cast<bool>();
  if (has("num_workers")) {
    if (py::isinstance<py::str>(o["num_workers"])) opts.num_workers = loader::kAutoWorkers;
    else opts.num_workers = o["num_workers"].cast<int>();
  }
  if (has("collate_fn_name")) opts.collate_fn_name = o["collate_fn_name"].cast<std::string>();
  if (has("worker_init_fn_name")) opts.worker_init_fn_name = o["worker_init_fn_name"].cast<std::string>();
  if (has("pin_memory")) opts.pin_memory = o["pin_memory"].cast<bool>();
  if (has("pin_memory_device")) opts.pin_memory_device = o["pin_memory_device"].cast<std::string>();
  if (has("drop_last")) opts.drop_last = o["drop_last"].cast<bool>();
  if (has("timeout")) opts.timeout = o["timeout"].cast<double>();
  if (has("prefetch_factor")) opts.prefetch_factor = o["prefetch_factor"].cast<int>();
  if (has("persistent_workers")) opts.persistent_workers = o["persistent_workers"].cast<bool>();
  if (has("in_order")) opts.in_order = o["in_order"].cast<bool>();
  if (has("multiprocessing_context")) opts.multiprocessing_context = o["multiprocessing_context"].cast<std::string>();
  if (has("max_worker_restarts")) opts.max_worker_restarts = o["max_worker_restarts"].cast<int>();
  if (has("worker_seeding")) opts.worker_seeding = seeding_from(o["worker_seeding"].cast<std::string>());
  if (has("worker_executable")) opts.worker_executable = o["worker_executable"].cast<std::string>();
  if (has("shm_limit_bytes")) opts.shm_limit_bytes = o["shm_limit_bytes"].cast<uint64_t>();
  if (has("remote_workers")) opts.remote_workers = o["remote_workers"].cast<std::vector<std::string>>();
  if (has("remote_token_file")) opts.remote_token_file = o["remote_token_file"].cast<std::string>();
  if (has("remote_timeout_ms")) opts.remote_timeout_ms = o["remote_timeout_ms"].cast<int64_t>();
  if (has("remote_tls_cert")) opts.remote_tls_cert = o["remote_tls_cert"].cast<std::string>();
  if (has("remote_tls_key")) opts.remote_tls_key = o["remote_tls_key"].cast<std::string>();
  if (has("remote_tls_ca")) opts.remote_tls_ca = o["remote_tls_ca"].cast<std::string>();
  if (has("autotune")) {
    py::dict a = o["autotune"];
    if (a.contains("min_workers")) opts.autotune.min_workers = a["min_workers"].cast<int>();
    if (a.contains("max_workers")) opts.autotune.max_workers = a["max_workers"].cast<int>();
    if (a.contains("memory_budget_bytes")) opts.autotune.memory_budget_bytes = a["memory_budget_bytes"].cast<uint64_t>();
    if (a.contains("tune_prefetch")) opts.autotune.tune_prefetch = a["tune_prefetch"].cast<bool>();
    if (a.contains("max_prefetch_factor")) opts.autotune.max_prefetch_factor = a["max_prefetch_factor"].cast<int>();
  }
  if (has("worker_mode")) {
    const std::string m = o["worker_mode"].cast<std::string>();
    if (m == "process") opts.worker_mode = loader::WorkerMode::Process;
    else if (m == "in_process" || m == "in-process") opts.worker_mode = loader::WorkerMode::InProcess;
    else throw loader::ValueError("worker_mode must be 'process' or 'in_process', got '" + m + "'");
  }
  return opts;
}

/// A dataset the runtime can rebuild in a worker: a registered type name plus parameters.
struct PyDataset {
  std::shared_ptr<loader::Dataset> map;
  std::shared_ptr<loader::IterableDataset> iterable;
  loader::DatasetHandle handle;
};

/// One pass over a C++ iterable dataset in this process (iter() of a CppIterableDataset).
struct PyCursor {
  std::unique_ptr<loader::Cursor<Value>> cursor;
};

// ------------------------------------------------------------------ samplers
using SamplerPtr = std::shared_ptr<loader::Sampler>;
using BatchSamplerPtr = std::shared_ptr<loader::BatchSamplerBase>;
std::shared_ptr<loader::Generator> generator_of(const std::shared_ptr<PyGenerator>& g) {
  if (!g || g->is_default) return nullptr;
  return g->gen;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "loader's C++ runtime (use the `loader` package, not this module)";
  m.attr("__version__") = LOADER_VERSION;

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const loader::Error& e) {
      PyErr_SetString(python_exception_type(e.python_type()), e.what());
    } catch (const PythonErrorPending&) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyboardInterrupt, "");
    }
  });

  // ---- warnings: the runtime's warn() becomes Python's warnings.warn (filters, catch_warnings,
  // pytest.warns), from whichever thread warns; printed as before while the interpreter ends.
  loader::set_warning_handler([](const loader::Warning& w) {
#if PY_VERSION_HEX >= 0x030D0000
    const bool finalizing = Py_IsFinalizing();
#else
    const bool finalizing = _Py_IsFinalizing();
#endif
    if (!Py_IsInitialized() || finalizing) {
      std::fprintf(stderr, "%s: %s\n", w.category.c_str(), w.message.c_str());
      return;
    }
    py::gil_scoped_acquire gil;
    PyObject* category = PyDict_GetItemString(PyEval_GetBuiltins(), w.category.c_str());
    if (!category || !PyType_Check(category) || !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(category),
                                                                 reinterpret_cast<PyTypeObject*>(PyExc_Warning)))
      category = PyExc_UserWarning;
    if (PyErr_WarnEx(category, w.message.c_str(), 1) != 0) {
      // A filter turned it into an error, where no Python frame can take it: show it.
      PyErr_WriteUnraisable(nullptr);
    }
  });

  // ---- generators
  py::class_<PyGenerator, std::shared_ptr<PyGenerator>>(m, "_Generator")
      .def(py::init([](bool is_default) {
             auto g = std::make_shared<PyGenerator>();
             g->is_default = is_default;
             if (!is_default) g->gen = std::make_shared<loader::Generator>();
             g->synced = g->g();
             return g;
           }),
           py::arg("is_default") = false)
      .def("load_torch_state", [](PyGenerator& g, const py::bytes& b) { g.load_torch(std::string(b)); })
      .def("changed_torch_state",
           [](PyGenerator& g, const py::bytes& base) { return g.changed_torch_state(base); });

  // ---- datasets
  py::class_<PyDataset, std::shared_ptr<PyDataset>>(m, "_Dataset")
      .def(py::init([](const std::string& type, const py::object& params) {
             auto d = std::make_shared<PyDataset>();
             d->handle = loader::DatasetHandle{type, from_python(params)};
             py::gil_scoped_release release;
             if (loader::is_registered_dataset(type)) d->map = loader::make_dataset(d->handle);
             else if (loader::is_registered_iterable_dataset(type)) d->iterable = loader::make_iterable_dataset(d->handle);
             else
               throw loader::KeyError("no dataset is registered as '" + type +
                                      "' (register it in C++ with LOADER_REGISTER_DATASET and load the library "
                                      "with loader.load_library)");
             return d;
           }),
           py::arg("type"), py::arg("params"))
      .def("is_iterable", [](const PyDataset& d) { return static_cast<bool>(d.iterable); })
      .def("type", [](const PyDataset& d) { return d.handle.type; })
      .def("params", [](const PyDataset& d) { return to_python(d.handle.params); })
      .def("__len__",
           [](const PyDataset& d) -> int64_t {
             if (!d.map) throw loader::TypeError("this IterableDataset has no len()");
             return d.map->size();
           })
      .def("__getitem__",
           [](const PyDataset& d, int64_t index) {
             if (!d.map) throw loader::TypeError("an IterableDataset has no __getitem__");
             Value v;
             {
               py::gil_scoped_release release;
               v = d.map->get(index);
             }
             return to_python(v);
           })
      .def("__iter__",
           [](const PyDataset& d) {
             if (!d.iterable) throw loader::TypeError("a map-style dataset: index it, or iterate a DataLoader");
             auto c = std::make_shared<PyCursor>();
             py::gil_scoped_release release;
             c->cursor = d.iterable->iter();
             return c;
           })
      .def("image_info", [](const PyDataset& d) {
        py::dict out;
        auto* folder = dynamic_cast<loader::image::ImageFolder*>(d.map.get());
        auto* images = dynamic_cast<loader::image::ImageDataset*>(d.map.get());
        if (!images) return out;
        py::list samples;
        for (const auto& s : images->samples()) samples.append(py::make_tuple(s.path, s.target));
        out["samples"] = samples;
        if (folder) {
          out["classes"] = py::cast(folder->classes());
          py::dict c2i;
          for (const auto& [k, v] : folder->class_to_idx()) c2i[py::str(k)] = v;
          out["class_to_idx"] = c2i;
        }
        return out;
      });

  py::class_<PyCursor, std::shared_ptr<PyCursor>>(m, "_Cursor")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", [](PyCursor& c) -> py::object {
        std::optional<Value> v;
        {
          py::gil_scoped_release release;
          v = c.cursor->next();
        }
        if (!v) throw py::stop_iteration();
        return to_python(*v);
      });

  py::class_<loader::SharedTensorFile, std::shared_ptr<loader::SharedTensorFile>>(m, "_SharedTensors")
      .def(py::init([](const py::list& tensors) {
             std::vector<loader::Tensor> ts;
             for (const py::handle& t : tensors) ts.push_back(tensor_from_python(t));
             py::gil_scoped_release release;
             return std::make_shared<loader::SharedTensorFile>(ts);
           }))
      .def("handle",
           [](const loader::SharedTensorFile& f) {
             const loader::DatasetHandle h = f.handle();
             return py::make_tuple(h.type, to_python(h.params));
           })
      .def("nbytes", &loader::SharedTensorFile::bytes);

  // ---- samplers (the C++ ones, bit-exact with torch's)
  py::class_<loader::Sampler, SamplerPtr>(m, "_Sampler")
      .def("__len__", [](const loader::Sampler& s) -> int64_t {
        auto n = s.size();
        if (!n) throw loader::TypeError("this sampler has no len()");
        return *n;
      })
      .def("set_epoch", [](loader::Sampler& s, int64_t epoch) {
        auto* d = dynamic_cast<loader::DistributedSampler*>(&s);
        if (!d) throw loader::TypeError("set_epoch: not a DistributedSampler");
        d->set_epoch(epoch);
      });
  py::class_<loader::BatchSamplerBase, BatchSamplerPtr>(m, "_BatchSampler")
      .def("__len__", [](const loader::BatchSamplerBase& s) -> int64_t {
        auto n = s.size();
        if (!n) throw loader::TypeError("this batch sampler has no len()");
        return *n;
      });
  m.def("sequential_sampler", [](int64_t n) -> SamplerPtr { return std::make_shared<loader::SequentialSampler>(n); });
  m.def("random_sampler",
        [](int64_t n, bool replacement, std::optional<int64_t> num_samples,
           const std::shared_ptr<PyGenerator>& g) -> SamplerPtr {
          loader::RandomSamplerOptions o;
          o.replacement = replacement;
          o.num_samples = num_samples;
          o.generator = generator_of(g);
          return std::make_shared<loader::RandomSampler>(n, o);
        },
        py::arg("n"), py::arg("replacement"), py::arg("num_samples"), py::arg("generator"));
  m.def("subset_random_sampler",
        [](const py::object& indices, const std::shared_ptr<PyGenerator>& g) -> SamplerPtr {
          return std::make_shared<loader::SubsetRandomSampler>(int_list(indices), generator_of(g));
        });
  m.def("weighted_random_sampler",
        [](const py::object& weights, int64_t num_samples, bool replacement,
           const std::shared_ptr<PyGenerator>& g) -> SamplerPtr {
          loader::Tensor w = tensor_from_python(weights);
          return std::make_shared<loader::WeightedRandomSampler>(w, num_samples, replacement, generator_of(g));
        });
  m.def("distributed_sampler",
        [](int64_t n, int64_t num_replicas, int64_t rank, bool shuffle, int64_t seed, bool drop_last) -> SamplerPtr {
          loader::DistributedSamplerOptions o;
          o.num_replicas = num_replicas;
          o.rank = rank;
          o.shuffle = shuffle;
          o.seed = static_cast<uint64_t>(seed);
          o.drop_last = drop_last;
          return std::make_shared<loader::DistributedSampler>(n, o);
        });
  m.def("python_sampler", [](py::object iterable) -> SamplerPtr {
    return std::make_shared<PySampler<int64_t>>(std::move(iterable));
  });
  m.def("batch_sampler", [](const SamplerPtr& s, int64_t batch_size, bool drop_last) -> BatchSamplerPtr {
    return std::make_shared<loader::BatchSampler>(s, batch_size, drop_last);
  });
  m.def("python_batch_sampler", [](py::object iterable) -> BatchSamplerPtr {
    return std::make_shared<PySampler<loader::IndexBatch>>(std::move(iterable));
  });

  // ---- the loader
  py::class_<PyLoader, std::shared_ptr<PyLoader>>(m, "_DataLoader")
      .def(py::init([](const std::shared_ptr<PyDataset>& ds, const py::dict& options, const SamplerPtr& sampler,
                       const BatchSamplerPtr& batch_sampler, const std::shared_ptr<PyGenerator>& g) {
             loader::DataLoaderOptions opts = options_from(options);
             opts.sampler = sampler;
             opts.batch_sampler = batch_sampler;
             opts.generator = generator_of(g);
             auto l = std::make_shared<PyLoader>();
             py::gil_scoped_release release;
             if (ds->iterable) l->dl = std::make_unique<loader::DataLoader>(ds->iterable, opts);
             else l->dl = std::make_unique<loader::DataLoader>(ds->map, opts);
             return l;
           }),
           py::arg("dataset"), py::arg("options"), py::arg("sampler"), py::arg("batch_sampler"), py::arg("generator"))
      .def("__len__",
           [](PyLoader& l) {
             py::gil_scoped_release release;
             std::lock_guard<std::mutex> lock(l.mu);
             return l.dl->size();
           })
      .def("iter",
           [](const std::shared_ptr<PyLoader>& l) {
             auto it = std::make_shared<PyIterator>();
             it->owner = l;
             interruptible([&] {
               std::lock_guard<std::mutex> lock(l->mu);
               it->it.emplace(l->dl->iter());
               return 0;
             });
             return it;
           })
      .def("state_dict",
           [](PyLoader& l) {
             Value v;
             {
               py::gil_scoped_release release;
               std::lock_guard<std::mutex> lock(l.mu);
               v = l.dl->state_dict();
             }
             return to_python(v);
           })
      .def("load_state_dict",
           [](PyLoader& l, const py::object& state, bool strict) {
             Value v = from_python(state);
             py::gil_scoped_release release;
             std::lock_guard<std::mutex> lock(l.mu);
             l.dl->load_state_dict(v, strict);
           },
           py::arg("state"), py::arg("strict") = true)
      .def("stats_json",
           [](PyLoader& l) {
             py::gil_scoped_release release;
             std::lock_guard<std::mutex> lock(l.mu);
             return l.dl->stats().to_json();
           })
      .def("pin_memory_status",
           [](PyLoader& l) {
             loader::PinStatus s;
             {
               py::gil_scoped_release release;
               std::lock_guard<std::mutex> lock(l.mu);
               s = l.dl->pin_memory_status();
             }
             py::dict d;
             d["requested"] = s.requested;
             d["backend"] = s.backend_name();
             d["pinned"] = s.pinned;
             d["reason"] = s.reason;
             d["regions"] = s.regions;
             return d;
           })
      .def("shutdown", [](PyLoader& l) {
        py::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(l.mu);
        l.dl->shutdown();
      });

  py::class_<PyIterator, std::shared_ptr<PyIterator>>(m, "_Iterator")
      .def("next",
           [](PyIterator& it) -> py::object {
             if (!it.it) return py::none();
             std::optional<Value> v = interruptible([&] {
               std::lock_guard<std::mutex> lock(it.owner->mu);
               return it.it->next();
             });
             if (!v) return py::reinterpret_borrow<py::object>(Py_Ellipsis);  // the end of the epoch
             return to_python(*v);
           })
      .def("state_dict",
           [](PyIterator& it) {
             Value v;
             {
               py::gil_scoped_release release;
               std::lock_guard<std::mutex> lock(it.owner->mu);
               if (!it.it) throw loader::RuntimeError("this iterator is closed");
               v = it.it->state_dict();
             }
             return to_python(v);
           })
      .def("stats_json",
           [](PyIterator& it) {
             py::gil_scoped_release release;
             std::lock_guard<std::mutex> lock(it.owner->mu);
             if (!it.it) throw loader::RuntimeError("this iterator is closed");
             return it.it->stats().to_json();
           })
      .def("worker_pids",
           [](PyIterator& it) {
             py::gil_scoped_release release;
             std::lock_guard<std::mutex> lock(it.owner->mu);
             return it.it ? it.it->worker_pids() : std::vector<int>{};
           })
      .def("close", [](PyIterator& it) {
        py::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(it.owner->mu);
        it.it.reset();
      });

  // ---- extensions
  m.def(
      "load_library",
      [](const std::string& path) {
        void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
        if (!h)
          throw loader::Error("OSError", "load_library: cannot load '" + path + "': " + std::string(::dlerror()));
      },
      py::arg("path"));
}
