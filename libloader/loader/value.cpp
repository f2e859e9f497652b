#include "loader/value.h"

#include <cmath>
#include <cstring>
#include <sstream>

namespace loader {

Value Value::bytes(std::string b) {
  Value v;
  v.kind_ = Kind::Bytes;
  v.str_ = std::move(b);
  return v;
}

Value Value::list(std::vector<Value> items, std::string type_name) {
  Value v;
  v.kind_ = Kind::List;
  v.seq_ = std::make_shared<Seq>(Seq{std::move(items), std::move(type_name), {}});
  return v;
}

Value Value::tuple(std::vector<Value> items, std::string type_name) {
  Value v = list(std::move(items), std::move(type_name));
  v.kind_ = Kind::Tuple;
  return v;
}

Value Value::namedtuple(std::string type_name, std::vector<std::string> fields, std::vector<Value> items) {
  if (fields.size() != items.size())
    throw ValueError("namedtuple " + type_name + ": " + std::to_string(fields.size()) +
                     " field names for " + std::to_string(items.size()) + " values");
  Value v = tuple(std::move(items), std::move(type_name));
  v.seq_->field_names = std::move(fields);
  return v;
}

Value Value::dict(std::initializer_list<std::pair<std::string, Value>> items) {
  std::vector<std::pair<Value, Value>> kv;
  kv.reserve(items.size());
  for (const auto& [k, val] : items) kv.emplace_back(Value(k), val);
  return dict(std::move(kv));
}

Value Value::dict(std::vector<std::pair<Value, Value>> items, std::string type_name) {
  Value v;
  v.kind_ = Kind::Dict;
  v.map_ = std::make_shared<Map>(Map{std::move(items), std::move(type_name)});
  return v;
}

Value Value::object(std::shared_ptr<CustomObject> obj) {
  if (!obj) throw ValueError("Value::object: null object");
  Value v;
  v.kind_ = Kind::Object;
  v.obj_ = std::move(obj);
  return v;
}

const char* Value::kind_name() const noexcept {
  switch (kind_) {
    case Kind::None: return "None";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Double: return "float";
    case Kind::String: return "str";
    case Kind::Bytes: return "bytes";
    case Kind::Tensor: return "Tensor";
    case Kind::List: return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Dict: return "dict";
    case Kind::Object: return "object";
  }
  return "?";
}

std::string Value::python_type() const {
  if ((is_sequence() || is_dict()) && !type_name().empty()) return type_name();
  if (is_object()) return obj_->type_name();
  return kind_name();
}

static TypeError kind_error(const char* wanted, const Value& v) {
  return TypeError(std::string("expected ") + wanted + ", got " + v.python_type());
}

bool Value::to_bool() const {
  if (kind_ != Kind::Bool) throw kind_error("bool", *this);
  return u_.b;
}

int64_t Value::to_int() const {
  if (kind_ == Kind::Int) return u_.i;
  if (kind_ == Kind::Bool) return u_.b ? 1 : 0;
  throw kind_error("int", *this);
}

double Value::to_double() const {
  if (kind_ == Kind::Double) return u_.d;
  if (kind_ == Kind::Int) return static_cast<double>(u_.i);
  if (kind_ == Kind::Bool) return u_.b ? 1.0 : 0.0;
  throw kind_error("float", *this);
}

const std::string& Value::to_string() const {
  if (kind_ != Kind::String && kind_ != Kind::Bytes) throw kind_error("str", *this);
  return str_;
}

const Tensor& Value::to_tensor() const {
  if (kind_ != Kind::Tensor) throw kind_error("Tensor", *this);
  return tensor_;
}

Tensor& Value::to_tensor() {
  if (kind_ != Kind::Tensor) throw kind_error("Tensor", *this);
  return tensor_;
}

const std::shared_ptr<CustomObject>& Value::to_object() const {
  if (kind_ != Kind::Object) throw kind_error("object", *this);
  return obj_;
}

size_t Value::size() const {
  if (is_sequence()) return seq_->items.size();
  if (is_dict()) return map_->items.size();
  if (is_string() || is_bytes()) return str_.size();
  throw kind_error("a container", *this);
}

const std::vector<Value>& Value::items() const {
  if (!is_sequence()) throw kind_error("list or tuple", *this);
  return seq_->items;
}

std::vector<Value>& Value::items() {
  if (!is_sequence()) throw kind_error("list or tuple", *this);
  return seq_->items;
}

const Value& Value::operator[](size_t i) const {
  const auto& it = items();
  if (i >= it.size())
    throw IndexError(std::string(kind_name()) + " index out of range (" + std::to_string(i) +
                     " of " + std::to_string(it.size()) + ")");
  return it[i];
}

const std::vector<std::pair<Value, Value>>& Value::dict_items() const {
  if (!is_dict()) throw kind_error("dict", *this);
  return map_->items;
}

std::vector<std::pair<Value, Value>>& Value::dict_items() {
  if (!is_dict()) throw kind_error("dict", *this);
  return map_->items;
}

bool Value::contains(const std::string& key) const {
  for (const auto& kv : dict_items())
    if (kv.first.is_string() && kv.first.str_ == key) return true;
  return false;
}

const Value& Value::at(const std::string& key) const {
  for (const auto& kv : dict_items())
    if (kv.first.is_string() && kv.first.str_ == key) return kv.second;
  throw KeyError("'" + key + "'");
}

Value Value::get(const std::string& key, Value fallback) const {
  for (const auto& kv : dict_items())
    if (kv.first.is_string() && kv.first.str_ == key) return kv.second;
  return fallback;
}

void Value::set(Value key, Value v) {
  auto& items = dict_items();
  for (auto& kv : items)
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  items.emplace_back(std::move(key), std::move(v));
}

void Value::push_back(Value v) {
  if (kind_ != Kind::List) throw kind_error("list", *this);
  seq_->items.push_back(std::move(v));
}

const std::string& Value::type_name() const {
  static const std::string empty;
  if (is_sequence()) return seq_->type_name;
  if (is_dict()) return map_->type_name;
  return empty;
}

const std::vector<std::string>& Value::field_names() const {
  static const std::vector<std::string> empty;
  return is_sequence() ? seq_->field_names : empty;
}

bool Value::operator==(const Value& o) const {
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::None: return true;
    case Kind::Bool: return u_.b == o.u_.b;
    case Kind::Int: return u_.i == o.u_.i;
    case Kind::Double: return u_.d == o.u_.d || (std::isnan(u_.d) && std::isnan(o.u_.d));
    case Kind::String:
    case Kind::Bytes: return str_ == o.str_;
    case Kind::Tensor: return tensor_.equal(o.tensor_);
    case Kind::List:
    case Kind::Tuple:
      return seq_ == o.seq_ || (seq_->type_name == o.seq_->type_name && seq_->items == o.seq_->items);
    case Kind::Dict:
      return map_ == o.map_ || (map_->type_name == o.map_->type_name && map_->items == o.map_->items);
    case Kind::Object: return obj_ == o.obj_;
  }
  return false;
}

static void repr_to(const Value& v, std::ostringstream& os) {
  switch (v.kind()) {
    case Value::Kind::None: os << "None"; break;
    case Value::Kind::Bool: os << (v.to_bool() ? "True" : "False"); break;
    case Value::Kind::Int: os << v.to_int(); break;
    case Value::Kind::Double: os << v.to_double(); break;
    case Value::Kind::String: os << "'" << v.to_string() << "'"; break;
    case Value::Kind::Bytes: os << "b'<" << v.to_string().size() << " bytes>'"; break;
    case Value::Kind::Tensor: os << v.to_tensor().repr(); break;
    case Value::Kind::List:
    case Value::Kind::Tuple: {
      bool tuple = v.is_tuple();
      if (!v.type_name().empty()) os << v.type_name();
      os << (tuple ? "(" : "[");
      const auto& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) os << ", ";
        if (i < v.field_names().size()) os << v.field_names()[i] << "=";
        repr_to(items[i], os);
      }
      if (tuple && items.size() == 1) os << ",";
      os << (tuple ? ")" : "]");
      break;
    }
    case Value::Kind::Dict: {
      if (!v.type_name().empty()) os << v.type_name() << "(";
      os << "{";
      bool first = true;
      for (const auto& [k, val] : v.dict_items()) {
        if (!first) os << ", ";
        first = false;
        repr_to(k, os);
        os << ": ";
        repr_to(val, os);
      }
      os << "}";
      if (!v.type_name().empty()) os << ")";
      break;
    }
    case Value::Kind::Object: os << "<" << v.to_object()->type_name() << ">"; break;
  }
}

std::string Value::repr() const {
  std::ostringstream os;
  repr_to(*this, os);
  return os.str();
}

void Value::for_each_tensor(const std::function<void(const Tensor&)>& fn) const {
  switch (kind_) {
    case Kind::Tensor: fn(tensor_); break;
    case Kind::List:
    case Kind::Tuple:
      for (const auto& x : seq_->items) x.for_each_tensor(fn);
      break;
    case Kind::Dict:
      for (const auto& kv : map_->items) kv.second.for_each_tensor(fn);
      break;
    case Kind::Object:
      for (const auto& t : obj_->tensors()) fn(t);
      break;
    default: break;
  }
}

Value Value::map_tensors(const std::function<Tensor(const Tensor&)>& fn) const {
  switch (kind_) {
    case Kind::Tensor: return Value(fn(tensor_));
    case Kind::List:
    case Kind::Tuple: {
      std::vector<Value> out;
      out.reserve(seq_->items.size());
      for (const auto& x : seq_->items) out.push_back(x.map_tensors(fn));
      Value r = list(std::move(out), seq_->type_name);
      r.kind_ = kind_;
      r.seq_->field_names = seq_->field_names;
      return r;
    }
    case Kind::Dict: {
      std::vector<std::pair<Value, Value>> out;
      out.reserve(map_->items.size());
      for (const auto& kv : map_->items) out.emplace_back(kv.first, kv.second.map_tensors(fn));
      return dict(std::move(out), map_->type_name);
    }
    default: return *this;
  }
}

// ------------------------------------------------------------------ binary encoding
void put_u64(std::string& out, uint64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);
  out.append(b, 8);
}

uint64_t get_u64(const char*& p, const char* end) {
  if (end - p < 8) throw ValueError("decode_value: truncated input (need 8 bytes)");
  uint64_t v;
  std::memcpy(&v, p, 8);
  p += 8;
  return v;
}

namespace {
enum Tag : uint8_t { kNone, kBool, kInt, kDouble, kString, kBytes, kTensorInline, kTensorCodec, kList, kTuple, kDict };

void put_str(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out.append(s);
}

std::string get_str(const char*& p, const char* end) {
  uint64_t n = get_u64(p, end);
  if (static_cast<uint64_t>(end - p) < n) throw ValueError("decode_value: truncated string");
  std::string s(p, n);
  p += n;
  return s;
}

void put_dims(std::string& out, const Dims& d) {
  put_u64(out, d.size());
  for (int64_t x : d) put_u64(out, static_cast<uint64_t>(x));
}

Dims get_dims(const char*& p, const char* end) {
  uint64_t n = get_u64(p, end);
  if (n > 64) throw ValueError("decode_value: tensor with " + std::to_string(n) + " dimensions");
  std::vector<int64_t> d(n);
  for (auto& x : d) x = static_cast<int64_t>(get_u64(p, end));
  return Dims(d);
}

void encode(const Value& v, std::string& out, TensorCodec* codec) {
  switch (v.kind()) {
    case Value::Kind::None: out.push_back(static_cast<char>(kNone)); break;
    case Value::Kind::Bool:
      out.push_back(static_cast<char>(kBool));
      out.push_back(v.to_bool() ? 1 : 0);
      break;
    case Value::Kind::Int:
      out.push_back(static_cast<char>(kInt));
      put_u64(out, static_cast<uint64_t>(v.to_int()));
      break;
    case Value::Kind::Double: {
      out.push_back(static_cast<char>(kDouble));
      double d = v.to_double();
      uint64_t bits;
      std::memcpy(&bits, &d, 8);
      put_u64(out, bits);
      break;
    }
    case Value::Kind::String:
    case Value::Kind::Bytes:
      out.push_back(static_cast<char>(v.is_string() ? kString : kBytes));
      put_str(out, v.to_string());
      break;
    case Value::Kind::Tensor: {
      const Tensor& t = v.to_tensor();
      if (codec) {
        size_t mark = out.size();
        out.push_back(static_cast<char>(kTensorCodec));
        if (codec->encode(t, out)) break;
        out.resize(mark);
      }
      out.push_back(static_cast<char>(kTensorInline));
      out.push_back(static_cast<char>(t.dtype()));
      put_dims(out, t.sizes());
      size_t at = out.size();
      out.resize(at + t.nbytes());
      copy_to_contiguous(t, &out[at]);
      break;
    }
    case Value::Kind::List:
    case Value::Kind::Tuple:
      out.push_back(static_cast<char>(v.is_list() ? kList : kTuple));
      put_str(out, v.type_name());
      put_u64(out, v.field_names().size());
      for (const auto& f : v.field_names()) put_str(out, f);
      put_u64(out, v.items().size());
      for (const auto& x : v.items()) encode(x, out, codec);
      break;
    case Value::Kind::Dict:
      out.push_back(static_cast<char>(kDict));
      put_str(out, v.type_name());
      put_u64(out, v.dict_items().size());
      for (const auto& [k, x] : v.dict_items()) {
        encode(k, out, codec);
        encode(x, out, codec);
      }
      break;
    case Value::Kind::Object:
      throw TypeError("cannot send a custom object (" + v.to_object()->type_name() +
                      ") between processes; return tensors, numbers, strings, lists or dicts from "
                      "the worker and build the object in the main process");
  }
}

Value decode(const char*& p, const char* end, TensorCodec* codec, int depth) {
  if (depth > 256) throw ValueError("decode_value: nesting deeper than 256");
  if (p >= end) throw ValueError("decode_value: truncated input");
  auto tag = static_cast<uint8_t>(*p++);
  switch (tag) {
    case kNone: return Value();
    case kBool:
      if (p >= end) throw ValueError("decode_value: truncated bool");
      return Value(*p++ != 0);
    case kInt: return Value(static_cast<int64_t>(get_u64(p, end)));
    case kDouble: {
      uint64_t bits = get_u64(p, end);
      double d;
      std::memcpy(&d, &bits, 8);
      return Value(d);
    }
    case kString: return Value(get_str(p, end));
    case kBytes: return Value::bytes(get_str(p, end));
    case kTensorCodec:
      if (!codec) throw ValueError("decode_value: tensor reference without a codec");
      return Value(codec->decode(p, end));
    case kTensorInline: {
      if (p >= end) throw ValueError("decode_value: truncated tensor");
      auto dt = static_cast<uint8_t>(*p++);
      if (dt >= kNumDTypes) throw ValueError("decode_value: bad dtype " + std::to_string(dt));
      Dims sizes = get_dims(p, end);
      // The data must be there before anything is allocated for it: sizes that claim
      // more than the input holds (or overflow) are refused as they are read.
      // (A zero size makes no data, but the other sizes must still be ones the tensor's
      // shape arithmetic can hold.)
      const uint64_t left = static_cast<uint64_t>(end - p);
      constexpr uint64_t kMaxElements = uint64_t{1} << 48;
      uint64_t nonzero = 1;
      bool empty = false;
      for (int64_t s : sizes) {
        if (s < 0) throw ValueError("decode_value: negative tensor size");
        if (s == 0) {
          empty = true;
          continue;
        }
        if (nonzero > kMaxElements / static_cast<uint64_t>(s)) throw ValueError("decode_value: tensor sizes too large");
        nonzero *= static_cast<uint64_t>(s);
      }
      if (!empty && nonzero > left / element_size(static_cast<DType>(dt)))
        throw ValueError("decode_value: truncated tensor data");
      Tensor t = Tensor::empty(sizes, static_cast<DType>(dt));
      if (static_cast<size_t>(end - p) < t.nbytes()) throw ValueError("decode_value: truncated tensor data");
      if (t.nbytes()) std::memcpy(t.data_ptr(), p, t.nbytes());
      p += t.nbytes();
      return Value(std::move(t));
    }
    case kList:
    case kTuple: {
      std::string type = get_str(p, end);
      uint64_t nf = get_u64(p, end);
      if (nf > static_cast<uint64_t>(end - p)) throw ValueError("decode_value: bad field count");
      std::vector<std::string> fields(nf);
      for (auto& f : fields) f = get_str(p, end);
      uint64_t n = get_u64(p, end);
      if (n > static_cast<uint64_t>(end - p)) throw ValueError("decode_value: bad item count");
      std::vector<Value> items;
      items.reserve(n);
      for (uint64_t i = 0; i < n; ++i) items.push_back(decode(p, end, codec, depth + 1));
      if (tag == kList) return Value::list(std::move(items), std::move(type));
      if (!fields.empty()) return Value::namedtuple(std::move(type), std::move(fields), std::move(items));
      return Value::tuple(std::move(items), std::move(type));
    }
    case kDict: {
      std::string type = get_str(p, end);
      uint64_t n = get_u64(p, end);
      if (n > static_cast<uint64_t>(end - p)) throw ValueError("decode_value: bad dict size");
      std::vector<std::pair<Value, Value>> items;
      items.reserve(n);
      for (uint64_t i = 0; i < n; ++i) {
        Value k = decode(p, end, codec, depth + 1);
        Value x = decode(p, end, codec, depth + 1);
        items.emplace_back(std::move(k), std::move(x));
      }
      return Value::dict(std::move(items), std::move(type));
    }
    default: throw ValueError("decode_value: unknown tag " + std::to_string(tag));
  }
}
}  // namespace

void encode_value(const Value& v, std::string& out, TensorCodec* codec) { encode(v, out, codec); }

Value decode_value(const char* data, size_t size, TensorCodec* codec) {
  const char* p = data;
  const char* end = data + size;
  try {
    Value v = decode(p, end, codec, 0);
    if (p != end) throw ValueError("decode_value: " + std::to_string(end - p) + " trailing bytes");
    return v;
  } catch (const ValueError& e) {
    throw ValueError(std::string(e.what()) + " (at byte offset " + std::to_string(p - data) + ")");
  }
}

}  // namespace loader
