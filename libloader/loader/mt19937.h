// MT19937 (Matsumoto and Nishimura), the engine of loader::Generator: the same outputs as
// std::mt19937 and as PyTorch's CPU generator, faster.  libstdc++'s std::mt19937 keeps
// its 624 words as uint_fast32_t (64 bits on x86-64) and regenerates them one scalar step
// at a time; the sampler of a map-style epoch makes one draw per sample, and on W1 that
// regeneration was a quarter of the parent's CPU.  Here the words are uint32_t and the
// regeneration runs four words per step on SSE2 (the x86-64 baseline; GCC's vector
// extensions lower to scalar code elsewhere).
//
//   loader::Mt19937 e(42);
//   uint32_t a = e();        // == std::mt19937(42)()
//   e.discard(1000);         // == 1000 calls of e()
//
// Trivially copyable: Generator saves and restores it as bytes.  Not thread-safe.
#pragma once

#include <cstdint>
#include <type_traits>

namespace loader {

class Mt19937 {
 public:
  static constexpr int kN = 624;

  explicit Mt19937(uint32_t seed = 5489u) noexcept { seed_with(seed); }

  /// std::mt19937::seed(s): Knuth's initialisation of the 624 words.
  void seed_with(uint32_t s) noexcept {
    mt_[0] = s;
    for (uint32_t i = 1; i < kN; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + i;
    next_ = kN;
  }

  uint32_t operator()() noexcept {
    if (next_ >= kN) regenerate();
    uint32_t y = mt_[next_++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
  }

  /// Skips `k` outputs (regenerates every 624 of them; no tempering).
  void discard(uint64_t k) noexcept {
    while (k > 0) {
      if (next_ >= kN) regenerate();
      const uint64_t here = static_cast<uint64_t>(kN - next_);
      const uint64_t take = k < here ? k : here;
      next_ += static_cast<uint32_t>(take);
      k -= take;
    }
  }

 /// False for a state no engine can be in (a corrupt saved state): its index is past the words.
  bool valid() const noexcept { return next_ <= static_cast<uint32_t>(kN); }

  /// The 624 words and the index of the next one to temper (kN: regenerate first), for
  /// converting to and from other engines' saved states (Generator::torch_state).
  const uint32_t* words() const noexcept { return mt_; }
  uint32_t index() const noexcept { return next_; }
  /// Sets the words and the index; false, nothing changed, when index > kN.
  bool assign(const uint32_t* words, uint32_t index) noexcept {
    if (index > static_cast<uint32_t>(kN)) return false;
    for (int i = 0; i < kN; ++i) mt_[i] = words[i];
    next_ = index;
    return true;
  }

 private:
  /// The next 624 words from the current ones (mt19937.cpp).
  void regenerate() noexcept;

  uint32_t mt_[kN];
  uint32_t next_;  // the word the next output tempers; kN: regenerate first
};

static_assert(std::is_trivially_copyable<Mt19937>::value, "Generator saves the engine as bytes");

}  // namespace loader
