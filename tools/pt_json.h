// JSON descriptions of a loaded `.pt` file, shared by `loader pt dump` and the tests
// (header-only: it needs nlohmann/json, which loader_core does not link).
//
//   loader::pt::Archive a = loader::pt::load_archive("x.pt");
//   nlohmann::json tree = loader::tool::describe_value(a.value, &a, {});   // the manifest's layout
//   nlohmann::json list = loader::tool::list_tensors(a.value);             // one entry per tensor
//
// describe_value: the layout of golden/pt_manifest.json.  A tensor becomes {"kind":
// "tensor"|"parameter", dtype, shape, stride, storage_offset, storage_numel,
// is_contiguous, requires_grad, values (row-major, nested by shape; complex as [re, im]),
// values_bits_hex (floating dtypes: each element's little-endian bits as hex),
// storage_sha256, storage_bytes_hex (null above 512 bytes), storage_id (distinct storages
// numbered in first-seen order)}.  Non-finite floats are strings: "NaN", "Infinity",
// "-Infinity" (JsonStyle::python_repr gives the manifest's "nan", "inf", "-inf").
//   - A tensor with more than JsonStyle::max_values elements has no values /
//     values_bits_hex but "values_omitted": true and "numel".
//   - A tensor with more than kMaxNestedDims dimensions has its values flat, with
//     "values_layout": "flat".
//   - A list, tuple, dict or Parameter met more than once (the same object, shared
//     through the pickle memo) is described at its first place, with "id": N, and
//     elsewhere as {"kind": "ref", "ref": N}; ids count from 0 in first-seen order, and
//     only objects met again have one.  (A plain tensor is a value in loader::Value,
//     with no identity: it is described at each place, with the same storage_id.)
//
// Both walk at most kMaxDescribeDepth containers deep (deeper: ValueError), more than
// pt::load accepts (pt::LoadOptions::max_depth, 1000), so the recursion here and in
// nlohmann's dump() stays bounded.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "loader/error.h"
#include "loader/serialization/pt.h"
#include "loader/serialization/sha256.h"

namespace loader::tool {

struct JsonStyle {
  /// Non-finite floats as Python's repr ("nan", "inf", "-inf") instead of "NaN", ...
  bool python_repr = false;
  /// Leave out "values"/"values_bits_hex" of tensors with more elements (-1: no limit).
  int64_t max_values = -1;
};

/// Deepest container nesting described.
constexpr int kMaxDescribeDepth = 1024;
/// Tensors with more dimensions have their values flat ("values_layout": "flat").
constexpr size_t kMaxNestedDims = 64;

namespace detail {

inline nlohmann::json json_double(double d, const JsonStyle& s) {
  if (std::isnan(d)) return s.python_repr ? "nan" : "NaN";
  if (std::isinf(d)) return d > 0 ? (s.python_repr ? "inf" : "Infinity") : (s.python_repr ? "-inf" : "-Infinity");
  return d;
}

inline std::string hex_of(const uint8_t* p, size_t n, bool little_endian_value) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    uint8_t b = little_endian_value ? p[n - 1 - i] : p[i];
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

inline nlohmann::json element_json(const uint8_t* p, DType t, const JsonStyle& s) {
  switch (t) {
    case DType::Bool: return *p != 0;
    case DType::Complex64: {
      float re, im;
      std::memcpy(&re, p, 4);
      std::memcpy(&im, p + 4, 4);
      return nlohmann::json::array({json_double(re, s), json_double(im, s)});
    }
    case DType::Float16:
    case DType::BFloat16:
    case DType::Float32:
    case DType::Float64: return json_double(load_as_double(p, t), s);
    default: return load_as_int64(p, t);
  }
}

/// The identity of a non-empty container (its shared items), or null.  Empty ones print
/// in constant size and may be one shared object for unrelated places: no identity.
inline const void* identity_of(const Value& v) {
  if (v.is_sequence() && !v.items().empty()) return &v.items();
  if (v.is_dict() && !v.dict_items().empty()) return &v.dict_items();
  return nullptr;
}

inline void check_depth(int depth) {
  if (depth > kMaxDescribeDepth)
    throw ValueError("containers nested more than " + std::to_string(kMaxDescribeDepth) + " deep cannot be described");
}

/// The elements of `t` in row-major order as JSON (and their bits into `bits`, when
/// given), nested by shape up to kMaxNestedDims dimensions, else flat.
inline nlohmann::json tensor_values(const Tensor& t, const JsonStyle& style, nlohmann::json* bits) {
  const size_t ndim = static_cast<size_t>(t.dim());
  const size_t es = t.element_size();
  const int64_t numel = t.numel();
  std::vector<nlohmann::json> flat;
  flat.reserve(static_cast<size_t>(numel));
  if (numel > 0) {
    const auto* base = static_cast<const uint8_t*>(t.storage()->data());
    std::vector<int64_t> index(ndim, 0);  // an odometer over the shape: no recursion per dimension
    int64_t offset = t.storage_offset();
    for (int64_t k = 0; k < numel; ++k) {
      const uint8_t* p = base + static_cast<size_t>(offset) * es;
      if (bits) bits->push_back(hex_of(p, es, true));
      flat.push_back(element_json(p, t.dtype(), style));
      for (size_t d = ndim; d-- > 0;) {
        offset += t.strides()[d];
        if (++index[d] < t.sizes()[d]) break;
        offset -= t.strides()[d] * index[d];
        index[d] = 0;
      }
    }
  }
  if (ndim > kMaxNestedDims) return nlohmann::json(std::move(flat));
  size_t pos = 0;
  struct Nest {  // recursion at most kMaxNestedDims deep
    const Tensor& t;
    std::vector<nlohmann::json>& flat;
    size_t& pos;
    nlohmann::json operator()(size_t dim) const {
      if (dim == static_cast<size_t>(t.dim())) return std::move(flat[pos++]);
      nlohmann::json arr = nlohmann::json::array();
      for (int64_t i = 0; i < t.sizes()[dim]; ++i) arr.push_back((*this)(dim + 1));
      return arr;
    }
  };
  return Nest{t, flat, pos}(0);
}

struct Describer {
  const pt::Archive* archive;
  JsonStyle style;
  std::map<const Storage*, int> storage_ids;
  std::map<const Storage*, std::string> storage_sha256;  // each storage hashed once
  std::unordered_map<const void*, const Value*> states;  // dict identity -> its attributes
  std::unordered_map<const void*, int> times_met;        // container identity -> places (1, or 2 for "more")
  std::unordered_map<const void*, int> ids;              // of containers met more than once

  Describer(const pt::Archive* a, JsonStyle s) : archive(a), style(s) {
    if (archive)
      for (const auto& st : archive->states)
        if (st.object.is_dict()) states.emplace(&st.object.dict_items(), &st.state);
  }

  const Value* state_of(const Value& v) const {
    if (!v.is_dict()) return nullptr;
    auto it = states.find(&v.dict_items());
    return it == states.end() || !it->second->is_dict() ? nullptr : it->second;
  }

  /// First pass: which containers are met more than once.  Each is walked once.
  void count(const Value& v, int depth) {
    check_depth(depth);
    if (const void* id = identity_of(v)) {
      int& n = times_met[id];
      if (++n > 1) {
        n = 2;
        return;
      }
    }
    if (v.is_sequence()) {
      for (const Value& x : v.items()) count(x, depth + 1);
    } else if (v.is_dict()) {
      for (const auto& kv : v.dict_items()) {
        count(kv.first, depth + 1);
        count(kv.second, depth + 1);
      }
      if (const Value* st = state_of(v))
        for (const auto& kv : st->dict_items()) count(kv.second, depth + 1);
    }
  }

  nlohmann::json tensor(const Tensor& t, bool requires_grad, const char* kind) {
    nlohmann::json e;
    const size_t es = t.element_size();
    const Storage& st = *t.storage();
    e["dtype"] = dtype_name(t.dtype());
    e["shape"] = t.sizes().vec();
    e["stride"] = t.strides().vec();
    e["storage_offset"] = t.storage_offset();
    e["storage_numel"] = static_cast<int64_t>(st.nbytes() / es);
    e["is_contiguous"] = t.is_contiguous();
    e["requires_grad"] = requires_grad;
    const bool floating = is_floating(t.dtype());
    if (style.max_values < 0 || t.numel() <= style.max_values) {
      nlohmann::json bits = nlohmann::json::array();
      e["values"] = tensor_values(t, style, floating ? &bits : nullptr);
      if (floating) e["values_bits_hex"] = std::move(bits);
      if (static_cast<size_t>(t.dim()) > kMaxNestedDims) e["values_layout"] = "flat";
    } else {
      e["values_omitted"] = true;
      e["numel"] = t.numel();
    }
    const auto* bytes = static_cast<const uint8_t*>(st.data());
    const size_t nbytes = st.nbytes() / es * es;
    auto sha = storage_sha256.find(&st);
    if (sha == storage_sha256.end()) sha = storage_sha256.emplace(&st, pt::sha256_hex(bytes, nbytes)).first;
    e["storage_sha256"] = sha->second;
    e["storage_bytes_hex"] = nbytes <= 512 ? nlohmann::json(hex_of(bytes, nbytes, false)) : nlohmann::json(nullptr);
    e["kind"] = kind;
    auto it = storage_ids.emplace(&st, static_cast<int>(storage_ids.size())).first;
    e["storage_id"] = it->second;
    return e;
  }

  /// Second pass: the description, with ids and refs for containers met more than once.
  nlohmann::json value(const Value& v, int depth) {
    check_depth(depth);
    const void* identity = identity_of(v);
    if (identity && times_met[identity] > 1) {
      auto it = ids.find(identity);
      if (it != ids.end()) return {{"kind", "ref"}, {"ref", it->second}};
      const int id = static_cast<int>(ids.size());
      ids.emplace(identity, id);
      nlohmann::json j = described(v, depth);
      j["id"] = id;
      return j;
    }
    return described(v, depth);
  }

  nlohmann::json described(const Value& v, int depth) {
    if (pt::is_tensor_like(v))
      return tensor(pt::tensor_of(v), pt::requires_grad_of(v), pt::is_parameter(v) ? "parameter" : "tensor");
    switch (v.kind()) {
      case Value::Kind::None: return {{"kind", "None"}};
      case Value::Kind::Bool: return {{"kind", "bool"}, {"value", v.to_bool()}};
      case Value::Kind::Int: return {{"kind", "int"}, {"value", v.to_int()}};
      case Value::Kind::Double: {
        double d = v.to_double();
        uint64_t u;
        std::memcpy(&u, &d, 8);
        char buf[17];
        std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(u));
        return {{"kind", "float"}, {"value", json_double(d, style)}, {"bits_hex", buf}};
      }
      case Value::Kind::String: return {{"kind", "str"}, {"value", v.to_string()}};
      case Value::Kind::Bytes: {
        const std::string& b = v.to_string();
        return {{"kind", "bytes"}, {"hex", hex_of(reinterpret_cast<const uint8_t*>(b.data()), b.size(), false)}};
      }
      case Value::Kind::List:
      case Value::Kind::Tuple: {
        std::string kind = v.is_tuple() ? "tuple" : "list";
        if (v.type_name() == "set" || v.type_name() == "frozenset") kind = v.type_name();
        nlohmann::json items = nlohmann::json::array();
        for (const Value& x : v.items()) items.push_back(value(x, depth + 1));
        return {{"kind", kind}, {"items", std::move(items)}};
      }
      case Value::Kind::Dict: {
        const bool ordered = v.type_name() == "collections.OrderedDict";
        nlohmann::json items = nlohmann::json::array();
        for (const auto& kv : v.dict_items())
          items.push_back(nlohmann::json::array({value(kv.first, depth + 1), value(kv.second, depth + 1)}));
        nlohmann::json d = {{"kind", ordered ? "OrderedDict" : "dict"}, {"items", std::move(items)}};
        if (const Value* st = state_of(v))
          for (const auto& kv : st->dict_items()) d["attr_" + kv.first.to_string()] = value(kv.second, depth + 1);
        return d;
      }
      case Value::Kind::Tensor: break;  // handled above
      case Value::Kind::Object: return {{"kind", v.python_type()}};
    }
    return nullptr;
  }
};

/// The path of a dict key in list_tensors: a str as itself, an int (or bool) as its
/// decimal digits, anything else as "<type>".
inline std::string key_segment(const Value& k) {
  if (k.is_string()) return k.to_string();
  if (k.is_int() || k.is_bool()) return std::to_string(k.to_int());
  return "<" + k.python_type() + ">";
}

struct TensorLister {
  std::map<const Storage*, int> storage_ids;
  std::unordered_set<const void*> walked;  // containers already walked
  std::vector<std::string> path;
  nlohmann::json tensors = nlohmann::json::array();
  uint64_t total_storage_bytes = 0;

  std::string key() const {
    std::string k;
    for (size_t i = 0; i < path.size(); ++i) k += (i ? "." : "") + path[i];
    return k;
  }

  void walk(const Value& v, int depth) {
    check_depth(depth);
    if (pt::is_tensor_like(v)) {
      const Tensor& t = pt::tensor_of(v);
      auto [it, fresh] = storage_ids.emplace(t.storage().get(), static_cast<int>(storage_ids.size()));
      if (fresh) total_storage_bytes += t.storage()->nbytes();
      tensors.push_back({{"key", key()},
                         {"dtype", dtype_name(t.dtype())},
                         {"shape", t.sizes().vec()},
                         {"bytes", static_cast<uint64_t>(t.numel()) * t.element_size()},
                         {"storage_id", it->second}});
      return;
    }
    if (const void* id = identity_of(v))
      if (!walked.insert(id).second) return;  // met before: its tensors are listed under the first key
    if (v.is_sequence()) {
      for (size_t i = 0; i < v.items().size(); ++i) {
        path.push_back(std::to_string(i));
        walk(v.items()[i], depth + 1);
        path.pop_back();
      }
    } else if (v.is_dict()) {
      for (const auto& kv : v.dict_items()) {
        path.push_back(key_segment(kv.first));
        walk(kv.second, depth + 1);
        path.pop_back();
      }
    }
  }
};

}  // namespace detail

/// The manifest-style description of `v` (`archive`, when given, supplies OrderedDict
/// attributes).  Storage ids are numbered across the whole call.
inline nlohmann::json describe_value(const Value& v, const pt::Archive* archive, const JsonStyle& style,
                                     int* num_distinct_storages = nullptr) {
  detail::Describer d(archive, style);
  d.count(v, 0);
  nlohmann::json j = d.value(v, 0);
  if (num_distinct_storages) *num_distinct_storages = static_cast<int>(d.storage_ids.size());
  return j;
}

/// The tensors reached in `v`, without reading their data: {"num_tensors",
/// "num_distinct_storages", "total_storage_bytes", "tensors": [{key, dtype, shape, bytes
/// (numel * element size), storage_id}, ...]} in first-seen order.  `key` is the path,
/// dict keys and list indices joined by '.' ("layer1.0.weight"); "" for a tensor at the
/// top.  A tensor is listed at every place it is reached (tied weights under each key,
/// with one storage_id), except that a container met again (the same object through
/// the pickle memo) is not walked again: its tensors are listed once, under the first key.
inline nlohmann::json list_tensors(const Value& v) {
  detail::TensorLister l;
  l.walk(v, 0);
  return {{"num_tensors", l.tensors.size()},
          {"num_distinct_storages", l.storage_ids.size()},
          {"total_storage_bytes", l.total_storage_bytes},
          {"tensors", std::move(l.tensors)}};
}

}  // namespace loader::tool
