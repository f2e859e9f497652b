// Reading and writing PyTorch `.pt` files, safely: only the pickle globals that
// tensors, Parameters and OrderedDicts need are honoured (as torch.load(...,
// weights_only=True)).  Both of torch.save's formats: the zip format (the default since
// PyTorch 1.6) and the legacy one (PyTorch 0.4 to 1.5, _use_new_zipfile_serialization=
// False); load() tells them apart, SaveOptions::legacy_format writes the legacy one.
//
//   loader::Value sd = loader::pt::load("model.pt");          // tensors, dicts, lists, ...
//   const loader::Tensor& w = loader::pt::tensor_of(sd.at("0.weight"));
//   loader::pt::save(loader::Value::dict({{"w", w}}), "out.pt");  // torch.load() reads it
//
//   // a state_dict round trip that keeps its `_metadata`:
//   loader::pt::Archive a = loader::pt::load_archive("model.pt");
//   loader::Value md = a.metadata_of(a.value);                 // OrderedDict or None
//   loader::pt::save(a, "copy.pt");
//
// How Python objects map to loader::Value (see docs/pt_format.md):
//   torch.Tensor             -> Value(Tensor); views of one storage share one
//                               shared_ptr<Storage>, as in the file
//   Parameter                -> namedtuple "torch.nn.parameter.Parameter" with fields
//                               (data: Tensor, requires_grad: bool); make_parameter()
//   tensor, requires_grad    -> namedtuple "torch.Tensor" (data, requires_grad=True);
//                               make_requires_grad().  tensor_of() unwraps all three.
//   dict / OrderedDict       -> Value::dict (keys may be any hashable Value), type name
//                               "" / "collections.OrderedDict"
//   OrderedDict attributes   -> not in the Value: Archive::states (`_metadata` of a
//                               state_dict), written back by save(Archive) / SaveOptions
//   list / tuple             -> Value::list / Value::tuple
//   set / frozenset          -> Value::list with type name "set" / "frozenset"
//   torch.Size               -> Value::tuple with type name "torch.Size"
//   bytes / bytearray        -> Value::bytes (a bytearray loads as bytes)
//   int, float, str, bool, None -> the Value scalars (int must fit in int64)
// Tensors load on the CPU whatever device they were saved from (map_location="cpu").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "loader/serialization/format_error.h"
#include "loader/serialization/zip.h"
#include "loader/value.h"

namespace loader::pt {

struct LoadOptions {
  /// Memory-map the file (load/load_archive from a path only): STORED, native-endian
  /// records whose data is aligned become MemoryKind::FileMapping storages sharing the
  /// page cache (copy-on-write); others are copied.  In a legacy file only records
  /// whose data offset is a multiple of the element size can be mapped (files we write
  /// align them; torch's seldom are).  Default: copy every storage.
  bool mmap = false;
  /// Check the CRC-32 of every record read (for mapped storages this reads every page).
  bool verify_crc = true;
  /// Deepest container nesting accepted.
  int max_depth = 1000;
  /// Largest size a DEFLATE record may claim (torch.save never compresses).
  uint64_t max_inflated_bytes = uint64_t{1} << 30;
};

/// Attributes PyTorch stores on an object with the pickle BUILD opcode.  `object` is a
/// reference to the dict in the loaded Value (the same shared map), `state` a string-
/// keyed dict of attribute values, e.g. {"_metadata": OrderedDict(...)}.
struct ObjectState {
  Value object;
  Value state;
};

/// Which of torch.save's two formats a file is in.
enum class Format {
  Zip,     ///< PyTorch >= 1.6 (the default): a zip archive of records
  Legacy,  ///< PyTorch 0.4 to 1.5, or _use_new_zipfile_serialization=False: a stream of pickles
};

/// One storage record of a legacy file: an int64 element count, then the bytes.
struct LegacyRecord {
  std::string key;           ///< the storage's key in the pickle (torch writes a memory address)
  DType dtype = DType::UInt8;  ///< the dtype of its first reference
  uint64_t numel = 0;
  uint64_t data_offset = 0;  ///< file offset of its first byte (just after the count)
  bool mapped = false;       ///< wrapped in place (LoadOptions::mmap and aligned), else copied
};

/// What a legacy file says about the machine that wrote it (its `sys_info`), and
/// where its storages are.
struct LegacyInfo {
  int64_t protocol_version = 1001;
  bool little_endian = true;
  int64_t short_size = 2;  ///< sys_info["type_sizes"]
  int64_t int_size = 4;
  int64_t long_size = 8;
  std::vector<LegacyRecord> records;  ///< in file order
};

/// Everything a `.pt` file holds.
struct Archive {
  Value value;                       ///< the object torch.save was given
  std::vector<ObjectState> states;   ///< attributes of dicts in `value` (state_dict `_metadata`)
  std::string archive_name;          ///< record prefix ("archive", or the saved file's stem); "" for legacy
  std::vector<std::string> records;  ///< every record name, in archive order (zip)
  Format format = Format::Zip;
  LegacyInfo legacy{};               ///< format == Format::Legacy only

  /// The attribute dict attached to `dict` (a reference into `value`), or None.
  Value state_of(const Value& dict) const;
  /// `state_of(dict)["_metadata"]`, or None: a state_dict's version metadata.
  Value metadata_of(const Value& dict) const;
};

Archive load_archive(const std::string& path, const LoadOptions& options = {});
/// Reads an archive held in memory; the bytes are copied, the caller may free them.
Archive load_archive_bytes(const void* data, size_t size, const LoadOptions& options = {});
/// Reads any ByteSource (a mapped source with options.mmap wraps storages in place).
Archive load_archive(const std::shared_ptr<ByteSource>& source, const LoadOptions& options = {});

/// torch.load(path, map_location="cpu", weights_only=True).
Value load(const std::string& path, const LoadOptions& options = {});
Value load_bytes(const void* data, size_t size, const LoadOptions& options = {});
inline Value load_bytes(const std::string& bytes, const LoadOptions& options = {}) {
  return load_bytes(bytes.data(), bytes.size(), options);
}

struct SaveOptions {
  /// BUILD states to write after the dicts they belong to (matched by identity).
  std::vector<ObjectState> states;
  /// Write a `byteorder` record (as PyTorch 2.x does; 1.x ignores it).  Without it the
  /// output is byte-identical to torch 1.13's torch.save for the same object.
  bool write_byteorder = true;
  /// Record prefix.  Default: the file's stem (as torch 1.x) or "archive" (save_bytes).
  std::string archive_name;
  /// Zip64 fields on every record (tests zip64 readers); needed ones are always written.
  bool force_zip64 = false;
  /// Write the legacy format (torch.save(..., _use_new_zipfile_serialization=False)),
  /// which every PyTorch since 0.4 reads.  write_byteorder, archive_name and force_zip64
  /// do not apply.  See docs/pt_format.md.
  bool legacy_format = false;
};

/// torch.save(value, path): protocol-2 pickle, storages deduplicated, records STORED
/// and 64-byte aligned with CRC-32, `version` "3\n".  Writes `path` atomically (a
/// temporary file renamed into place).  Throws ValueError for what cannot be saved
/// (custom objects, cycles, non-UTF-8 strings, one storage viewed as two dtypes).
/// Namedtuples and list/dict subclasses are written as plain tuples, lists and dicts.
void save(const Value& value, const std::string& path, const SaveOptions& options = {});
/// Saves `archive.value` with `archive.states` (plus options.states).
void save(const Archive& archive, const std::string& path, SaveOptions options = {});
std::string save_bytes(const Value& value, const SaveOptions& options = {});

// ---- tensors with attributes
/// A Parameter: namedtuple "torch.nn.parameter.Parameter"(data, requires_grad).
Value make_parameter(Tensor data, bool requires_grad = true);
/// A tensor with requires_grad=True: namedtuple "torch.Tensor"(data, requires_grad).
Value make_requires_grad(Tensor data);
bool is_parameter(const Value& v);
/// A tensor, a Parameter or a requires-grad tensor.
bool is_tensor_like(const Value& v);
/// The tensor of a tensor-like value; TypeError otherwise.
const Tensor& tensor_of(const Value& v);
bool requires_grad_of(const Value& v);

/// The pickle globals the loader honours ("torch._utils._rebuild_tensor_v2", ...).
std::vector<std::string> allowed_globals();

}  // namespace loader::pt
