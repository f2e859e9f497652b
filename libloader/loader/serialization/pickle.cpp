#include "loader/serialization/pickle.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <unordered_set>

namespace loader::pt {

namespace {

const char* opcode_name(uint8_t c) {
  switch (c) {
    case '(': return "MARK";
    case '.': return "STOP";
    case '0': return "POP";
    case '1': return "POP_MARK";
    case '2': return "DUP";
    case 'F': return "FLOAT";
    case 'I': return "INT";
    case 'J': return "BININT";
    case 'K': return "BININT1";
    case 'L': return "LONG";
    case 'M': return "BININT2";
    case 'N': return "NONE";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 'R': return "REDUCE";
    case 'S': return "STRING";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE";
    case 'X': return "BINUNICODE";
    case 'a': return "APPEND";
    case 'b': return "BUILD";
    case 'c': return "GLOBAL";
    case 'd': return "DICT";
    case '}': return "EMPTY_DICT";
    case 'e': return "APPENDS";
    case 'g': return "GET";
    case 'h': return "BINGET";
    case 'i': return "INST";
    case 'j': return "LONG_BINGET";
    case 'l': return "LIST";
    case ']': return "EMPTY_LIST";
    case 'o': return "OBJ";
    case 'p': return "PUT";
    case 'q': return "BINPUT";
    case 'r': return "LONG_BINPUT";
    case 's': return "SETITEM";
    case 't': return "TUPLE";
    case ')': return "EMPTY_TUPLE";
    case 'u': return "SETITEMS";
    case 'G': return "BINFLOAT";
    case 0x80: return "PROTO";
    case 0x81: return "NEWOBJ";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x85: return "TUPLE1";
    case 0x86: return "TUPLE2";
    case 0x87: return "TUPLE3";
    case 0x88: return "NEWTRUE";
    case 0x89: return "NEWFALSE";
    case 0x8a: return "LONG1";
    case 0x8b: return "LONG4";
    case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES";
    case 0x8c: return "SHORT_BINUNICODE";
    case 0x8d: return "BINUNICODE8";
    case 0x8e: return "BINBYTES8";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x92: return "NEWOBJ_EX";
    case 0x93: return "STACK_GLOBAL";
    case 0x94: return "MEMOIZE";
    case 0x95: return "FRAME";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

bool is_container(const Value& v) { return v.is_sequence() || v.is_dict(); }

const void* identity(const Value& v) {
  if (v.is_sequence()) return &v.items();
  return &v.dict_items();
}

bool is_set(const Value& v) {
  return v.is_list() && (v.type_name() == "set" || v.type_name() == "frozenset");
}

class Unpickler {
 public:
  Unpickler(const uint8_t* data, size_t size, size_t start, PickleHooks& hooks, const std::string& where,
            const UnpicklerLimits& limits)
      : data_(data), size_(size), hooks_(hooks), where_(where), limits_(limits), pos_(start), op_pos_(start) {}

  ~Unpickler() {
    if (!committed_) dismantle();
  }

  Value run() {
    Value result = loop();
    const size_t end = pos_;
    check_structure(result);
    committed_ = true;
    pos_ = end;
    return result;
  }

  /// Offset just past the STOP opcode (after run()).
  size_t end() const { return pos_; }

 private:
  // ---------------------------------------------------------------- errors and input
  [[noreturn]] void fail(const std::string& what) const {
    std::string op;
    if (const char* n = opcode_name(opcode_)) op = std::string(" (") + n + ")";
    throw PtFormatError(where_ + " offset " + std::to_string(op_pos_) + op + ": " + what);
  }
  // The input ends before the pickle does: a truncated pickle (or, for a caller that
  // reads a file piecewise, a window too small for it).
  [[noreturn]] void fail_truncated(const std::string& what) const {
    std::string op;
    if (const char* n = opcode_name(opcode_)) op = std::string(" (") + n + ")";
    throw PickleTruncatedError(where_ + " offset " + std::to_string(op_pos_) + op + ": " + what);
  }

  const uint8_t* take(uint64_t n) {
    if (n > size_ - pos_)
      fail_truncated("needs " + std::to_string(n) + " bytes but only " + std::to_string(size_ - pos_) +
           " remain (truncated pickle)");
    const uint8_t* p = data_ + pos_;
    pos_ += static_cast<size_t>(n);
    return p;
  }
  uint8_t u8() { return *take(1); }
  uint16_t u16() {
    const uint8_t* p = take(2);
    return static_cast<uint16_t>(p[0] | (p[1] << 8));
  }
  uint32_t u32() {
    const uint8_t* p = take(4);
    return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
           (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
  }
  uint64_t u64() {
    uint64_t lo = u32();
    return lo | (static_cast<uint64_t>(u32()) << 32);
  }
  std::string line() {
    const void* nl = std::memchr(data_ + pos_, '\n', size_ - pos_);
    if (!nl) fail_truncated("line without a newline (truncated pickle)");
    size_t n = static_cast<size_t>(static_cast<const uint8_t*>(nl) - (data_ + pos_));
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n + 1;
    if (!s.empty() && s.back() == '\r') s.pop_back();
    return s;
  }
  std::string text(uint64_t n) {
    const uint8_t* p = take(n);
    return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
  }
  int64_t parse_int_line(const std::string& s) {
    std::string t = s;
    if (!t.empty() && t.back() == 'L') t.pop_back();
    if (t.empty()) fail("empty integer");
    size_t i = (t[0] == '-' || t[0] == '+') ? 1 : 0;
    if (i == t.size()) fail("malformed integer '" + s + "'");
    for (size_t k = i; k < t.size(); ++k)
      if (t[k] < '0' || t[k] > '9') fail("malformed integer '" + s + "'");
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(t.c_str(), &end, 10);
    if (errno == ERANGE) fail("integer " + s + " does not fit in 64 bits");
    return v;
  }
  int64_t decode_long(const uint8_t* p, uint64_t n) {
    if (n == 0) return 0;
    // bytes beyond the eighth must only extend the sign
    const bool negative = (p[n - 1] & 0x80) != 0;
    for (uint64_t k = 8; k < n; ++k)
      if (p[k] != (negative ? 0xFF : 0x00)) fail("integer does not fit in 64 bits");
    if (n > 8 && ((p[7] & 0x80) != 0) != negative) fail("integer does not fit in 64 bits");
    uint64_t u = 0;
    const uint64_t m = n < 8 ? n : 8;
    for (uint64_t k = 0; k < m; ++k) u |= static_cast<uint64_t>(p[k]) << (8 * k);
    if (negative && m < 8) u |= ~uint64_t{0} << (8 * m);
    int64_t v;
    std::memcpy(&v, &u, sizeof v);
    return v;
  }

  // ---------------------------------------------------------------- stack
  size_t fence() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(Value v) {
    if (is_container(v)) track(v);
    stack_.push_back(std::move(v));
  }
  Value pop() {
    if (stack_.size() <= fence()) fail("unpickling stack underflow");
    Value v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  Value& top() {
    if (stack_.size() <= fence()) fail("unpickling stack underflow");
    return stack_.back();
  }
  std::vector<Value> pop_mark() {
    if (marks_.empty()) fail("no MARK on the stack");
    size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Value> items(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(m)),
                             std::make_move_iterator(stack_.end()));
    stack_.resize(m);
    return items;
  }
  void track(const Value& v) {
    if (tracked_ids_.insert(identity(v)).second) tracked_.push_back(v);
  }

  // Hooks report problems without a location; add the record, offset and opcode.
  template <class F>
  Value hook(F&& f) {
    try {
      return f();
    } catch (const Error& e) {
      fail(e.what());
    }
  }

  // ---------------------------------------------------------------- memo
  void put(uint64_t index) {
    Value& v = top();
    memo_[index] = v;
  }
  void get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end())
      fail("memo entry " + std::to_string(index) + " was never stored (corrupt pickle)");
    push(it->second);
  }

  // ---------------------------------------------------------------- dicts and sets
  std::unordered_map<std::string, size_t>& index_of(Value& dict_or_set) {
    auto& idx = key_index_[identity(dict_or_set)];
    if (idx.empty()) {  // index what was there before (hooks may prefill)
      if (dict_or_set.is_dict()) {
        const auto& items = dict_or_set.dict_items();
        for (size_t i = 0; i < items.size(); ++i) idx.emplace(key(items[i].first), i);
      } else {
        const auto& items = dict_or_set.items();
        for (size_t i = 0; i < items.size(); ++i) idx.emplace(key(items[i]), i);
      }
    }
    return idx;
  }
  std::string key(const Value& k) {
    try {
      return dict_key_of(k);
    } catch (const PtFormatError& e) {
      fail(e.what());
    }
  }
  void set_item(Value& dict, Value k, Value v) {
    if (!dict.is_dict()) fail("SETITEM(S) target is a " + dict.python_type() + ", not a dict");
    auto& idx = index_of(dict);
    auto& items = dict.dict_items();
    auto [it, inserted] = idx.emplace(key(k), items.size());
    if (inserted) items.emplace_back(std::move(k), std::move(v));
    else items[it->second].second = std::move(v);
  }
  void add_to_set(Value& set, std::vector<Value> values) {
    auto& idx = index_of(set);
    auto& items = set.items();
    for (auto& v : values)
      if (idx.emplace(key(v), items.size()).second) items.push_back(std::move(v));
  }

  // ---------------------------------------------------------------- main loop
  Value loop() {
    while (true) {
      op_pos_ = pos_;
      if (pos_ >= size_) fail_truncated("pickle ends without STOP (truncated)");
      opcode_ = data_[pos_++];
      switch (opcode_) {
        case 0x80: {  // PROTO
          uint8_t v = u8();
          if (v > 5) fail("pickle protocol " + std::to_string(v) + " is newer than 5");
          break;
        }
        case 0x95: {  // FRAME: a length hint, nothing to do
          uint64_t n = u64();
          if (n > size_ - pos_) fail_truncated("frame of " + std::to_string(n) + " bytes runs past the end");
          break;
        }
        case '.': return pop();
        case '(': marks_.push_back(stack_.size()); break;
        case '0':
          if (stack_.size() > fence()) stack_.pop_back();
          else if (!marks_.empty()) marks_.pop_back();
          else fail("unpickling stack underflow");
          break;
        case '1': pop_mark(); break;
        case '2': push(Value(top())); break;
        case 'F': {
          std::string s = line();
          char* end = nullptr;
          double d = std::strtod(s.c_str(), &end);
          if (s.empty() || *end != '\0') fail("malformed float '" + s + "'");
          push(Value(d));
          break;
        }
        case 'I': {
          std::string s = line();
          if (s == "01") push(Value(true));
          else if (s == "00") push(Value(false));
          else push(Value(parse_int_line(s)));
          break;
        }
        case 'L': push(Value(parse_int_line(line()))); break;
        case 'J': {
          uint32_t u = u32();
          int32_t v;
          std::memcpy(&v, &u, sizeof v);
          push(Value(static_cast<int64_t>(v)));
          break;
        }
        case 'K': push(Value(static_cast<int64_t>(u8()))); break;
        case 'M': push(Value(static_cast<int64_t>(u16()))); break;
        case 0x8a: {  // LONG1
          uint8_t n = u8();
          const uint8_t* p = take(n);
          push(Value(decode_long(p, n)));
          break;
        }
        case 0x8b: {  // LONG4
          uint32_t n = u32();
          if (n > 0x7FFFFFFFu) fail("negative LONG4 length");
          const uint8_t* p = take(n);
          push(Value(decode_long(p, n)));
          break;
        }
        case 'N': push(Value()); break;
        case 0x88: push(Value(true)); break;
        case 0x89: push(Value(false)); break;
        case 'G': {
          const uint8_t* p = take(8);
          uint64_t u = 0;
          for (int k = 0; k < 8; ++k) u = (u << 8) | p[k];
          double d;
          std::memcpy(&d, &u, sizeof d);
          push(Value(d));
          break;
        }
        case 'T': {
          uint32_t n = u32();
          if (n > 0x7FFFFFFFu) fail("negative BINSTRING length");
          push(Value(text(n)));
          break;
        }
        case 'U': push(Value(text(u8()))); break;
        case 'X': push(Value(text(u32()))); break;
        case 0x8c: push(Value(text(u8()))); break;
        case 0x8d: push(Value(text(u64()))); break;
        case 'B': push(Value::bytes(text(u32()))); break;
        case 'C': push(Value::bytes(text(u8()))); break;
        case 0x8e:
        case 0x96: push(Value::bytes(text(u64()))); break;
        case ')': push(Value::tuple()); break;
        case 0x85:
        case 0x86:
        case 0x87: {
          size_t n = static_cast<size_t>(opcode_ - 0x84);
          if (stack_.size() < fence() + n) fail("unpickling stack underflow");
          std::vector<Value> items(std::make_move_iterator(stack_.end() - static_cast<std::ptrdiff_t>(n)),
                                   std::make_move_iterator(stack_.end()));
          stack_.resize(stack_.size() - n);
          push(Value::tuple(std::move(items)));
          break;
        }
        case 't': push(Value::tuple(pop_mark())); break;
        case ']': push(Value::list()); break;
        case 'l': push(Value::list(pop_mark())); break;
        case '}': push(Value::dict(std::vector<std::pair<Value, Value>>{})); break;
        case 'd': {
          std::vector<Value> items = pop_mark();
          if (items.size() % 2) fail("DICT with an odd number of items");
          Value d = Value::dict(std::vector<std::pair<Value, Value>>{});
          track(d);
          for (size_t i = 0; i < items.size(); i += 2) set_item(d, std::move(items[i]), std::move(items[i + 1]));
          push(std::move(d));
          break;
        }
        case 'a': {
          Value v = pop();
          Value& l = top();
          if (!l.is_list() || is_set(l)) fail("APPEND target is a " + l.python_type() + ", not a list");
          l.push_back(std::move(v));
          break;
        }
        case 'e': {
          std::vector<Value> items = pop_mark();
          Value& l = top();
          if (!l.is_list() || is_set(l)) fail("APPENDS target is a " + l.python_type() + ", not a list");
          auto& dst = l.items();
          for (auto& v : items) dst.push_back(std::move(v));
          break;
        }
        case 's': {
          Value v = pop();
          Value k = pop();
          set_item(top(), std::move(k), std::move(v));
          break;
        }
        case 'u': {
          std::vector<Value> items = pop_mark();
          if (items.size() % 2) fail("SETITEMS with an odd number of items");
          Value& d = top();
          for (size_t i = 0; i < items.size(); i += 2) set_item(d, std::move(items[i]), std::move(items[i + 1]));
          break;
        }
        case 0x8f: push(Value::list({}, "set")); break;
        case 0x90: {
          std::vector<Value> items = pop_mark();
          Value& s = top();
          if (!s.is_list() || s.type_name() != "set") fail("ADDITEMS target is a " + s.python_type() + ", not a set");
          add_to_set(s, std::move(items));
          break;
        }
        case 0x91: {
          std::vector<Value> items = pop_mark();
          Value s = Value::list({}, "frozenset");
          track(s);
          add_to_set(s, std::move(items));
          push(std::move(s));
          break;
        }
        case 'g': get(static_cast<uint64_t>(parse_int_line(line()))); break;
        case 'h': get(u8()); break;
        case 'j': get(u32()); break;
        case 'p': {
          int64_t i = parse_int_line(line());
          if (i < 0) fail("negative PUT index");
          put(static_cast<uint64_t>(i));
          break;
        }
        case 'q': put(u8()); break;
        case 'r': put(u32()); break;
        case 0x94: put(memo_.size()); break;
        case 'c': {
          std::string module = line();
          std::string name = line();
          push(hook([&] { return hooks_.find_class(module, name); }));
          break;
        }
        case 0x93: {
          Value name = pop();
          Value module = pop();
          if (!name.is_string() || !module.is_string()) fail("STACK_GLOBAL needs two strings");
          push(hook([&] { return hooks_.find_class(module.to_string(), name.to_string()); }));
          break;
        }
        case 'R': {
          Value args = pop();
          Value fn = pop();
          if (!args.is_tuple()) fail("REDUCE arguments are a " + args.python_type() + ", not a tuple");
          push(hook([&] { return hooks_.reduce(fn, args); }));
          break;
        }
        case 0x81: {
          Value args = pop();
          Value cls = pop();
          if (!args.is_tuple()) fail("NEWOBJ arguments are a " + args.python_type() + ", not a tuple");
          push(hook([&] { return hooks_.new_object(cls, args); }));
          break;
        }
        case 'b': {
          Value state = pop();
          Value& obj = top();
          hook([&] {
            hooks_.build(obj, state);
            return Value();
          });
          break;
        }
        case 'Q': {
          Value pid = pop();
          push(hook([&] { return hooks_.persistent_load(pid); }));
          break;
        }
        case 'P': {
          Value pid(line());
          push(hook([&] { return hooks_.persistent_load(pid); }));
          break;
        }
        case 'S':
        case 'V':
          fail("text-mode (protocol 0) string opcodes are not supported; save with torch.save, which uses protocol 2");
        case 'i':
        case 'o':
        case 0x92:
        case 0x82:
        case 0x83:
        case 0x84:
          fail("this opcode builds arbitrary Python objects and is refused by the safe loader");
        case 0x97:
        case 0x98: fail("out-of-band buffers (protocol 5) are not supported");
        default: {
          char buf[8];
          std::snprintf(buf, sizeof buf, "0x%02x", opcode_);
          fail(std::string("unknown opcode ") + buf + " (not a pickle, or corrupt)");
        }
      }
    }
  }

  // ---------------------------------------------------------------- final checks
  // Every container made while unpickling is checked: no cycles (Value holds shared
  // pointers, so a cycle would leak and make every recursive walk overflow), nesting at
  // most max_depth, and no unpickling-only objects in the result.
  void check_structure(const Value& root) {
    std::unordered_map<const void*, int> state;  // 1: on the DFS path, 2: done
    std::unordered_map<const void*, int> height;
    auto dfs = [&](const Value& start, bool check_objects) {
      struct Frame {
        const Value* v;
        size_t next;
        int height;
      };
      std::vector<Frame> path;
      state[identity(start)] = 1;
      path.push_back({&start, 0, 1});
      while (!path.empty()) {
        Frame& f = path.back();
        const Value& v = *f.v;
        const size_t n = v.is_dict() ? 2 * v.dict_items().size() : v.items().size();
        if (f.next < n) {
          const size_t i = f.next++;
          const Value& child = v.is_dict() ? (i % 2 ? v.dict_items()[i / 2].second : v.dict_items()[i / 2].first)
                                           : v.items()[i];
          if (check_objects && child.is_object()) reject_object(child);
          if (!is_container(child)) continue;
          const void* id = identity(child);
          int& s = state[id];
          if (s == 1)
            fail("a " + child.python_type() +
                 " contains itself; recursive structures are not supported");
          if (s == 2) {
            f.height = std::max(f.height, height[id] + 1);
            continue;
          }
          s = 1;
          path.push_back({&child, 0, 1});
          continue;
        }
        const void* id = identity(v);
        const int h = f.height;
        height[id] = h;
        state[id] = 2;
        if (h > limits_.max_depth)
          fail("containers nested " + std::to_string(h) + " deep, more than the limit of " +
               std::to_string(limits_.max_depth));
        path.pop_back();
        if (!path.empty()) path.back().height = std::max(path.back().height, h + 1);
      }
    };
    op_pos_ = pos_;
    opcode_ = '.';
    if (root.is_object()) reject_object(root);
    if (is_container(root)) dfs(root, true);
    for (const Value& t : tracked_)
      if (state[identity(t)] == 0) dfs(t, false);
  }

  [[noreturn]] void reject_object(const Value& v) const {
    fail("the unpickled object contains " + v.python_type() +
         ", which is not data (a class, function or bare storage); loader only loads tensors, "
         "numbers, strings, bytes and containers of them");
  }

  // Breaks every container apart so that destroying a deep or cyclic partial result
  // neither recurses deeply nor leaks.
  void dismantle() noexcept {
    for (Value& t : tracked_) {
      if (t.is_dict()) t.dict_items().clear();
      else t.items().clear();
    }
    tracked_.clear();
  }

  const uint8_t* data_;
  size_t size_;
  PickleHooks& hooks_;
  const std::string& where_;
  UnpicklerLimits limits_;
  size_t pos_ = 0;
  size_t op_pos_ = 0;
  uint8_t opcode_ = 0;
  std::vector<Value> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Value> memo_;
  std::vector<Value> tracked_;
  std::unordered_set<const void*> tracked_ids_;
  std::unordered_map<const void*, std::unordered_map<std::string, size_t>> key_index_;
  bool committed_ = false;
};

void key_to(const Value& k, std::string& out, int depth, int max_depth, uint64_t& unique) {
  if (depth > max_depth)
    throw PtFormatError("dict key nested more than " + std::to_string(max_depth) + " deep");
  switch (k.kind()) {
    case Value::Kind::None: out += 'N'; return;
    case Value::Kind::Bool: out += 'i'; out += k.to_bool() ? '1' : '0'; out += ';'; return;
    case Value::Kind::Int: out += 'i'; out += std::to_string(k.to_int()); out += ';'; return;
    case Value::Kind::Double: {
      double d = k.to_double();
      if (std::isnan(d)) {  // NaN keys are only equal to themselves (by identity)
        out += "n" + std::to_string(unique++) + ";";
        return;
      }
      if (d == std::floor(d) && d >= -9.2233720368547758e18 && d < 9.2233720368547758e18) {
        out += 'i';
        out += std::to_string(static_cast<int64_t>(d));
        out += ';';
        return;
      }
      uint64_t u;
      if (d == 0) d = 0;  // -0.0 == 0.0
      std::memcpy(&u, &d, sizeof u);
      out += 'f' + std::to_string(u) + ';';
      return;
    }
    case Value::Kind::String:
      out += 's' + std::to_string(k.to_string().size()) + ':' + k.to_string();
      return;
    case Value::Kind::Bytes:
      out += 'b' + std::to_string(k.to_string().size()) + ':' + k.to_string();
      return;
    case Value::Kind::Tensor:  // hashed by identity in Python: every tensor key is distinct
      out += "T" + std::to_string(unique++) + ";";
      return;
    case Value::Kind::Tuple:
      out += '(';
      for (const Value& v : k.items()) key_to(v, out, depth + 1, max_depth, unique);
      out += ')';
      return;
    case Value::Kind::List:
      if (k.type_name() == "frozenset") {  // hashable; order-independent equality is not modelled
        out += "fs" + std::to_string(unique++) + ";";
        return;
      }
      break;
    default: break;
  }
  throw PtFormatError("unhashable dict key or set element of type " + k.python_type());
}

}  // namespace

std::string dict_key_of(const Value& key, int max_depth) {
  static thread_local uint64_t unique = 0;
  std::string out;
  key_to(key, out, 0, max_depth, unique);
  return out;
}

Value unpickle(const uint8_t* data, size_t size, PickleHooks& hooks, const std::string& where,
               const UnpicklerLimits& limits) {
  Unpickler u(data, size, 0, hooks, where, limits);
  return u.run();
}

Value unpickle_stream(const uint8_t* data, size_t size, size_t& pos, PickleHooks& hooks, const std::string& where,
                      const UnpicklerLimits& limits) {
  if (pos > size) throw PtFormatError(where + " offset " + std::to_string(pos) + ": past the end of the input");
  Unpickler u(data, size, pos, hooks, where, limits);
  Value v = u.run();
  pos = u.end();
  return v;
}

// ------------------------------------------------------------------ Pickler
void Pickler::proto() { out_ += "\x80\x02"; }
void Pickler::stop() { out_ += '.'; }
void Pickler::mark() { out_ += '('; }
void Pickler::none() { out_ += 'N'; }
void Pickler::boolean(bool b) { out_ += static_cast<char>(b ? 0x88 : 0x89); }
void Pickler::op(char opcode) { out_ += opcode; }
void Pickler::empty_tuple() { out_ += ')'; }
void Pickler::empty_list() { out_ += ']'; }
void Pickler::empty_dict() { out_ += '}'; }

namespace {
void put_le(std::string& s, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
}  // namespace

void Pickler::integer(int64_t v) {
  if (v >= 0 && v <= 0xFF) {
    out_ += 'K';
    put_le(out_, static_cast<uint64_t>(v), 1);
  } else if (v >= 0 && v <= 0xFFFF) {
    out_ += 'M';
    put_le(out_, static_cast<uint64_t>(v), 2);
  } else if (v >= -2147483648LL && v <= 2147483647LL) {
    out_ += 'J';
    put_le(out_, static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(v))), 4);
  } else {
    // CPython's encode_long: (bit_length >> 3) + 1 bytes of two's complement, then a
    // redundant 0xff sign byte of a negative number is dropped.
    uint64_t mag = v < 0 ? (~static_cast<uint64_t>(v) + 1) : static_cast<uint64_t>(v);
    int bits = 0;
    while (bits < 64 && (mag >> bits) != 0) ++bits;
    int n = (bits >> 3) + 1;
    std::string b;
    uint64_t u = static_cast<uint64_t>(v);
    for (int i = 0; i < n; ++i) b.push_back(static_cast<char>(i < 8 ? (u >> (8 * i)) & 0xFF : (v < 0 ? 0xFF : 0)));
    if (v < 0 && n > 1 && static_cast<uint8_t>(b[n - 1]) == 0xFF && (static_cast<uint8_t>(b[n - 2]) & 0x80))
      b.pop_back();
    out_ += static_cast<char>(0x8a);
    out_ += static_cast<char>(b.size());
    out_ += b;
  }
}

void Pickler::floating(double v) {
  uint64_t u;
  std::memcpy(&u, &v, sizeof u);
  out_ += 'G';
  for (int i = 7; i >= 0; --i) out_ += static_cast<char>((u >> (8 * i)) & 0xFF);
}

void Pickler::string(const std::string& utf8, int ns) {
  auto& memo = string_memo_[ns ? 1 : 0];
  auto it = memo.find(utf8);
  if (it != memo.end()) {
    get(it->second);
    return;
  }
  if (utf8.size() > 0xFFFFFFFFu) throw ValueError("pt::save: string of " + std::to_string(utf8.size()) + " bytes is too long for protocol 2");
  out_ += 'X';
  put_le(out_, utf8.size(), 4);
  out_ += utf8;
  memo.emplace(utf8, memoize());
}

void Pickler::global(const std::string& module, const std::string& name) {
  std::string k = module + "\n" + name;
  auto it = global_memo_.find(k);
  if (it != global_memo_.end()) {
    get(it->second);
    return;
  }
  out_ += 'c';
  out_ += k;
  out_ += '\n';
  global_memo_.emplace(std::move(k), memoize());
}

uint32_t Pickler::tuple_end(size_t n) {
  if (n == 1) out_ += static_cast<char>(0x85);
  else if (n == 2) out_ += static_cast<char>(0x86);
  else if (n == 3) out_ += static_cast<char>(0x87);
  else out_ += 't';
  return memoize();
}

uint32_t Pickler::memoize() {
  uint32_t i = next_memo_++;
  if (i < 256) {
    out_ += 'q';
    out_ += static_cast<char>(i);
  } else {
    out_ += 'r';
    put_le(out_, i, 4);
  }
  return i;
}

void Pickler::get(uint32_t index) {
  if (index < 256) {
    out_ += 'h';
    out_ += static_cast<char>(index);
  } else {
    out_ += 'j';
    put_le(out_, index, 4);
  }
}

}  // namespace loader::pt
