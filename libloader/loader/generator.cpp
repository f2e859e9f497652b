#include "loader/generator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <utility>

#include <sys/mman.h>
#include <unistd.h>

#include "loader/detail/splitmix64.h"
#include "loader/error.h"

namespace loader {

namespace {
thread_local Generator* tls_override = nullptr;
}

// ------------------------------------------------------------------ torch's saved state
// torch 1.13, aten/src/ATen/CPUGeneratorImpl.cpp: get_state() writes
//   struct THGeneratorState { uint64 the_initial_seed; int left; int seeded; uint64 next;
//                             uint64 state[624]; double normal_x, normal_y, normal_rho;
//                             int normal_is_valid; };                        // 5048 bytes
//   struct { THGeneratorState legacy_pod; float next_float_normal_sample;
//            bool is_next_float_normal_sample_valid; };                      // 5056 bytes
// at::mt19937 decrements `left` before each output and regenerates when it reaches 0:
// after seeding left = 1, next = 0; after k outputs of a block, next = k, left = 625 - k.
// Our engine's index is the next word to temper, kN meaning "regenerate first", so
// index = (left == 1 ? 624 : next) and back left = 625 - index, next = index.
namespace {
constexpr size_t kTorchSeedAt = 0, kTorchLeftAt = 8, kTorchSeededAt = 12, kTorchNextAt = 16, kTorchWordsAt = 24;
}  // namespace

std::string Generator::torch_state(const std::string& base) const {
  if (!base.empty() && base.size() != kTorchStateBytes)
    throw ValueError("torch_state: a torch.Generator state has " + std::to_string(kTorchStateBytes) + " bytes, got " +
                     std::to_string(base.size()));
  std::string out = base.empty() ? std::string(kTorchStateBytes, '\0') : base;
  Mt19937 e = engine_;
  if (owed_ != 0) e.discard(owed_);
  const uint32_t index = e.index();
  const uint64_t seed = initial_seed_;
  const int32_t left = static_cast<int32_t>(625 - index), seeded = 1;
  const uint64_t next = index;
  std::memcpy(&out[kTorchSeedAt], &seed, 8);
  std::memcpy(&out[kTorchLeftAt], &left, 4);
  std::memcpy(&out[kTorchSeededAt], &seeded, 4);
  std::memcpy(&out[kTorchNextAt], &next, 8);
  for (int i = 0; i < Mt19937::kN; ++i) {
    const uint64_t w = e.words()[i];
    std::memcpy(&out[kTorchWordsAt + 8 * static_cast<size_t>(i)], &w, 8);
  }
  return out;
}

void Generator::set_torch_state(const std::string& bytes) {
  if (bytes.size() != kTorchStateBytes)
    throw ValueError("set_torch_state: a torch.Generator (CPU) state has " + std::to_string(kTorchStateBytes) +
                     " bytes, got " + std::to_string(bytes.size()) + " (is it a CUDA generator's?)");
  uint64_t seed = 0, next = 0;
  int32_t left = 0;
  std::memcpy(&seed, &bytes[kTorchSeedAt], 8);
  std::memcpy(&left, &bytes[kTorchLeftAt], 4);
  std::memcpy(&next, &bytes[kTorchNextAt], 8);
  if (left < 1 || left > 625 || next > 624)
    throw ValueError("set_torch_state: not a torch.Generator state (left " + std::to_string(left) + ", next " +
                     std::to_string(next) + ")");
  uint32_t words[Mt19937::kN];
  for (int i = 0; i < Mt19937::kN; ++i) {
    uint64_t w = 0;
    std::memcpy(&w, &bytes[kTorchWordsAt + 8 * static_cast<size_t>(i)], 8);
    words[i] = static_cast<uint32_t>(w);
  }
  Mt19937 e;
  e.assign(words, left == 1 ? static_cast<uint32_t>(Mt19937::kN) : static_cast<uint32_t>(next));
  engine_ = e;
  initial_seed_ = seed;
  owed_ = 0;
}

Generator& default_generator() {
  static Generator global;
  return tls_override ? *tls_override : global;
}

DefaultGeneratorScope::DefaultGeneratorScope(Generator& g) : previous_(tls_override) { tls_override = &g; }
DefaultGeneratorScope::~DefaultGeneratorScope() { tls_override = previous_; }

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

uint64_t task_seed(uint64_t base_seed, uint64_t index) {
  return detail::splitmix64_mix(base_seed + (index + 1) * detail::kSplitmix64Gamma);
}

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

// ------------------------------------------------------------------ LazyPermutation
namespace {
// Slots of at least this many bytes are mapped on their own (see slots_of).
constexpr size_t kMapSlots = size_t{128} << 10;  // glibc maps calloc blocks this large anew

// The mapping of the last large pass that ended, kept for the next one (an epoch's
// sampler follows the previous one's): zeroed in order as it is given back, instead of
// faulting in again page by page in the next pass.  One per process, at most kMaxSpare
// bytes (a pass of 16 M elements), so a larger pass leaves nothing held.
constexpr size_t kMaxSpare = size_t{64} << 20;
struct SpareSlots {
  std::mutex mu;
  void* p = nullptr;
  size_t bytes = 0;
};
SpareSlots& spare_slots() {
  static auto* spare = new SpareSlots;  // never destroyed: deleters may run at exit
  return *spare;
}
}  // namespace

void LazyPermutation::SlotsDeleter::operator()(void* p) const noexcept {
  if (mapped_bytes == 0) {
    std::free(p);
    return;
  }
  auto& spare = spare_slots();
  auto keep = [&] { return mapped_bytes <= kMaxSpare && spare.bytes <= mapped_bytes; };  // the larger one
  void* drop = p;
  size_t drop_bytes = mapped_bytes;
  {
    std::unique_lock<std::mutex> lock(spare.mu);
    if (keep()) {
      lock.unlock();
      // Zeroed now, as the pass ends (its last batches are still on their way), not when
      // the next pass starts and its first batch waits.  Past used_bytes it is still zero.
      std::memset(p, 0, used_bytes);
      lock.lock();
      if (keep()) {
        std::swap(drop, spare.p);
        std::swap(drop_bytes, spare.bytes);
      }
    }
  }
  if (drop) ::munmap(drop, drop_bytes);
}

// Zero-filled slots (see the header).  Large ones get their own anonymous mapping: the
// spare one of the previous pass when it is large enough (zeroed already), or a new one,
// whose pages the pass faults in where it first touches them.  (Not marked for
// transparent huge pages: with the kernel's default defrag=madvise such a fault may
// compact memory first, seen here as 8 ms stalls of the first batch.)  Small ones come
// from calloc.
void* LazyPermutation::slots_of(size_t count, size_t size, SlotsDeleter& deleter) {
  count = std::max<size_t>(count, 1);
  const size_t bytes = count * size;
  if (bytes < kMapSlots) {
    void* p = std::calloc(count, size);
    if (!p) throw std::bad_alloc();
    return p;
  }
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t mapped = (bytes + page - 1) / page * page;
  {
    auto& spare = spare_slots();
    std::lock_guard<std::mutex> lock(spare.mu);
    if (spare.p && spare.bytes >= mapped) {
      void* p = spare.p;
      deleter.mapped_bytes = spare.bytes;
      deleter.used_bytes = bytes;
      spare.p = nullptr;
      spare.bytes = 0;
      return p;
    }
  }
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  deleter.mapped_bytes = mapped;
  deleter.used_bytes = bytes;
  return p;
}

LazyPermutation::LazyPermutation(int64_t n, Generator& g)
    : n_(n > 0 ? n : 0), source_(&g),
      rng_(g.lend(static_cast<uint64_t>(n_ > 1 ? n_ - 1 : 0), &ticket_)) {
  const bool narrow = static_cast<uint64_t>(n_) < (uint64_t{1} << 32);
  SlotsDeleter d;
  void* p = slots_of(static_cast<size_t>(n_), narrow ? sizeof(uint32_t) : sizeof(uint64_t), d);
  if (narrow)
    r32_ = std::unique_ptr<uint32_t[], SlotsDeleter>(static_cast<uint32_t*>(p), d);
  else
    r64_ = std::unique_ptr<uint64_t[], SlotsDeleter>(static_cast<uint64_t*>(p), d);
  if (n_ <= 1) {  // no draws: nothing owed
    source_->repay(ticket_, rng_);
    repaid_ = true;
  }
}

// Draws the z of every step below `upto` not drawn yet (never past the pass's n - 1
// draws) and prefetches the slot each will swap with.
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

// randperm's step i: swap places i and j = i + z_i, and place i is final.  No later step
// reads place i (each reads only places at or after its own), so only place j is written.
template <class T>
int64_t LazyPermutation::step(T* r) {
  const auto i = static_cast<uint64_t>(i_);
  auto element_at = [r](uint64_t place) -> uint64_t {
    const T v = r[place];
    return v != 0 ? static_cast<uint64_t>(v) - 1 : place;
  };
  uint64_t out;
  if (i_ + 1 < n_) {  // the last element needs no draw
    if (drawn_ <= i_) draw_ahead(i_ + kLookahead);
    const uint64_t j = i + ahead_[i_ % kLookahead];
    out = element_at(j);
    if (j != i) r[j] = static_cast<T>(element_at(i) + 1);
  } else {
    out = element_at(i);
  }
  ++i_;
  return static_cast<int64_t>(out);
}

int64_t LazyPermutation::next() { return wide() ? step(r64_.get()) : step(r32_.get()); }

void LazyPermutation::take(std::vector<int64_t>& out, size_t m) {
  if (wide())
    for (size_t j = 0; j < m; ++j) out.push_back(step(r64_.get()));
  else
    for (size_t j = 0; j < m; ++j) out.push_back(step(r32_.get()));
}

void LazyPermutation::skip(size_t m) {
  if (wide())
    for (size_t j = 0; j < m; ++j) (void)step(r64_.get());
  else
    for (size_t j = 0; j < m; ++j) (void)step(r32_.get());
}

void LazyPermutation::finish() {
  // No element will be taken any more: the slots go now (to the spare, zeroed).
  r32_.reset();
  r64_.reset();
  i_ = n_;
  if (repaid_) return;
  for (int64_t i = drawn_; i + 1 < n_; ++i) rng_.random();
  drawn_ = n_ > 0 ? n_ - 1 : 0;
  source_->repay(ticket_, rng_);
  repaid_ = true;
}

}  // namespace loader
