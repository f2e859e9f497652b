// SHA-256 throughput of the two implementations behind loader::pt::Sha256: OpenSSL's
// libcrypto (Sha256Impl::Best, when the build found it) and the built-in code.
//
//   build/bench/sha256_bench [--mb 256] [--repeats 3]
//
// One JSON line per implementation: {"impl": ..., "MB_per_s": ..., "digest": ...}
// (best of the repeats; MB = 10^6 bytes).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "loader/serialization/sha256.h"

int main(int argc, char** argv) {
  size_t mb = 256;
  int repeats = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--mb") mb = static_cast<size_t>(std::atoll(argv[i + 1]));
    else if (a == "--repeats") repeats = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: sha256_bench [--mb N] [--repeats R]\n");
      return 2;
    }
  }
  std::vector<uint8_t> data(mb * 1000 * 1000);
  uint64_t x = 88172645463325252ull;  // xorshift: incompressible, reproducible bytes
  for (auto& b : data) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<uint8_t>(x);
  }
  using loader::pt::Sha256;
  using loader::pt::Sha256Impl;
  std::string digests[2];
  int k = 0;
  for (Sha256Impl impl : {Sha256Impl::Best, Sha256Impl::Builtin}) {
    if (impl == Sha256Impl::Best && !Sha256::have_openssl()) continue;
    double best = 1e30;
    std::string digest, name;
    for (int r = 0; r < repeats; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      Sha256 h(impl);
      for (size_t off = 0; off < data.size(); off += 1 << 20)
        h.update(data.data() + off, std::min<size_t>(1 << 20, data.size() - off));
      digest = h.hex_digest();
      name = h.implementation();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    digests[k++] = digest;
    std::printf("{\"impl\": \"%s\", \"bytes\": %zu, \"seconds\": %.4f, \"MB_per_s\": %.0f, \"digest\": \"%s\"}\n",
                name.c_str(), data.size(), best, static_cast<double>(data.size()) / best / 1e6, digest.c_str());
  }
  if (k == 2 && digests[0] != digests[1]) {
    std::fprintf(stderr, "sha256_bench: the implementations disagree\n");
    return 1;
  }
  return 0;
}
