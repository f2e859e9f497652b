#include "loader/random_split.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "loader/error.h"
#include "loader/warnings.h"

namespace loader {

namespace {

/// Python's math.isclose(a, b) with the default rel_tol=1e-09, abs_tol=0.
bool is_close(double a, double b) {
  if (a == b) return true;
  if (std::isinf(a) || std::isinf(b)) return false;
  double diff = std::fabs(b - a);
  return diff <= std::fabs(1e-9 * b) || diff <= std::fabs(1e-9 * a);
}

/// Python's sequence[start:stop] for a step of 1 (negative bounds count from the end).
std::vector<int64_t> py_slice(const std::vector<int64_t>& v, int64_t start, int64_t stop) {
  const int64_t len = static_cast<int64_t>(v.size());
  auto clamp = [len](int64_t i) {
    if (i < 0) i += len;
    return std::min(std::max<int64_t>(i, 0), len);
  };
  start = clamp(start);
  stop = clamp(stop);
  if (stop <= start) return {};
  return std::vector<int64_t>(v.begin() + start, v.begin() + stop);
}

}  // namespace

SplitLengths::SplitLengths(std::initializer_list<int> lengths)
    : SplitLengths(std::vector<int64_t>(lengths.begin(), lengths.end())) {}

SplitLengths::SplitLengths(std::initializer_list<double> fractions)
    : SplitLengths(std::vector<double>(fractions.begin(), fractions.end())) {}

SplitLengths::SplitLengths(const std::vector<int64_t>& lengths)
    : integers_(true), ints_(lengths), values_(lengths.begin(), lengths.end()) {}

SplitLengths::SplitLengths(const std::vector<int>& lengths)
    : SplitLengths(std::vector<int64_t>(lengths.begin(), lengths.end())) {}

SplitLengths::SplitLengths(const std::vector<double>& fractions) : integers_(false), values_(fractions) {}

std::vector<int64_t> random_split_lengths(int64_t n, const SplitLengths& lengths) {
  if (n < 0) throw ValueError("random_split: the dataset length must be >= 0, but got " + std::to_string(n));
  // Python's sum(): integers exactly, floats left to right.
  double sum = 0.0;
  int64_t int_sum = 0;
  for (double v : lengths.values()) sum += v;
  for (int64_t v : lengths.int_values()) int_sum += v;
  const bool sums_to_one = lengths.integers() ? int_sum == 1 : (is_close(sum, 1.0) && sum <= 1.0);

  std::vector<int64_t> result;
  if (sums_to_one) {
    // Fractions: floor(n * f) each, then +1 round-robin from index 0 until all n are used.
    for (size_t i = 0; i < lengths.size(); ++i) {
      double frac = lengths.values()[i];
      if (frac < 0 || frac > 1)
        throw ValueError("Fraction at index " + std::to_string(i) + " is not between 0 and 1");
      result.push_back(static_cast<int64_t>(std::floor(static_cast<double>(n) * frac)));
    }
    int64_t assigned = 0;
    for (int64_t v : result) assigned += v;
    const int64_t remainder = n - assigned;
    for (int64_t i = 0; i < remainder; ++i) result[static_cast<size_t>(i) % result.size()] += 1;
    for (size_t i = 0; i < result.size(); ++i)
      if (result[i] == 0)
        warn("Length of split at index " + std::to_string(i) + " is 0. This might result in an empty dataset.");
  } else if (lengths.integers() || lengths.size() == 0) {
    result = lengths.int_values();  // (sum([]) is the integer 0 in Python too)
  } else {
    if (sum != static_cast<double>(n))
      throw ValueError("Sum of input lengths does not equal the length of the input dataset!");
    // PyTorch goes on to torch.randperm(<float sum>), which raises TypeError.
    throw TypeError(
        "random_split: float lengths must be fractions summing to 1; to give counts, pass integer "
        "lengths (PyTorch raises TypeError from randperm() here)");
  }
  int64_t total = 0;
  for (int64_t v : result) total += v;
  if (total != n) throw ValueError("Sum of input lengths does not equal the length of the input dataset!");
  return result;
}

std::vector<std::vector<int64_t>> random_split(int64_t n, const SplitLengths& lengths,
                                               std::shared_ptr<Generator> generator) {
  const std::vector<int64_t> sizes = random_split_lengths(n, lengths);
  // indices = randperm(sum(lengths)); split i = indices[offset - length : offset].
  const std::vector<int64_t> indices = randperm(n, generator ? *generator : default_generator());
  std::vector<std::vector<int64_t>> splits;
  splits.reserve(sizes.size());
  int64_t offset = 0;
  for (int64_t length : sizes) {
    offset += length;
    splits.push_back(py_slice(indices, offset - length, offset));
  }
  return splits;
}

}  // namespace loader
