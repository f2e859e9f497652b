// random_split: PyTorch 1.13's torch.utils.data.random_split, as index lists.
//
// Lengths are integers (they must sum to n) or fractions (they must sum to 1; each
// split gets floor(n * f) and the remainder is handed out one by one, round-robin
// from the first split).  The indices are torch.randperm(n, generator) cut into
// consecutive pieces, so the same seed gives PyTorch's exact splits.
//
//   auto g = std::make_shared<loader::Generator>(1);
//   auto splits = loader::random_split(10, {3, 7}, g);
//   // {{5, 6, 1}, {2, 0, 8, 9, 3, 7, 4}}  == random_split(range(10), [3, 7], Generator().manual_seed(1))
//   auto thirds = loader::random_split(100, {0.3, 0.3, 0.4});   // default generator
//
// A dataset-level overload returning Subsets lives beside Subset (datasets.h).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "loader/generator.h"

namespace loader {

/// random_split's `lengths`: all integers, or fractions (Python floats).  A braced list
/// of integer literals is integers, one with any decimal literal is fractions.
class SplitLengths {
 public:
  SplitLengths(std::initializer_list<int> lengths);         // NOLINT(google-explicit-constructor)
  SplitLengths(std::initializer_list<double> fractions);    // NOLINT(google-explicit-constructor)
  SplitLengths(const std::vector<int64_t>& lengths);        // NOLINT(google-explicit-constructor)
  SplitLengths(const std::vector<int>& lengths);            // NOLINT(google-explicit-constructor)
  SplitLengths(const std::vector<double>& fractions);       // NOLINT(google-explicit-constructor)

  bool integers() const noexcept { return integers_; }
  const std::vector<int64_t>& int_values() const noexcept { return ints_; }
  const std::vector<double>& values() const noexcept { return values_; }
  size_t size() const noexcept { return values_.size(); }

 private:
  bool integers_;
  std::vector<int64_t> ints_;   // when integers_
  std::vector<double> values_;  // always (the integers as doubles too)
};

/// random_split(range(n), lengths, generator): the dataset indices of each split.
/// A null generator draws from the default generator (loader::default_generator()).
/// Throws ValueError "Sum of input lengths does not equal the length of the input
/// dataset!" or "Fraction at index i is not between 0 and 1", and TypeError for
/// non-fraction float lengths (PyTorch fails in randperm there).  A split of length 0
/// from fractions warns "Length of split at index i is 0. This might result in an
/// empty dataset." through loader::warn.
std::vector<std::vector<int64_t>> random_split(int64_t n, const SplitLengths& lengths,
                                               std::shared_ptr<Generator> generator = nullptr);

/// The lengths random_split would use (fractions resolved), without drawing anything.
/// Same errors and warnings as random_split.
std::vector<int64_t> random_split_lengths(int64_t n, const SplitLengths& lengths);

}  // namespace loader
