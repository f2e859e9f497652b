#include "loader/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "loader/error.h"

namespace loader {

namespace {

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A gzFile with a destructor (gzread also reads uncompressed files transparently).
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path), f_(gzopen(path.c_str(), "rb")) {
    if (!f_) throw ValueError("cannot open " + path + ": " + std::strerror(errno));
    gzbuffer(f_, 1 << 17);
  }
  ~GzReader() {
    if (f_) gzclose(f_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  /// Reads up to n bytes; returns how many were read (fewer only at the end of the data).
  size_t read(void* dst, size_t n) {
    size_t got = 0;
    auto* p = static_cast<uint8_t*>(dst);
    while (got < n) {
      unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
      int r = gzread(f_, p + got, chunk);
      if (r < 0) {
        int code = 0;
        const char* msg = gzerror(f_, &code);
        throw ValueError(path_ + ": corrupt gzip data after " + std::to_string(offset_ + got) +
                         " decompressed bytes (" + (msg ? msg : "zlib error") + "); re-download the file");
      }
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    offset_ += got;
    return got;
  }

  /// Moves to decompressed byte `offset` (backwards rewinds and reads again).
  void seek(uint64_t offset) {
    if (offset == offset_) return;
    z_off_t r = gzseek(f_, static_cast<z_off_t>(offset), SEEK_SET);
    if (r < 0 || static_cast<uint64_t>(r) != offset) {
      int code = 0;
      const char* msg = gzerror(f_, &code);
      throw ValueError(path_ + ": cannot seek to decompressed byte " + std::to_string(offset) + " (" +
                       (msg && *msg ? msg : "the data ends before it") + ")");
    }
    offset_ = offset;
  }

  /// zlib's complaint about a stream that ended early ("unexpected end of file"), if any.
  std::string stream_error() {
    int code = Z_OK;
    const char* msg = gzerror(f_, &code);
    return code == Z_OK ? std::string() : std::string(msg ? msg : "zlib error");
  }

 private:
  std::string path_;
  gzFile f_;
  uint64_t offset_ = 0;
};

uint32_t big_endian_u32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s;
  for (int64_t d : dims) s += (s.empty() ? "" : "x") + std::to_string(d);
  return s;
}

}  // namespace

// ------------------------------------------------------------------ IdxReader
struct IdxReader::Impl {
  Impl(const std::string& p) : path(p), in(p) {}
  std::string path;
  GzReader in;
  std::vector<int64_t> dims;
  uint64_t header_bytes = 0;
  uint64_t record_bytes = 1;
  uint64_t total_bytes = 0;  // data bytes the header announces
  int64_t position = 0;

  std::string truncated(uint64_t got_bytes) {
    std::string z = in.stream_error();
    return path + ": truncated: the header announces " + dims_text(dims) + " = " + std::to_string(total_bytes) +
           " bytes of data, the file holds " + std::to_string(got_bytes) + (z.empty() ? "" : " (" + z + ")") +
           "; re-download the file";
  }
};

IdxReader::IdxReader(const std::string& path, int expected_ndim) {
  if (!file_exists(path)) throw ValueError("IDX file not found: " + path);
  if (expected_ndim < 1 || expected_ndim > 255)
    throw ValueError("IdxReader: expected_ndim must be in [1, 255], got " + std::to_string(expected_ndim));
  impl_ = std::make_unique<Impl>(path);
  Impl& s = *impl_;
  uint8_t head[4];
  if (s.in.read(head, 4) < 4)
    throw ValueError(path + ": truncated: the file ends inside the 4-byte IDX magic number");
  uint32_t magic = big_endian_u32(head);
  uint32_t expected_magic = 0x0800u | static_cast<uint32_t>(expected_ndim);
  if (magic != expected_magic) {
    std::string what = (head[0] != 0 || head[1] != 0) ? "not an IDX file"
                       : head[2] != 0x08 ? "an IDX file whose elements are not unsigned bytes"
                                         : "an IDX file with " + std::to_string(head[3]) + " dimensions";
    throw ValueError(path + ": bad magic number " + hex32(magic) + " (" + what + "); expected " +
                     hex32(expected_magic) + " (unsigned bytes, " + std::to_string(expected_ndim) +
                     " dimensions)");
  }
  uint64_t numel = 1;
  for (int d = 0; d < expected_ndim; ++d) {
    uint8_t b[4];
    if (s.in.read(b, 4) < 4)
      throw ValueError(path + ": truncated: the file ends inside the IDX header (dimension " +
                       std::to_string(d) + " of " + std::to_string(expected_ndim) + ")");
    uint32_t n = big_endian_u32(b);
    s.dims.push_back(static_cast<int64_t>(n));
    numel *= n;
    if (d > 0) s.record_bytes *= n;
    if (numel > (uint64_t{1} << 34))
      throw ValueError(path + ": IDX header announces more than 16 GiB of data (dimensions " +
                       dims_text(s.dims) + "...); the file is corrupt");
  }
  s.header_bytes = 4 + 4 * static_cast<uint64_t>(expected_ndim);
  s.total_bytes = numel;
}

IdxReader::~IdxReader() = default;
IdxReader::IdxReader(IdxReader&&) noexcept = default;
IdxReader& IdxReader::operator=(IdxReader&&) noexcept = default;

const std::string& IdxReader::path() const noexcept { return impl_->path; }
const std::vector<int64_t>& IdxReader::dims() const noexcept { return impl_->dims; }
int64_t IdxReader::count() const noexcept { return impl_->dims[0]; }
size_t IdxReader::record_bytes() const noexcept { return static_cast<size_t>(impl_->record_bytes); }
int64_t IdxReader::position() const noexcept { return impl_->position; }

void IdxReader::seek(int64_t record) {
  Impl& s = *impl_;
  if (record < 0 || record > count())
    throw IndexError(s.path + ": record " + std::to_string(record) + " is out of range for " +
                     std::to_string(count()) + " records");
  if (record == s.position) return;
  s.in.seek(s.header_bytes + static_cast<uint64_t>(record) * s.record_bytes);
  s.position = record;
}

void IdxReader::read(void* dst, int64_t n) {
  Impl& s = *impl_;
  if (n < 0 || n > count() - s.position)
    throw ValueError(s.path + ": cannot read " + std::to_string(n) + " records at record " +
                     std::to_string(s.position) + " of " + std::to_string(count()));
  const uint64_t want = static_cast<uint64_t>(n) * s.record_bytes;
  const uint64_t got = s.in.read(dst, static_cast<size_t>(want));
  if (got < want) throw ValueError(s.truncated(static_cast<uint64_t>(s.position) * s.record_bytes + got));
  s.position += n;
}

void IdxReader::check_at_end() {
  Impl& s = *impl_;
  seek(count());
  uint8_t extra;
  if (s.in.read(&extra, 1) != 0)
    throw ValueError(s.path + ": " + std::to_string(s.total_bytes) + " bytes of data (" + dims_text(s.dims) +
                     ") are followed by more bytes; the header does not describe this file");
}

// ------------------------------------------------------------------ whole file
IdxArray read_idx_ubyte(const std::string& path, int expected_ndim) {
  IdxReader r(path, expected_ndim);
  IdxArray out;
  out.dims = r.dims();
  // Grow as records arrive, so a corrupt header cannot make us allocate what is not there.
  const int64_t per_chunk =
      r.record_bytes() == 0 ? std::max<int64_t>(1, r.count())
                            : std::max<int64_t>(1, static_cast<int64_t>((size_t{64} << 20) / r.record_bytes()));
  while (r.position() < r.count()) {
    const int64_t n = std::min(per_chunk, r.count() - r.position());
    const size_t at = static_cast<size_t>(r.position()) * r.record_bytes();
    out.data.resize(at + static_cast<size_t>(n) * r.record_bytes());
    r.read(out.data.data() + at, n);
  }
  r.check_at_end();
  return out;
}

}  // namespace loader
