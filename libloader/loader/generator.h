// PyTorch's CPU random number generator, bit for bit.
//
// MT19937 seeded with the low 32 bits of the seed (the full 64-bit seed is kept
// as initial_seed()), with the draws torch uses (DESIGN.md section 5):
//   random()   = one 32-bit output          random64() = two outputs, high word first
//   randperm   = r[i]=i; for i<n-1: swap(r[i], r[i + random() % (n-i)])
//   int64 random_() = random64() % 2^63     uniform double = (random64() & (2^53-1)) * 2^-53
//
//   loader::Generator g(42);
//   auto perm = loader::randperm(10, g);    // == torch.randperm(10, generator=g)
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "loader/mt19937.h"

namespace loader {

class Generator {
 public:
  /// torch.Generator()'s default seed (67280421310721).
  static constexpr uint64_t kDefaultSeed = 67280421310721ULL;

  explicit Generator(uint64_t seed = kDefaultSeed) { manual_seed(seed); }

  /// Re-seeds (torch.Generator.manual_seed); draws still owed (lend) are dropped.
  void manual_seed(uint64_t seed) {
    initial_seed_ = seed;
    engine_.seed_with(static_cast<uint32_t>(seed & 0xffffffffULL));
    owed_ = 0;
  }
  uint64_t initial_seed() const noexcept { return initial_seed_; }

  /// The whole state (engine + initial seed) as bytes, and back: a restarted worker
  /// resumes the stream exactly where its first unfinished task began.
  static constexpr size_t kStateBytes = sizeof(Mt19937) + sizeof(uint64_t);
  /// The saved state is the one after the draws still owed (lend), as if they were made.
  void save_state(unsigned char* out) const {
    if (owed_ != 0) {
      Mt19937 settled = engine_;
      settled.discard(owed_);
      std::memcpy(out, &settled, sizeof(Mt19937));
    } else {
      std::memcpy(out, &engine_, sizeof(Mt19937));
    }
    std::memcpy(out + sizeof(Mt19937), &initial_seed_, sizeof(uint64_t));
  }
  void load_state(const unsigned char* in) noexcept {
    std::memcpy(&engine_, in, sizeof(Mt19937));
    std::memcpy(&initial_seed_, in + sizeof(Mt19937), sizeof(uint64_t));
    owed_ = 0;
  }
  /// The same state as a string of kStateBytes bytes (DataLoader checkpoints).
  std::string state() const {
    std::string out(kStateBytes, '\0');
    save_state(reinterpret_cast<unsigned char*>(&out[0]));
    return out;
  }
  /// Loads a state() string; false, and nothing changed, when `bytes` is not one (wrong
  /// size, or an engine index no engine can have).
  bool set_state(const std::string& bytes) noexcept {
    if (bytes.size() != kStateBytes) return false;
    Mt19937 probe;
    std::memcpy(&probe, bytes.data(), sizeof(Mt19937));
    if (!probe.valid()) return false;
    load_state(reinterpret_cast<const unsigned char*>(bytes.data()));
    return true;
  }

  /// Whether this generator is in the state `o` is in, draws still owed included, without
  /// making them (state() settles a loan of k draws in O(k); this compares in O(1) memory
  /// words): what a mirror of a torch.Generator checks after every batch.
  bool same_state(const Generator& o) const noexcept {
    return owed_ == o.owed_ && initial_seed_ == o.initial_seed_ &&
           std::memcmp(&engine_, &o.engine_, sizeof(Mt19937)) == 0;
  }

  /// torch.Generator.get_state() of a CPU generator (torch 1.13's CPUGeneratorImplState,
  /// 5056 bytes: initial seed, `left`, `seeded`, `next`, the 624 words as uint64, the
  /// normal-sample caches).  torch_state(base) writes this generator's engine and initial
  /// seed over a copy of `base` (a state torch gave, whose normal-sample caches are kept:
  /// loader never draws normals) or over a fresh state when `base` is empty; the result
  /// goes to torch.Generator.set_state.  ValueError when `base` is not kTorchStateBytes.
  static constexpr size_t kTorchStateBytes = 5056;
  std::string torch_state(const std::string& base = {}) const;
  /// Takes torch.Generator.get_state()'s bytes: afterwards this generator draws what that
  /// torch generator would.  ValueError naming what is wrong for bytes that are not such
  /// a state (wrong size, an index no engine can have); nothing changed then.
  void set_torch_state(const std::string& bytes);

  /// Lends the next `k` draws to a consumer that makes them lazily (LazyPermutation):
  /// returns a copy of this stream for it to draw from, and records that this generator
  /// owes them.  Every later use of this generator makes the owed draws first (discards
  /// them), so what it returns is what it would return had the k draws been made now;
  /// unless `repay(ticket, copy)` came first, with the copy having made exactly those k
  /// draws: then the copy's state becomes this generator's, and nothing is discarded.
  Generator lend(uint64_t k, uint64_t* ticket) {
    settle();
    Generator copy = *this;
    owed_ = k;
    *ticket = ++ticket_;
    return copy;
  }
  /// See lend(): ignored when the loan was settled meanwhile (or another loan followed).
  void repay(uint64_t ticket, const Generator& copy) noexcept {
    if (owed_ != 0 && ticket == ticket_) {
      engine_ = copy.engine_;
      owed_ = 0;
    }
  }

  /// Makes `k` random() draws and drops them (what a skipped randperm or randint block
  /// draws), without tempering each output.
  void discard(uint64_t k) {
    settle();
    engine_.discard(k);
  }

  uint32_t random() {
    settle();
    return static_cast<uint32_t>(engine_());
  }
  uint64_t random64() {
    uint64_t hi = random();
    uint64_t lo = random();
    return (hi << 32) | lo;
  }
  /// torch.empty((), dtype=int64).random_(generator=g): random64() % 2^63.
  int64_t random_int64() { return static_cast<int64_t>(random64() % (1ULL << 63)); }
  /// Uniform double in [0, 1) with 53 random bits.
  double uniform_double() {
    return static_cast<double>(random64() & ((1ULL << 53) - 1)) * (1.0 / 9007199254740992.0);
  }
  /// torch.randint(high, ...) for one element: random() % high, or random64() % high
  /// when the range needs more than 32 bits.
  int64_t randint(int64_t high) {
    uint64_t range = static_cast<uint64_t>(high);
    if (range >= (1ULL << 32)) return static_cast<int64_t>(random64() % range);
    return static_cast<int64_t>(random() % static_cast<uint32_t>(range));
  }

 private:
  /// Makes the draws owed to a lent copy (see lend).
  void settle() {
    if (owed_ != 0) {
      engine_.discard(owed_);
      owed_ = 0;
    }
  }

  Mt19937 engine_;
  uint64_t initial_seed_ = kDefaultSeed;
  uint64_t owed_ = 0;    // draws lent to a copy and not yet made here or repaid
  uint64_t ticket_ = 0;  // the latest loan
};

/// The default generator (torch's default CPU generator), shared by the process like
/// PyTorch's.  Not synchronised: a loader's sampler draws from it (when no generator
/// was given) in the thread that iterates the loader (iter() and next(), with or
/// without workers), as PyTorch's does, so do not draw from it in another thread
/// meanwhile.  A worker (a child process, or an in-process worker thread with
/// a DefaultGeneratorScope) has its own, seeded with its worker seed.
Generator& default_generator();
/// torch.manual_seed(seed): re-seeds the default generator.
void manual_seed(uint64_t seed);

/// The seed of the epoch's index batch `index` under WorkerSeeding::PerTask: output
/// `index` of splitmix64 started at `base_seed`, i.e. the finaliser of
/// base_seed + (index + 1) * 0x9E3779B97F4A7C15.  Neighbouring indices get unrelated
/// seeds (a plain base_seed + index would give related mt19937 streams' seeds); the
/// generator takes the low 32 bits, as torch's manual_seed does.
uint64_t task_seed(uint64_t base_seed, uint64_t index);

/// Makes `g` the calling thread's default_generator() for the scope's lifetime.
class DefaultGeneratorScope {
 public:
  explicit DefaultGeneratorScope(Generator& g);
  ~DefaultGeneratorScope();
  DefaultGeneratorScope(const DefaultGeneratorScope&) = delete;
  DefaultGeneratorScope& operator=(const DefaultGeneratorScope&) = delete;

 private:
  Generator* previous_;
};

/// torch.randperm(n, generator=g) (CPU, int64), the recipe above.
std::vector<int64_t> randperm(int64_t n, Generator& g);

/// randperm(n, g), one element at a time: element i of the Fisher-Yates pass is final after
/// its step i, so the first elements cost O(1) each instead of the whole pass (randperm of
/// 250,000 takes about 2 ms).  The draws come from a copy of g lent by Generator::lend; g
/// owes them until the permutation has made them all and repays them, so any other use of
/// g meanwhile sees exactly the stream it would see had randperm(n, g) run at once.
///
///   LazyPermutation p(n, g);            // same elements, same order as randperm(n, g)
///   while (p.remaining() > 0) use(p.next());
///
/// Not thread-safe (like Generator); `g` must outlive the permutation.  Move-only.
class LazyPermutation {
 public:
  LazyPermutation(int64_t n, Generator& g);
  int64_t remaining() const noexcept { return n_ - i_; }
  /// The next element; remaining() must be > 0.
  int64_t next();
  /// Appends the next m elements to `out` (m <= remaining()): m calls of next().
  void take(std::vector<int64_t>& out, size_t m);
  /// Drops the next m elements (m <= remaining()): m calls of next(), whose swaps the
  /// elements after them need, without handing the elements out.
  void skip(size_t m);
  /// Makes the draws the rest of the pass would make (without the swaps) and repays g:
  /// for a caller that stops early (randperm(n)[:k]), so g is not left owing them.  Frees
  /// the slots; remaining() is 0 afterwards.
  void finish();

 private:
  // Step i swaps r[i] with r[i + z_i], a random place in an array of n: a cache miss per
  // step once n is large.  The draws do not depend on the array, so they are made
  // kLookahead steps early and the place each will touch is prefetched; elements are
  // kept as uint32 while n fits (half the cache footprint of int64).  The slots start
  // zero-filled and slot j holds its element + 1, 0 meaning "element j is still at place
  // j": no pass writes the identity first, and no page is written before the pass
  // touches it, so the first elements cost O(1) also for a large n (slots_of in
  // generator.cpp: 0.02–0.07 ms for the first 1024 of 10^6 elements, against 1.3 ms).
  static constexpr int64_t kLookahead = 16;
  struct SlotsDeleter {
    SlotsDeleter() noexcept {}
    size_t mapped_bytes = 0;  ///< 0: from calloc
    size_t used_bytes = 0;    ///< the bytes the pass may have written (a mapping's first ones)
    void operator()(void* p) const noexcept;
  };
  static void* slots_of(size_t count, size_t size, SlotsDeleter& deleter);
  template <class T>
  int64_t step(T* r);
  void draw_ahead(int64_t upto);
  bool wide() const noexcept { return static_cast<bool>(r64_); }  // n >= 2^32: uint64 slots

  int64_t n_;
  int64_t i_ = 0;
  int64_t drawn_ = 0;                // steps whose z was drawn (and prefetched)
  uint32_t ahead_[kLookahead] = {};  // z of step j at ahead_[j % kLookahead]
  std::unique_ptr<uint32_t[], SlotsDeleter> r32_;  // the slots while n < 2^32
  std::unique_ptr<uint64_t[], SlotsDeleter> r64_;  // otherwise
  Generator* source_;
  Generator rng_;
  uint64_t ticket_ = 0;
  bool repaid_ = false;
};

}  // namespace loader
