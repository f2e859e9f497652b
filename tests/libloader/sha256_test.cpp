// SHA-256's two implementations (OpenSSL's libcrypto when the build uses it, the
// built-in code always) give the same digests: known vectors, uneven pieces, sizes
// around the 64-byte block and its 56-byte padding limit.
#include "loader/serialization/sha256.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "loader/error.h"

namespace {

using loader::pt::Sha256;
using loader::pt::Sha256Impl;

std::string hex(Sha256Impl impl, const std::string& data) {
  Sha256 h(impl);
  h.update(data.data(), data.size());
  return h.hex_digest();
}

TEST(Sha256Impls, BothGiveTheKnownDigests) {
  for (Sha256Impl impl : {Sha256Impl::Best, Sha256Impl::Builtin}) {
    EXPECT_EQ(hex(impl, ""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(hex(impl, "abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(hex(impl, "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  }
}

TEST(Sha256Impls, NamesTheImplementation) {
  EXPECT_STREQ(Sha256(Sha256Impl::Builtin).implementation(), "builtin");
  EXPECT_STREQ(Sha256().implementation(), Sha256::have_openssl() ? "openssl" : "builtin");
}

TEST(Sha256Impls, AgreeOnEverySizeAroundTheBlockAndInPieces) {
  std::string data;
  uint32_t x = 12345;
  for (int i = 0; i < 300; ++i) {
    x = x * 1103515245u + 12345u;
    data.push_back(static_cast<char>(x >> 24));
  }
  for (size_t n = 0; n <= data.size(); ++n) {
    const std::string part = data.substr(0, n);
    ASSERT_EQ(hex(Sha256Impl::Best, part), hex(Sha256Impl::Builtin, part)) << n << " bytes";
  }
  Sha256 a(Sha256Impl::Best), b(Sha256Impl::Builtin);
  for (size_t off = 0, step = 1; off < data.size(); off += step, step = step * 2 + 1) {
    const size_t n = std::min(step, data.size() - off);
    a.update(data.data() + off, n);
    b.update(data.data() + off, n);
  }
  EXPECT_EQ(a.hex_digest(), b.hex_digest());
  EXPECT_EQ(a.hex_digest(), hex(Sha256Impl::Builtin, data)) << "digest() twice gives the same";
  EXPECT_THROW(a.update("x", 1), loader::RuntimeError);
}

}  // namespace
