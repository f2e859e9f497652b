#include "loader/python_random.h"

#include <cmath>
#include <cstring>
#include <unordered_set>

#include "loader/error.h"

namespace loader {

// ------------------------------------------------------------------ seeding
//
// CPython's random_seed(): key = the 32-bit words of |n|, least significant first, at least
// one word; then the reference init_by_array() of MT19937 (Matsumoto & Nishimura, 2002).

void PythonRandom::init_genrand(uint32_t s) {
  mt_[0] = s;
  for (int i = 1; i < kN; ++i) mt_[i] = 1812433253U * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  index_ = kN;
}

void PythonRandom::init_by_array(const std::vector<uint32_t>& key) {
  init_genrand(19650218U);
  const size_t length = key.size();
  int i = 1;
  size_t j = 0;
  for (size_t k = (static_cast<size_t>(kN) > length ? kN : length); k; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525U)) + key[j] + static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
    if (j >= length) j = 0;
  }
  for (int k = kN - 1; k; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941U)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000U;  // MSB is 1, assuring a non-zero initial array
  index_ = kN;
}

std::string PythonRandom::state() const {
  std::string out(sizeof(mt_) + 4, '\0');
  std::memcpy(&out[0], mt_.data(), sizeof(mt_));
  const auto index = static_cast<uint32_t>(index_);
  std::memcpy(&out[sizeof(mt_)], &index, 4);
  return out;
}

bool PythonRandom::set_state(const std::string& bytes) {
  if (bytes.size() != sizeof(mt_) + 4) return false;
  uint32_t index = 0;
  std::memcpy(&index, &bytes[sizeof(mt_)], 4);
  if (index > static_cast<uint32_t>(kN)) return false;
  std::memcpy(mt_.data(), bytes.data(), sizeof(mt_));
  index_ = static_cast<int>(index);
  return true;
}

void PythonRandom::seed(uint64_t seed) {
  seed_words({static_cast<uint32_t>(seed & 0xffffffffU), static_cast<uint32_t>(seed >> 32)});
}

void PythonRandom::seed_words(std::vector<uint32_t> words) {
  while (!words.empty() && words.back() == 0) words.pop_back();
  if (words.empty()) words.push_back(0);
  init_by_array(words);
}

void PythonRandom::seed_decimal(const std::string& decimal) {
  size_t pos = (!decimal.empty() && (decimal[0] == '-' || decimal[0] == '+')) ? 1 : 0;
  if (pos == decimal.size())
    throw ValueError("PythonRandom: the seed '" + decimal + "' is not a decimal integer (expected digits, e.g. 42)");
  std::vector<uint32_t> words;  // |n| in base 2^32, least significant first
  for (; pos < decimal.size(); ++pos) {
    const char c = decimal[pos];
    if (c < '0' || c > '9')
      throw ValueError("PythonRandom: the seed '" + decimal + "' is not a decimal integer (unexpected '" +
                       std::string(1, c) + "')");
    uint64_t carry = static_cast<uint64_t>(c - '0');
    for (uint32_t& w : words) {
      const uint64_t v = static_cast<uint64_t>(w) * 10 + carry;
      w = static_cast<uint32_t>(v);
      carry = v >> 32;
    }
    if (carry) words.push_back(static_cast<uint32_t>(carry));
  }
  seed_words(std::move(words));
}

PythonRandom PythonRandom::from_decimal(const std::string& decimal) {
  PythonRandom r;
  r.seed_decimal(decimal);
  return r;
}

// ------------------------------------------------------------------ draws

uint32_t PythonRandom::next_uint32() {
  constexpr uint32_t kUpper = 0x80000000U, kLower = 0x7fffffffU, kMatrixA = 0x9908b0dfU;
  constexpr int kM = 397;
  if (index_ >= kN) {  // generate kN words at one time
    int k = 0;
    for (; k < kN - kM; ++k) {
      const uint32_t y = (mt_[k] & kUpper) | (mt_[k + 1] & kLower);
      mt_[k] = mt_[k + kM] ^ (y >> 1) ^ ((y & 1U) ? kMatrixA : 0U);
    }
    for (; k < kN - 1; ++k) {
      const uint32_t y = (mt_[k] & kUpper) | (mt_[k + 1] & kLower);
      mt_[k] = mt_[k + (kM - kN)] ^ (y >> 1) ^ ((y & 1U) ? kMatrixA : 0U);
    }
    const uint32_t y = (mt_[kN - 1] & kUpper) | (mt_[0] & kLower);
    mt_[kN - 1] = mt_[kM - 1] ^ (y >> 1) ^ ((y & 1U) ? kMatrixA : 0U);
    index_ = 0;
  }
  uint32_t y = mt_[index_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680U;
  y ^= (y << 15) & 0xefc60000U;
  y ^= (y >> 18);
  return y;
}

uint64_t PythonRandom::getrandbits(int k) {
  if (k < 0) throw ValueError("number of bits must be non-negative");
  if (k > 64)
    throw ValueError("PythonRandom::getrandbits(" + std::to_string(k) +
                     "): at most 64 bits per call here (Python returns a larger int); draw several values instead");
  if (k == 0) return 0;
  if (k <= 32) return next_uint32() >> (32 - k);
  const uint64_t low = next_uint32();                   // first word: least significant
  const uint64_t high = next_uint32() >> (64 - k);      // last word keeps its top k - 32 bits
  return low | (high << 32);
}

double PythonRandom::random() {
  const uint32_t a = next_uint32() >> 5, b = next_uint32() >> 6;
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

uint64_t PythonRandom::randbelow(uint64_t n) {
  if (n == 0) throw ValueError("PythonRandom::randbelow(0): the range [0, 0) is empty; n must be positive");
  int k = 0;  // n.bit_length()
  for (uint64_t v = n; v; v >>= 1) ++k;
  uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

int64_t PythonRandom::randrange(int64_t start, int64_t stop) {
  if (start >= stop) {
    // Python's message shows the width, stop - start (computed without overflow here).
    const long double width = static_cast<long double>(stop) - static_cast<long double>(start);
    throw ValueError("empty range for randrange() (" + std::to_string(start) + ", " + std::to_string(stop) + ", " +
                     std::to_string(static_cast<long long>(width)) + ")");
  }
  const uint64_t width = static_cast<uint64_t>(stop) - static_cast<uint64_t>(start);
  return static_cast<int64_t>(static_cast<uint64_t>(start) + randbelow(width));
}

int64_t PythonRandom::randint(int64_t a, int64_t b) {
  if (b == INT64_MAX) {  // b + 1 overflows int64: same draw, done in unsigned arithmetic
    if (a == INT64_MIN) return static_cast<int64_t>(getrandbits(64));
    return static_cast<int64_t>(static_cast<uint64_t>(a) +
                                randbelow(static_cast<uint64_t>(b) - static_cast<uint64_t>(a) + 1));
  }
  return randrange(a, b + 1);
}

uint64_t PythonRandom::checked_choice_size(size_t n) {
  if (n == 0) throw IndexError("Cannot choose from an empty sequence");
  return static_cast<uint64_t>(n);
}

std::vector<int64_t> PythonRandom::sample(int64_t n, int64_t k) {
  if (k < 0 || n < 0 || k > n) throw ValueError("Sample larger than population or is negative");
  std::vector<int64_t> result(static_cast<size_t>(k));
  // setsize = 21 + (4 ** ceil(log(3k, 4)) when k > 5): decides between Python's two paths.
  bool use_pool = n <= 21;
  if (k > 5) {
    const double e = std::ceil(std::log(static_cast<double>(k * 3)) / std::log(4.0));
    use_pool = e >= 31 || n <= 21 + (int64_t{1} << (2 * static_cast<int>(e)));
  }
  if (use_pool) {
    // Invariant: the values not yet selected are pool[0 : n - i].
    std::vector<int64_t> pool(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) pool[static_cast<size_t>(i)] = i;
    for (int64_t i = 0; i < k; ++i) {
      const auto j = static_cast<size_t>(randbelow(static_cast<uint64_t>(n - i)));
      result[static_cast<size_t>(i)] = pool[j];
      pool[j] = pool[static_cast<size_t>(n - i - 1)];
    }
  } else {
    std::unordered_set<int64_t> selected;
    for (int64_t i = 0; i < k; ++i) {
      auto j = static_cast<int64_t>(randbelow(static_cast<uint64_t>(n)));
      while (selected.count(j)) j = static_cast<int64_t>(randbelow(static_cast<uint64_t>(n)));
      selected.insert(j);
      result[static_cast<size_t>(i)] = j;
    }
  }
  return result;
}

}  // namespace loader
