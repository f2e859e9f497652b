// Python's `random.Random`, bit for bit (CPython 3.x's Mersenne Twister and the pure-Python
// methods of Lib/random.py that build on it), for code transcribed from Python that must draw
// the same numbers for the same seed.  PyTorch's generator is a different recipe: see
// loader::Generator (generator.h).
//
//   loader::PythonRandom rng(42);                  // random.Random(42) / random.seed(42)
//   rng.getrandbits(32);                           // 2746317213, as in Python
//   rng.random();                                  // a double in [0, 1), 53 random bits
//   std::vector<int64_t> v{0, 1, 2, 3, 4};
//   rng.shuffle(v);                                // random.shuffle(v)
//   int64_t x = rng.choice(v);                     // random.choice(v)
//   auto big = loader::PythonRandom::from_decimal("123456789012345678901234567890");
//
// What is reproduced, and how (CPython's Modules/_randommodule.c and Lib/random.py):
//  - seeding with an int: init_by_array over the 32-bit words of |seed|, least significant
//    first (seed 0 is the one word 0).  Any size: uint64 here, or a decimal string, or the
//    words themselves.  (Seeding with str/bytes/None is not reproduced.)
//  - getrandbits(k): k <= 32: one 32-bit output >> (32 - k); k > 32: ceil(k/32) outputs, the
//    first one the least significant word, the last one keeping its top bits.
//  - random(): (a * 2^26 + b) / 2^53 with a = output >> 5, b = output >> 6.
//  - randbelow(n) (Python's _randbelow): getrandbits(n.bit_length()) until the value is < n.
//  - shuffle, choice, randint/randrange, sample: Python 3.11's algorithms on randbelow.
//
// Copyable: a copy continues the same stream independently.  Not synchronised.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace loader {

class PythonRandom {
 public:
  /// random.Random(seed).
  explicit PythonRandom(uint64_t seed = 0) { this->seed(seed); }

  /// random.Random(n) for an integer written in decimal, any size; a leading '-' is allowed
  /// (Python seeds with the absolute value).  Throws ValueError for anything else.
  static PythonRandom from_decimal(const std::string& decimal);

  /// random.seed(seed).
  void seed(uint64_t seed);
  /// random.seed(n) for the integer whose 32-bit words, least significant first, are `words`
  /// (high zero words are ignored, as they are not part of the integer; empty means 0).
  void seed_words(std::vector<uint32_t> words);
  /// random.seed(n) for a decimal integer (see from_decimal).
  void seed_decimal(const std::string& decimal);

  /// One raw 32-bit output of the twister (genrand_uint32).
  uint32_t next_uint32();
  /// random.getrandbits(k) for 0 <= k <= 64.  Throws ValueError for k < 0 and for k > 64
  /// (Python returns a larger int there; this class does not).
  uint64_t getrandbits(int k);
  /// random.random(): uniform in [0, 1).
  double random();
  /// random._randbelow(n): uniform in [0, n).  Throws ValueError when n == 0.
  uint64_t randbelow(uint64_t n);
  /// random.randrange(start, stop) with step 1: start + randbelow(stop - start).  Throws
  /// ValueError when start >= stop ("empty range in randrange(start, stop)").
  int64_t randrange(int64_t start, int64_t stop);
  /// random.randint(a, b) = randrange(a, b + 1).
  int64_t randint(int64_t a, int64_t b);

  /// random.shuffle(x): for i from len-1 down to 1, swap x[i] with x[randbelow(i + 1)].
  template <class T>
  void shuffle(std::vector<T>& x) {
    for (size_t i = x.size(); i-- > 1;) {
      const auto j = static_cast<size_t>(randbelow(static_cast<uint64_t>(i) + 1));
      std::swap(x[i], x[j]);
    }
  }

  /// random.choice(seq): seq[randbelow(len(seq))].  Throws IndexError when seq is empty.
  template <class T>
  const T& choice(const std::vector<T>& seq) {
    return seq[static_cast<size_t>(randbelow(checked_choice_size(seq.size())))];
  }

  /// random.sample(range(n), k): k distinct values of [0, n) in selection order, with
  /// Python's two algorithms (a shrinking pool for small n, rejection with a set otherwise),
  /// so the draws match.  Throws ValueError "Sample larger than population or is negative".
  std::vector<int64_t> sample(int64_t n, int64_t k);
  /// random.sample(population, k).
  template <class T>
  std::vector<T> sample(const std::vector<T>& population, int64_t k) {
    std::vector<T> out;
    for (int64_t i : sample(static_cast<int64_t>(population.size()), k)) out.push_back(population[static_cast<size_t>(i)]);
    return out;
  }

  /// The whole state as bytes (random.getstate()'s content, in this class's own layout),
  /// and back; set_state returns false, changing nothing, for bytes that are not a state.
  std::string state() const;
  bool set_state(const std::string& bytes);

 private:
  static constexpr int kN = 624;
  static uint64_t checked_choice_size(size_t n);
  void init_genrand(uint32_t s);
  void init_by_array(const std::vector<uint32_t>& key);

  std::array<uint32_t, kN> mt_{};
  int index_ = kN;
};

}  // namespace loader
