// The zip container of PyTorch's `.pt` files: a bounds-checked reader and a writer
// that lays records out as `torch.save` does (STORED, data 64-byte aligned by an
// `FB` extra field padded with 'Z', data descriptors, zip64 end records).
//
//   auto src = loader::pt::ByteSource::from_file("model.pt");
//   loader::pt::ZipReader zip(src);
//   std::string pkl = zip.read(*zip.find("model/data.pkl"));
//
//   std::string out;
//   loader::pt::ZipWriter w([&](const void* p, size_t n) { out.append((const char*)p, n); });
//   w.write_record("archive/data.pkl", pkl.data(), pkl.size());
//   w.finish();
//
// Every offset and size read from the archive is checked against the bytes that
// exist before it is used; problems raise PtFormatError naming the entry and the
// offset.  Records may be STORED or DEFLATEd (PyTorch only writes STORED ones);
// a DEFLATE record may not claim more than LoadLimits::max_inflated_bytes, nor
// more than deflate's maximal ratio allows (zip bombs), and overlapping records
// (the "overlapping files" zip bomb) are refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace loader::pt {

/// Read-only random access to the bytes of an archive: a file read with pread, a
/// memory-mapped file, or a caller's buffer.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  /// Total number of bytes.
  virtual uint64_t size() const = 0;
  /// Copies `n` bytes at `offset` into `dst`; PtFormatError past the end.
  virtual void read(uint64_t offset, void* dst, size_t n) const = 0;
  /// All bytes in memory (a mapping or a buffer), or nullptr for a file read with pread.
  virtual const uint8_t* data() const { return nullptr; }
  /// Keeps data() valid; the owner of storages that wrap mapped bytes.  Null when
  /// data() is null or when the caller owns the buffer.
  virtual std::shared_ptr<const void> keep_alive() const { return nullptr; }
  /// For messages: the path, or "<memory>".
  virtual const std::string& name() const = 0;

  /// Reads with pread; the file stays open while the source lives.
  static std::shared_ptr<ByteSource> from_file(const std::string& path);
  /// Maps the file copy-on-write (MAP_PRIVATE, readable and writable): untouched
  /// pages are shared by every process that maps the file; writes stay private.
  /// The file must not be truncated while mapped (that would raise SIGBUS).
  static std::shared_ptr<ByteSource> map_file(const std::string& path);
  /// Views `size` bytes at `data` without copying; `owner` (may be null) keeps them
  /// alive.  Without an owner the caller must keep the bytes alive while the source
  /// and anything read from it are in use.
  static std::shared_ptr<ByteSource> from_memory(const void* data, size_t size,
                                                 std::shared_ptr<const void> owner = nullptr,
                                                 std::string name = "<memory>");
};

/// One record of the central directory, with offsets resolved and checked.
struct ZipEntry {
  std::string name;
  uint16_t method = 0;             ///< 0 STORED, 8 DEFLATE
  uint16_t flags = 0;
  uint32_t crc32 = 0;              ///< as recorded in the central directory
  uint64_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
  uint64_t local_header_offset = 0;  ///< absolute (after any prefix before the archive)
  uint64_t data_offset = 0;          ///< absolute offset of the record's first data byte
};

struct ZipLimits {
  /// Largest uncompressed size a DEFLATE record may claim (STORED records are bounded
  /// by the file size).  Default 1 GiB.
  uint64_t max_inflated_bytes = uint64_t{1} << 30;
};

class ZipReader {
 public:
  /// Parses and checks the end records, the central directory and every local header.
  explicit ZipReader(std::shared_ptr<ByteSource> source, ZipLimits limits = {});

  const std::vector<ZipEntry>& entries() const noexcept { return entries_; }
  /// The entry called `name`, or nullptr.
  const ZipEntry* find(const std::string& name) const;
  /// Bytes before the archive proper (e.g. a header written before torch.save).
  uint64_t archive_start() const noexcept { return archive_start_; }
  const ByteSource& source() const noexcept { return *source_; }
  const std::shared_ptr<ByteSource>& source_ptr() const noexcept { return source_; }

  /// The uncompressed contents of `e`; CRC-32 checked when `verify_crc`.
  std::string read(const ZipEntry& e, bool verify_crc = true) const;
  /// Same, into `dst` (exactly e.uncompressed_size bytes).
  void read_into(const ZipEntry& e, void* dst, bool verify_crc = true) const;
  /// The record's bytes in place (mapped or in-memory source, STORED record), else nullptr.
  const uint8_t* data_in_place(const ZipEntry& e) const;
  /// Checks the CRC-32 of a record's bytes that are already in memory.
  void check_crc(const ZipEntry& e, const void* data) const;

 private:
  std::shared_ptr<ByteSource> source_;
  ZipLimits limits_;
  std::vector<ZipEntry> entries_;
  std::unordered_map<std::string, size_t> by_name_;
  uint64_t archive_start_ = 0;
};

struct ZipWriterOptions {
  /// Data of every record starts at a multiple of this (PyTorch: 64). 1 disables padding.
  uint32_t alignment = 64;
  /// Write zip64 extra fields for every record, even small ones (tests zip64 readers).
  bool force_zip64 = false;
};

/// Writes records sequentially to `sink` as PyTorch's PyTorchStreamWriter does.
class ZipWriter {
 public:
  using Sink = std::function<void(const void* data, size_t n)>;
  explicit ZipWriter(Sink sink, ZipWriterOptions options = {});

  /// Appends one STORED record; its CRC-32 is computed.
  void write_record(const std::string& name, const void* data, size_t n);
  /// Writes the central directory and the (zip64) end records.  Call once, last.
  void finish();
  /// Bytes written so far.
  uint64_t offset() const noexcept { return offset_; }

 private:
  struct Written {
    std::string name;
    uint32_t crc = 0;
    uint64_t size = 0;
    uint64_t local_header_offset = 0;
  };
  void put(const std::string& bytes);
  Sink sink_;
  ZipWriterOptions options_;
  uint64_t offset_ = 0;
  std::vector<Written> written_;
  bool finished_ = false;
};

/// zlib's CRC-32 over any number of bytes.
uint32_t crc32_of(const void* data, size_t n, uint32_t crc = 0);

}  // namespace loader::pt
