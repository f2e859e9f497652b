#include "loader/serialization/sha256.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "loader/error.h"

#ifdef LOADER_HAVE_OPENSSL
#include <openssl/evp.h>
#endif

namespace loader::pt {

namespace {
constexpr uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
}  // namespace

struct Sha256::State {
  virtual ~State() = default;
  virtual void update(const uint8_t* p, size_t n) = 0;
  virtual std::array<uint8_t, 32> finish() = 0;
  virtual const char* name() const = 0;
};

namespace {

// FIPS 180-4, one 64-byte block at a time.
class BuiltinSha256 final : public Sha256::State {
 public:
  void update(const uint8_t* p, size_t n) override;
  std::array<uint8_t, 32> finish() override;
  const char* name() const override { return "builtin"; }

 private:
  void block(const uint8_t* p);
  uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  uint8_t buf_[64] = {};
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

void BuiltinSha256::block(const uint8_t* p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = (static_cast<uint32_t>(p[4 * i]) << 24) | (static_cast<uint32_t>(p[4 * i + 1]) << 16) |
           (static_cast<uint32_t>(p[4 * i + 2]) << 8) | static_cast<uint32_t>(p[4 * i + 3]);
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = h + s1 + ch + kK[i] + w[i];
    uint32_t s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = s0 + maj;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h_[0] += a; h_[1] += b; h_[2] += c; h_[3] += d;
  h_[4] += e; h_[5] += f; h_[6] += g; h_[7] += h;
}

void BuiltinSha256::update(const uint8_t* p, size_t n) {
  total_ += n;
  if (buf_len_) {
    size_t take = std::min(n, sizeof buf_ - buf_len_);
    std::memcpy(buf_ + buf_len_, p, take);
    buf_len_ += take;
    p += take;
    n -= take;
    if (buf_len_ < sizeof buf_) return;
    block(buf_);
    buf_len_ = 0;
  }
  for (; n >= 64; p += 64, n -= 64) block(p);
  if (n) std::memcpy(buf_, p, n);
  buf_len_ = n;
}

std::array<uint8_t, 32> BuiltinSha256::finish() {
  const uint64_t bits = total_ * 8;
  const uint8_t pad = 0x80;
  update(&pad, 1);
  const uint8_t zero = 0;
  while (buf_len_ != 56) update(&zero, 1);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  update(len, 8);
  std::array<uint8_t, 32> out{};
  for (int i = 0; i < 8; ++i)
    for (int k = 0; k < 4; ++k) out[4 * i + k] = static_cast<uint8_t>(h_[i] >> (24 - 8 * k));
  return out;
}

#ifdef LOADER_HAVE_OPENSSL
// libcrypto's EVP interface (SHA256_Init and friends are deprecated in OpenSSL 3).
class OpenSslSha256 final : public Sha256::State {
 public:
  OpenSslSha256() : ctx_(EVP_MD_CTX_new()) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
      EVP_MD_CTX_free(ctx_);
      throw RuntimeError("sha256: OpenSSL's EVP_DigestInit_ex failed");
    }
  }
  ~OpenSslSha256() override { EVP_MD_CTX_free(ctx_); }
  OpenSslSha256(const OpenSslSha256&) = delete;
  OpenSslSha256& operator=(const OpenSslSha256&) = delete;
  void update(const uint8_t* p, size_t n) override {
    if (EVP_DigestUpdate(ctx_, p, n) != 1) throw RuntimeError("sha256: OpenSSL's EVP_DigestUpdate failed");
  }
  std::array<uint8_t, 32> finish() override {
    std::array<uint8_t, 32> out{};
    unsigned len = 0;
    if (EVP_DigestFinal_ex(ctx_, out.data(), &len) != 1 || len != out.size())
      throw RuntimeError("sha256: OpenSSL's EVP_DigestFinal_ex failed");
    return out;
  }
  const char* name() const override { return "openssl"; }

 private:
  EVP_MD_CTX* ctx_;
};
#endif

}  // namespace

Sha256::Sha256(Sha256Impl impl) {
#ifdef LOADER_HAVE_OPENSSL
  if (impl == Sha256Impl::Best) {
    state_ = std::make_unique<OpenSslSha256>();
    return;
  }
#endif
  (void)impl;
  state_ = std::make_unique<BuiltinSha256>();
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

bool Sha256::have_openssl() {
#ifdef LOADER_HAVE_OPENSSL
  return true;
#else
  return false;
#endif
}

const char* Sha256::implementation() const { return state_->name(); }

void Sha256::update(const void* data, size_t n) {
  if (done_) throw RuntimeError("Sha256::update after digest()");
  if (n) state_->update(static_cast<const uint8_t*>(data), n);
}

std::array<uint8_t, 32> Sha256::digest() {
  if (!done_) {
    digest_ = state_->finish();
    done_ = true;
  }
  return digest_;
}

std::string Sha256::hex_digest() {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : digest()) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

std::string sha256_hex(const void* data, size_t n) {
  Sha256 h;
  h.update(data, n);
  return h.hex_digest();
}

std::string sha256_file_hex(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw RuntimeError("sha256: cannot open '" + path + "': " + std::strerror(errno));
  Sha256 h;
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) h.update(buf.data(), n);
  const bool bad = std::ferror(f) != 0;
  std::fclose(f);
  if (bad) throw RuntimeError("sha256: reading '" + path + "' failed");
  return h.hex_digest();
}

}  // namespace loader::pt
