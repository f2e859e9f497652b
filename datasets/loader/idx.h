// IDX files (the MNIST file format: a big-endian header, then row-major data) of
// unsigned bytes, gzip-compressed or not.  Part of loader_datasets.
//
// Whole file at once (what FashionMNIST does):
//
//   loader::IdxArray a = loader::read_idx_ubyte(".../t10k-images-idx3-ubyte.gz", 3);
//   a.dims;   // {10000, 28, 28}
//
// Record by record, never holding the file in memory (a streaming dataset):
//
//   loader::IdxReader r(".../t10k-images-idx3-ubyte.gz", 3);
//   r.seek(5000);                              // record 5000 (gzip: decompresses up to it)
//   std::vector<uint8_t> img(r.record_bytes());
//   r.read(img.data(), 1);                     // 784 bytes
//
// Bad files give a ValueError naming the file and what is wrong (missing, not IDX,
// not unsigned bytes, wrong number of dimensions, truncated, corrupt gzip stream).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace loader {

/// One array read from an IDX file: unsigned bytes only.
struct IdxArray {
  std::vector<int64_t> dims;  ///< e.g. [60000, 28, 28]
  std::vector<uint8_t> data;  ///< row-major, numel_of(dims) bytes
};

/// An open IDX file of unsigned bytes, read one record (one index of the first
/// dimension) or more at a time.  Move-only.
class IdxReader {
 public:
  /// Opens `path` and checks its header: magic 0x0000080N with N == expected_ndim.
  IdxReader(const std::string& path, int expected_ndim);
  ~IdxReader();
  IdxReader(IdxReader&&) noexcept;
  IdxReader& operator=(IdxReader&&) noexcept;
  IdxReader(const IdxReader&) = delete;
  IdxReader& operator=(const IdxReader&) = delete;

  const std::string& path() const noexcept;
  /// The header's dimensions, e.g. {10000, 28, 28}.
  const std::vector<int64_t>& dims() const noexcept;
  /// Records in the file: dims()[0].
  int64_t count() const noexcept;
  /// Bytes per record: the product of dims()[1:] (1 for a 1-dimensional file).
  size_t record_bytes() const noexcept;
  /// The record the next read() starts at.
  int64_t position() const noexcept;

  /// Moves to record `record` (0 <= record <= count()).  Forward in a gzip file
  /// decompresses up to it; backward starts again from the beginning.
  void seek(int64_t record);
  /// Reads `n` records into `dst` (n * record_bytes() bytes).  ValueError when fewer
  /// than n records remain or the data ends before the header says it should.
  void read(void* dst, int64_t n);
  /// ValueError unless the data ends exactly after the last record.
  void check_at_end();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Reads a whole IDX file of unsigned bytes (magic 0x0000080N, N = number of dims),
/// gzip-compressed or not.  Throws ValueError naming `path` when the file is
/// missing, not unsigned-byte IDX, has `expected_ndim` != N, is truncated or has
/// bytes after the data.
IdxArray read_idx_ubyte(const std::string& path, int expected_ndim);

}  // namespace loader
