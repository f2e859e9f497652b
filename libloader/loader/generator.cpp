#include "loader/generator.h"

#include <utility>

namespace loader {

namespace {
thread_local Generator* tls_override = nullptr;
}

Generator& default_generator() {
  static Generator global;
  return tls_override ? *tls_override : global;
}

DefaultGeneratorScope::DefaultGeneratorScope(Generator& g) : previous_(tls_override) { tls_override = &g; }
DefaultGeneratorScope::~DefaultGeneratorScope() { tls_override = previous_; }

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

std::vector<int64_t> randperm(int64_t n, Generator& g) {
  std::vector<int64_t> r(static_cast<size_t>(n > 0 ? n : 0));
  for (int64_t i = 0; i < n; ++i) r[static_cast<size_t>(i)] = i;
  for (int64_t i = 0; i + 1 < n; ++i) {
    int64_t z = static_cast<int64_t>(g.random() % static_cast<uint32_t>(n - i));
    std::swap(r[static_cast<size_t>(i)], r[static_cast<size_t>(i + z)]);
  }
  return r;
}

}  // namespace loader
