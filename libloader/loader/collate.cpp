// default_collate / default_convert with the rules of torch/utils/data/_utils/collate.py
// (torch 1.13), checked against tests/golden/default_collate.json.
//
// The collate path is hot (one call per batch, millions of samples a second), so it works
// on columns of pointers into the samples instead of copying Values, reuses one column
// buffer per nesting level, and for K tensor-valued fields in B samples makes K output
// allocations and B*K copies (one memcpy each when the sample is contiguous).
#include "loader/collate.h"

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loader/batch_copy.h"
#include "loader/error.h"

namespace loader {

namespace {

constexpr const char* kBadElement =
    "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found ";

// type(x) as Python prints it in the default_collate TypeError.
std::string python_class(const Value& v) {
  if (v.is_none()) return "<class 'NoneType'>";
  return "<class '" + v.python_type() + "'>";
}

bool is_namedtuple(const Value& v) { return v.is_tuple() && !v.field_names().empty(); }

// ---- torch.result_type for the dtypes loader has (torch.stack promotes its inputs).
enum class Category { Bool, Integral, Floating, Complex };

Category category(DType t) {
  if (t == DType::Bool) return Category::Bool;
  if (t == DType::Complex64) return Category::Complex;
  return is_floating(t) ? Category::Floating : Category::Integral;
}

int integral_rank(DType t) {
  switch (t) {
    case DType::Int8: return 1;
    case DType::Int16: return 2;
    case DType::Int32: return 3;
    case DType::Int64: return 4;
    default: return 0;  // UInt8
  }
}

int floating_rank(DType t) {
  switch (t) {
    case DType::Float16: return 1;
    case DType::BFloat16: return 1;
    case DType::Float32: return 2;
    default: return 3;  // Float64
  }
}

/// PyTorch's promote_types(a, b); nullopt when the result (complex128) has no loader dtype.
std::optional<DType> promote_types(DType a, DType b) {
  if (a == b) return a;
  Category ca = category(a), cb = category(b);
  if (ca != cb) {
    // The higher category wins; inside it the type of that operand, except that complex
    // with float64 needs complex128.
    if (ca < cb) {
      std::swap(a, b);
      std::swap(ca, cb);
    }
    if (ca == Category::Complex && b == DType::Float64) return std::nullopt;
    return a;
  }
  if (ca == Category::Integral) {
    // uint8 with a signed type: the signed type, widened to int16 for int8.
    if (a == DType::UInt8 || b == DType::UInt8) {
      DType s = a == DType::UInt8 ? b : a;
      return s == DType::Int8 ? DType::Int16 : s;
    }
    return integral_rank(a) >= integral_rank(b) ? a : b;
  }
  if (ca == Category::Floating) {
    int ra = floating_rank(a), rb = floating_rank(b);
    if (ra == 1 && rb == 1) return DType::Float32;  // float16 with bfloat16
    return ra >= rb ? a : b;
  }
  return a;  // Bool, or Complex64 with itself
}

class Collator {
 public:
  explicit Collator(TensorAllocator* alloc) : alloc_(alloc ? alloc : &current_tensor_allocator()) {}

  Value collate(const Value* const* batch, size_t n) {
    if (n == 0)
      throw IndexError("default_collate: the batch is empty (list index out of range); a batch "
                       "needs at least one sample");
    const Value& elem = *batch[0];
    switch (elem.kind()) {
      case Value::Kind::Tensor: return stack(batch, n);
      case Value::Kind::Double: return collate_floats(batch, n);
      case Value::Kind::Int:
      case Value::Kind::Bool: return collate_ints(batch, n);
      case Value::Kind::String:
      case Value::Kind::Bytes: {
        std::vector<Value> items;
        items.reserve(n);
        for (size_t i = 0; i < n; ++i) items.push_back(*batch[i]);
        return Value::list(std::move(items));
      }
      case Value::Kind::Dict: return collate_dicts(batch, n);
      case Value::Kind::List:
      case Value::Kind::Tuple: return collate_sequences(batch, n);
      case Value::Kind::None:
      case Value::Kind::Object: break;
    }
    throw TypeError(kBadElement + python_class(elem));
  }

 private:
  // torch.stack(batch, 0): equal shapes, type promotion, one contiguous output.
  Value stack(const Value* const* batch, size_t n) {
    // torch.stack parses its arguments first (all tensors), then checks the shapes.
    for (size_t i = 1; i < n; ++i)
      if (!batch[i]->is_tensor())
        throw TypeError("expected Tensor as element " + std::to_string(i) +
                        " in argument 0, but got " + batch[i]->python_type());
    const Tensor& first = batch[0]->to_tensor();
    DType dtype = first.dtype();
    for (size_t i = 0; i < n; ++i) {
      const Tensor& t = batch[i]->to_tensor();
      if (!t.defined())
        throw ValueError("default_collate: the tensor of sample " + std::to_string(i) +
                         " is undefined (a default-constructed Tensor)");
      if (t.sizes() != first.sizes())
        throw RuntimeError("stack expects each tensor to be equal size, but got " +
                           first.sizes().str() + " at entry 0 and " + t.sizes().str() +
                           " at entry " + std::to_string(i));
      if (t.dtype() != dtype) {
        auto promoted = promote_types(dtype, t.dtype());
        if (!promoted)
          throw TypeError(std::string("default_collate: stacking ") + dtype_name(dtype) +
                          " with " + dtype_name(t.dtype()) + " (sample " + std::to_string(i) +
                          ") promotes to complex128, which loader does not support; convert "
                          "the samples to one dtype");
        dtype = *promoted;
      }
    }
    Dims shape = first.sizes();
    shape.push_front(static_cast<int64_t>(n));
    Tensor out = Tensor::empty(shape, dtype, alloc_);
    const size_t sample_bytes = static_cast<size_t>(first.numel()) * element_size(dtype);
    auto* dst = static_cast<uint8_t*>(out.data_ptr());
    for (size_t i = 0; i < n; ++i) {
      const Tensor& t = batch[i]->to_tensor();
      if (t.dtype() == dtype) {
        if (t.is_contiguous())
          copy_into_batch(dst + i * sample_bytes, t.data_ptr(), sample_bytes);
        else
          copy_to_contiguous(t, dst + i * sample_bytes);
      } else {
        Tensor slot = out.select(0, static_cast<int64_t>(i));
        slot.copy_(t);
      }
    }
    return Value(std::move(out));
  }

  // collate_float_fn: torch.tensor(batch, dtype=torch.float64).
  Value collate_floats(const Value* const* batch, size_t n) {
    Tensor out = Tensor::empty({static_cast<int64_t>(n)}, DType::Float64, alloc_);
    auto* p = static_cast<double*>(out.data_ptr());
    for (size_t i = 0; i < n; ++i) {
      const Value& v = *batch[i];
      if (!v.is_number())
        throw TypeError("must be real number, not " + python_name(v) +
                        " (default_collate: sample " + std::to_string(i) +
                        " of a batch of floats)");
      p[i] = v.to_double();
    }
    return Value(std::move(out));
  }

  // collate_int_fn: torch.tensor(batch), whose dtype is *inferred from all elements*:
  // any float makes it the default dtype float32, else any int makes it int64, else
  // (all bools) bool.  Because default_collate picks this path from the first element
  // alone, [1, 2.5] becomes float32 while [2.5, 1] (float path) becomes float64; golden
  // cases `int_then_float` and `float_then_int` record exactly that.
  Value collate_ints(const Value* const* batch, size_t n) {
    bool any_double = false, any_int = false;
    for (size_t i = 0; i < n; ++i) {
      const Value& v = *batch[i];
      switch (v.kind()) {
        case Value::Kind::Double: any_double = true; break;
        case Value::Kind::Int: any_int = true; break;
        case Value::Kind::Bool: break;
        case Value::Kind::String:
          throw TypeError("new(): invalid data type 'str' (default_collate: sample " +
                          std::to_string(i) + " of a batch of ints)");
        case Value::Kind::None:
          throw RuntimeError("Could not infer dtype of NoneType (default_collate: sample " +
                             std::to_string(i) + " of a batch of ints)");
        default:
          throw TypeError("default_collate: sample " + std::to_string(i) + " is a " +
                          python_name(v) + " in a batch of ints; torch.tensor cannot combine them");
      }
    }
    const auto count = static_cast<int64_t>(n);
    if (any_double) {
      Tensor out = Tensor::empty({count}, DType::Float32, alloc_);
      auto* p = static_cast<float*>(out.data_ptr());
      for (size_t i = 0; i < n; ++i) {
        const Value& v = *batch[i];
        p[i] = v.is_int() ? static_cast<float>(v.to_int()) : static_cast<float>(v.to_double());
      }
      return Value(std::move(out));
    }
    if (any_int) {
      Tensor out = Tensor::empty({count}, DType::Int64, alloc_);
      auto* p = static_cast<int64_t*>(out.data_ptr());
      for (size_t i = 0; i < n; ++i) p[i] = batch[i]->to_int();
      return Value(std::move(out));
    }
    Tensor out = Tensor::empty({count}, DType::Bool, alloc_);
    auto* p = static_cast<uint8_t*>(out.data_ptr());
    for (size_t i = 0; i < n; ++i) p[i] = batch[i]->to_bool() ? 1 : 0;
    return Value(std::move(out));
  }

  // Mapping: keys of the first sample, in its order; the dict's type name is kept.
  Value collate_dicts(const Value* const* batch, size_t n) {
    const auto& keys = batch[0]->dict_items();
    for (size_t i = 1; i < n; ++i)
      if (!batch[i]->is_dict())
        throw TypeError("default_collate: sample " + std::to_string(i) + " is a " +
                        python_name(*batch[i]) + " but sample 0 is a " +
                        batch[0]->python_type() + "; every sample needs the same structure");
    std::vector<const Value*> column(n);
    std::vector<std::pair<Value, Value>> out;
    out.reserve(keys.size());
    for (size_t k = 0; k < keys.size(); ++k) {
      const Value& key = keys[k].first;
      for (size_t i = 0; i < n; ++i) column[i] = &lookup(*batch[i], key, k, i);
      out.emplace_back(key, collate(column.data(), n));
    }
    return Value::dict(std::move(out), batch[0]->type_name());
  }

  // d[key], trying the first sample's position first (samples usually share key order).
  static const Value& lookup(const Value& d, const Value& key, size_t position, size_t sample) {
    const auto& items = d.dict_items();
    if (position < items.size() && items[position].first == key) return items[position].second;
    for (const auto& kv : items)
      if (kv.first == key) return kv.second;
    throw KeyError(key.repr() + " (default_collate: sample " + std::to_string(sample) +
                   " lacks a key of sample 0; every sample needs the same keys)");
  }

  // namedtuple: its type and fields kept; tuple: a list (backwards compatibility in
  // PyTorch); list: its type name kept.  Plain sequences must all have the same length.
  Value collate_sequences(const Value* const* batch, size_t n) {
    const Value& elem = *batch[0];
    const size_t width = elem.size();
    const bool named = is_namedtuple(elem);
    for (size_t i = 1; i < n; ++i) {
      const Value& v = *batch[i];
      if (!v.is_sequence())
        throw TypeError("object of type '" + python_name(v) + "' has no len() (default_collate: "
                        "sample " + std::to_string(i) + " is not a sequence but sample 0 is a " +
                        elem.python_type() + ")");
      if (named) {
        // PyTorch builds elem_type(*zip(*batch)): longer samples are cut to the first's
        // length, shorter ones leave fields missing.
        if (v.size() < width)
          throw TypeError(elem.type_name() + ".__new__() missing " +
                          std::to_string(width - v.size()) +
                          " required positional argument(s) (default_collate: sample " +
                          std::to_string(i) + " has " + std::to_string(v.size()) + " of " +
                          std::to_string(width) + " fields)");
      } else if (v.size() != width) {
        throw RuntimeError("each element in list of batch should be of equal size");
      }
    }
    std::vector<const Value*> column(n);
    std::vector<Value> items;
    items.reserve(width);
    for (size_t j = 0; j < width; ++j) {
      for (size_t i = 0; i < n; ++i) column[i] = &batch[i]->items()[j];
      items.push_back(collate(column.data(), n));
    }
    if (named) return Value::namedtuple(elem.type_name(), elem.field_names(), std::move(items));
    if (elem.is_tuple()) return Value::list(std::move(items));
    return Value::list(std::move(items), elem.type_name());
  }

  static std::string python_name(const Value& v) { return v.is_none() ? "NoneType" : v.python_type(); }

  TensorAllocator* alloc_;
};

// ---- collate registry
struct CollateRegistry {
  std::mutex mu;
  std::map<std::string, CollateFn> fns;
  CollateRegistry() {
    fns["default_collate"] = [](std::vector<Value>& samples) { return default_collate(samples); };
  }
};

CollateRegistry& collate_registry() {
  static CollateRegistry r;
  return r;
}

}  // namespace

Value default_collate(std::vector<Value>& samples, TensorAllocator* alloc) {
  std::vector<const Value*> batch(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) batch[i] = &samples[i];
  return Collator(alloc).collate(batch.data(), batch.size());
}

Value default_convert(Value sample) {
  switch (sample.kind()) {
    case Value::Kind::Dict: {
      std::vector<std::pair<Value, Value>> items;
      items.reserve(sample.size());
      for (const auto& kv : sample.dict_items()) items.emplace_back(kv.first, default_convert(kv.second));
      return Value::dict(std::move(items), sample.type_name());
    }
    case Value::Kind::Tuple:
    case Value::Kind::List: {
      std::vector<Value> items;
      items.reserve(sample.size());
      for (const auto& v : sample.items()) items.push_back(default_convert(v));
      if (is_namedtuple(sample))
        return Value::namedtuple(sample.type_name(), sample.field_names(), std::move(items));
      if (sample.is_tuple()) return Value::list(std::move(items));  // tuple -> list, as PyTorch
      return Value::list(std::move(items), sample.type_name());
    }
    default:
      // Tensors pass through; numbers, strings, None and custom objects are left as they
      // are (PyTorch converts only numpy arrays, which loader does not have).
      return sample;
  }
}

void register_collate_fn(const std::string& name, CollateFn fn) {
  if (!fn) throw ValueError("register_collate_fn: the function registered as '" + name + "' is empty");
  auto& r = collate_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.fns[name] = std::move(fn);
}

CollateFn find_collate_fn(const std::string& name) {
  auto& r = collate_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.fns.find(name);
  if (it != r.fns.end()) return it->second;
  std::string known;
  for (const auto& kv : r.fns) known += (known.empty() ? "" : ", ") + kv.first;
  throw ValueError("unknown collate function '" + name + "'; registered: " + (known.empty() ? "none" : known) +
                   ". " + detail::registration_hint("LOADER_REGISTER_COLLATE_FN", "loader::register_collate_fn"));
}

}  // namespace loader
