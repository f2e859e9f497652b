#include "loader/torch.h"

#include <ATen/core/jit_type.h>
#include <ATen/ops/from_blob.h>
#include <torch/nn/module.h>
#include <torch/utils.h>

#include <map>
#include <memory>
#include <sstream>
#include <utility>

#include "loader/error.h"
#include "loader/serialization/pt.h"

namespace loader {

// ------------------------------------------------------------------ element types
c10::ScalarType to_torch_dtype(DType dtype) {
  switch (dtype) {
    case DType::Bool: return c10::kBool;
    case DType::UInt8: return c10::kByte;
    case DType::Int8: return c10::kChar;
    case DType::Int16: return c10::kShort;
    case DType::Int32: return c10::kInt;
    case DType::Int64: return c10::kLong;
    case DType::Float16: return c10::kHalf;
    case DType::BFloat16: return c10::kBFloat16;
    case DType::Float32: return c10::kFloat;
    case DType::Float64: return c10::kDouble;
    case DType::Complex64: return c10::kComplexFloat;
  }
  throw TypeError("to_torch_dtype: unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

DType from_torch_dtype(c10::ScalarType type) {
  switch (type) {
    case c10::kBool: return DType::Bool;
    case c10::kByte: return DType::UInt8;
    case c10::kChar: return DType::Int8;
    case c10::kShort: return DType::Int16;
    case c10::kInt: return DType::Int32;
    case c10::kLong: return DType::Int64;
    case c10::kHalf: return DType::Float16;
    case c10::kBFloat16: return DType::BFloat16;
    case c10::kFloat: return DType::Float32;
    case c10::kDouble: return DType::Float64;
    case c10::kComplexFloat: return DType::Complex64;
    default: break;
  }
  throw TypeError(std::string("from_torch: loader has no dtype for torch.") + c10::toString(type) +
                  " (supported: bool, uint8, int8, int16, int32, int64, float16, bfloat16, float32, "
                  "float64, complex64)");
}

// ------------------------------------------------------------------ loader -> torch
at::Tensor to_torch(const Tensor& t) {
  if (!t.defined()) throw ValueError("to_torch: undefined tensor");
  const c10::IntArrayRef sizes(t.sizes().data(), t.sizes().size());
  const c10::IntArrayRef strides(t.strides().data(), t.strides().size());
  // The context owns a reference to the loader storage (for a worker's batch: the
  // lease on its slab); torch deletes it when its own storage dies.
  auto* keep = new std::shared_ptr<Storage>(t.storage());
  return at::for_blob(t.data_ptr(), sizes)
      .strides(strides)
      .context(keep, [](void* p) { delete static_cast<std::shared_ptr<Storage>*>(p); })
      .options(at::TensorOptions().dtype(to_torch_dtype(t.dtype())).device(at::kCPU))
      .target_device(at::Device(at::kCPU))
      .make_tensor();
}

std::vector<at::Tensor> to_torch_list(const Value& batch) {
  if (batch.is_tensor()) return {to_torch(batch.to_tensor())};
  if (!batch.is_sequence())
    throw TypeError("to_torch_list: expected a list or tuple of tensors, got " + batch.python_type());
  std::vector<at::Tensor> out;
  out.reserve(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    const Value& item = batch[i];
    if (!item.is_tensor())
      throw TypeError("to_torch_list: item " + std::to_string(i) + " is a " + item.python_type() +
                      ", not a Tensor (to_ivalue converts batches that carry numbers or strings)");
    out.push_back(to_torch(item.to_tensor()));
  }
  return out;
}

torch::OrderedDict<std::string, at::Tensor> to_torch_dict(const Value& batch) {
  if (!batch.is_dict()) throw TypeError("to_torch_dict: expected a dict of tensors, got " + batch.python_type());
  torch::OrderedDict<std::string, at::Tensor> out("Tensor");
  out.reserve(batch.size());
  for (const auto& [k, v] : batch.dict_items()) {
    if (!k.is_string()) throw TypeError("to_torch_dict: key " + k.repr() + " is a " + k.python_type() + ", not a str");
    if (!v.is_tensor())
      throw TypeError("to_torch_dict: value of '" + k.to_string() + "' is a " + v.python_type() +
                      ", not a Tensor (to_ivalue converts batches that carry numbers or strings)");
    out.insert(k.to_string(), to_torch(v.to_tensor()));
  }
  return out;
}

namespace {

c10::IValue to_ivalue_at(const Value& v, const std::string& where) {
  switch (v.kind()) {
    case Value::Kind::None: return c10::IValue();
    case Value::Kind::Bool: return c10::IValue(v.to_bool());
    case Value::Kind::Int: return c10::IValue(v.to_int());
    case Value::Kind::Double: return c10::IValue(v.to_double());
    case Value::Kind::String:
    case Value::Kind::Bytes: return c10::IValue(v.to_string());
    case Value::Kind::Tensor: return c10::IValue(to_torch(v.to_tensor()));
    case Value::Kind::List: {
      bool all_tensors = true;
      for (const Value& item : v.items()) all_tensors = all_tensors && item.is_tensor();
      if (all_tensors) {
        c10::List<at::Tensor> list;
        list.reserve(v.size());
        for (const Value& item : v.items()) list.push_back(to_torch(item.to_tensor()));
        return c10::IValue(std::move(list));
      }
      c10::impl::GenericList list(c10::AnyType::get());
      list.reserve(v.size());
      for (size_t i = 0; i < v.size(); ++i) list.push_back(to_ivalue_at(v[i], where + "[" + std::to_string(i) + "]"));
      return c10::IValue(std::move(list));
    }
    case Value::Kind::Tuple: {
      std::vector<c10::IValue> items;
      items.reserve(v.size());
      for (size_t i = 0; i < v.size(); ++i) items.push_back(to_ivalue_at(v[i], where + "[" + std::to_string(i) + "]"));
      return c10::IValue(c10::ivalue::Tuple::create(std::move(items)));
    }
    case Value::Kind::Dict: {
      bool str_keys = true, int_keys = true, all_tensors = true;
      for (const auto& [k, item] : v.dict_items()) {
        str_keys = str_keys && k.is_string();
        int_keys = int_keys && k.is_int();
        all_tensors = all_tensors && item.is_tensor();
      }
      if (!str_keys && !int_keys)
        throw TypeError("to_ivalue: the dict at " + where +
                        " mixes key types or has keys that are neither str nor int; libtorch dicts need one key type");
      const c10::TypePtr key_type = str_keys ? c10::TypePtr(c10::StringType::get()) : c10::TypePtr(c10::IntType::get());
      const c10::TypePtr value_type =
          all_tensors ? c10::TypePtr(c10::TensorType::get()) : c10::TypePtr(c10::AnyType::get());
      c10::impl::GenericDict dict(key_type, value_type);
      dict.reserve(v.size());
      for (const auto& [k, item] : v.dict_items()) {
        c10::IValue key = str_keys ? c10::IValue(k.to_string()) : c10::IValue(k.to_int());
        dict.insert_or_assign(std::move(key), to_ivalue_at(item, where + "[" + k.repr() + "]"));
      }
      return c10::IValue(std::move(dict));
    }
    case Value::Kind::Object:
      throw TypeError("to_ivalue: " + where + " is a custom object (" + v.to_object()->type_name() +
                      "); convert its tensors() yourself");
  }
  throw TypeError("to_ivalue: unknown value kind at " + where);
}

}  // namespace

c10::IValue to_ivalue(const Value& batch) { return to_ivalue_at(batch, "batch"); }

// ------------------------------------------------------------------ torch -> loader
namespace {

// Loader storages made for torch storages, so that tensors sharing a torch storage
// share one loader storage (pt::save then writes it once, as torch.save does).
using StorageCache = std::map<const c10::StorageImpl*, std::shared_ptr<Storage>>;

Tensor from_torch_cached(const at::Tensor& t, StorageCache* cache) {
  if (!t.defined()) throw ValueError("from_torch: undefined tensor");
  if (!t.device().is_cpu())
    throw ValueError("from_torch: the tensor is on " + t.device().str() + "; only CPU tensors can be viewed (call .cpu())");
  if (t.layout() != at::kStrided)
    throw ValueError("from_torch: only strided (dense) tensors can be viewed; call .to_dense()");
  const DType dtype = from_torch_dtype(t.scalar_type());
  const c10::Storage& ts = t.storage();
  std::shared_ptr<Storage> storage;
  if (cache) {
    auto it = cache->find(ts.unsafeGetStorageImpl());
    if (it != cache->end()) storage = it->second;
  }
  if (!storage) {
    // The loader storage owns a reference to the torch storage.
    auto owner = std::make_shared<c10::Storage>(ts);
    storage = Storage::wrap(const_cast<void*>(ts.data()), ts.nbytes(), owner, MemoryKind::External, {}, t.is_pinned());
    if (cache) (*cache)[ts.unsafeGetStorageImpl()] = storage;
  }
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  return Tensor(std::move(storage), dtype, Dims(sizes.data(), sizes.size()), Dims(strides.data(), strides.size()),
                t.storage_offset());
}

// Python's Module._save_to_state_dict order: own parameters, own buffers, then children.
void collect_state(const torch::nn::Module& m, const std::string& prefix,
                   std::vector<std::pair<std::string, at::Tensor>>& out) {
  for (const auto& p : m.named_parameters(/*recurse=*/false))
    if (p.value().defined()) out.emplace_back(prefix + p.key(), p.value());
  for (const auto& b : m.named_buffers(/*recurse=*/false))
    if (b.value().defined()) out.emplace_back(prefix + b.key(), b.value());
  for (const auto& c : m.named_children()) collect_state(*c.value(), prefix + c.key() + ".", out);
}

std::string torch_size(c10::IntArrayRef s) {
  std::ostringstream os;
  os << "torch.Size([";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "])";
  return os.str();
}

std::string torch_size(const Dims& s) { return torch_size(c10::IntArrayRef(s.data(), s.size())); }

}  // namespace

Tensor from_torch(const at::Tensor& t) { return from_torch_cached(t, nullptr); }

Value torch_state_dict(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, at::Tensor>> named;
  collect_state(module, "", named);
  StorageCache cache;
  std::vector<std::pair<Value, Value>> items;
  items.reserve(named.size());
  for (auto& [name, tensor] : named) items.emplace_back(Value(name), Value(from_torch_cached(tensor.detach(), &cache)));
  return Value::dict(std::move(items), "collections.OrderedDict");
}

void load_torch_state_dict(torch::nn::Module& module, const Value& state_dict) {
  if (!state_dict.is_dict())
    throw TypeError("load_torch_state_dict: expected a dict of tensors (a state_dict), got " + state_dict.python_type());
  std::vector<std::pair<std::string, at::Tensor>> named;
  collect_state(module, "", named);
  std::map<std::string, const Value*> given;
  std::vector<std::string> unexpected;
  for (const auto& [k, v] : state_dict.dict_items()) {
    if (!k.is_string() || !pt::is_tensor_like(v))
      throw TypeError("load_torch_state_dict: entry " + k.repr() + " is not a named tensor");
    given[k.to_string()] = &v;
  }
  std::vector<std::string> missing, mismatched;
  std::map<std::string, bool> known;
  for (const auto& [name, target] : named) {
    known[name] = true;
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
      continue;
    }
    const Tensor& src = pt::tensor_of(*it->second);
    if (src.sizes() != Dims(target.sizes().data(), target.sizes().size()))
      mismatched.push_back("size mismatch for " + name + ": copying a param with shape " + torch_size(src.sizes()) +
                           " from checkpoint, the shape in current model is " + torch_size(target.sizes()) + ".");
  }
  for (const auto& [k, v] : state_dict.dict_items())
    if (!known.count(k.to_string())) unexpected.push_back(k.to_string());
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    auto quoted = [](const std::vector<std::string>& keys) {
      std::string s;
      for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", \"" : "\"") + keys[i] + "\"";
      return s;
    };
    std::string msg = "Error(s) in loading state_dict for " + module.name() + ":";
    if (!missing.empty()) msg += "\n\tMissing key(s) in state_dict: " + quoted(missing) + ". ";
    if (!unexpected.empty()) msg += "\n\tUnexpected key(s) in state_dict: " + quoted(unexpected) + ". ";
    for (const auto& m : mismatched) msg += "\n\t" + m;
    throw RuntimeError(msg);
  }
  torch::NoGradGuard no_grad;
  for (auto& [name, target] : named) target.copy_(to_torch(pt::tensor_of(*given.at(name))));
}

}  // namespace loader
