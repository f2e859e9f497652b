// Tensors placed once in name-less shared memory, served to worker processes as a
// TensorDataset that each of them maps (no copy per worker, none per batch).
//
//   loader::SharedTensorFile file({features, labels});      // one copy, into shared memory
//   auto ds = loader::make_dataset(file.handle());          // {"shared_tensors", {...}}
//   loader::DataLoader dl(ds, opts);                        // workers map the same pages
//
// The file has no name (ShmSegment: O_TMPFILE in /dev/shm, or a memfd when /dev/shm is
// too small for it): it goes with the last descriptor and mapping, so no crash can leave
// it behind.  Workers open it as /proc/<this pid>/fd/<fd> (the same user's children may),
// so the handle works for local workers only; a remote worker refuses it, naming the
// parameter (remote_protocol.cpp).  The SharedTensorFile must outlive every loader over
// its handle that starts workers; datasets built from the handle keep their own mapping.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loader/dataset.h"
#include "loader/tensor.h"

namespace loader {

class SharedTensorFile {
 public:
  /// Copies `tensors` (at least one, all with the same first dimension, any strides) into
  /// a new name-less shared-memory file, each row-major at a 64-byte aligned offset.
  /// Throws ValueError for no tensors or a 0-dim tensor, AssertionError for mismatched first
  /// dimensions ("Size mismatch between tensors", torch's TensorDataset), RuntimeError naming the
  /// bytes needed and free when shared memory is too small.
  explicit SharedTensorFile(const std::vector<Tensor>& tensors);
  ~SharedTensorFile();
  SharedTensorFile(const SharedTensorFile&) = delete;
  SharedTensorFile& operator=(const SharedTensorFile&) = delete;

  /// {"shared_tensors", {"path": "/proc/<pid>/fd/<fd>", "bytes": N, "tensors": [{"dtype",
  /// "shape", "offset"}, ...]}}: make_dataset() of it maps the file (here or in a worker)
  /// and serves TensorDataset's samples.
  DatasetHandle handle() const;
  uint64_t bytes() const noexcept;
  /// The tensors as this process sees them (views of its own mapping).
  std::vector<Tensor> tensors() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Registers "shared_tensors" (idempotent; SharedTensorFile does it).
void register_shared_tensors_dataset();

}  // namespace loader
