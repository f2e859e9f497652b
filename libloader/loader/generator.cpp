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

// randperm's steps above, one element at a time.  randperm keeps its own loop: built on
// LazyPermutation a whole pass of 250,000 took 5.3 ms instead of 2.3 ms here.
LazyPermutation::LazyPermutation(int64_t n, Generator& g)
    : n_(n > 0 ? n : 0), r_(static_cast<size_t>(n_)), source_(&g),
      rng_(g.lend(static_cast<uint64_t>(n_ > 1 ? n_ - 1 : 0), &ticket_)) {
  for (int64_t i = 0; i < n_; ++i) r_[static_cast<size_t>(i)] = i;
  if (n_ <= 1) {  // no draws: nothing owed
    source_->repay(ticket_, rng_);
    repaid_ = true;
  }
}

int64_t LazyPermutation::next() {
  const auto i = static_cast<size_t>(i_);
  if (i_ + 1 < n_) {  // randperm's step i (the last element needs no draw)
    int64_t z = static_cast<int64_t>(rng_.random() % static_cast<uint32_t>(n_ - i_));
    std::swap(r_[i], r_[i + static_cast<size_t>(z)]);
    if (i_ + 2 == n_) {  // that was the last draw
      source_->repay(ticket_, rng_);
      repaid_ = true;
    }
  }
  ++i_;
  return r_[i];
}

void LazyPermutation::finish() {
  if (repaid_) return;
  for (int64_t i = i_; i + 1 < n_; ++i) rng_.random();
  i_ = n_;
  source_->repay(ticket_, rng_);
  repaid_ = true;
}

}  // namespace loader

