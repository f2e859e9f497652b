// A safe pickle reader and a protocol-2 pickle writer for `.pt` files.
//
// The Unpickler never imports or calls anything: GLOBAL, REDUCE, BUILD, NEWOBJ and
// persistent ids are passed to PickleHooks, which allow what a tensor file needs
// and refuse the rest (pt.cpp holds the allow-list).  It reads protocols 0 to 5
// except the opcodes that only arbitrary objects need (INST, OBJ, EXT*, NEWOBJ_EX,
// out-of-band buffers, text STRING/UNICODE).
//
//   struct Hooks : loader::pt::PickleHooks { ... };
//   Hooks hooks;
//   loader::Value v = loader::pt::unpickle(bytes.data(), bytes.size(), hooks, "archive/data.pkl");
//
//   loader::pt::Pickler p;          // protocol 2, memoised like CPython's pickler
//   p.proto(); p.none(); p.stop();  // low-level opcodes; pt.cpp drives it
//
// Hostile input: every length is checked against the bytes left, memo indices live
// in a hash map (a huge index costs nothing), containers nested deeper than
// `max_depth` or containing themselves are refused with PtFormatError (the whole
// partial structure is then dismantled iteratively, so nothing recursive runs on
// it), and dict keys are indexed so a large dict loads in linear time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "loader/serialization/format_error.h"
#include "loader/value.h"

namespace loader::pt {

/// An object that lives only while unpickling (a class, a function, a storage, a
/// dtype): carried on the stack as a Value holding a PickleObject.  None may remain
/// in the final result.
class PickleObject : public CustomObject {
 public:
  /// What it is, for messages ("torch._utils._rebuild_tensor_v2", "storage 'data/0'").
  std::string type_name() const override = 0;
};

/// The unpickler's callbacks: the allow-list and object construction.
class PickleHooks {
 public:
  virtual ~PickleHooks() = default;
  /// GLOBAL / STACK_GLOBAL `module name` (protocol-2 names such as `__builtin__` are
  /// passed as written).  Return a Value (usually a PickleObject) or throw
  /// PtFormatError("Unsupported global: GLOBAL module.name ...").
  virtual Value find_class(const std::string& module, const std::string& name) = 0;
  /// REDUCE: `callable(*args)`; `args` is a tuple.
  virtual Value reduce(const Value& callable, const Value& args) = 0;
  /// NEWOBJ: `cls.__new__(cls, *args)`; `args` is a tuple.
  virtual Value new_object(const Value& cls, const Value& args) = 0;
  /// BUILD: apply `state` to `object` (the object stays on the stack).
  virtual void build(Value& object, const Value& state) = 0;
  /// BINPERSID / PERSID.
  virtual Value persistent_load(const Value& pid) = 0;
};

struct UnpicklerLimits {
  /// Deepest nesting of containers accepted (Python's own recursion limit is 1000).
  int max_depth = 1000;
};

/// Thrown (a PtFormatError) when the input ends before the pickle's STOP opcode.
class PickleTruncatedError : public PtFormatError {
 public:
  using PtFormatError::PtFormatError;
};

/// Reads one pickle from `data`; `where` names the record in messages.  Throws
/// PtFormatError naming the opcode and its byte offset for anything malformed.
Value unpickle(const uint8_t* data, size_t size, PickleHooks& hooks, const std::string& where,
               const UnpicklerLimits& limits = {});

/// Reads the pickle that starts at `data[pos]` and is followed by other bytes (the
/// legacy `.pt` format is a stream of pickles); on return `pos` is just past its STOP
/// opcode.  Offsets in messages count from `data`.
Value unpickle_stream(const uint8_t* data, size_t size, size_t& pos, PickleHooks& hooks, const std::string& where,
                      const UnpicklerLimits& limits = {});

/// A key for Python-style dict lookups: equal for keys Python considers equal
/// (1 == 1.0 == True, tuples element-wise), distinct otherwise.  Throws
/// PtFormatError for unhashable keys (list, dict) or keys nested deeper than `max_depth`.
std::string dict_key_of(const Value& key, int max_depth = 100);

/// Emits pickle opcodes (protocol 2) with CPython's memoisation, so that the output
/// for the same object matches `pickle.Pickler(protocol=2)` byte for byte.
class Pickler {
 public:
  void proto();                       ///< \x80 2
  void stop();                        ///< .
  void mark();
  void none();
  void boolean(bool b);
  void integer(int64_t v);            ///< BININT1 / BININT2 / BININT / LONG1
  void floating(double v);            ///< BINFLOAT
  /// BINUNICODE, memoised by value in `ns` (0: ordinary strings, 1: storage keys),
  /// as CPython memoises interned strings by identity.
  void string(const std::string& utf8, int ns = 0);
  void global(const std::string& module, const std::string& name);  ///< memoised
  void empty_tuple();
  void empty_list();
  void empty_dict();
  /// TUPLE1/2/3 for n <= 3 (no mark), TUPLE after a mark otherwise; then memoised
  /// (returns the memo index).
  uint32_t tuple_end(size_t n);
  void op(char opcode);               ///< REDUCE, BUILD, APPEND(S), SETITEM(S), BINPERSID, ...
  /// Stores the object on top of the stack in the memo (BINPUT / LONG_BINPUT); returns its index.
  uint32_t memoize();
  void get(uint32_t index);           ///< BINGET / LONG_BINGET
  const std::string& bytes() const noexcept { return out_; }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
  uint32_t next_memo_ = 0;
  std::unordered_map<std::string, uint32_t> string_memo_[2];
  std::unordered_map<std::string, uint32_t> global_memo_;
};

// Opcodes the writer uses.
namespace op {
constexpr char MARK = '(';
constexpr char STOP = '.';
constexpr char REDUCE = 'R';
constexpr char BUILD = 'b';
constexpr char APPEND = 'a';
constexpr char APPENDS = 'e';
constexpr char SETITEM = 's';
constexpr char SETITEMS = 'u';
constexpr char BINPERSID = 'Q';
}  // namespace op

}  // namespace loader::pt
