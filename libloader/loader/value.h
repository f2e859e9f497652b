// A sample or a batch: a nested structure of tensors, numbers, strings, lists,
// tuples and maps, as Python objects are in torch.utils.data.
//
// Containers have reference semantics (copying a Value shares the list, as
// Python does); scalars and tensors are held inline.  Dict keeps insertion
// order; keys are usually strings (samples) but may be any Value (.pt files).
//
//   loader::Value sample = loader::Value::tuple({features, loader::Value(int64_t{3})});
//   loader::Value rec = loader::Value::dict({{"image", img}, {"label", 7}});
//   rec.at("label").to_int();   // 7
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loader/tensor.h"

namespace loader {

class Value;

/// A user type carried inside a Value (PyTorch's custom batch objects).  Subclass it
/// to give a batch its own `pin_memory()` hook (see SimpleCustomBatch in the docs).
class CustomObject {
 public:
  virtual ~CustomObject() = default;
  virtual std::string type_name() const = 0;
  /// Returns a pinned version of this object (default: itself, unchanged).
  virtual std::shared_ptr<CustomObject> pin_memory() { return nullptr; }
  /// Tensors this object holds, in a fixed order (for checksums and transfers).
  virtual std::vector<Tensor> tensors() const { return {}; }
};

class Value {
 public:
  enum class Kind : uint8_t { None, Bool, Int, Double, String, Bytes, Tensor, List, Tuple, Dict, Object };

  struct Seq {
    std::vector<Value> items;
    std::string type_name;  ///< "" for plain list/tuple; a namedtuple's or subclass's name otherwise
    std::vector<std::string> field_names;  ///< namedtuple fields (empty otherwise)
  };
  struct Map {
    std::vector<std::pair<Value, Value>> items;
    std::string type_name;  ///< "" for dict; "collections.OrderedDict" or a subclass name
  };

  Value() noexcept : kind_(Kind::None) {}
  Value(std::nullptr_t) noexcept : kind_(Kind::None) {}       // NOLINT
  Value(bool b) noexcept : kind_(Kind::Bool) { u_.b = b; }    // NOLINT
  Value(int v) noexcept : kind_(Kind::Int) { u_.i = v; }      // NOLINT
  Value(long v) noexcept : kind_(Kind::Int) { u_.i = v; }     // NOLINT
  Value(long long v) noexcept : kind_(Kind::Int) { u_.i = v; }  // NOLINT
  Value(unsigned v) noexcept : kind_(Kind::Int) { u_.i = v; }   // NOLINT
  Value(double v) noexcept : kind_(Kind::Double) { u_.d = v; }  // NOLINT
  Value(float v) noexcept : kind_(Kind::Double) { u_.d = v; }   // NOLINT
  Value(std::string s) : kind_(Kind::String), str_(std::move(s)) {}  // NOLINT
  Value(const char* s) : kind_(Kind::String), str_(s) {}              // NOLINT
  Value(Tensor t) : kind_(Kind::Tensor), tensor_(std::move(t)) {}     // NOLINT

  static Value bytes(std::string b);
  static Value list(std::vector<Value> items = {}, std::string type_name = "");
  static Value tuple(std::vector<Value> items = {}, std::string type_name = "");
  static Value namedtuple(std::string type_name, std::vector<std::string> fields, std::vector<Value> items);
  /// String-keyed map in the given order.
  static Value dict(std::initializer_list<std::pair<std::string, Value>> items);
  static Value dict(std::vector<std::pair<Value, Value>> items = {}, std::string type_name = "");
  static Value object(std::shared_ptr<CustomObject> obj);

  Kind kind() const noexcept { return kind_; }
  const char* kind_name() const noexcept;
  /// A Python-like type name for messages: "int", "float", "str", "Tensor", "list", ...
  std::string python_type() const;
  bool is_none() const noexcept { return kind_ == Kind::None; }
  bool is_bool() const noexcept { return kind_ == Kind::Bool; }
  bool is_int() const noexcept { return kind_ == Kind::Int; }
  bool is_double() const noexcept { return kind_ == Kind::Double; }
  bool is_number() const noexcept { return kind_ == Kind::Int || kind_ == Kind::Double || kind_ == Kind::Bool; }
  bool is_string() const noexcept { return kind_ == Kind::String; }
  bool is_bytes() const noexcept { return kind_ == Kind::Bytes; }
  bool is_tensor() const noexcept { return kind_ == Kind::Tensor; }
  bool is_list() const noexcept { return kind_ == Kind::List; }
  bool is_tuple() const noexcept { return kind_ == Kind::Tuple; }
  bool is_sequence() const noexcept { return kind_ == Kind::List || kind_ == Kind::Tuple; }
  bool is_dict() const noexcept { return kind_ == Kind::Dict; }
  bool is_object() const noexcept { return kind_ == Kind::Object; }

  // Accessors throw TypeError naming the actual kind when it does not match.
  bool to_bool() const;
  int64_t to_int() const;      ///< Int or Bool
  double to_double() const;    ///< Double, Int or Bool
  const std::string& to_string() const;  ///< String or Bytes
  const Tensor& to_tensor() const;
  Tensor& to_tensor();
  const std::shared_ptr<CustomObject>& to_object() const;

  /// List/tuple elements, or dict size for maps.
  size_t size() const;
  const std::vector<Value>& items() const;
  std::vector<Value>& items();
  const Value& operator[](size_t i) const;
  const std::vector<std::pair<Value, Value>>& dict_items() const;
  std::vector<std::pair<Value, Value>>& dict_items();
  bool contains(const std::string& key) const;
  /// Dict lookup by string key; KeyError when absent.
  const Value& at(const std::string& key) const;
  /// Dict lookup with a default.
  Value get(const std::string& key, Value fallback) const;
  /// Adds or replaces a key (dicts only).
  void set(Value key, Value v);
  void push_back(Value v);  ///< lists only
  const std::string& type_name() const;  ///< container type name ("" for plain)
  const std::vector<std::string>& field_names() const;  ///< namedtuple fields

  /// Deep equality (tensors by Tensor::equal; containers by kind, type name and items).
  bool operator==(const Value& o) const;
  bool operator!=(const Value& o) const { return !(*this == o); }
  /// Python-like text, e.g. "[tensor([1, 2], dtype=int64, shape=[2]), 'a']".
  std::string repr() const;

  /// Calls fn on every tensor in structure order (depth first, dict in insertion order).
  void for_each_tensor(const std::function<void(const Tensor&)>& fn) const;
  /// Rebuilds the structure with each tensor replaced by fn(tensor).
  Value map_tensors(const std::function<Tensor(const Tensor&)>& fn) const;

 private:
  Kind kind_;
  union {
    bool b;
    int64_t i;
    double d;
  } u_{};
  std::string str_;
  Tensor tensor_;
  std::shared_ptr<Seq> seq_;
  std::shared_ptr<Map> map_;
  std::shared_ptr<CustomObject> obj_;
};

// ------------------------------------------------------------------ binary encoding
/// How tensors are written by encode_value: inline bytes (default), or as a
/// reference the codec resolves (the runtime writes shared-memory descriptors).
class TensorCodec {
 public:
  virtual ~TensorCodec() = default;
  /// Writes `t` to `out`; returns false to fall back to inline bytes.
  virtual bool encode(const Tensor& t, std::string& out) = 0;
  /// Reads a tensor written by encode() at `p` (advancing it, never past `end`).
  virtual Tensor decode(const char*& p, const char* end) = 0;
};

/// Appends a self-describing binary encoding of `v` to `out`.
void encode_value(const Value& v, std::string& out, TensorCodec* codec = nullptr);
/// Decodes one value; throws ValueError naming the offset on malformed input.
Value decode_value(const char* data, size_t size, TensorCodec* codec = nullptr);
inline Value decode_value(const std::string& s, TensorCodec* codec = nullptr) {
  return decode_value(s.data(), s.size(), codec);
}

// Little helpers for the binary codecs of the runtime.
void put_u64(std::string& out, uint64_t v);
uint64_t get_u64(const char*& p, const char* end);

}  // namespace loader
