#include "loader/serialization/pt.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "loader/serialization/pickle.h"

namespace loader::pt {

namespace {

const char* const kParameterType = "torch.nn.parameter.Parameter";
const char* const kRequiresGradType = "torch.Tensor";
const char* const kOrderedDict = "collections.OrderedDict";

bool little_endian_host() {
  const uint16_t x = 1;
  uint8_t b;
  std::memcpy(&b, &x, 1);
  return b == 1;
}

// ------------------------------------------------------------------ the allow-list
enum class G {
  OrderedDict,
  RebuildTensor,
  RebuildTensorV2,
  RebuildTensorV3,
  RebuildParameter,
  RebuildParameterWithState,
  RebuildFromTypeV2,
  StorageType,   // torch.<X>Storage (dtype) or torch.UntypedStorage (untyped)
  DTypeObject,   // torch.float32 ... (arguments of _rebuild_tensor_v3)
  TorchSize,
  ParameterClass,
  TensorClass,
  CodecsEncode,
  Bytes,
  ByteArray,
  Set,
  FrozenSet,
};

struct GlobalSpec {
  G kind;
  DType dtype = DType::UInt8;
  bool untyped = false;
};

struct StorageName {
  const char* name;
  DType dtype;
};
const StorageName kStorageNames[] = {
    {"BoolStorage", DType::Bool},         {"ByteStorage", DType::UInt8},
    {"CharStorage", DType::Int8},         {"ShortStorage", DType::Int16},
    {"IntStorage", DType::Int32},         {"LongStorage", DType::Int64},
    {"HalfStorage", DType::Float16},      {"BFloat16Storage", DType::BFloat16},
    {"FloatStorage", DType::Float32},     {"DoubleStorage", DType::Float64},
    {"ComplexFloatStorage", DType::Complex64},
};

const char* storage_class_name(DType t) {
  for (const auto& s : kStorageNames)
    if (s.dtype == t) return s.name;
  return "ByteStorage";
}

const std::map<std::string, GlobalSpec>& global_table() {
  static const std::map<std::string, GlobalSpec> table = [] {
    std::map<std::string, GlobalSpec> t;
    t["collections.OrderedDict"] = {G::OrderedDict};
    t["torch._utils._rebuild_tensor"] = {G::RebuildTensor};
    t["torch._utils._rebuild_tensor_v2"] = {G::RebuildTensorV2};
    t["torch._utils._rebuild_tensor_v3"] = {G::RebuildTensorV3};
    t["torch._utils._rebuild_parameter"] = {G::RebuildParameter};
    t["torch._utils._rebuild_parameter_with_state"] = {G::RebuildParameterWithState};
    t["torch._tensor._rebuild_from_type_v2"] = {G::RebuildFromTypeV2};
    t["torch.Size"] = {G::TorchSize};
    t["torch.nn.parameter.Parameter"] = {G::ParameterClass};
    t["torch.Tensor"] = {G::TensorClass};
    t["torch._tensor.Tensor"] = {G::TensorClass};
    t["_codecs.encode"] = {G::CodecsEncode};
    t["builtins.bytes"] = {G::Bytes};
    t["builtins.bytearray"] = {G::ByteArray};
    t["builtins.set"] = {G::Set};
    t["builtins.frozenset"] = {G::FrozenSet};
    for (const auto& s : kStorageNames) t[std::string("torch.") + s.name] = {G::StorageType, s.dtype};
    t["torch.UntypedStorage"] = {G::StorageType, DType::UInt8, true};
    t["torch.storage.UntypedStorage"] = {G::StorageType, DType::UInt8, true};
    for (int i = 0; i < kNumDTypes; ++i) {
      auto d = static_cast<DType>(i);
      t[std::string("torch.") + dtype_name(d)] = {G::DTypeObject, d};
    }
    return t;
  }();
  return table;
}

// Names torch uses for what DType lacks: a clearer message than "Unsupported global".
bool is_unsupported_torch_dtype(const std::string& full) {
  static const std::unordered_set<std::string> names = {
      "torch.ComplexDoubleStorage", "torch.QInt8Storage",   "torch.QUInt8Storage",
      "torch.QInt32Storage",        "torch.QUInt4x2Storage", "torch.QUInt2x4Storage",
      "torch.complex128",           "torch.complex32",       "torch.uint16",
      "torch.uint32",               "torch.uint64",          "torch.float8_e5m2",
      "torch.float8_e4m3fn",        "torch.float8_e5m2fnuz", "torch.float8_e4m3fnuz",
      "torch.qint8",                "torch.quint8",          "torch.qint32",
      "torch.quint4x2",             "torch.quint2x4"};
  return names.count(full) > 0;
}

class GlobalRef final : public PickleObject {
 public:
  GlobalRef(std::string full, GlobalSpec spec) : full_(std::move(full)), spec_(spec) {}
  std::string type_name() const override { return full_; }
  const GlobalSpec& spec() const { return spec_; }

 private:
  std::string full_;
  GlobalSpec spec_;
};

// A storage named by a persistent id: the bytes of record data/<key> (zip), or of a
// storage record or a view into one (legacy).  `label` names it in messages.
class StorageRef final : public PickleObject {
 public:
  StorageRef(std::shared_ptr<Storage> s, DType dtype, bool untyped, std::string key, std::string label)
      : storage(std::move(s)), dtype(dtype), untyped(untyped), key(std::move(key)), label(std::move(label)) {}
  std::string type_name() const override { return "storage " + label; }
  std::shared_ptr<Storage> storage;
  DType dtype;
  bool untyped;
  std::string key;
  std::string label;  // "'data/0'" (zip), "'140234'" or "view '1402' of '1401'" (legacy)
};

// A global outside the allow-list met in a legacy file.  PyTorch's legacy format pickles
// a whole nn.Module class as the persistent id ('module', <class>, source_file, source),
// and the class's GLOBAL comes first; the refusal waits for the next opcode that uses
// it, so that a pickled module gets its own message.  It is never called or built.
class RefusedGlobal final : public PickleObject {
 public:
  explicit RefusedGlobal(std::string full) : full_(std::move(full)) {}
  std::string type_name() const override { return full_; }

 private:
  std::string full_;
};

const GlobalRef* as_global(const Value& v) {
  if (!v.is_object()) return nullptr;
  return dynamic_cast<const GlobalRef*>(v.to_object().get());
}
const StorageRef* as_storage(const Value& v) {
  if (!v.is_object()) return nullptr;
  return dynamic_cast<const StorageRef*>(v.to_object().get());
}

// UTF-8 text of code points 0..255 (Python's str(bytes, 'latin1')) and back.
std::string latin1_to_utf8(const std::string& b) {
  std::string s;
  s.reserve(b.size() * 2);
  for (unsigned char c : b) {
    if (c < 0x80) {
      s += static_cast<char>(c);
    } else {
      s += static_cast<char>(0xC0 | (c >> 6));
      s += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return s;
}

std::string utf8_to_latin1(const std::string& s) {
  std::string b;
  b.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      b += static_cast<char>(c);
    } else if ((c == 0xC2 || c == 0xC3) && i + 1 < s.size() &&
               (static_cast<unsigned char>(s[i + 1]) & 0xC0) == 0x80) {
      b += static_cast<char>(((c & 0x03) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3F));
      ++i;
    } else {
      throw PtFormatError("_codecs.encode(..., 'latin1'): the string has a character above U+00FF");
    }
  }
  return b;
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
      return false;
    i += len;
  }
  return true;  // surrogates (ED A0..BF) are accepted: Python writes them with surrogatepass
}

std::vector<int64_t> int_tuple(const Value& v, const char* what) {
  if (!v.is_sequence())
    throw PtFormatError(std::string(what) + " is a " + v.python_type() + ", not a tuple of ints");
  std::vector<int64_t> out;
  out.reserve(v.items().size());
  for (const Value& x : v.items()) {
    if (!x.is_int()) throw PtFormatError(std::string(what) + " holds a " + x.python_type() + ", not an int");
    out.push_back(x.to_int());
  }
  return out;
}

int64_t int_arg(const Value& v, const char* what) {
  if (!v.is_int()) throw PtFormatError(std::string(what) + " is a " + v.python_type() + ", not an int");
  return v.to_int();
}

bool bool_arg(const Value& v, const char* what) {
  if (v.is_bool()) return v.to_bool();
  if (v.is_int() && (v.to_int() == 0 || v.to_int() == 1)) return v.to_int() == 1;
  throw PtFormatError(std::string(what) + " is a " + v.python_type() + ", not a bool");
}

// A storage key: a str, or an int (written as its decimal digits).
std::string key_arg(const Value& v, const char* what) {
  if (v.is_string()) return v.to_string();
  if (v.is_int()) return std::to_string(v.to_int());
  throw PtFormatError(std::string(what) + " is a " + v.python_type() + ", not a str");
}

// Builds a tensor over a storage after checking, without any overflow, that every
// element it addresses lies inside the storage.
Tensor make_view(const StorageRef& s, DType dtype, const Value& offset_v, const Value& size_v,
                 const Value& stride_v) {
  const int64_t offset = int_arg(offset_v, "storage_offset");
  std::vector<int64_t> sizes = int_tuple(size_v, "size");
  std::vector<int64_t> strides = int_tuple(stride_v, "stride");
  if (sizes.size() != strides.size())
    throw PtFormatError("tensor has " + std::to_string(sizes.size()) + " sizes but " +
                        std::to_string(strides.size()) + " strides");
  if (offset < 0) throw PtFormatError("negative storage_offset " + std::to_string(offset));
  int64_t numel = 1;
  bool overflow = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0) throw PtFormatError("negative size " + std::to_string(sizes[i]) + " in dimension " + std::to_string(i));
    if (strides[i] < 0) throw PtFormatError("negative stride " + std::to_string(strides[i]) + " in dimension " + std::to_string(i));
    if (!overflow && __builtin_mul_overflow(numel, sizes[i], &numel)) overflow = true;
  }
  bool empty = false;
  for (int64_t sz : sizes) empty = empty || sz == 0;
  if (overflow && !empty) throw PtFormatError("tensor sizes multiply to more than 2^63 elements");
  const size_t es = element_size(dtype);
  if (!empty) {
    int64_t last = offset;  // index of the furthest element
    for (size_t i = 0; i < sizes.size(); ++i) {
      int64_t span;
      if (__builtin_mul_overflow(sizes[i] - 1, strides[i], &span) || __builtin_add_overflow(last, span, &last))
        throw PtFormatError("tensor view (sizes, strides, offset) addresses elements beyond 2^63");
    }
    uint64_t need;
    if (__builtin_mul_overflow(static_cast<uint64_t>(last) + 1, static_cast<uint64_t>(es), &need) ||
        need > s.storage->nbytes())
      throw PtFormatError("storage " + s.label + " holds " + std::to_string(s.storage->nbytes()) +
                          " bytes, too small for a " + dtype_name(dtype) + " view with sizes " +
                          Dims(sizes).str() + ", strides " + Dims(strides).str() + " and offset " +
                          std::to_string(offset));
  }
  return Tensor(s.storage, dtype, Dims(sizes), Dims(strides), offset);
}

// ------------------------------------------------------------------ loading hooks
// Where TorchHooks gets the bytes of the storages that persistent ids name.
class StorageProvider {
 public:
  virtual ~StorageProvider() = default;
  /// Storage `key`, first referenced as `numel` elements of `dtype` (`nbytes` bytes,
  /// computed without overflow).  Called once per key.
  virtual std::shared_ptr<Storage> root(const std::string& key, DType dtype, bool untyped, int64_t numel,
                                        uint64_t nbytes) = 0;
  /// `nbytes` bytes of `root` from byte `offset` on (checked to lie inside it).
  virtual std::shared_ptr<Storage> view(const std::shared_ptr<Storage>& root, uint64_t offset, uint64_t nbytes) = 0;
};

class TorchHooks final : public PickleHooks {
 public:
  /// `legacy`: persistent ids are ('storage', type, key, location, numel, view_metadata)
  /// as the legacy format writes them; otherwise the zip format's 5-tuples.
  TorchHooks(StorageProvider& provider, bool legacy, bool swap)
      : provider_(provider), legacy_(legacy), swap_(swap) {}

  std::vector<ObjectState> states;

  /// A global refused in a legacy file and not used yet (see RefusedGlobal), or "".
  const std::string& pending_refusal() const { return pending_; }

  Value find_class(const std::string& module, const std::string& name) override {
    check_pending();
    std::string m = module == "__builtin__" ? "builtins" : module;
    const std::string full = m + "." + name;
    const auto& table = global_table();
    auto it = table.find(full);
    if (it != table.end()) return Value::object(std::make_shared<GlobalRef>(full, it->second));
    if (is_unsupported_torch_dtype(full))
      throw PtFormatError("Unsupported global: GLOBAL " + full +
                          ": loader has no such dtype (it has bool, uint8, int8, int16, int32, int64, "
                          "float16, bfloat16, float32, float64, complex64); convert the tensor in "
                          "Python (e.g. .to(torch.complex64)) and save it again");
    std::string refusal = "Unsupported global: GLOBAL " + full +
                          " is not allowed: loader only honours the globals that tensors, Parameters "
                          "and OrderedDicts need (as torch.load(weights_only=True)). The file may be "
                          "malicious, or it holds Python objects: load it in Python and save only "
                          "tensors and containers (for a model, its state_dict())";
    if (!legacy_) throw PtFormatError(refusal);
    pending_ = std::move(refusal);
    return Value::object(std::make_shared<RefusedGlobal>(full));
  }

  Value persistent_load(const Value& pid) override {
    if (!pid.is_tuple()) {
      check_pending();
      throw PtFormatError("persistent id is a " + pid.python_type() + ", not a tuple");
    }
    const auto& p = pid.items();
    const bool named = !p.empty() && (p[0].is_string() || p[0].is_bytes());
    if (legacy_ && named && p[0].to_string() == "module") {
      pending_.clear();  // the module's class was the refused global: this says more
      throw PtFormatError(
          "persistent id ('module', " + (p.size() > 1 ? p[1].python_type() : std::string("?")) +
          ", ...): the file holds a whole pickled torch.nn.Module (torch.save(model)); loader never "
          "imports or runs a module's classes or code. In Python, save only its weights: "
          "torch.save(torch.load(path).state_dict(), new_path)");
    }
    check_pending();
    if (!named || p[0].to_string() != "storage")
      throw PtFormatError("Only persistent_load of storage is allowed, but got " +
                          (p.empty() ? std::string("()") : named ? "'" + p[0].to_string() + "'" : p[0].python_type()));
    if (p.size() != (legacy_ ? 6u : 5u))
      throw PtFormatError("storage persistent id has " + std::to_string(p.size()) + " items, expected " +
                          (legacy_ ? "('storage', type, key, location, numel, view_metadata)"
                                   : "('storage', type, key, location, numel)"));
    const GlobalRef* type = as_global(p[1]);
    if (!type || type->spec().kind != G::StorageType)
      throw PtFormatError("storage type is a " + p[1].python_type() + ", not a torch storage class");
    const std::string key = key_arg(p[2], "storage key");
    const int64_t numel = int_arg(p[4], "storage numel");
    if (numel < 0) throw PtFormatError("negative storage numel " + std::to_string(numel));
    const DType dtype = type->spec().dtype;
    const bool untyped = type->spec().untyped;
    const std::string label = legacy_ ? "'" + key + "'" : "'data/" + key + "'";
    uint64_t nbytes;
    if (__builtin_mul_overflow(static_cast<uint64_t>(numel), static_cast<uint64_t>(element_size(dtype)), &nbytes))
      throw PtFormatError("storage " + label + " size overflows");
    std::shared_ptr<StorageRef> root;
    auto cached = storages_.find(key);
    if (cached != storages_.end()) {
      const StorageRef& s = *cached->second;
      if (nbytes > s.storage->nbytes())
        throw PtFormatError("storage " + label + " is referenced with " + std::to_string(nbytes) +
                            " bytes, more than the " + std::to_string(s.storage->nbytes()) + " first declared");
      if (swap_ && element_size(s.dtype) != element_size(dtype))
        throw PtFormatError("storage " + label + " of a big-endian file is viewed with two element sizes; cannot byte-swap it");
      root = std::make_shared<StorageRef>(s.storage, dtype, untyped, key, label);
    } else {
      if (views_.count(key))
        throw PtFormatError("storage key " + label + " was used before as the key of a storage view");
      root = std::make_shared<StorageRef>(provider_.root(key, dtype, untyped, numel, nbytes), dtype, untyped, key, label);
      storages_.emplace(key, root);
    }
    if (!legacy_ || p[5].is_none()) return Value::object(root);
    return Value::object(legacy_view(*root, p[5]));
  }

  Value reduce(const Value& fn, const Value& args_v) override {
    check_pending();
    const GlobalRef* g = as_global(fn);
    if (!g) throw PtFormatError("REDUCE calls a " + fn.python_type() + ", which is not an allowed function");
    const auto& a = args_v.items();
    auto want = [&](size_t lo, size_t hi) {
      if (a.size() < lo || a.size() > hi)
        throw PtFormatError(g->type_name() + " called with " + std::to_string(a.size()) + " arguments, expected " +
                            std::to_string(lo) + (hi != lo ? " to " + std::to_string(hi) : ""));
    };
    switch (g->spec().kind) {
      case G::OrderedDict: {
        want(0, 1);
        Value d = Value::dict(std::vector<std::pair<Value, Value>>{}, kOrderedDict);
        if (a.size() == 1) fill_pairs(d, a[0]);
        return d;
      }
      case G::RebuildTensor: {
        want(4, 4);
        const StorageRef& s = storage_arg(a[0]);
        return make_view(s, s.dtype, a[1], a[2], a[3]);
      }
      case G::RebuildTensorV2: {
        want(6, 7);  // (storage, offset, size, stride, requires_grad, backward_hooks[, metadata])
        const StorageRef& s = storage_arg(a[0]);
        if (s.untyped) throw PtFormatError("_rebuild_tensor_v2 needs a typed storage, got torch.UntypedStorage");
        Tensor t = make_view(s, s.dtype, a[1], a[2], a[3]);
        return bool_arg(a[4], "requires_grad") ? make_requires_grad(std::move(t)) : Value(std::move(t));
      }
      case G::RebuildTensorV3: {
        want(7, 8);  // (storage, offset, size, stride, requires_grad, backward_hooks, dtype[, metadata])
        const StorageRef& s = storage_arg(a[0]);
        const GlobalRef* d = as_global(a[6]);
        if (!d || d->spec().kind != G::DTypeObject)
          throw PtFormatError("_rebuild_tensor_v3 dtype is a " + a[6].python_type() + ", not a torch dtype");
        if (!s.untyped && s.dtype != d->spec().dtype)
          throw PtFormatError("_rebuild_tensor_v3 views a " + std::string(dtype_name(s.dtype)) + " storage as " +
                              dtype_name(d->spec().dtype));
        Tensor t = make_view(s, d->spec().dtype, a[1], a[2], a[3]);
        return bool_arg(a[4], "requires_grad") ? make_requires_grad(std::move(t)) : Value(std::move(t));
      }
      case G::RebuildParameter:
      case G::RebuildParameterWithState: {
        // (data, requires_grad, backward_hooks[, state]); Python attributes in `state` are dropped
        if (g->spec().kind == G::RebuildParameter) want(3, 3);
        else want(4, 4);
        return make_parameter(tensor_arg(a[0], "Parameter data"), bool_arg(a[1], "requires_grad"));
      }
      case G::RebuildFromTypeV2: {
        want(4, 4);  // (func, new_type, args, state); Python attributes in `state` are dropped
        if (!a[2].is_tuple()) throw PtFormatError("_rebuild_from_type_v2 args are a " + a[2].python_type());
        Value r = reduce(a[0], a[2]);
        const GlobalRef* type = as_global(a[1]);
        if (type && type->spec().kind == G::TensorClass && is_tensor_like(r)) return r;
        if (type && type->spec().kind == G::ParameterClass && is_tensor_like(r))
          return make_parameter(tensor_of(r), requires_grad_of(r));
        throw PtFormatError("_rebuild_from_type_v2 to " + a[1].python_type() +
                            " is not supported (only torch.Tensor and Parameter)");
      }
      case G::CodecsEncode: {
        want(1, 2);
        if (!a[0].is_string()) throw PtFormatError("_codecs.encode of a " + a[0].python_type());
        return Value::bytes(encode(a[0].to_string(), a.size() == 2 ? a[1] : Value("utf-8")));
      }
      case G::Bytes:
      case G::ByteArray: {
        want(0, 2);
        if (a.empty()) return Value::bytes("");
        if (a[0].is_bytes() && a.size() == 1) return Value::bytes(a[0].to_string());
        if (a[0].is_string() && a.size() == 2) return Value::bytes(encode(a[0].to_string(), a[1]));
        throw PtFormatError(g->type_name() + " of a " + a[0].python_type() + " is not supported");
      }
      case G::Set:
      case G::FrozenSet: {
        want(0, 1);
        Value s = Value::list({}, g->spec().kind == G::Set ? "set" : "frozenset");
        if (a.size() == 1) {
          if (!a[0].is_sequence()) throw PtFormatError(g->type_name() + " of a " + a[0].python_type());
          std::unordered_set<std::string> seen;
          for (const Value& x : a[0].items())
            if (seen.insert(dict_key_of(x)).second) s.push_back(x);
        }
        return s;
      }
      case G::TorchSize: {
        want(1, 1);
        int_tuple(a[0], "torch.Size");
        return Value::tuple(a[0].items(), "torch.Size");
      }
      case G::ParameterClass: return new_object(fn, args_v);
      case G::TensorClass:
      case G::StorageType:
      case G::DTypeObject: break;
    }
    throw PtFormatError("Trying to call reduce for unrecognized function " + g->type_name());
  }

  Value new_object(const Value& cls, const Value& args_v) override {
    check_pending();
    const GlobalRef* g = as_global(cls);
    const auto& a = args_v.items();
    if (g && g->spec().kind == G::ParameterClass && !a.empty() && a.size() <= 2)
      return make_parameter(tensor_arg(a[0], "Parameter data"),
                            a.size() == 2 ? bool_arg(a[1], "requires_grad") : true);
    if (g && g->spec().kind == G::OrderedDict && a.empty())
      return Value::dict(std::vector<std::pair<Value, Value>>{}, kOrderedDict);
    throw PtFormatError("Trying to instantiate unsupported class " + cls.python_type());
  }

  void build(Value& object, const Value& state) override {
    check_pending();
    if (!object.is_dict() || object.type_name() != kOrderedDict)
      throw PtFormatError("Can only build OrderedDict objects, but got " + object.python_type());
    if (!state.is_dict())
      throw PtFormatError("OrderedDict state is a " + state.python_type() + ", not a dict of attributes");
    for (const auto& kv : state.dict_items())
      if (!kv.first.is_string()) throw PtFormatError("OrderedDict attribute name is a " + kv.first.python_type());
    for (auto& s : states)
      if (&s.object.dict_items() == &object.dict_items()) {
        for (const auto& kv : state.dict_items()) s.state.set(kv.first, kv.second);
        return;
      }
    Value copy = Value::dict(state.dict_items());
    states.push_back({object, copy});
  }

 private:
  const StorageRef& storage_arg(const Value& v) {
    const StorageRef* s = as_storage(v);
    if (!s) throw PtFormatError("tensor storage is a " + v.python_type() + ", not a persistent storage");
    return *s;
  }

  Tensor tensor_arg(const Value& v, const char* what) {
    if (!is_tensor_like(v)) throw PtFormatError(std::string(what) + " is a " + v.python_type() + ", not a tensor");
    return tensor_of(v);
  }

  void fill_pairs(Value& d, const Value& pairs) {
    if (!pairs.is_sequence()) throw PtFormatError("OrderedDict items are a " + pairs.python_type());
    std::unordered_map<std::string, size_t> idx;
    auto& items = d.dict_items();
    for (const Value& kv : pairs.items()) {
      if (!kv.is_sequence() || kv.items().size() != 2) throw PtFormatError("OrderedDict item is not a (key, value) pair");
      auto [it, inserted] = idx.emplace(dict_key_of(kv.items()[0]), items.size());
      if (inserted) items.emplace_back(kv.items()[0], kv.items()[1]);
      else items[it->second].second = kv.items()[1];
    }
  }

  static std::string encode(const std::string& s, const Value& encoding) {
    if (!encoding.is_string()) throw PtFormatError("encoding is a " + encoding.python_type());
    std::string e = encoding.to_string();
    std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::replace(e.begin(), e.end(), '_', '-');
    if (e == "latin1" || e == "latin-1" || e == "iso-8859-1" || e == "iso8859-1" || e == "l1")
      return utf8_to_latin1(s);
    if (e == "utf-8" || e == "utf8") return s;
    if (e == "ascii") {
      for (unsigned char c : s)
        if (c >= 0x80) throw PtFormatError("_codecs.encode(..., 'ascii') of a non-ASCII string");
      return s;
    }
    throw PtFormatError("_codecs.encode with encoding '" + encoding.to_string() + "' is not supported");
  }

  void check_pending() const {
    if (!pending_.empty()) throw PtFormatError(pending_);
  }

  // A legacy view_metadata (view_key, offset, view_size): the storage is elements
  // [offset, offset + view_size) of `root`, counted in the reference's dtype.
  std::shared_ptr<StorageRef> legacy_view(const StorageRef& root, const Value& meta) {
    if (!meta.is_tuple() || meta.items().size() != 3)
      throw PtFormatError("view_metadata of storage " + root.label + " is a " + meta.python_type() +
                          ", expected None or (view_key, offset, view_size)");
    const auto& m = meta.items();
    const std::string vkey = key_arg(m[0], "storage view key");
    const int64_t offset = int_arg(m[1], "storage view offset");
    const int64_t size = int_arg(m[2], "storage view size");
    const std::string label = "view '" + vkey + "' of '" + root.key + "'";
    const uint64_t es = element_size(root.dtype);
    const uint64_t have = root.storage->nbytes();
    if (offset < 0 || size < 0 || static_cast<uint64_t>(offset) > have / es ||
        static_cast<uint64_t>(size) > have / es - static_cast<uint64_t>(offset))
      throw PtFormatError("storage " + label + ": elements [" + std::to_string(offset) + ", " + std::to_string(offset) +
                          " + " + std::to_string(size) + ") do not lie inside the " + std::to_string(have / es) +
                          " elements of storage '" + root.key + "'");
    const uint64_t byte_offset = static_cast<uint64_t>(offset) * es, nbytes = static_cast<uint64_t>(size) * es;
    if (storages_.count(vkey)) throw PtFormatError("storage " + label + ": the view key is also a storage key");
    auto it = views_.find(vkey);
    if (it != views_.end()) {
      const View& v = it->second;
      if (v.root_key != root.key || v.byte_offset != byte_offset || v.ref->storage->nbytes() != nbytes)
        throw PtFormatError("storage " + label + " was declared before as a different view");
      return std::make_shared<StorageRef>(v.ref->storage, root.dtype, root.untyped, vkey, label);
    }
    auto ref = std::make_shared<StorageRef>(provider_.view(root.storage, byte_offset, nbytes), root.dtype,
                                            root.untyped, vkey, label);
    views_.emplace(vkey, View{root.key, byte_offset, ref});
    return ref;
  }

  struct View {
    std::string root_key;
    uint64_t byte_offset;
    std::shared_ptr<StorageRef> ref;
  };

  StorageProvider& provider_;
  bool legacy_;
  bool swap_;
  std::string pending_;
  std::unordered_map<std::string, std::shared_ptr<StorageRef>> storages_;
  std::unordered_map<std::string, View> views_;  // legacy storage views, by view key
};

void swap_bytes(void* data, size_t nbytes, DType dtype) {
  const size_t es = element_size(dtype);
  if (es <= 1) return;
  const size_t w = dtype == DType::Complex64 ? 4 : es;  // complex: swap each float
  auto* p = static_cast<uint8_t*>(data);
  for (size_t i = 0; i + w <= nbytes; i += w) std::reverse(p + i, p + i + w);
}

// Zip format: storage <key> is record <archive>/data/<key>, copied or wrapped in place.
class ZipStorages final : public StorageProvider {
 public:
  ZipStorages(const ZipReader& zip, std::string prefix, const LoadOptions& options, bool swap)
      : zip_(zip), prefix_(std::move(prefix)), options_(options), swap_(swap) {}

  std::shared_ptr<Storage> root(const std::string& key, DType dtype, bool untyped, int64_t numel,
                                uint64_t nbytes) override {
    const std::string record = prefix_ + "data/" + key;
    const ZipEntry* e = zip_.find(record);
    if (!e) throw PtFormatError("storage record '" + record + "' is missing from the archive");
    if (e->uncompressed_size < nbytes)
      throw PtFormatError("record '" + record + "' has " + std::to_string(e->uncompressed_size) +
                          " bytes, but the pickle declares a storage of " + std::to_string(numel) +
                          " elements of " + std::to_string(element_size(dtype)) + " bytes");
    if (swap_ && untyped)
      throw PtFormatError("big-endian files with untyped storages (_rebuild_tensor_v3) are not supported");
    return materialize(*e, static_cast<size_t>(nbytes), dtype);
  }

  std::shared_ptr<Storage> view(const std::shared_ptr<Storage>&, uint64_t, uint64_t) override {
    throw PtFormatError("storage views are a legacy-format feature");  // TorchHooks asks only when legacy
  }

 private:
  std::shared_ptr<Storage> materialize(const ZipEntry& e, size_t nbytes, DType dtype) {
    const size_t es = element_size(dtype);
    const uint8_t* in_place = zip_.data_in_place(e);
    auto owner = zip_.source().keep_alive();
    if (options_.mmap && in_place && owner && !swap_ &&
        reinterpret_cast<uintptr_t>(in_place) % std::max<size_t>(es, 1) == 0) {
      if (options_.verify_crc) zip_.check_crc(e, in_place);
      return Storage::wrap(const_cast<uint8_t*>(in_place), nbytes, std::move(owner), MemoryKind::FileMapping);
    }
    std::shared_ptr<Storage> s;
    if (e.uncompressed_size == nbytes) {
      s = Storage::allocate(nbytes);
      zip_.read_into(e, s->data(), options_.verify_crc);
    } else {  // the record holds more than the storage needs
      std::string all = zip_.read(e, options_.verify_crc);
      s = Storage::allocate(nbytes);
      if (nbytes) std::memcpy(s->data(), all.data(), nbytes);
    }
    if (swap_) swap_bytes(s->data(), nbytes, dtype);
    return s;
  }

  const ZipReader& zip_;
  std::string prefix_;  // "<archive>/"
  const LoadOptions& options_;
  bool swap_;
};

std::string small_record(const ZipReader& zip, const ZipEntry& e, const LoadOptions& o) {
  if (e.uncompressed_size > 64)
    throw PtFormatError(zip.source().name() + ": record '" + e.name + "' has " +
                        std::to_string(e.uncompressed_size) + " bytes; expected a few");
  return zip.read(e, o.verify_crc);
}

// Attribute states are not part of the result the unpickler checked: refuse classes,
// functions and storages in them too (depth is bounded and cycles were refused).
void reject_objects(const Value& v, const std::string& where) {
  if (v.is_object())
    throw PtFormatError(where + ": an OrderedDict attribute holds " + v.python_type() +
                        ", which is not data; loader only loads tensors, numbers, strings, bytes and containers");
  if (v.is_sequence())
    for (const Value& x : v.items()) reject_objects(x, where);
  if (v.is_dict())
    for (const auto& kv : v.dict_items()) {
      reject_objects(kv.first, where);
      reject_objects(kv.second, where);
    }
}

// ------------------------------------------------------------------ legacy format
// torch.save(..., _use_new_zipfile_serialization=False), and every torch.save of
// PyTorch 0.4 to 1.5: five pickles one after the other, then the storages' bytes.
//   magic number 0x1950a86a20f9469cfc6c | protocol version 1001 | sys_info dict |
//   the object (storages as persistent ids) | the list of storage keys |
//   per key in that order: int64 element count (little-endian), then the bytes
//   (little-endian elements, whatever machine wrote them).

const uint8_t kLegacyMagic[10] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};  // little-endian
const char kLegacyMagicText[] = "L119547037146038801333356L\n";  // protocols 0 and 1
constexpr int64_t kLegacyProtocolVersion = 1001;

enum class MagicMatch { Yes, No, Truncated };

// The first pickle of a legacy file holds an int wider than 64 bits, which the
// unpickler refuses; it is matched byte for byte instead, in every protocol's
// spelling: [PROTO n [FRAME len]] (LONG1 10 <bytes> | LONG "L...L\n") STOP.
MagicMatch match_legacy_magic(const uint8_t* d, size_t n, size_t& end) {
  size_t i = 0;
  auto have = [&](size_t k) { return n - i >= k; };
  if (!have(1)) return MagicMatch::Truncated;
  if (d[0] == 0x80) {
    if (!have(2)) return MagicMatch::Truncated;
    if (d[1] > 5) return MagicMatch::No;
    i = 2;
    if (have(1) && d[i] == 0x95) {  // FRAME (protocol 4+)
      if (!have(9)) return MagicMatch::Truncated;
      i += 9;
    }
  }
  if (!have(1)) return MagicMatch::Truncated;
  if (d[i] == 0x8a) {  // LONG1
    ++i;
    if (!have(1)) return MagicMatch::Truncated;
    if (d[i++] != sizeof kLegacyMagic) return MagicMatch::No;
    for (uint8_t b : kLegacyMagic) {
      if (!have(1)) return MagicMatch::Truncated;
      if (d[i++] != b) return MagicMatch::No;
    }
  } else if (d[i] == 'L') {
    for (const char* c = kLegacyMagicText; *c; ++c) {
      if (!have(1)) return MagicMatch::Truncated;
      if (d[i++] != static_cast<uint8_t>(*c)) return MagicMatch::No;
    }
  } else {
    return MagicMatch::No;
  }
  if (!have(1)) return MagicMatch::Truncated;
  if (d[i++] != '.') return MagicMatch::No;
  end = i;
  return MagicMatch::Yes;
}

// The pickles before and after the object hold only numbers, strings, lists and dicts.
class DataOnlyHooks final : public PickleHooks {
 public:
  Value find_class(const std::string& module, const std::string& name) override {
    throw PtFormatError("Unsupported global: GLOBAL " + module + "." + name +
                        " in a part of the legacy format that holds only numbers, strings and containers");
  }
  Value reduce(const Value&, const Value&) override { refuse("REDUCE"); }
  Value new_object(const Value&, const Value&) override { refuse("NEWOBJ"); }
  void build(Value&, const Value&) override { refuse("BUILD"); }
  Value persistent_load(const Value&) override { refuse("a persistent id"); }

 private:
  [[noreturn]] static void refuse(const char* what) {
    throw PtFormatError(std::string(what) + " in a part of the legacy format that holds only numbers, strings and containers");
  }
};

// Legacy storages.  The records follow the object pickle, so the storages are made
// before their bytes are found.  Copying (the default): heap storages, allocated when
// the pickle declares them (their total bounded by the file size) and filled once every
// record is checked; the object is read once.  Mapping: the first pass over the object
// pickle gets placeholders with a size and no bytes (its tensors are checked, then
// dropped); once the records are located, a second pass gets the storages themselves,
// mapped where aligned, else copied.
class LegacyStorages final : public StorageProvider {
 public:
  struct Declared {
    DType dtype;
    int64_t numel;
    uint64_t nbytes;
  };

  LegacyStorages(uint64_t file_size, bool allocate) : file_size_(file_size), allocate_(allocate) {}

  std::unordered_map<std::string, Declared> declared;
  std::vector<std::string> declared_order;
  std::unordered_map<std::string, std::shared_ptr<Storage>> real;  // allocated, or made for the second pass
  bool second_pass = false;

  std::shared_ptr<Storage> root(const std::string& key, DType dtype, bool, int64_t numel, uint64_t nbytes) override {
    if (second_pass) {
      auto it = real.find(key);
      if (it == real.end()) throw PtFormatError("storage '" + key + "' has no record");  // the first pass saw every key
      return it->second;
    }
    if (nbytes > file_size_ - declared_bytes_)
      throw PtFormatError("storage '" + key + "' declares " + std::to_string(numel) + " elements of " +
                          std::to_string(element_size(dtype)) + " bytes, which with the storages before it is " +
                          "more than the whole file (" + std::to_string(file_size_) + " bytes)");
    declared_bytes_ += nbytes;
    declared.emplace(key, Declared{dtype, numel, nbytes});
    declared_order.push_back(key);
    if (!allocate_) return placeholder(nbytes);
    auto s = Storage::allocate(static_cast<size_t>(nbytes));
    real.emplace(key, s);
    return s;
  }

  std::shared_ptr<Storage> view(const std::shared_ptr<Storage>& root, uint64_t offset, uint64_t nbytes) override {
    if (!allocate_ && !second_pass) return placeholder(nbytes);
    auto* base = static_cast<uint8_t*>(root->data());
    return Storage::wrap(base ? base + offset : nullptr, static_cast<size_t>(nbytes), root, root->kind());
  }

 private:
  static std::shared_ptr<Storage> placeholder(uint64_t nbytes) {
    return Storage::wrap(nullptr, static_cast<size_t>(nbytes), nullptr, MemoryKind::External);
  }
  uint64_t file_size_;
  bool allocate_;
  uint64_t declared_bytes_ = 0;
};

struct LegacyPickles {
  LegacyInfo info;
  Value value;  // read over the storages of the first pass
  std::vector<ObjectState> states;
  size_t object_start = 0;
  std::vector<std::pair<std::string, size_t>> keys;  // key, offset of the key list
  size_t keys_start = 0;
  size_t records_start = 0;
};

int64_t sys_info_int(const Value& d, const char* key, const std::string& where) {
  const Value v = d.get(key, Value());
  if (!v.is_int() || v.is_bool())
    throw PtFormatError(where + ": sys_info has no int '" + key + "' (found " + v.python_type() + ")");
  return v.to_int();
}

void check_sys_info(const Value& s, LegacyInfo& info, const std::string& where) {
  if (!s.is_dict()) throw PtFormatError(where + ": sys_info is a " + s.python_type() + ", not a dict");
  const Value le = s.get("little_endian", Value());
  if (!le.is_bool()) throw PtFormatError(where + ": sys_info has no bool 'little_endian' (found " + le.python_type() + ")");
  info.little_endian = le.to_bool();
  if (s.get("protocol_version", Value()).is_int())
    info.protocol_version = s.get("protocol_version", Value()).to_int();
  if (info.protocol_version != kLegacyProtocolVersion)
    throw PtFormatError(where + ": sys_info says protocol version " + std::to_string(info.protocol_version) +
                        "; this reader supports " + std::to_string(kLegacyProtocolVersion));
  const Value sizes = s.get("type_sizes", Value());
  if (!sizes.is_dict()) throw PtFormatError(where + ": sys_info has no dict 'type_sizes' (found " + sizes.python_type() + ")");
  info.short_size = sys_info_int(sizes, "short", where);
  info.int_size = sys_info_int(sizes, "int", where);
  info.long_size = sys_info_int(sizes, "long", where);
  const std::string redo = " Load it with PyTorch on such a machine and save it again: "
                           "torch.save(torch.load(old_path), new_path) writes the zip format.";
  if (!info.little_endian)
    throw PtFormatError(where + ": sys_info says the file was written on a big-endian machine; loader reads "
                        "legacy files from little-endian machines only." + redo);
  if (info.short_size != 2 || info.int_size != 4 || (info.long_size != 4 && info.long_size != 8))
    throw PtFormatError(where + ": sys_info gives type sizes short=" + std::to_string(info.short_size) +
                        ", int=" + std::to_string(info.int_size) + ", long=" + std::to_string(info.long_size) +
                        "; loader reads files from machines with 2-byte short, 4-byte int and 4- or 8-byte long." + redo);
}

// The five pickles, from `d` (the whole file, or a prefix of it: a PickleTruncatedError
// then asks for more).  The object pickle is read over `storages` (allocated heap
// storages when copying, placeholders when mapping).
LegacyPickles read_legacy_pickles(const uint8_t* d, size_t n, const std::string& name, LegacyStorages& storages,
                                  const LoadOptions& options) {
  LegacyPickles out;
  size_t pos = 0;
  switch (match_legacy_magic(d, n, pos)) {
    case MagicMatch::Yes: break;
    case MagicMatch::Truncated:
      throw PickleTruncatedError(name + ": the file ends inside the magic number of the legacy torch.save format");
    case MagicMatch::No:
      throw PtFormatError(name + " offset 0: Invalid magic number; not a legacy torch.save file, or a corrupt one");
  }
  UnpicklerLimits ul;
  ul.max_depth = options.max_depth;
  DataOnlyHooks data_only;
  const std::string header = name + ": legacy header";
  const size_t version_at = pos;
  const Value version = unpickle_stream(d, n, pos, data_only, header, ul);
  if (!version.is_int() || version.is_bool() || version.to_int() != kLegacyProtocolVersion)
    throw PtFormatError(header + " offset " + std::to_string(version_at) + ": Invalid protocol version: " +
                        (version.is_int() ? std::to_string(version.to_int()) : "a " + version.python_type()) +
                        "; this reader supports " + std::to_string(kLegacyProtocolVersion));
  const size_t sys_info_at = pos;
  const Value sys_info = unpickle_stream(d, n, pos, data_only, header, ul);
  check_sys_info(sys_info, out.info, header + " offset " + std::to_string(sys_info_at));

  out.object_start = pos;
  {
    const std::string where = name + ": legacy object pickle";
    TorchHooks hooks(storages, true, !little_endian_host());
    try {
      out.value = unpickle_stream(d, n, pos, hooks, where, ul);
      out.states = std::move(hooks.states);
    } catch (const PickleTruncatedError&) {
      throw;
    } catch (const PtFormatError&) {
      // a refused global that was never used reports itself, not what it caused later
      if (hooks.pending_refusal().empty()) throw;
      throw PtFormatError(where + ": " + hooks.pending_refusal());
    }
    if (!hooks.pending_refusal().empty()) throw PtFormatError(where + ": " + hooks.pending_refusal());
  }

  out.keys_start = pos;
  const std::string where = name + ": legacy storage key list offset " + std::to_string(pos);
  const Value keys = unpickle_stream(d, n, pos, data_only, name + ": legacy storage key list", ul);
  if (!keys.is_list() && !keys.is_tuple())
    throw PtFormatError(where + ": the storage keys are a " + keys.python_type() + ", not a list");
  for (const Value& k : keys.items()) {
    if (!k.is_string() && !k.is_int())
      throw PtFormatError(where + ": a storage key is a " + k.python_type() + ", not a str");
    out.keys.emplace_back(key_arg(k, "storage key"), out.keys_start);
  }
  out.records_start = pos;
  return out;
}

// Checks every storage record against what the object pickle declared, and returns
// them in file order.
std::vector<LegacyRecord> locate_legacy_records(const ByteSource& src, const LegacyPickles& p,
                                                const LegacyStorages& storages) {
  const std::string& name = src.name();
  const uint64_t size = src.size();
  const std::string list_at = "the storage key list at offset " + std::to_string(p.keys_start);
  std::vector<LegacyRecord> records;
  std::unordered_set<std::string> seen;
  uint64_t off = p.records_start;
  for (const auto& kv : p.keys) {
    const std::string& key = kv.first;
    auto it = storages.declared.find(key);
    if (it == storages.declared.end())
      throw PtFormatError(name + ": " + list_at + " names storage '" + key +
                          "', which the object pickle does not use (a corrupt file)");
    if (!seen.insert(key).second)
      throw PtFormatError(name + ": " + list_at + " names storage '" + key + "' twice");
    const auto& decl = it->second;
    const std::string rec = name + ": storage record '" + key + "' at offset " + std::to_string(off);
    if (size - off < 8)
      throw PtFormatError(rec + ": the file ends before its 8-byte element count (" + std::to_string(size - off) +
                          " bytes remain; truncated file)");
    uint8_t b[8];
    src.read(off, b, 8);
    uint64_t u = 0;
    for (int i = 7; i >= 0; --i) u = (u << 8) | b[i];
    int64_t count;
    std::memcpy(&count, &u, sizeof count);
    if (count != decl.numel)
      throw PtFormatError(rec + ": the record holds " + std::to_string(count) + " elements, but the object pickle declares " +
                          std::to_string(decl.numel) + " (" + dtype_name(decl.dtype) + ")");
    const uint64_t data = off + 8;
    if (decl.nbytes > size - data)
      throw PtFormatError(rec + ": needs " + std::to_string(decl.nbytes) + " bytes of data but only " +
                          std::to_string(size - data) + " remain (truncated file)");
    records.push_back({key, decl.dtype, static_cast<uint64_t>(decl.numel), data, false});
    off = data + decl.nbytes;
  }
  for (const std::string& key : storages.declared_order)
    if (!seen.count(key))
      throw PtFormatError(name + ": storage '" + key + "' is used by the object pickle, but " + list_at +
                          " does not name it, so the file holds no bytes for it");
  return records;  // bytes after the last record are ignored, as torch.load does
}

Archive load_legacy(const std::shared_ptr<ByteSource>& source, const LoadOptions& options) {
  const std::string& name = source->name();
  const uint64_t file_size = source->size();
  const bool swap = !little_endian_host();  // records are little-endian
  const uint8_t* in_place = source->data();
  auto owner = source->keep_alive();
  const bool may_map = options.mmap && in_place && owner && !swap;
  std::unique_ptr<LegacyStorages> storages;
  // The pickles are parsed in memory: the file itself when it is mapped or a buffer,
  // else a prefix read with pread, grown until they fit in it.
  std::string window;
  const uint8_t* d = in_place;
  size_t n = static_cast<size_t>(d ? file_size : std::min<uint64_t>(file_size, uint64_t{64} << 10));
  LegacyPickles pickles;
  for (;;) {
    if (!in_place) {
      window.resize(n);
      source->read(0, window.data(), n);
      d = reinterpret_cast<const uint8_t*>(window.data());
    }
    try {
      storages = std::make_unique<LegacyStorages>(file_size, !may_map);
      pickles = read_legacy_pickles(d, n, name, *storages, options);
      break;
    } catch (const PickleTruncatedError&) {
      if (n == file_size) throw;
      n = static_cast<size_t>(std::min<uint64_t>(file_size, uint64_t{n} * 4));
    }
  }

  Archive out;
  out.format = Format::Legacy;
  out.legacy = pickles.info;
  out.legacy.records = locate_legacy_records(*source, pickles, *storages);
  for (LegacyRecord& r : out.legacy.records) {
    const size_t nbytes = static_cast<size_t>(storages->declared.at(r.key).nbytes);
    if (may_map && reinterpret_cast<uintptr_t>(in_place + r.data_offset) % std::max<size_t>(element_size(r.dtype), 1) == 0) {
      storages->real.emplace(r.key, Storage::wrap(const_cast<uint8_t*>(in_place + r.data_offset), nbytes, owner,
                                                  MemoryKind::FileMapping));
      r.mapped = true;
      continue;
    }
    auto it = storages->real.find(r.key);  // allocated by the first pass when copying
    if (it == storages->real.end()) it = storages->real.emplace(r.key, Storage::allocate(nbytes)).first;
    if (nbytes) source->read(r.data_offset, it->second->data(), nbytes);
    if (swap) swap_bytes(it->second->data(), nbytes, r.dtype);
  }

  const std::string where = name + ": legacy object pickle";
  if (may_map) {  // the second pass, over the storages themselves
    storages->second_pass = true;
    TorchHooks hooks(*storages, true, swap);
    UnpicklerLimits ul;
    ul.max_depth = options.max_depth;
    size_t pos = pickles.object_start;
    out.value = unpickle_stream(d, n, pos, hooks, where, ul);
    out.states = std::move(hooks.states);
  } else {
    out.value = std::move(pickles.value);
    out.states = std::move(pickles.states);
  }
  for (const auto& st : out.states) reject_objects(st.state, where);
  return out;
}

enum class FileKind { Zip, Legacy };

// Tells the formats apart by their first bytes, as torch.load does: a zip archive
// starts with "PK\3\4" (or with bytes before it), a legacy file with the magic pickle.
FileKind detect_format(const ByteSource& src) {
  uint8_t head[262] = {};
  const size_t n = static_cast<size_t>(std::min<uint64_t>(src.size(), sizeof head));
  src.read(0, head, n);
  if (n >= 4 && std::memcmp(head, "PK\x03\x04", 4) == 0) return FileKind::Zip;
  if (n >= 262 && std::memcmp(head + 257, "ustar", 5) == 0)
    throw PtFormatError(src.name() + ": this is a tar-format torch.save file (PyTorch 0.3 or older), which loader "
                        "does not read. PyTorch still reads it: torch.save(torch.load(old_path), new_path) "
                        "writes it again in the zip format, which loader reads.");
  size_t end = 0;
  switch (match_legacy_magic(head, n, end)) {
    case MagicMatch::Yes: return FileKind::Legacy;
    case MagicMatch::Truncated:
      if (n > 0)
        throw PtFormatError(src.name() + ": the file ends inside the magic number of the legacy torch.save format "
                            "(" + std::to_string(n) + " bytes; truncated)");
      break;
    case MagicMatch::No: break;
  }
  if (n >= 2 && head[0] == 0x80 && head[1] <= 5)
    throw PtFormatError(src.name() + " offset 0: the file starts with a pickle, but not with the magic number of "
                        "torch.save's legacy format (Invalid magic number): not a torch.save file, or a corrupt one");
  return FileKind::Zip;  // perhaps with bytes before the archive; the zip reader decides
}

}  // namespace

// ------------------------------------------------------------------ tensor wrappers
Value make_parameter(Tensor data, bool requires_grad) {
  return Value::namedtuple(kParameterType, {"data", "requires_grad"}, {Value(std::move(data)), Value(requires_grad)});
}

Value make_requires_grad(Tensor data) {
  return Value::namedtuple(kRequiresGradType, {"data", "requires_grad"}, {Value(std::move(data)), Value(true)});
}

static bool is_wrapper(const Value& v, const char* type) {
  return v.is_tuple() && v.type_name() == type && v.items().size() == 2 && v.items()[0].is_tensor() &&
         v.items()[1].is_bool();
}

bool is_parameter(const Value& v) { return is_wrapper(v, kParameterType); }

bool is_tensor_like(const Value& v) {
  return v.is_tensor() || is_wrapper(v, kParameterType) || is_wrapper(v, kRequiresGradType);
}

const Tensor& tensor_of(const Value& v) {
  if (v.is_tensor()) return v.to_tensor();
  if (is_tensor_like(v)) return v.items()[0].to_tensor();
  throw TypeError("expected a tensor, a Parameter or a requires_grad tensor, got " + v.python_type());
}

bool requires_grad_of(const Value& v) {
  if (v.is_tensor()) return false;
  if (is_tensor_like(v)) return v.items()[1].to_bool();
  throw TypeError("expected a tensor, a Parameter or a requires_grad tensor, got " + v.python_type());
}

std::vector<std::string> allowed_globals() {
  std::vector<std::string> out;
  for (const auto& kv : global_table()) out.push_back(kv.first);
  return out;
}

Value Archive::state_of(const Value& dict) const {
  if (!dict.is_dict()) return Value();
  for (const auto& s : states)
    if (s.object.is_dict() && &s.object.dict_items() == &dict.dict_items()) return s.state;
  return Value();
}

Value Archive::metadata_of(const Value& dict) const {
  Value s = state_of(dict);
  return s.is_dict() ? s.get("_metadata", Value()) : Value();
}

// ------------------------------------------------------------------ load
Archive load_archive(const std::shared_ptr<ByteSource>& source, const LoadOptions& options) {
  if (detect_format(*source) == FileKind::Legacy) return load_legacy(source, options);
  ZipLimits limits;
  limits.max_inflated_bytes = options.max_inflated_bytes;
  ZipReader zip(source, limits);
  const std::string& name = source->name();
  if (zip.entries().empty()) throw PtFormatError(name + ": the zip archive has no records; not a torch.save file");
  Archive out;
  for (const auto& e : zip.entries()) out.records.push_back(e.name);
  const std::string& first = zip.entries().front().name;
  const auto slash = first.find('/');
  if (slash == std::string::npos)
    throw PtFormatError(name + ": record '" + first + "' is not inside a folder; not a torch.save archive");
  out.archive_name = first.substr(0, slash);
  const std::string prefix = out.archive_name + "/";
  bool torchscript = zip.find(prefix + "constants.pkl") != nullptr;
  for (const auto& e : zip.entries()) torchscript = torchscript || e.name.rfind(prefix + "code/", 0) == 0;
  if (torchscript)
    throw PtFormatError(name + ": this is a TorchScript archive (torch.jit.save), not a torch.save file; "
                        "loader does not run TorchScript. In Python: torch.save(torch.jit.load(path).state_dict(), new_path)");
  const ZipEntry* pkl = zip.find(prefix + "data.pkl");
  if (!pkl) throw PtFormatError(name + ": no record '" + prefix + "data.pkl'; not a torch.save archive");
  const ZipEntry* version = zip.find(prefix + "version");
  if (!version) version = zip.find(prefix + ".data/version");
  if (version) {
    std::string v = small_record(zip, *version, options);
    while (!v.empty() && (v.back() == '\n' || v.back() == '\r' || v.back() == ' ')) v.pop_back();
    bool digits = !v.empty() && v.size() <= 4 && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
    int num = digits ? std::stoi(v) : -1;
    if (num < 1 || num > 10)
      throw PtFormatError(name + ": record '" + version->name + "' says format version '" + v +
                          "'; this reader supports versions 1 to 10");
  }
  bool swap = false;
  if (const ZipEntry* bo = zip.find(prefix + "byteorder")) {
    std::string b = small_record(zip, *bo, options);
    if (b != "little" && b != "big")
      throw PtFormatError(name + ": record '" + bo->name + "' is '" + b + "', expected 'little' or 'big'");
    swap = (b == "little") != little_endian_host();
  }
  const std::string pickle = zip.read(*pkl, options.verify_crc);
  ZipStorages storages(zip, prefix, options, swap);
  TorchHooks hooks(storages, false, swap);
  UnpicklerLimits ul;
  ul.max_depth = options.max_depth;
  out.value = unpickle(reinterpret_cast<const uint8_t*>(pickle.data()), pickle.size(), hooks,
                       name + ": record '" + pkl->name + "'", ul);
  out.states = std::move(hooks.states);
  for (const auto& st : out.states) reject_objects(st.state, name + ": record '" + pkl->name + "'");
  return out;
}

Archive load_archive(const std::string& path, const LoadOptions& options) {
  return load_archive(options.mmap ? ByteSource::map_file(path) : ByteSource::from_file(path), options);
}

Archive load_archive_bytes(const void* data, size_t size, const LoadOptions& options) {
  LoadOptions o = options;
  o.mmap = false;  // the caller's buffer: always copy
  return load_archive(ByteSource::from_memory(data, size), o);
}

Value load(const std::string& path, const LoadOptions& options) { return load_archive(path, options).value; }

Value load_bytes(const void* data, size_t size, const LoadOptions& options) {
  return load_archive_bytes(data, size, options).value;
}

// ------------------------------------------------------------------ save
namespace {

class PtWriter {
 public:
  PtWriter(const SaveOptions& options, const std::vector<ObjectState>& extra_states) : legacy_(options.legacy_format) {
    for (const auto* list : {&options.states, &extra_states})
      for (const auto& s : *list) {
        if (!s.object.is_dict()) throw ValueError("pt::save: SaveOptions::states object is a " + s.object.python_type() + ", not a dict");
        if (!s.state.is_dict()) throw ValueError("pt::save: the state of an object is a " + s.state.python_type() + ", not a dict");
        states_[&s.object.dict_items()] = &s.state;
      }
  }

  struct StorageOut {
    std::string key;
    std::shared_ptr<Storage> storage;
    DType dtype;
    size_t nbytes;
  };

  std::string pickle(const Value& v) {
    p_.proto();
    save(v, 0);
    p_.stop();
    return p_.take();
  }
  const std::vector<StorageOut>& storages() const { return storages_; }

 private:
  static constexpr int kMaxDepth = 1000;
  static constexpr size_t kBatch = 1000;  // pickle's _BATCHSIZE

  static const void* identity(const Value& v) {
    return v.is_dict() ? static_cast<const void*>(&v.dict_items()) : static_cast<const void*>(&v.items());
  }

  bool memo_get(const Value& v) {
    auto it = memo_.find(identity(v));
    if (it == memo_.end()) return false;
    p_.get(it->second);
    return true;
  }

  void save(const Value& v, int depth) {
    if (depth > kMaxDepth) throw ValueError("pt::save: containers nested deeper than " + std::to_string(kMaxDepth));
    switch (v.kind()) {
      case Value::Kind::None: p_.none(); return;
      case Value::Kind::Bool: p_.boolean(v.to_bool()); return;
      case Value::Kind::Int: p_.integer(v.to_int()); return;
      case Value::Kind::Double: p_.floating(v.to_double()); return;
      case Value::Kind::String:
        if (!valid_utf8(v.to_string()))
          throw ValueError("pt::save: a str is not valid UTF-8 (Python strings are Unicode); save raw bytes with Value::bytes");
        p_.string(v.to_string());
        return;
      case Value::Kind::Bytes: save_bytes(v.to_string()); return;
      case Value::Kind::Tensor: save_tensor(v.to_tensor(), false); return;
      case Value::Kind::Object:
        throw ValueError("pt::save: cannot save a " + v.python_type() +
                         " (a custom object); only tensors, numbers, strings, bytes and containers of them");
      case Value::Kind::Tuple:
        if (is_parameter(v)) return save_parameter(tensor_of(v), requires_grad_of(v));
        if (is_tensor_like(v)) return save_tensor(tensor_of(v), requires_grad_of(v));
        if (v.type_name() == "torch.Size") return save_size(v, depth);
        return save_tuple(v, depth);
      case Value::Kind::List: return save_list(v, depth);
      case Value::Kind::Dict: return save_dict(v, depth);
    }
  }

  struct InProgress {
    std::unordered_set<const void*>& set;
    const void* id;
    InProgress(std::unordered_set<const void*>& s, const Value& v) : set(s), id(identity(v)) {
      if (!set.insert(id).second)
        throw ValueError("pt::save: a " + v.python_type() + " contains itself; recursive structures cannot be saved");
    }
    ~InProgress() { set.erase(id); }
  };

  void save_items(const std::vector<Value>& items, int depth) {
    for (size_t i = 0; i < items.size(); i += kBatch) {
      const size_t m = std::min(kBatch, items.size() - i);
      if (m > 1) p_.mark();
      for (size_t k = i; k < i + m; ++k) save(items[k], depth + 1);
      p_.op(m > 1 ? op::APPENDS : op::APPEND);
    }
  }

  void save_tuple(const Value& v, int depth) {
    InProgress guard(in_progress_, v);
    if (memo_get(v)) return;
    const auto& items = v.items();
    if (items.empty()) {
      p_.empty_tuple();
      return;
    }
    if (items.size() > 3) p_.mark();
    for (const Value& x : items) save(x, depth + 1);
    memo_[identity(v)] = p_.tuple_end(items.size());
  }

  void save_list(const Value& v, int depth) {
    InProgress guard(in_progress_, v);
    if (memo_get(v)) return;
    if (v.type_name() == "set" || v.type_name() == "frozenset") {
      p_.global("__builtin__", v.type_name());
      p_.empty_list();
      p_.memoize();
      save_items(v.items(), depth);
      p_.tuple_end(1);
      p_.op(op::REDUCE);
      memo_[identity(v)] = p_.memoize();
      return;
    }
    p_.empty_list();
    memo_[identity(v)] = p_.memoize();
    save_items(v.items(), depth);
  }

  void save_dict(const Value& v, int depth) {
    InProgress guard(in_progress_, v);
    if (memo_get(v)) return;
    const bool ordered = v.type_name() == kOrderedDict;
    if (ordered) {
      p_.global("collections", "OrderedDict");
      p_.empty_tuple();
      p_.op(op::REDUCE);
    } else {
      p_.empty_dict();
    }
    memo_[identity(v)] = p_.memoize();
    const auto& items = v.dict_items();
    for (size_t i = 0; i < items.size(); i += kBatch) {
      const size_t m = std::min(kBatch, items.size() - i);
      if (m > 1) p_.mark();
      for (size_t k = i; k < i + m; ++k) {
        const Value& key = items[k].first;
        if (key.is_list() || key.is_dict())
          throw ValueError("pt::save: a dict key is a " + key.python_type() + ", which Python cannot hash");
        save(key, depth + 1);
        save(items[k].second, depth + 1);
      }
      p_.op(m > 1 ? op::SETITEMS : op::SETITEM);
    }
    auto st = states_.find(&v.dict_items());
    if (st != states_.end()) {
      if (!ordered)
        throw ValueError("pt::save: attributes (BUILD state) can only be written for an OrderedDict");
      save(*st->second, depth + 1);
      p_.op(op::BUILD);
    }
  }

  void save_size(const Value& v, int depth) {
    p_.global("torch", "Size");
    Value plain = Value::tuple(v.items());
    save_tuple(plain, depth);
    p_.tuple_end(1);
    p_.op(op::REDUCE);
    p_.memoize();
  }

  void save_bytes(const std::string& b) {
    if (b.empty()) {
      p_.global("__builtin__", "bytes");
      p_.empty_tuple();
    } else {
      p_.global("_codecs", "encode");
      p_.string(latin1_to_utf8(b));
      p_.string("latin1");
      p_.tuple_end(2);
    }
    p_.op(op::REDUCE);
    p_.memoize();
  }

  void save_storage(const Tensor& t) {
    // One key per storage.  An empty storage viewed as several dtypes (no data to
    // disagree about) gets one key per dtype, so every tensor keeps its dtype.
    const bool empty = t.storage()->nbytes() < t.element_size();
    const auto key = std::make_pair(static_cast<const void*>(t.storage().get()), empty ? static_cast<int>(t.dtype()) : -1);
    auto it = storage_index_.find(key);
    size_t idx;
    if (it == storage_index_.end()) {
      idx = storages_.size();
      const size_t es = t.element_size();
      storages_.push_back({std::to_string(idx), t.storage(), t.dtype(), t.storage()->nbytes() / es * es});
      storage_index_.emplace(key, idx);
    } else {
      idx = it->second;
      const StorageOut& s = storages_[idx];
      if (s.dtype != t.dtype())
        throw ValueError("Cannot save multiple tensors or storages that view the same data as different types "
                         "(a " + std::string(dtype_name(s.dtype)) + " and a " + dtype_name(t.dtype()) +
                         " tensor share one storage); save a copy (clone()) of one of them");
    }
    const StorageOut& s = storages_[idx];
    p_.mark();
    p_.string("storage");
    p_.global("torch", storage_class_name(s.dtype));
    p_.string(s.key, 1);
    p_.string("cpu");
    p_.integer(static_cast<int64_t>(s.nbytes / element_size(s.dtype)));
    if (legacy_) {
      p_.none();  // view_metadata
      p_.tuple_end(6);
    } else {
      p_.tuple_end(5);
    }
    p_.op(op::BINPERSID);
  }

  void save_int_tuple(const Dims& d) {
    if (d.empty()) {
      p_.empty_tuple();
      return;
    }
    if (d.size() > 3) p_.mark();
    for (int64_t x : d) p_.integer(x);
    p_.tuple_end(d.size());
  }

  void save_tensor(const Tensor& t, bool requires_grad) {
    if (!t.defined()) throw ValueError("pt::save: cannot save an undefined Tensor");
    p_.global("torch._utils", "_rebuild_tensor_v2");
    p_.mark();
    save_storage(t);
    p_.integer(t.storage_offset());
    save_int_tuple(t.sizes());
    save_int_tuple(t.strides());
    p_.boolean(requires_grad);
    p_.global("collections", "OrderedDict");
    p_.empty_tuple();
    p_.op(op::REDUCE);
    p_.memoize();
    p_.tuple_end(6);
    p_.op(op::REDUCE);
    p_.memoize();
  }

  void save_parameter(const Tensor& t, bool requires_grad) {
    p_.global("torch._utils", "_rebuild_parameter");
    save_tensor(t, false);
    p_.boolean(requires_grad);
    p_.global("collections", "OrderedDict");
    p_.empty_tuple();
    p_.op(op::REDUCE);
    p_.memoize();
    p_.tuple_end(3);
    p_.op(op::REDUCE);
    p_.memoize();
  }

  bool legacy_;
  Pickler p_;
  std::unordered_map<const void*, uint32_t> memo_;
  std::unordered_set<const void*> in_progress_;
  std::unordered_map<const void*, const Value*> states_;
  std::vector<StorageOut> storages_;
  std::map<std::pair<const void*, int>, size_t> storage_index_;
};

std::string default_archive_name(const std::string& path) {
  // torch 1.x: the file name without directories and without its last extension
  size_t start = path.find_last_of('/');
  start = start == std::string::npos ? 0 : start + 1;
  std::string base = path.substr(start);
  size_t dot = base.find_last_of('.');
  if (dot != std::string::npos) base = base.substr(0, dot);
  return base.empty() ? "archive" : base;
}

// The legacy format (see load_legacy): what torch 1.13's _legacy_save writes, with
// storage keys "0", "1", ... instead of memory addresses, records ordered so that as
// many as possible start aligned (those whose size is a multiple of 8 first), and the
// key list padded with no-op BINPUTs so that the first record's data starts at a
// multiple of 64.  Records are little-endian whatever the host.
void write_legacy(const Value& value, const SaveOptions& options, const std::vector<ObjectState>& extra,
                  const ZipWriter::Sink& sink) {
  std::string head = "\x80\x02\x8a\x0a";
  head.append(reinterpret_cast<const char*>(kLegacyMagic), sizeof kLegacyMagic);
  head += '.';
  {
    Pickler p;
    p.proto();
    p.integer(kLegacyProtocolVersion);
    p.stop();
    head += p.bytes();
  }
  {
    Pickler p;  // dict(protocol_version=1001, little_endian=True, type_sizes=dict(short=2, int=4, long=4))
    p.proto();
    p.empty_dict();
    p.memoize();
    p.mark();
    p.string("protocol_version");
    p.integer(kLegacyProtocolVersion);
    p.string("little_endian");
    p.boolean(true);  // the records are little-endian, even from a big-endian host
    p.string("type_sizes");
    p.empty_dict();
    p.memoize();
    p.mark();
    p.string("short");
    p.integer(2);  // torch: struct.Struct('=h').size, a standard size
    p.string("int");
    p.integer(4);
    p.string("long");
    p.integer(4);  // '=l' is 4 bytes on every platform
    p.op(op::SETITEMS);
    p.op(op::SETITEMS);
    p.stop();
    head += p.bytes();
  }
  PtWriter w(options, extra);
  head += w.pickle(value);

  std::vector<const PtWriter::StorageOut*> order;
  for (const auto& s : w.storages()) order.push_back(&s);
  std::stable_partition(order.begin(), order.end(), [](auto* s) { return s->nbytes % 8 == 0; });
  Pickler keys;
  keys.proto();
  keys.empty_list();
  keys.memoize();
  for (size_t i = 0; i < order.size(); i += 1000) {  // pickle's batches of 1000
    const size_t m = std::min<size_t>(1000, order.size() - i);
    if (m > 1) keys.mark();
    for (size_t k = i; k < i + m; ++k) keys.string(order[k]->key);
    keys.op(m > 1 ? op::APPENDS : op::APPEND);
  }
  head += keys.bytes();  // without its STOP yet
  // pad: BINPUT 0 (2 bytes) and LONG_BINPUT 0 (5 bytes) store the list again
  size_t pad = (64 - (head.size() + 1 + 8) % 64) % 64;
  if (pad == 1 || pad == 3) pad += 64;
  if (pad % 2) head.append("r\0\0\0\0", 5), pad -= 5;
  for (; pad; pad -= 2) head.append("q\0", 2);
  head += '.';
  sink(head.data(), head.size());

  std::vector<uint8_t> swapped;
  for (const auto* s : order) {
    const uint64_t numel = s->nbytes / element_size(s->dtype);
    uint8_t count[8];
    for (int i = 0; i < 8; ++i) count[i] = static_cast<uint8_t>(numel >> (8 * i));
    sink(count, 8);
    if (!s->nbytes) continue;
    if (little_endian_host()) {
      sink(s->storage->data(), s->nbytes);
    } else {
      swapped.assign(static_cast<const uint8_t*>(s->storage->data()), static_cast<const uint8_t*>(s->storage->data()) + s->nbytes);
      swap_bytes(swapped.data(), swapped.size(), s->dtype);
      sink(swapped.data(), swapped.size());
    }
  }
}

void write_archive(const Value& value, const SaveOptions& options, const std::vector<ObjectState>& extra,
                   const std::string& archive_name, const ZipWriter::Sink& sink) {
  if (options.legacy_format) return write_legacy(value, options, extra, sink);
  if (archive_name.empty() || archive_name.find('/') != std::string::npos)
    throw ValueError("pt::save: archive name '" + archive_name + "' must be non-empty and contain no '/'");
  PtWriter w(options, extra);
  const std::string pkl = w.pickle(value);
  ZipWriterOptions zo;
  zo.force_zip64 = options.force_zip64;
  ZipWriter zip(sink, zo);
  const std::string prefix = archive_name + "/";
  zip.write_record(prefix + "data.pkl", pkl.data(), pkl.size());
  if (options.write_byteorder) {
    const std::string order = little_endian_host() ? "little" : "big";
    zip.write_record(prefix + "byteorder", order.data(), order.size());
  }
  std::vector<const PtWriter::StorageOut*> sorted;
  for (const auto& s : w.storages()) sorted.push_back(&s);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->key < b->key; });  // as torch: string order
  for (const auto* s : sorted) zip.write_record(prefix + "data/" + s->key, s->storage->data(), s->nbytes);
  zip.write_record(prefix + "version", "3\n", 2);
  zip.finish();
}

void save_to_file(const Value& value, const std::string& path, const SaveOptions& options,
                  const std::vector<ObjectState>& extra) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  const std::string name = options.archive_name.empty() ? default_archive_name(path) : options.archive_name;
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw RuntimeError("pt::save: cannot create '" + tmp + "': " + std::strerror(errno));
  try {
    write_archive(value, options, extra, name, [&](const void* p, size_t n) {
      if (n && std::fwrite(p, 1, n, f) != n)
        throw RuntimeError("pt::save: writing '" + tmp + "' failed: " + std::strerror(errno));
    });
    FILE* g = f;
    f = nullptr;
    if (std::fclose(g) != 0) throw RuntimeError("pt::save: closing '" + tmp + "' failed: " + std::strerror(errno));
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw RuntimeError("pt::save: cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
  } catch (...) {
    if (f) std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
}

}  // namespace

void save(const Value& value, const std::string& path, const SaveOptions& options) {
  save_to_file(value, path, options, {});
}

void save(const Archive& archive, const std::string& path, SaveOptions options) {
  save_to_file(archive.value, path, options, archive.states);
}

std::string save_bytes(const Value& value, const SaveOptions& options) {
  std::string out;
  write_archive(value, options, {}, options.archive_name.empty() ? "archive" : options.archive_name,
                [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); });
  return out;
}

}  // namespace loader::pt
