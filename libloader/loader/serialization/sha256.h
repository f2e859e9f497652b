// SHA-256 (FIPS 180-4), for checking downloaded checkpoints against the hash prefix
// in their file name, as torch.hub does.  With OpenSSL's libcrypto when the build
// found it (LOADER_WITH_OPENSSL; it uses the CPU's SHA instructions: about 6 times the
// built-in code's speed, bench/sha256_bench measures both), else with built-in code.
//
//   loader::pt::Sha256 h;
//   h.update(data, n);
//   std::string hex = h.hex_digest();           // 64 lowercase hex digits
//   loader::pt::sha256_file_hex("model.pt");    // the whole file
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace loader::pt {

/// Which code computes the hash: the best available (OpenSSL's libcrypto when the build
/// found it, else the built-in code), or the built-in code whatever the build has.
enum class Sha256Impl { Best, Builtin };

class Sha256 {
 public:
  explicit Sha256(Sha256Impl impl = Sha256Impl::Best);
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t n);
  /// Finishes the hash; the object must not be updated afterwards (RuntimeError).
  /// Calling it again returns the same digest.
  std::array<uint8_t, 32> digest();
  std::string hex_digest();
  /// "openssl" or "builtin": the code this object uses.
  const char* implementation() const;
  /// Whether this build uses OpenSSL's libcrypto for Sha256Impl::Best.
  static bool have_openssl();

  struct State;

 private:
  std::unique_ptr<State> state_;
  std::array<uint8_t, 32> digest_{};
  bool done_ = false;
};

std::string sha256_hex(const void* data, size_t n);
/// Hash of a whole file, read in chunks; RuntimeError when it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace loader::pt
