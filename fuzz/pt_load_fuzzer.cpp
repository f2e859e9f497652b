// libFuzzer target for the `.pt` reader (built with clang++ by fuzz/CMakeLists.txt or
// scripts/fuzz.sh).  Every input is tried
//   1. as a whole file (zip or legacy format: zip layer or pickle stream, records,
//      pickles), copied and, through an owned in-memory source, mapped in place;
//   2. when it starts like a pickle (0x80), as data.pkl inside a well-formed archive
//      with storages "0".."3", so that mutations reach the unpickler past the CRCs;
//   3. and as the object pickle of a legacy file (header, the input, an empty storage
//      key list), which reaches the legacy persistent ids and storage views.
// Anything that loads is saved (in both formats) and loaded again: the writer must
// accept what the reader produces.  The only acceptable failure is a loader::Error.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "loader/serialization/pt.h"
#include "loader/serialization/zip.h"

namespace {

void roundtrip(const loader::Value& v) {
  for (bool legacy : {false, true}) {
    loader::pt::SaveOptions o;
    o.legacy_format = legacy;
    std::string again;
    try {
      again = loader::pt::save_bytes(v, o);
    } catch (const loader::Error&) {
      return;  // e.g. a str that is not UTF-8: the writer refuses it with a ValueError
    }
    loader::pt::load_bytes(again);  // must not throw: a failure here is a bug
  }
}

void try_load(const uint8_t* data, size_t size) {
  loader::pt::LoadOptions o;
  o.max_inflated_bytes = 64 << 20;
  loader::Value v;
  try {
    v = loader::pt::load_bytes(data, size, o);
  } catch (const loader::Error&) {
    return;
  }
  roundtrip(v);
}

// The same bytes as a source that owns them: LoadOptions::mmap wraps storages in place
// (and reads legacy files in two passes).
void try_load_in_place(const uint8_t* data, size_t size) {
  auto owner = std::make_shared<std::string>(reinterpret_cast<const char*>(data), size);
  loader::pt::LoadOptions o;
  o.max_inflated_bytes = 64 << 20;
  o.mmap = true;
  try {
    loader::pt::load_archive(loader::pt::ByteSource::from_memory(owner->data(), owner->size(), owner), o);
  } catch (const loader::Error&) {
  }
}

const std::string& legacy_header() {
  static const std::string h = [] {  // magic number, protocol version, sys_info of a file we write
    const std::string f = loader::pt::save_bytes(loader::Value(), [] {
      loader::pt::SaveOptions o;
      o.legacy_format = true;
      return o;
    }());
    return f.substr(0, f.find("\x80\x02N.", 20));  // the object pickle of None follows the header
  }();
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try_load(data, size);
  try_load_in_place(data, size);
  if (size > 0 && data[0] == 0x80) {
    std::string zip;
    loader::pt::ZipWriter w([&](const void* p, size_t n) { zip.append(static_cast<const char*>(p), n); });
    w.write_record("archive/data.pkl", data, size);
    const std::string storage(64, '\x01');
    for (const char* key : {"0", "1", "2", "3"})
      w.write_record(std::string("archive/data/") + key, storage.data(), storage.size());
    w.write_record("archive/version", "3\n", 2);
    w.finish();
    try_load(reinterpret_cast<const uint8_t*>(zip.data()), zip.size());

    std::string legacy = legacy_header();
    legacy.append(reinterpret_cast<const char*>(data), size);
    legacy += std::string("\x80\x02]q\x00.", 6);  // the storage keys: []
    try_load(reinterpret_cast<const uint8_t*>(legacy.data()), legacy.size());
  }
  return 0;
}
