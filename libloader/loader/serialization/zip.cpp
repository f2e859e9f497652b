#include "loader/serialization/zip.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <limits>
#include <sstream>

#include "loader/error.h"
#include "loader/serialization/format_error.h"

namespace loader::pt {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kEnd64Sig = 0x06064b50;
constexpr uint32_t kEnd64LocatorSig = 0x07064b50;
constexpr uint32_t kDescriptorSig = 0x08074b50;
constexpr size_t kLocalHeaderSize = 30;
constexpr size_t kCentralHeaderSize = 46;
constexpr size_t kEndSize = 22;
constexpr size_t kEnd64Size = 56;
constexpr size_t kEnd64LocatorSize = 20;
constexpr uint64_t kMax32 = 0xFFFFFFFFu;
// deflate cannot expand by more than 1032:1 (RFC 1951 blocks of 258-byte matches).
constexpr uint64_t kMaxDeflateRatio = 1032;

uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t le64(const uint8_t* p) { return le32(p) | (static_cast<uint64_t>(le32(p + 4)) << 32); }

void put16(std::string& s, uint16_t v) {
  s.push_back(static_cast<char>(v & 0xFF));
  s.push_back(static_cast<char>(v >> 8));
}
void put32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void put64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

std::string hex(uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

[[noreturn]] void fail(const ByteSource& src, uint64_t offset, const std::string& what) {
  throw PtFormatError(src.name() + ": zip offset " + std::to_string(offset) + " (" + hex(offset) +
                      "): " + what);
}

// a + b <= limit without overflow
bool fits(uint64_t a, uint64_t b, uint64_t limit) { return a <= limit && b <= limit - a; }

std::string errno_text() { return std::strerror(errno); }

// ------------------------------------------------------------------ sources
class FdHolder {
 public:
  explicit FdHolder(int fd) : fd_(fd) {}
  ~FdHolder() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdHolder(const FdHolder&) = delete;
  FdHolder& operator=(const FdHolder&) = delete;
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }

 private:
  int fd_;
};

uint64_t open_regular(const std::string& path, FdHolder& fd) {
  if (fd.get() < 0)
    throw RuntimeError("cannot open '" + path + "': " + errno_text());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw RuntimeError("cannot stat '" + path + "': " + errno_text());
  if (S_ISDIR(st.st_mode)) throw RuntimeError("cannot read '" + path + "': it is a directory");
  return static_cast<uint64_t>(st.st_size);
}

class FileSource final : public ByteSource {
 public:
  explicit FileSource(const std::string& path)
      : name_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    size_ = open_regular(path, fd_);
  }
  uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }
  void read(uint64_t offset, void* dst, size_t n) const override {
    if (!fits(offset, n, size_))
      fail(*this, offset, "reading " + std::to_string(n) + " bytes goes past the end of the " +
                              std::to_string(size_) + "-byte file (truncated?)");
    auto* out = static_cast<char*>(dst);
    while (n > 0) {
      size_t chunk = std::min<size_t>(n, size_t{1} << 30);
      ssize_t got = ::pread(fd_.get(), out, chunk, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0)
        fail(*this, offset,
             got < 0 ? "read failed: " + errno_text() : "file shrank while being read");
      out += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<size_t>(got);
    }
  }

 private:
  std::string name_;
  FdHolder fd_;
  uint64_t size_ = 0;
};

class MemorySource : public ByteSource, public std::enable_shared_from_this<MemorySource> {
 public:
  MemorySource(const uint8_t* data, uint64_t size, std::shared_ptr<const void> owner, std::string name)
      : data_(data), size_(size), owner_(std::move(owner)), name_(std::move(name)) {}
  uint64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const uint8_t* data() const override { return data_; }
  std::shared_ptr<const void> keep_alive() const override { return owner_; }
  void read(uint64_t offset, void* dst, size_t n) const override {
    if (!fits(offset, n, size_))
      fail(*this, offset, "reading " + std::to_string(n) + " bytes goes past the end of the " +
                              std::to_string(size_) + "-byte archive (truncated?)");
    if (n) std::memcpy(dst, data_ + offset, n);
  }

 protected:
  const uint8_t* data_;
  uint64_t size_;
  std::shared_ptr<const void> owner_;
  std::string name_;
};

// One read-only-to-disk, copy-on-write mapping of a whole file; unmapped when the
// last storage that wraps it dies.
struct Mapping {
  void* addr = nullptr;
  size_t length = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (addr && length) ::munmap(addr, length);
  }
};

class MappedSource final : public MemorySource {
 public:
  MappedSource(std::shared_ptr<Mapping> m, uint64_t size, std::string name)
      : MemorySource(static_cast<const uint8_t*>(m->addr), size, m, std::move(name)) {}
};

}  // namespace

std::shared_ptr<ByteSource> ByteSource::from_file(const std::string& path) {
  return std::make_shared<FileSource>(path);
}

std::shared_ptr<ByteSource> ByteSource::map_file(const std::string& path) {
  FdHolder fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  uint64_t size = open_regular(path, fd);
  auto m = std::make_shared<Mapping>();
  if (size > 0) {
    if (size > std::numeric_limits<size_t>::max())
      throw RuntimeError("cannot map '" + path + "': file too large for the address space");
    void* p = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_PRIVATE,
                     fd.get(), 0);
    if (p == MAP_FAILED) throw RuntimeError("cannot mmap '" + path + "': " + errno_text());
    m->addr = p;
    m->length = static_cast<size_t>(size);
  }
  return std::make_shared<MappedSource>(std::move(m), size, path);
}

std::shared_ptr<ByteSource> ByteSource::from_memory(const void* data, size_t size,
                                                    std::shared_ptr<const void> owner,
                                                    std::string name) {
  return std::make_shared<MemorySource>(static_cast<const uint8_t*>(data), size, std::move(owner),
                                        std::move(name));
}

uint32_t crc32_of(const void* data, size_t n, uint32_t crc) {
  if (n == 0) return crc;
  return static_cast<uint32_t>(::crc32_z(crc, static_cast<const Bytef*>(data), n));
}

// ------------------------------------------------------------------ reader
ZipReader::ZipReader(std::shared_ptr<ByteSource> source, ZipLimits limits)
    : source_(std::move(source)), limits_(limits) {
  const ByteSource& src = *source_;
  const uint64_t size = src.size();
  if (size < kEndSize)
    fail(src, 0, "only " + std::to_string(size) +
                     " bytes: too short to be a zip archive (a torch.save file is a zip archive)");

  // ---- end of central directory: the last "PK\5\6" whose comment fits in the file
  const uint64_t tail_len = std::min<uint64_t>(size, kEndSize + 0xFFFF);
  std::vector<uint8_t> tail(static_cast<size_t>(tail_len));
  src.read(size - tail_len, tail.data(), tail.size());
  int64_t found = -1;
  for (int64_t p = static_cast<int64_t>(tail_len) - static_cast<int64_t>(kEndSize); p >= 0; --p) {
    const uint8_t* q = tail.data() + p;
    if (le32(q) != kEndSig) continue;
    uint64_t comment = le16(q + 20);
    if (static_cast<uint64_t>(p) + kEndSize + comment <= tail_len) {
      found = p;
      break;
    }
  }
  if (found < 0)
    fail(src, size, "no end-of-central-directory record in the last " + std::to_string(tail_len) +
                        " bytes: not a zip archive, or truncated");
  const uint64_t eocd_pos = size - tail_len + static_cast<uint64_t>(found);
  const uint8_t* e = tail.data() + found;
  uint64_t disk = le16(e + 4), disk_cd = le16(e + 6);
  uint64_t n_disk = le16(e + 8), n_total = le16(e + 10);
  uint64_t cd_size = le32(e + 12), cd_offset = le32(e + 16);
  uint64_t cd_end = eocd_pos;  // where the central directory is expected to end

  // ---- zip64: a locator right before the end record points at the zip64 end record
  bool zip64 = false;
  if (eocd_pos >= kEnd64LocatorSize) {
    uint8_t loc[kEnd64LocatorSize];
    src.read(eocd_pos - kEnd64LocatorSize, loc, sizeof loc);
    if (le32(loc) == kEnd64LocatorSig) {
      zip64 = true;
      const uint64_t loc_pos = eocd_pos - kEnd64LocatorSize;
      uint64_t declared = le64(loc + 8);
      uint64_t z64_pos = 0;
      uint8_t z[kEnd64Size];
      bool ok = false;
      if (loc_pos >= kEnd64Size) {  // usual place: immediately before the locator
        src.read(loc_pos - kEnd64Size, z, sizeof z);
        if (le32(z) == kEnd64Sig) {
          z64_pos = loc_pos - kEnd64Size;
          ok = true;
        }
      }
      if (!ok && fits(declared, kEnd64Size, loc_pos)) {
        src.read(declared, z, sizeof z);
        if (le32(z) == kEnd64Sig) {
          z64_pos = declared;
          ok = true;
        }
      }
      if (!ok)
        fail(src, loc_pos, "zip64 end-of-central-directory locator points at offset " +
                               std::to_string(declared) + ", where there is no zip64 end record");
      disk = le32(z + 16);
      disk_cd = le32(z + 20);
      n_disk = le64(z + 24);
      n_total = le64(z + 32);
      cd_size = le64(z + 40);
      cd_offset = le64(z + 48);
      cd_end = z64_pos;
    }
  }
  if (!zip64 && (n_total == 0xFFFF || cd_size == kMax32 || cd_offset == kMax32))
    fail(src, eocd_pos, "end record needs zip64 values but there is no zip64 locator");
  if (disk != 0 || disk_cd != 0 || n_disk != n_total)
    fail(src, eocd_pos, "multi-disk (split) zip archives are not supported");
  if (cd_size > cd_end || cd_offset > cd_end - cd_size)
    fail(src, eocd_pos, "central directory (offset " + std::to_string(cd_offset) + ", size " +
                            std::to_string(cd_size) + ") does not fit before the end records at " +
                            std::to_string(cd_end));
  archive_start_ = cd_end - cd_size - cd_offset;  // bytes before the archive (Python's "concat")
  const uint64_t cd_pos = cd_end - cd_size;
  if (n_total > cd_size / kCentralHeaderSize)
    fail(src, cd_pos, "end record claims " + std::to_string(n_total) + " entries but the " +
                          std::to_string(cd_size) + "-byte central directory cannot hold them");

  std::vector<uint8_t> cd(static_cast<size_t>(cd_size));
  src.read(cd_pos, cd.data(), cd.size());
  entries_.reserve(static_cast<size_t>(n_total));
  size_t pos = 0;
  for (uint64_t i = 0; i < n_total; ++i) {
    const uint64_t here = cd_pos + pos;
    if (cd.size() - pos < kCentralHeaderSize || le32(cd.data() + pos) != kCentralSig)
      fail(src, here, "central directory entry " + std::to_string(i) + " is missing or corrupt");
    const uint8_t* h = cd.data() + pos;
    ZipEntry ent;
    ent.flags = le16(h + 8);
    ent.method = le16(h + 10);
    ent.crc32 = le32(h + 16);
    ent.compressed_size = le32(h + 20);
    ent.uncompressed_size = le32(h + 24);
    const size_t name_len = le16(h + 28), extra_len = le16(h + 30), comment_len = le16(h + 32);
    uint64_t disk_start = le16(h + 34);
    ent.local_header_offset = le32(h + 42);
    const size_t var = name_len + extra_len + comment_len;
    if (cd.size() - pos - kCentralHeaderSize < var)
      fail(src, here, "central directory entry " + std::to_string(i) + " runs past the directory");
    ent.name.assign(reinterpret_cast<const char*>(h + kCentralHeaderSize), name_len);
    // zip64 extra field: 64-bit values for the fields that hold 0xFFFFFFFF, in order
    const uint8_t* x = h + kCentralHeaderSize + name_len;
    size_t xp = 0;
    while (xp + 4 <= extra_len) {
      const uint16_t id = le16(x + xp), len = le16(x + xp + 2);
      if (xp + 4 + len > extra_len)
        fail(src, here, "corrupt extra field in the entry for '" + ent.name + "'");
      if (id == 0x0001) {
        const uint8_t* f = x + xp + 4;
        size_t left = len;
        auto take = [&](uint64_t& field) {
          if (left < 8) fail(src, here, "zip64 extra field of '" + ent.name + "' is too short");
          field = le64(f);
          f += 8;
          left -= 8;
        };
        if (ent.uncompressed_size == kMax32) take(ent.uncompressed_size);
        if (ent.compressed_size == kMax32) take(ent.compressed_size);
        if (ent.local_header_offset == kMax32) take(ent.local_header_offset);
        if (disk_start == 0xFFFF) {
          if (left < 4) fail(src, here, "zip64 extra field of '" + ent.name + "' is too short");
          disk_start = le32(f);
        }
      }
      xp += 4 + len;
    }
    if (disk_start != 0) fail(src, here, "'" + ent.name + "' starts on another disk");
    if (ent.flags & 0x1) fail(src, here, "'" + ent.name + "' is encrypted; encrypted zip archives are not supported");
    if (ent.method != 0 && ent.method != 8)
      fail(src, here, "'" + ent.name + "' uses compression method " + std::to_string(ent.method) +
                          "; only STORED (0, what torch.save writes) and DEFLATE (8) are supported");
    if (ent.method == 0 && ent.compressed_size != ent.uncompressed_size)
      fail(src, here, "STORED record '" + ent.name + "' has compressed size " +
                          std::to_string(ent.compressed_size) + " but uncompressed size " +
                          std::to_string(ent.uncompressed_size));
    if (ent.method == 8) {
      if (ent.uncompressed_size > limits_.max_inflated_bytes)
        fail(src, here, "DEFLATE record '" + ent.name + "' claims " +
                            std::to_string(ent.uncompressed_size) + " bytes, more than the limit of " +
                            std::to_string(limits_.max_inflated_bytes) +
                            " (raise ZipLimits::max_inflated_bytes if the file is trusted)");
      if (ent.uncompressed_size / kMaxDeflateRatio > ent.compressed_size + 1)
        fail(src, here, "DEFLATE record '" + ent.name + "' claims " +
                            std::to_string(ent.uncompressed_size) + " bytes from " +
                            std::to_string(ent.compressed_size) +
                            " compressed bytes, more than deflate can expand (a zip bomb?)");
    }
    if (ent.local_header_offset > cd_pos || archive_start_ > cd_pos - ent.local_header_offset)
      fail(src, here, "'" + ent.name + "' has local header offset " +
                          std::to_string(ent.local_header_offset) + ", past the central directory");
    ent.local_header_offset += archive_start_;
    if (!fits(ent.local_header_offset, kLocalHeaderSize, cd_pos))
      fail(src, ent.local_header_offset, "local header of '" + ent.name + "' runs into the central directory");
    uint8_t lh[kLocalHeaderSize];
    src.read(ent.local_header_offset, lh, sizeof lh);
    if (le32(lh) != kLocalSig)
      fail(src, ent.local_header_offset, "no local file header for '" + ent.name + "' where the central directory says");
    const uint64_t lname = le16(lh + 26), lextra = le16(lh + 28);
    ent.data_offset = ent.local_header_offset + kLocalHeaderSize + lname + lextra;
    if (ent.data_offset > cd_pos || ent.compressed_size > cd_pos - ent.data_offset)
      fail(src, ent.local_header_offset, "data of '" + ent.name + "' (" +
                                             std::to_string(ent.compressed_size) +
                                             " bytes) runs past the start of the central directory");
    if (lname != name_len)
      fail(src, ent.local_header_offset, "local header name differs from the central directory's '" + ent.name + "'");
    std::string lname_bytes(name_len, '\0');
    src.read(ent.local_header_offset + kLocalHeaderSize, lname_bytes.data(), name_len);
    if (lname_bytes != ent.name)
      fail(src, ent.local_header_offset, "local header name differs from the central directory's '" + ent.name + "'");
    if (!by_name_.emplace(ent.name, entries_.size()).second)
      fail(src, here, "duplicate record name '" + ent.name + "'");
    entries_.push_back(std::move(ent));
    pos += kCentralHeaderSize + var;
  }

  // ---- records must not overlap (the "overlapping files" zip bomb, or corruption)
  std::vector<size_t> order(entries_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return entries_[a].local_header_offset < entries_[b].local_header_offset;
  });
  for (size_t k = 1; k < order.size(); ++k) {
    const ZipEntry& prev = entries_[order[k - 1]];
    const ZipEntry& cur = entries_[order[k]];
    if (prev.data_offset + prev.compressed_size > cur.local_header_offset)
      fail(src, cur.local_header_offset, "records '" + prev.name + "' and '" + cur.name +
                                             "' overlap; the archive is corrupt or hostile");
  }
}

const ZipEntry* ZipReader::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

const uint8_t* ZipReader::data_in_place(const ZipEntry& e) const {
  if (e.method != 0 || source_->data() == nullptr) return nullptr;
  return source_->data() + e.data_offset;
}

void ZipReader::check_crc(const ZipEntry& e, const void* data) const {
  uint32_t got = crc32_of(data, static_cast<size_t>(e.uncompressed_size));
  if (got != e.crc32)
    fail(*source_, e.data_offset, "CRC-32 mismatch in record '" + e.name + "' (recorded " +
                                      hex(e.crc32) + ", computed " + hex(got) +
                                      "): the file is corrupt");
}

std::string ZipReader::read(const ZipEntry& e, bool verify_crc) const {
  if (e.uncompressed_size > std::numeric_limits<size_t>::max() / 2)
    fail(*source_, e.data_offset, "record '" + e.name + "' is too large for memory");
  std::string out(static_cast<size_t>(e.uncompressed_size), '\0');
  read_into(e, out.data(), verify_crc);
  return out;
}

void ZipReader::read_into(const ZipEntry& e, void* dst, bool verify_crc) const {
  const ByteSource& src = *source_;
  const size_t n = static_cast<size_t>(e.uncompressed_size);
  if (e.method == 0) {
    src.read(e.data_offset, dst, n);
  } else {
    z_stream zs{};
    if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) fail(src, e.data_offset, "zlib inflateInit2 failed");
    struct End {
      z_stream* z;
      ~End() { inflateEnd(z); }
    } end{&zs};
    std::vector<uint8_t> in_buf;
    const uint8_t* in_place = src.data() ? src.data() + e.data_offset : nullptr;
    uint64_t in_done = 0;
    uint8_t* out = static_cast<uint8_t*>(dst);
    size_t out_done = 0;
    int ret = Z_OK;
    uint8_t scratch[64];
    while (true) {
      if (zs.avail_in == 0 && in_done < e.compressed_size) {
        size_t chunk = static_cast<size_t>(std::min<uint64_t>(e.compressed_size - in_done, 1u << 20));
        if (in_place) {
          zs.next_in = const_cast<Bytef*>(in_place + in_done);
        } else {
          in_buf.resize(chunk);
          src.read(e.data_offset + in_done, in_buf.data(), chunk);
          zs.next_in = in_buf.data();
        }
        zs.avail_in = static_cast<uInt>(chunk);
        in_done += chunk;
      }
      const bool full = out_done == n;
      if (full) {  // look for output beyond the declared size
        zs.next_out = scratch;
        zs.avail_out = sizeof scratch;
      } else {
        zs.next_out = out + out_done;
        zs.avail_out = static_cast<uInt>(std::min<size_t>(n - out_done, 1u << 30));
      }
      const uInt before = zs.avail_out;
      const uInt avail_in_before = zs.avail_in;
      ret = inflate(&zs, Z_NO_FLUSH);
      const size_t produced = before - zs.avail_out;
      if (full && produced > 0)
        fail(src, e.data_offset, "DEFLATE record '" + e.name + "' inflates to more than its declared " +
                                     std::to_string(n) + " bytes");
      if (!full) out_done += produced;
      if (ret == Z_STREAM_END) break;
      if (ret == Z_DATA_ERROR || ret == Z_NEED_DICT || ret == Z_MEM_ERROR)
        fail(src, e.data_offset, "DEFLATE record '" + e.name + "' is corrupt (zlib: " +
                                     (zs.msg ? zs.msg : "error") + ")");
      if (produced == 0 && zs.avail_in == avail_in_before && in_done >= e.compressed_size)
        fail(src, e.data_offset, "DEFLATE record '" + e.name + "' is truncated");
    }
    if (out_done != n)
      fail(src, e.data_offset, "DEFLATE record '" + e.name + "' inflates to " +
                                   std::to_string(out_done) + " bytes, not the declared " +
                                   std::to_string(n));
  }
  if (verify_crc) check_crc(e, dst);
}

// ------------------------------------------------------------------ writer
ZipWriter::ZipWriter(Sink sink, ZipWriterOptions options)
    : sink_(std::move(sink)), options_(options) {
  if (options_.alignment == 0 || options_.alignment > 0x8000)
    throw ValueError("ZipWriter: alignment must be between 1 and 32768, got " +
                     std::to_string(options_.alignment));
}

void ZipWriter::put(const std::string& bytes) {
  sink_(bytes.data(), bytes.size());
  offset_ += bytes.size();
}

void ZipWriter::write_record(const std::string& name, const void* data, size_t n) {
  if (finished_) throw RuntimeError("ZipWriter: write_record('" + name + "') after finish()");
  if (name.empty() || name.size() > 0xFFFF)
    throw ValueError("ZipWriter: record name must have 1 to 65535 bytes, got " +
                     std::to_string(name.size()));
  const uint64_t size = n;
  const bool big_size = options_.force_zip64 || size >= kMax32;
  const bool big_offset = options_.force_zip64 || offset_ >= kMax32;
  // where the data would start without padding (as PyTorch's getPadding computes it)
  uint64_t start = offset_ + kLocalHeaderSize + name.size() + 4;
  std::string z64;
  if (big_size || big_offset) {
    put16(z64, 0x0001);
    put16(z64, static_cast<uint16_t>((big_size ? 16 : 0) + (big_offset ? 8 : 0)));
    if (big_size) {
      put64(z64, size);
      put64(z64, size);
    }
    if (big_offset) put64(z64, offset_);
    start += z64.size();
  }
  const uint64_t a = options_.alignment;
  const uint64_t padding = (a - start % a) % a;
  std::string h;
  put32(h, kLocalSig);
  put16(h, big_size || big_offset ? 45 : 0);  // version needed
  // UTF-8 names; a data descriptor follows, except after an empty record (as miniz writes)
  put16(h, n ? 0x0808 : 0x0800);
  put16(h, 0);                                // STORED
  put16(h, 0);                                // time
  put16(h, 0);                                // date
  put32(h, 0);                                // crc: in the data descriptor
  put32(h, big_size ? static_cast<uint32_t>(kMax32) : 0);
  put32(h, big_size ? static_cast<uint32_t>(kMax32) : 0);
  put16(h, static_cast<uint16_t>(name.size()));
  put16(h, static_cast<uint16_t>(z64.size() + 4 + padding));
  h += name;
  h += z64;
  h += "FB";
  put16(h, static_cast<uint16_t>(padding));
  h.append(static_cast<size_t>(padding), 'Z');
  Written w{name, crc32_of(data, n), size, offset_};
  put(h);
  if (n) sink_(data, n);
  offset_ += n;
  written_.push_back(std::move(w));
  if (n == 0) return;
  const Written& last = written_.back();
  std::string d;
  put32(d, kDescriptorSig);
  put32(d, last.crc);
  if (big_size) {
    put64(d, size);
    put64(d, size);
  } else {
    put32(d, static_cast<uint32_t>(size));
    put32(d, static_cast<uint32_t>(size));
  }
  put(d);
}

void ZipWriter::finish() {
  if (finished_) return;
  finished_ = true;
  const uint64_t cd_offset = offset_;
  std::string cd;
  for (const Written& w : written_) {
    const bool big_size = options_.force_zip64 || w.size >= kMax32;
    const bool big_offset = options_.force_zip64 || w.local_header_offset >= kMax32;
    std::string z64;
    if (big_size || big_offset) {
      put16(z64, 0x0001);
      put16(z64, static_cast<uint16_t>((big_size ? 16 : 0) + (big_offset ? 8 : 0)));
      if (big_size) {
        put64(z64, w.size);
        put64(z64, w.size);
      }
      if (big_offset) put64(z64, w.local_header_offset);
    }
    put32(cd, kCentralSig);
    put16(cd, 0);                                 // version made by (as PyTorch)
    put16(cd, big_size || big_offset ? 45 : 0);   // version needed
    put16(cd, w.size ? 0x0808 : 0x0800);
    put16(cd, 0);
    put16(cd, 0);
    put16(cd, 0);
    put32(cd, w.crc);
    put32(cd, big_size ? static_cast<uint32_t>(kMax32) : static_cast<uint32_t>(w.size));
    put32(cd, big_size ? static_cast<uint32_t>(kMax32) : static_cast<uint32_t>(w.size));
    put16(cd, static_cast<uint16_t>(w.name.size()));
    put16(cd, static_cast<uint16_t>(z64.size()));
    put16(cd, 0);  // comment
    put16(cd, 0);  // disk
    put16(cd, 0);  // internal attributes
    put32(cd, 0);  // external attributes
    put32(cd, big_offset ? static_cast<uint32_t>(kMax32) : static_cast<uint32_t>(w.local_header_offset));
    cd += w.name;
    cd += z64;
  }
  put(cd);
  const uint64_t cd_size = cd.size();
  const uint64_t n = written_.size();
  const uint64_t z64_offset = offset_;
  std::string end;
  put32(end, kEnd64Sig);
  put64(end, 44);
  put16(end, 0x031e);
  put16(end, 0x002d);
  put32(end, 0);
  put32(end, 0);
  put64(end, n);
  put64(end, n);
  put64(end, cd_size);
  put64(end, cd_offset);
  put32(end, kEnd64LocatorSig);
  put32(end, 0);
  put64(end, z64_offset);
  put32(end, 1);
  put32(end, kEndSig);
  put16(end, 0);
  put16(end, 0);
  put16(end, static_cast<uint16_t>(std::min<uint64_t>(n, 0xFFFF)));
  put16(end, static_cast<uint16_t>(std::min<uint64_t>(n, 0xFFFF)));
  put32(end, static_cast<uint32_t>(std::min<uint64_t>(cd_size, kMax32)));
  put32(end, static_cast<uint32_t>(std::min<uint64_t>(cd_offset, kMax32)));
  put16(end, 0);
  put(end);
}

}  // namespace loader::pt
