// JSON description of a loaded `.pt` file in the layout of golden/pt_manifest.json,
// shared by `loader pt dump` and the tests (header-only: it needs nlohmann/json,
// which loader_core does not link).
//
//   loader::pt::Archive a = loader::pt::load_archive("x.pt");
//   nlohmann::json j = loader::tool::describe_pt(a, {});
//   std::cout << j.dump(2);
//
// A tensor becomes {"kind": "tensor"|"parameter", dtype, shape, stride,
// storage_offset, storage_numel, is_contiguous, requires_grad, values (row-major,
// nested by shape; complex as [re, im]), values_bits_hex (floating dtypes: each
// element's little-endian bits as hex), storage_sha256, storage_bytes_hex (null above
// 512 bytes), storage_id (distinct storages numbered in first-seen order)}.
// Non-finite floats are strings: "NaN", "Infinity", "-Infinity" (JsonStyle::python_repr
// gives the manifest's "nan", "inf", "-inf").
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "loader/serialization/pt.h"
#include "loader/serialization/sha256.h"

namespace loader::tool {

struct JsonStyle {
  /// Non-finite floats as Python's repr ("nan", "inf", "-inf") instead of "NaN", ...
  bool python_repr = false;
  /// Leave out "values"/"values_bits_hex" of tensors with more elements (-1: no limit).
  int64_t max_values = -1;
};

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

struct TensorWalk {
  const Tensor& t;
  const uint8_t* base;
  size_t es;
  const JsonStyle& style;
  nlohmann::json* bits;  // null: no bits

  nlohmann::json walk(size_t dim, int64_t offset) {
    if (dim == static_cast<size_t>(t.dim())) {
      const uint8_t* p = base + static_cast<size_t>(offset) * es;
      if (bits) bits->push_back(hex_of(p, es, true));
      return element_json(p, t.dtype(), style);
    }
    nlohmann::json arr = nlohmann::json::array();
    for (int64_t i = 0; i < t.sizes()[dim]; ++i) arr.push_back(walk(dim + 1, offset + i * t.strides()[dim]));
    return arr;
  }
};

struct Describer {
  const pt::Archive* archive;
  JsonStyle style;
  std::map<const Storage*, int> storage_ids;

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
      TensorWalk w{t, static_cast<const uint8_t*>(st.data()), es, style, floating ? &bits : nullptr};
      e["values"] = w.walk(0, t.storage_offset());
      if (floating) e["values_bits_hex"] = bits;
    } else {
      e["values_omitted"] = true;
    }
    const auto* bytes = static_cast<const uint8_t*>(st.data());
    const size_t nbytes = st.nbytes() / es * es;
    e["storage_sha256"] = pt::sha256_hex(bytes, nbytes);
    e["storage_bytes_hex"] = nbytes <= 512 ? nlohmann::json(hex_of(bytes, nbytes, false)) : nlohmann::json(nullptr);
    e["kind"] = kind;
    auto it = storage_ids.emplace(&st, static_cast<int>(storage_ids.size())).first;
    e["storage_id"] = it->second;
    return e;
  }

  nlohmann::json value(const Value& v) {
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
        for (const Value& x : v.items()) items.push_back(value(x));
        return {{"kind", kind}, {"items", items}};
      }
      case Value::Kind::Dict: {
        const bool ordered = v.type_name() == "collections.OrderedDict";
        nlohmann::json items = nlohmann::json::array();
        for (const auto& kv : v.dict_items()) items.push_back(nlohmann::json::array({value(kv.first), value(kv.second)}));
        nlohmann::json d = {{"kind", ordered ? "OrderedDict" : "dict"}, {"items", items}};
        if (archive) {
          Value st = archive->state_of(v);
          if (st.is_dict())
            for (const auto& kv : st.dict_items()) d["attr_" + kv.first.to_string()] = value(kv.second);
        }
        return d;
      }
      case Value::Kind::Tensor: break;  // handled above
      case Value::Kind::Object: return {{"kind", v.python_type()}};
    }
    return nullptr;
  }
};

}  // namespace detail

/// The manifest-style description of `v` (`archive`, when given, supplies OrderedDict
/// attributes).  Storage ids are numbered across the whole call.
inline nlohmann::json describe_value(const Value& v, const pt::Archive* archive, const JsonStyle& style,
                                     int* num_distinct_storages = nullptr) {
  detail::Describer d{archive, style, {}};
  nlohmann::json j = d.value(v);
  if (num_distinct_storages) *num_distinct_storages = static_cast<int>(d.storage_ids.size());
  return j;
}

}  // namespace loader::tool
