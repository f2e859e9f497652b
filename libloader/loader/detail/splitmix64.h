// splitmix64 (Vigna), the one copy: its finaliser, a bijective 64-bit mix in which every
// input bit moves every output bit, and its generator step.  Used where the library needs
// unrelated 64-bit values from related inputs: per-task seeds (task_seed), the round
// keys of IndexShuffleSampler, the hashes of verified replays (HashChain).
#pragma once

#include <cstdint>

namespace loader::detail {

constexpr uint64_t kSplitmix64Gamma = 0x9e3779b97f4a7c15ULL;

/// The finaliser.
constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// Advances `state` and returns its next output.
inline uint64_t splitmix64_next(uint64_t& state) {
  state += kSplitmix64Gamma;
  return splitmix64_mix(state);
}

}  // namespace loader::detail
