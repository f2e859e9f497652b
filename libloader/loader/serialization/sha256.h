// SHA-256 (FIPS 180-4), for checking downloaded checkpoints against the hash prefix
// in their file name, as torch.hub does.  No OpenSSL needed.
//
//   loader::pt::Sha256 h;
//   h.update(data, n);
//   std::string hex = h.hex_digest();           // 64 lowercase hex digits
//   loader::pt::sha256_file_hex("model.pt");    // the whole file
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace loader::pt {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  /// Finishes the hash; the object must not be updated afterwards.
  std::array<uint8_t, 32> digest();
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
  bool done_ = false;
};

std::string sha256_hex(const void* data, size_t n);
/// Hash of a whole file, read in chunks; RuntimeError when it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace loader::pt
