#include "loader/generator.h"

#include <algorithm>
#include <type_traits>
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
  // z of step i is drawn kAhead steps early and the element it swaps with is prefetched
  // (the draws do not depend on the array; see LazyPermutation).
  constexpr int64_t kAhead = 16;
  uint32_t ahead[kAhead];
  int64_t drawn = 0;
  for (int64_t i = 0; i + 1 < n; ++i) {
    for (; drawn < n - 1 && drawn < i + kAhead; ++drawn) {
      const auto z = static_cast<uint32_t>(g.random() % static_cast<uint32_t>(n - drawn));
      ahead[drawn % kAhead] = z;
      __builtin_prefetch(&r[static_cast<size_t>(drawn) + z], 1);
    }
    std::swap(r[static_cast<size_t>(i)], r[static_cast<size_t>(i) + ahead[i % kAhead]]);
  }
  return r;
}

// randperm's steps above, one element at a time.  randperm keeps its own loop: it fills
// its int64 result in place, with no per-element call.
LazyPermutation::LazyPermutation(int64_t n, Generator& g)
    : n_(n > 0 ? n : 0), source_(&g),
      rng_(g.lend(static_cast<uint64_t>(n_ > 1 ? n_ - 1 : 0), &ticket_)) {
  auto fill = [](auto& r, int64_t size) {
    r.resize(static_cast<size_t>(size));
    for (size_t i = 0; i < r.size(); ++i) r[i] = static_cast<typename std::decay_t<decltype(r)>::value_type>(i);
  };
  if (static_cast<uint64_t>(n_) <= (uint64_t{1} << 32))
    fill(r32_, n_);
  else
    fill(r64_, n_);
  if (n_ <= 1) {  // no draws: nothing owed
    source_->repay(ticket_, rng_);
    repaid_ = true;
  }
}

// Draws the z of every step below `upto` not drawn yet (never past the pass's n - 1
// draws) and prefetches the element each will swap with.
void LazyPermutation::draw_ahead(int64_t upto) {
  upto = std::min(upto, n_ - 1);
  for (; drawn_ < upto; ++drawn_) {
    const auto z = static_cast<uint32_t>(rng_.random() % static_cast<uint32_t>(n_ - drawn_));
    ahead_[drawn_ % kLookahead] = z;
    const auto at = static_cast<size_t>(drawn_) + z;
    if (wide())
      __builtin_prefetch(&r64_[at], 1);
    else
      __builtin_prefetch(&r32_[at], 1);
  }
  if (drawn_ == n_ - 1 && !repaid_) {  // the pass's last draw was made
    source_->repay(ticket_, rng_);
    repaid_ = true;
  }
}

template <class T>
int64_t LazyPermutation::step(std::vector<T>& r) {
  const auto i = static_cast<size_t>(i_);
  if (i_ + 1 < n_) {  // randperm's step i (the last element needs no draw)
    if (drawn_ <= i_) draw_ahead(i_ + kLookahead);
    std::swap(r[i], r[i + ahead_[i_ % kLookahead]]);
  }
  ++i_;
  return static_cast<int64_t>(r[i]);
}

int64_t LazyPermutation::next() { return wide() ? step(r64_) : step(r32_); }

void LazyPermutation::take(std::vector<int64_t>& out, size_t m) {
  if (wide())
    for (size_t j = 0; j < m; ++j) out.push_back(step(r64_));
  else
    for (size_t j = 0; j < m; ++j) out.push_back(step(r32_));
}

void LazyPermutation::finish() {
  if (repaid_) return;
  for (int64_t i = drawn_; i + 1 < n_; ++i) rng_.random();
  drawn_ = n_ > 0 ? n_ - 1 : 0;
  i_ = n_;
  source_->repay(ticket_, rng_);
  repaid_ = true;
}

}  // namespace loader

