#include "loader/mt19937.h"

#include <cstring>

namespace loader {

namespace {
using u32x4 = uint32_t __attribute__((vector_size(16)));

inline u32x4 load4(const uint32_t* p) noexcept {
  u32x4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Word i's recurrence: mt[i] = mt[far] ^ twist(upper bit of mt[i], lower 31 bits of mt[i+1]).
inline uint32_t step1(uint32_t cur, uint32_t nxt, uint32_t far) noexcept {
  const uint32_t y = (cur & 0x80000000u) | (nxt & 0x7fffffffu);
  return far ^ (y >> 1) ^ ((0u - (nxt & 1u)) & 0x9908b0dfu);
}

// Words i..i+3 at once: every word read must already hold the value step1 would read.
inline void step4(uint32_t* mt, int i, int far) noexcept {
  const u32x4 cur = load4(mt + i);
  const u32x4 nxt = load4(mt + i + 1);
  const u32x4 y = (cur & 0x80000000u) | (nxt & 0x7fffffffu);
  const u32x4 odd = reinterpret_cast<u32x4>((nxt & 1u) == 1u);  // all ones where the low bit is set
  const u32x4 out = load4(mt + far) ^ (y >> 1) ^ (odd & 0x9908b0dfu);
  std::memcpy(mt + i, &out, sizeof out);
}
}  // namespace

void Mt19937::regenerate() noexcept {
  constexpr int kM = 397;
  constexpr int kSplit = kN - kM;        // 227: words below read old words kM ahead
  constexpr int kFours = kSplit / 4 * 4;  // 224
  static_assert((kN - 1 - kSplit) % 4 == 0, "words 227..622 go in blocks of four");
  // Words 0..226 read mt[i+1] and mt[i+397], both still old.
  for (int i = 0; i < kFours; i += 4) step4(mt_, i, i + kM);
  for (int i = kFours; i < kSplit; ++i) mt_[i] = step1(mt_[i], mt_[i + 1], mt_[i + kM]);
  // Words 227..622 read mt[i-227] (new, at least 227 words back) and mt[i+1] (old;
  // the last block reads word 623).
  for (int i = kSplit; i < kN - 1; i += 4) step4(mt_, i, i - kSplit);
  // Word 623 wraps round to the new word 0.
  mt_[kN - 1] = step1(mt_[kN - 1], mt_[0], mt_[kM - 1]);
  next_ = 0;
}

}  // namespace loader
