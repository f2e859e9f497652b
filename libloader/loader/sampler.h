// Samplers: what order a DataLoader visits a dataset in.
//
// A sampler is restartable: each `iter()` starts one pass (one epoch), like
// Python's `iter(sampler)`.  Work a pass does (seed draws, permutations) happens
// lazily at the first `next()`, as in PyTorch's generator-based `__iter__`, so the
// draw order matches PyTorch's exactly.
//
// Writing your own: derive from `Sampler` (yields indices) or `BatchSamplerBase`
// (yields lists of indices) and implement `iter()` and, when known, `size()`.  A pass
// (a Cursor) may also override `skip(k)` when it can drop elements faster than it
// yields them: a resumed epoch skips the batches its checkpoint had consumed.
//
//   class EveryOther : public loader::Sampler {
//    public:
//     explicit EveryOther(int64_t n) : n_(n) {}
//     std::unique_ptr<loader::Cursor<int64_t>> iter() override {
//       return loader::make_cursor<int64_t>([i = int64_t{0}, n = n_]() mutable
//           -> std::optional<int64_t> { if (i >= n) return std::nullopt; int64_t r = i; i += 2; return r; });
//     }
//     std::optional<int64_t> size() const override { return (n_ + 1) / 2; }
//    private:
//     int64_t n_;
//   };
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace loader {

/// One pass over a sequence: next() returns the next element or nullopt at the end.
template <class T>
class Cursor {
 public:
  virtual ~Cursor() = default;
  virtual std::optional<T> next() = 0;
  /// Appends up to `k` next elements to `out` and returns how many it appended: fewer
  /// than k only when the pass ended.  The same elements, in the same order, as k calls
  /// of next(); cursors on the batch path override it to skip the call per element.
  virtual size_t next_many(std::vector<T>& out, size_t k) {
    size_t got = 0;
    for (; got < k; ++got) {
      std::optional<T> v = next();
      if (!v) break;
      out.push_back(std::move(*v));
    }
    return got;
  }
  /// Drops the next `k` elements: the same as k calls of next() whose elements are
  /// dropped (the same draws from the same generators, in the same order, and the same
  /// state afterwards, so next() then returns what it would have), and returns how many
  /// it dropped: fewer than k only when the pass ended, and then the call of next() that
  /// found the end was made too (with the draws a pass makes as it ends).  The default
  /// pulls and drops; a cursor that can jump (a position in a list, a keyed shuffle) or
  /// make its draws without building the elements overrides it, since resuming a
  /// checkpointed epoch skips the tasks it had consumed (TaskSource::fast_forward).
  virtual size_t skip(size_t k) {
    size_t got = 0;
    for (; got < k; ++got)
      if (!next()) break;
    return got;
  }
};

/// A cursor from a callable returning std::optional<T>.
template <class T, class F>
class FunctionCursor final : public Cursor<T> {
 public:
  explicit FunctionCursor(F f) : f_(std::move(f)) {}
  std::optional<T> next() override { return f_(); }

 private:
  F f_;
};

template <class T, class F>
std::unique_ptr<Cursor<T>> make_cursor(F f) {
  return std::make_unique<FunctionCursor<T, F>>(std::move(f));
}

/// A random-number stream a sampler draws from, other than the default generator
/// (loader::default_generator()): a DataLoader checkpoint (DataLoader::state_dict)
/// saves its state when an epoch begins and replays the epoch's draws from it.
struct RandomStream {
  const void* identity = nullptr;                 ///< the stream's object (one stream, one entry)
  std::function<std::string()> save;              ///< its whole state, as bytes
  /// Loads a state: false when the bytes are not such a state; may throw ValueError
  /// saying what differs when they are one of a differently built stream.
  std::function<bool(const std::string&)> load;
  /// A setting of the pass that the program sets for each epoch (DistributedSampler's
  /// epoch) rather than a stream that runs on: loaded to replay a checkpointed epoch,
  /// left as the program set it for the epoch after a finished one.
  bool per_epoch_setting = false;
};

/// A restartable source of T (PyTorch's `Sampler[T]`).
template <class T>
class SamplerOf {
 public:
  virtual ~SamplerOf() = default;
  /// Starts a new pass.
  virtual std::unique_ptr<Cursor<T>> iter() = 0;
  /// len(sampler), or nullopt when the sampler has no length.
  virtual std::optional<int64_t> size() const { return std::nullopt; }
  /// The random streams a pass draws from besides the default generator (its own
  /// generator, a wrapped sampler's).  A sampler whose pass depends on anything else
  /// that changes between epochs (an std::mt19937 of its own, a clock) cannot be
  /// resumed exactly from a DataLoader checkpoint: report such a stream here.
  virtual std::vector<RandomStream> random_streams() const { return {}; }
};

using IndexBatch = std::vector<int64_t>;
/// Yields dataset indices.
using Sampler = SamplerOf<int64_t>;
/// Yields lists of indices, one list per batch (PyTorch's `Sampler[List[int]]`).
using BatchSamplerBase = SamplerOf<IndexBatch>;

}  // namespace loader
