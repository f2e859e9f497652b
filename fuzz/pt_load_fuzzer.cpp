// libFuzzer target for the `.pt` reader (built with clang++ by fuzz/CMakeLists.txt or
// scripts/fuzz.sh).  Every input is tried
//   1. as a whole file (zip layer, records, pickle), and
//   2. when it starts like a pickle (0x80), as data.pkl inside a well-formed archive
//      with storages "0".."3", so that mutations reach the unpickler past the CRCs.
// Anything that loads is saved and loaded again: the writer must accept what the
// reader produces.  The only acceptable failure is a loader::Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "loader/serialization/pt.h"
#include "loader/serialization/zip.h"

namespace {

void roundtrip(const loader::Value& v) {
  std::string again;
  try {
    again = loader::pt::save_bytes(v);
  } catch (const loader::Error&) {
    return;  // e.g. a str that is not UTF-8: the writer refuses it with a ValueError
  }
  loader::pt::load_bytes(again);  // must not throw: a failure here is a bug
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try_load(data, size);
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
  }
  return 0;
}
