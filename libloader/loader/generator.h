// PyTorch's CPU random number generator, bit for bit.
//
// MT19937 seeded with the low 32 bits of the seed (the full 64-bit seed is kept
// as initial_seed()), with the draws torch uses (DESIGN.md section 5):
//   random()   = one 32-bit output          random64() = two outputs, high word first
//   randperm   = r[i]=i; for i<n-1: swap(r[i], r[i + random() % (n-i)])
//   int64 random_() = random64() % 2^63     uniform double = (random64() & (2^53-1)) * 2^-53
//
//   loader::Generator g(42);
//   auto perm = loader::randperm(10, g);    // == torch.randperm(10, generator=g)
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

namespace loader {

class Generator {
 public:
  /// torch.Generator()'s default seed (67280421310721).
  static constexpr uint64_t kDefaultSeed = 67280421310721ULL;

  explicit Generator(uint64_t seed = kDefaultSeed) { manual_seed(seed); }

  /// Re-seeds (torch.Generator.manual_seed).
  void manual_seed(uint64_t seed) {
    initial_seed_ = seed;
    engine_.seed(static_cast<uint32_t>(seed & 0xffffffffULL));
  }
  uint64_t initial_seed() const noexcept { return initial_seed_; }

  /// The whole state (engine + initial seed) as bytes, and back: a restarted worker
  /// resumes the stream exactly where its first unfinished task began.
  static constexpr size_t kStateBytes = sizeof(std::mt19937) + sizeof(uint64_t);
  void save_state(unsigned char* out) const noexcept {
    std::memcpy(out, &engine_, sizeof(std::mt19937));
    std::memcpy(out + sizeof(std::mt19937), &initial_seed_, sizeof(uint64_t));
  }
  void load_state(const unsigned char* in) noexcept {
    std::memcpy(&engine_, in, sizeof(std::mt19937));
    std::memcpy(&initial_seed_, in + sizeof(std::mt19937), sizeof(uint64_t));
  }

  uint32_t random() { return static_cast<uint32_t>(engine_()); }
  uint64_t random64() {
    uint64_t hi = random();
    uint64_t lo = random();
    return (hi << 32) | lo;
  }
  /// torch.empty((), dtype=int64).random_(generator=g): random64() % 2^63.
  int64_t random_int64() { return static_cast<int64_t>(random64() % (1ULL << 63)); }
  /// Uniform double in [0, 1) with 53 random bits.
  double uniform_double() {
    return static_cast<double>(random64() & ((1ULL << 53) - 1)) * (1.0 / 9007199254740992.0);
  }
  /// torch.randint(high, ...) for one element: random() % high, or random64() % high
  /// when the range needs more than 32 bits.
  int64_t randint(int64_t high) {
    uint64_t range = static_cast<uint64_t>(high);
    if (range >= (1ULL << 32)) return static_cast<int64_t>(random64() % range);
    return static_cast<int64_t>(random() % static_cast<uint32_t>(range));
  }

 private:
  static_assert(std::is_trivially_copyable<std::mt19937>::value, "save_state copies the engine's bytes");
  std::mt19937 engine_;
  uint64_t initial_seed_ = kDefaultSeed;
};

/// The default generator (torch's default CPU generator), shared by the process like
/// PyTorch's.  Not synchronised: while an epoch with workers runs, the runtime's
/// sampler actor draws from it (when no generator was given), so do not draw from
/// it concurrently.  A worker (a child process, or an in-process worker thread with
/// a DefaultGeneratorScope) has its own, seeded with its worker seed.
Generator& default_generator();
/// torch.manual_seed(seed): re-seeds the default generator.
void manual_seed(uint64_t seed);

/// Makes `g` the calling thread's default_generator() for the scope's lifetime.
class DefaultGeneratorScope {
 public:
  explicit DefaultGeneratorScope(Generator& g);
  ~DefaultGeneratorScope();
  DefaultGeneratorScope(const DefaultGeneratorScope&) = delete;
  DefaultGeneratorScope& operator=(const DefaultGeneratorScope&) = delete;

 private:
  Generator* previous_;
};

/// torch.randperm(n, generator=g) (CPU, int64), the recipe above.
std::vector<int64_t> randperm(int64_t n, Generator& g);

}  // namespace loader
