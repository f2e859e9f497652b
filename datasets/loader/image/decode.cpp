#include "loader/image/decode.h"

#include <fcntl.h>
#include <png.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <jpeglib.h>  // after <cstdio> (FILE)

namespace loader::image {

namespace {

constexpr const char* kFixHint = "re-encode the file, or remove it from the dataset";

std::string bytes_preview(const uint8_t* data, size_t size) {
  std::string out;
  const size_t n = size < 8 ? size : 8;
  char buf[8];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof buf, "%s%02x", i ? " " : "", data[i]);
    out += buf;
  }
  return out;
}

[[noreturn]] void refuse_format(ImageFormat f, const uint8_t* data, size_t size, const std::string& name) {
  if (size == 0)
    throw ValueError(name + ": cannot identify image file: the file is empty (0 bytes); " + kFixHint);
  if (f == ImageFormat::Unknown)
    throw ValueError(name + ": cannot identify image file: neither JPEG nor PNG (it starts with bytes " +
                     bytes_preview(data, size) + "); " + kFixHint);
  throw ValueError(name + ": " + format_name(f) +
                   " images are not supported (only JPEG and PNG are decoded); convert the file to PNG or "
                   "JPEG, or leave its extension out of the dataset's extensions");
}

void check_pixels(int64_t width, int64_t height, int64_t limit, const std::string& name) {
  if (width <= 0 || height <= 0)
    throw ValueError(name + ": the header gives an empty image (" + std::to_string(width) + "x" +
                     std::to_string(height) + "); " + kFixHint);
  if (limit > 0 && width * height > limit)
    throw ValueError(name + ": image size (" + std::to_string(width) + "x" + std::to_string(height) + " = " +
                     std::to_string(width * height) + " pixels) exceeds the limit of " + std::to_string(limit) +
                     " pixels, could be a decompression bomb; raise max_image_pixels (0: no limit) if the file "
                     "is trusted");
}

// ------------------------------------------------------------------ JPEG (libjpeg API)
// libjpeg-turbo's libjpeg API with its decompression defaults, which are PIL's: the
// accurate integer IDCT (JDCT_ISLOW) and smooth ("fancy") chroma upsampling.  One decode
// path for the whole image and for a region: a whole-image decode is the region decode of
// the full box (no crop, no skip).  TurboJPEG's tjDecompress2 (which the full decode used
// before issue 50) runs the same library calls; its behaviour kept here: a progressive
// file of more than 500 scans is refused (TJFLAG_LIMITSCANS), and a warning decides as
// its first warning's text did (tolerated_warning below).
//
// Region decoding (decode_region): the box's columns are widened by kJpegColumnMargin
// chroma neighbours' worth of pixels on each side, then to iMCU boundaries
// (jpeg_crop_scanline); the rows above are skipped once from the top of the image
// (jpeg_skip_scanlines: Huffman-decoded only) to the row-group boundary at or above the
// box; libjpeg-turbo 2.1.5's skip itself decodes, and drops, the rows before the target
// that fancy upsampling reads as context (with h2v2 or h1v2 upsampling it skips whole
// iMCU rows only up to the one before the target row and reads the rest); skipping to a
// row group's start keeps the first row read the first of its group.  The rows below are
// not decoded when the scan's data ends at an EOI marker (scan_ends_with_eoi: they cannot
// change the outcome), else Huffman-decoded (skipped, never returned) so that a truncated
// file is reported as the full decode reports it.  tests/libloader/image_region_test.cpp
// shows the pixels equal a full decode's for every sampling, every phase of the margins
// and many boxes; it fails with no column margin (4:2:2 at once) and passes with one
// chroma sample (kJpegColumnMargin 1), and with the skip at the box's top row or one
// iMCU row above it.

// What the libjpeg callbacks share with the decoder; plain data (the library longjmps).
struct JpegErrorMgr {
  jpeg_error_mgr pub;
  jmp_buf jump;
  bool warned;                         // a warning was emitted (the first one is kept)
  char warning[JMSG_LENGTH_MAX];       // the first warning's text
  char error[JMSG_LENGTH_MAX];         // the fatal error's text
};

struct JpegProgressMgr {
  jpeg_progress_mgr pub;
  JpegErrorMgr* err;
};

void jpeg_on_error(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegErrorMgr*>(c->err);
  (*c->err->format_message)(c, e->error);
  std::longjmp(e->jump, 1);
}

void jpeg_on_message(j_common_ptr c, int level) {
  if (level >= 0) return;  // trace messages
  auto* e = reinterpret_cast<JpegErrorMgr*>(c->err);
  if (!e->warned) {
    (*c->err->format_message)(c, e->warning);
    e->warned = true;
  }
  c->err->num_warnings++;
}

void jpeg_on_output(j_common_ptr) {}

// TJFLAG_LIMITSCANS: a progressive file of more than 500 scans is a CPU bomb.
void jpeg_on_progress(j_common_ptr c) {
  if (!c->is_decompressor) return;
  auto* p = reinterpret_cast<JpegProgressMgr*>(c->progress);
  if (reinterpret_cast<j_decompress_ptr>(c)->input_scan_number > 500) {
    std::snprintf(p->err->error, sizeof p->err->error, "Progressive JPEG image has more than 500 scans");
    std::longjmp(p->err->jump, 1);
  }
}

// One decompressor per thread, reused from file to file (jpeg_abort_decompress between
// them); after a fatal error it is destroyed and made again.
class JpegDecoder {
 public:
  JpegDecoder() = default;
  ~JpegDecoder() { destroy(); }
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;
  // The decompressor, reset for a new file.
  j_decompress_ptr begin() {
    if (!created_) {
      cinfo_.err = jpeg_std_error(&err_.pub);
      err_.pub.error_exit = jpeg_on_error;
      err_.pub.emit_message = jpeg_on_message;
      err_.pub.output_message = jpeg_on_output;
      jpeg_create_decompress(&cinfo_);
      progress_.pub.progress_monitor = jpeg_on_progress;
      progress_.err = &err_;
      created_ = true;
    }
    cinfo_.progress = &progress_.pub;
    err_.warned = false;
    err_.warning[0] = err_.error[0] = 0;
    err_.pub.num_warnings = 0;
    return &cinfo_;
  }
  j_decompress_ptr cinfo() noexcept { return &cinfo_; }
  JpegErrorMgr& err() noexcept { return err_; }
  // After a file: ready for the next one.
  void end() noexcept {
    if (created_) jpeg_abort_decompress(&cinfo_);
  }
  // After a fatal error (the state of the library is not trusted).
  void reset() noexcept { destroy(); }
  // Scratch rows for the cropped or converted scanlines.
  uint8_t* scratch(size_t bytes) {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    return scratch_.data();
  }

 private:
  void destroy() noexcept {
    if (created_) jpeg_destroy_decompress(&cinfo_);
    created_ = false;
  }
  jpeg_decompress_struct cinfo_{};
  JpegErrorMgr err_{};
  JpegProgressMgr progress_{};
  bool created_ = false;
  std::vector<uint8_t> scratch_;
};

JpegDecoder& jpeg_decoder() {
  thread_local JpegDecoder decoder;
  return decoder;
}

// libjpeg's warnings (JWRN_*) but the end of the data: PIL decodes such files, and so
// does this (the first warning decides, as TurboJPEG's error string did).
bool tolerated_warning(const std::string& msg) {
  static const char* const kWarnings[] = {
      "Corrupt JPEG data",                   // extraneous bytes, bad Huffman code, bad ICC marker, ...
      "Unknown Adobe color transform code",  //
      "Inconsistent progression sequence",   //
      "Warning: unknown JFIF revision",      //
      "Invalid SOS parameters for sequential JPEG",
  };
  for (const char* w : kWarnings)
    if (msg.compare(0, std::strlen(w), w) == 0) return true;
  return false;
}

// Columns of margin on each side of a box, in multiples of the largest horizontal
// sampling factor: fancy upsampling reads one chroma neighbour (libjpeg.txt, "partial
// image decompression"), and the crop's own edge replicates its last sample.
constexpr int kJpegColumnMargin = 2;

// What the header says (plain data: filled between setjmp and the library's longjmp).
struct JpegHead {
  JDIMENSION image_width, image_height;  // the file's
  JDIMENSION width, height;              // the output's (DCT-scaled)
  J_COLOR_SPACE color_space;             // the file's
  J_COLOR_SPACE out_space;               // decoded to
  int out_components;
  bool multi_scan;                       // progressive (or non-interleaved): entropy-decoded whole first
  int max_h, max_v;                      // largest sampling factors
  int min_dct;                           // min_DCT_scaled_size
  int components;
  size_t scan_offset;                    // where the first scan's entropy-coded data starts
};

[[noreturn]] void jpeg_fail(JpegDecoder& d, const std::string& name) {
  const std::string msg = d.err().error;
  d.reset();
  throw ValueError(name + ": cannot decode JPEG: " + msg + "; " + kFixHint);
}

// The warnings of a finished decode: tolerated, or an error as the full decode's.
void jpeg_check_warnings(JpegDecoder& d, const std::string& name) {
  if (!d.err().warned) return;
  const std::string msg = d.err().warning;
  if (tolerated_warning(msg)) return;
  d.end();
  if (msg.find("Premature end of JPEG file") != std::string::npos)
    throw ValueError(name + ": image file is truncated (libjpeg: " + msg + "); " + kFixHint);
  throw ValueError(name + ": cannot decode JPEG: " + msg + "; " + kFixHint);
}

// Reads the header and sets the output's parameters.  `mode` < 0: header only.
bool jpeg_read_head(j_decompress_ptr c, JpegErrorMgr& err, const uint8_t* data, size_t size, int denom, int mode,
                    JpegHead* h) {
  if (setjmp(err.jump)) return false;
  jpeg_mem_src(c, data, static_cast<unsigned long>(size));
  jpeg_read_header(c, TRUE);
  h->image_width = c->image_width;
  h->image_height = c->image_height;
  h->color_space = c->jpeg_color_space;
  h->components = c->num_components;
  h->multi_scan = jpeg_has_multiple_scans(c);
  h->scan_offset = static_cast<size_t>(c->src->next_input_byte - data);
  if (mode < 0) return true;
  const bool cmyk = c->jpeg_color_space == JCS_CMYK || c->jpeg_color_space == JCS_YCCK;
  const bool gray = c->jpeg_color_space == JCS_GRAYSCALE;
  if (cmyk) {
    c->out_color_space = JCS_CMYK;  // libjpeg converts YCCK to CMYK
  } else if (gray && mode == static_cast<int>(ColorMode::L)) {
    c->out_color_space = JCS_GRAYSCALE;
  } else {
    c->out_color_space = JCS_EXT_RGB;  // gray -> RGB replicates, as PIL's L -> RGB
  }
  c->scale_num = 1;
  c->scale_denom = static_cast<unsigned int>(denom);
  jpeg_calc_output_dimensions(c);
  h->width = c->output_width;
  h->height = c->output_height;
  h->out_space = c->out_color_space;
  h->out_components = c->out_color_components;
  h->max_h = c->max_h_samp_factor;
  h->max_v = c->max_v_samp_factor;
  h->min_dct = c->min_DCT_scaled_size;
  return true;
}

// How the scanlines become the result's rows.
enum class RowConvert : uint8_t { Copy, CmykToRgb, CmykToL, RgbToL };

void convert_row(const uint8_t* in, uint8_t* dst, JDIMENSION n, RowConvert conv, int in_components) {
  switch (conv) {
    case RowConvert::Copy: std::memcpy(dst, in, static_cast<size_t>(n) * static_cast<size_t>(in_components)); return;
    case RowConvert::RgbToL:
      for (JDIMENSION i = 0; i < n; ++i, in += 3) dst[i] = luma(in[0], in[1], in[2]);
      return;
    case RowConvert::CmykToRgb:
    case RowConvert::CmykToL:
      // PIL: every CMYK JPEG is Adobe-inverted ("CMYK;I"), then Convert.c's cmyk2rgb.
      for (JDIMENSION i = 0; i < n; ++i, in += 4) {
        const int nk = in[3];  // 255 - k, k = 255 - stored
        uint8_t rgb[3];
        for (int ch = 0; ch < 3; ++ch) {
          const int cc = 255 - in[ch];
          const int t = cc * nk + 128;
          const int v = nk - (((t >> 8) + t) >> 8);
          rgb[ch] = static_cast<uint8_t>(v < 0 ? 0 : v);
        }
        if (conv == RowConvert::CmykToRgb) {
          dst[0] = rgb[0];
          dst[1] = rgb[1];
          dst[2] = rgb[2];
          dst += 3;
        } else {
          *dst++ = luma(rgb[0], rgb[1], rgb[2]);
        }
      }
      return;
  }
}

constexpr int kScratchRows = 16;

// What one decode does (plain data).
struct JpegPass {
  // asked for: output columns [crop_x, crop_x + crop_w) (crop_w == 0: no crop); rows
  // [skip, first) read and dropped, [first, last) written, the rest skipped (Huffman only).
  JDIMENSION crop_x, crop_w, skip, first, last;
  JDIMENSION box_left, box_width;  // the result's columns, in output coordinates
  RowConvert conv;
  int in_components;
  bool direct;                     // scanlines read straight into the result (Copy, no crop)
  bool stop_after_box;             // the rows below need not be read (scan_ends_with_eoi)
  uint8_t* out;
  size_t out_stride;
  uint8_t* scratch;
  size_t scratch_stride;
  JDIMENSION crop_got;             // the crop's first column after jpeg_crop_scanline
};

bool jpeg_run(j_decompress_ptr c, JpegErrorMgr& err, JpegPass* p) {
  if (setjmp(err.jump)) return false;
  jpeg_start_decompress(c);
  p->crop_got = 0;
  if (p->crop_w > 0 && p->crop_w < c->output_width) {
    JDIMENSION x = p->crop_x, w = p->crop_w;
    jpeg_crop_scanline(c, &x, &w);
    p->crop_got = x;
  }
  if (p->skip > 0) jpeg_skip_scanlines(c, p->skip);  // once, from the top
  const size_t col0 = static_cast<size_t>(p->box_left - p->crop_got) * static_cast<size_t>(p->in_components);
  JSAMPROW rows[kScratchRows];
  while (c->output_scanline < p->last) {
    const JDIMENSION y0 = c->output_scanline;
    JDIMENSION want = p->last - y0;
    if (want > kScratchRows) want = kScratchRows;
    for (JDIMENSION i = 0; i < want; ++i) {
      const JDIMENSION y = y0 + i;
      rows[i] = (p->direct && y >= p->first) ? p->out + (y - p->first) * p->out_stride
                                              : p->scratch + i * p->scratch_stride;
    }
    const JDIMENSION got = jpeg_read_scanlines(c, rows, want);
    if (got == 0) break;  // suspended: cannot happen with a memory source
    if (!p->direct)
      for (JDIMENSION i = 0; i < got; ++i) {
        const JDIMENSION y = y0 + i;
        if (y >= p->first)
          convert_row(rows[i] + col0, p->out + (y - p->first) * p->out_stride, p->box_width, p->conv,
                      p->in_components);
      }
  }
  if (p->stop_after_box) return true;  // the caller aborts the decompressor
  if (c->output_scanline < c->output_height) {
    // The rows below: Huffman-decoded by the skip (a skip to the very end would decode
    // nothing), then one row read, so that the end of the data is checked as a full
    // decode checks it.
    const JDIMENSION rest = c->output_height - c->output_scanline;
    if (rest > 1) jpeg_skip_scanlines(c, rest - 1);
    JSAMPROW row = p->scratch;
    while (c->output_scanline < c->output_height)
      if (jpeg_read_scanlines(c, &row, 1) == 0) break;
  }
  jpeg_finish_decompress(c);
  return true;
}

// Whether the entropy-coded data of a single-scan file, from `p`, ends at an EOI marker:
// the first marker after it (FF 00 is a stuffed byte, FF D0-D7 a restart marker, and FF
// bytes before a marker are fill) is FF D9.  Then the rows below a region cannot make the
// full decode fail: the entropy decoder stops at that marker without reading further (a
// shortfall of data there is libjpeg's tolerated "premature end of data segment"), and
// jpeg_finish_decompress finds the EOI at once; no "Premature end of JPEG file" can come.
// Otherwise (a truncated file, other markers after the scan) the rows below are decoded
// to check the end as the full decode does.
bool scan_ends_with_eoi(const uint8_t* p, const uint8_t* end) {
  while (p < end) {
    const void* ff = std::memchr(p, 0xff, static_cast<size_t>(end - p));
    if (!ff) return false;
    const uint8_t* q = static_cast<const uint8_t*>(ff) + 1;
    while (q < end && *q == 0xff) ++q;
    if (q >= end) return false;
    if (*q == 0x00 || (*q >= 0xd0 && *q <= 0xd7)) {
      p = q + 1;
      continue;
    }
    return *q == 0xd9;
  }
  return false;
}

JpegHead jpeg_head(JpegDecoder& d, const uint8_t* data, size_t size, int denom, int mode, const std::string& name) {
  if (size > std::numeric_limits<unsigned long>::max())
    throw ValueError(name + ": the file is too large to decode");
  j_decompress_ptr c = d.begin();
  JpegHead h{};
  if (!jpeg_read_head(c, d.err(), data, size, denom, mode, &h)) jpeg_fail(d, name);
  if (h.image_width == 0 || h.image_height == 0) {
    d.end();
    throw ValueError(name + ": cannot decode JPEG: no frame header (the file ends before the image size); " +
                     kFixHint);
  }
  return h;
}

// Decodes `box` (output coordinates, inside the image) of the file, or the whole image
// when region decoding would not be exact or not save enough; *window receives the part
// of the image returned.
Image decode_jpeg(const uint8_t* data, size_t size, const DecodeOptions& o, const std::string& name,
                  const CropBox* box, CropBox* window, bool* region) {
  const int denom = o.scale_denom;
  if (denom != 1 && denom != 2 && denom != 4 && denom != 8)
    throw ValueError(name + ": DecodeOptions::scale_denom must be 1, 2, 4 or 8, got " + std::to_string(denom));
  JpegDecoder& d = jpeg_decoder();
  const JpegHead h = jpeg_head(d, data, size, denom, static_cast<int>(o.mode), name);
  try {
    check_pixels(h.image_width, h.image_height, o.max_image_pixels, name);
  } catch (...) {
    d.end();
    throw;
  }
  const JDIMENSION W = h.width, H = h.height;
  CropBox b{0, 0, H, W};
  if (box) {
    if (box->top < 0 || box->left < 0 || box->height <= 0 || box->width <= 0 || box->top + box->height > H ||
        box->left + box->width > W) {
      d.end();
      throw ValueError(name + ": the region (top " + std::to_string(box->top) + ", left " +
                       std::to_string(box->left) + ", " + std::to_string(box->height) + "x" +
                       std::to_string(box->width) + ") is not inside the " + std::to_string(H) + "x" +
                       std::to_string(W) + " image");
    }
    b = *box;
  }
  JpegPass p{};
  p.in_components = h.out_components;
  const bool cmyk = h.out_space == JCS_CMYK;
  const int out_channels = static_cast<int>(mode_channels(o.mode));
  p.conv = cmyk ? (o.mode == ColorMode::RGB ? RowConvert::CmykToRgb : RowConvert::CmykToL)
                : (h.out_components == 3 && o.mode == ColorMode::L) ? RowConvert::RgbToL : RowConvert::Copy;

  // The region: columns widened by the margin (jpeg_crop_scanline widens them further to
  // iMCU boundaries), rows from kJpegRowMargin rows above the box.
  const int64_t hm = int64_t{kJpegColumnMargin} * h.max_h;
  const int64_t align = int64_t{h.min_dct} * (h.components == 1 ? 1 : h.max_h);
  const int64_t x0 = std::max<int64_t>(0, b.left - hm) / align * align;
  const int64_t x1 = std::min<int64_t>(W, b.left + b.width + hm);
  // The skip ends on the row-group boundary at or above the box (a row group: max_v
  // output rows, what the upsampler makes at once); libjpeg-turbo's skip decodes the
  // context rows before it itself (with context upsampling it skips whole iMCU rows only
  // up to one before the target and reads the rest).
  const int64_t skip = b.top / h.max_v * h.max_v;
  const int64_t rows_decoded = b.top + b.height - skip;
  const double share = static_cast<double>(rows_decoded) * static_cast<double>(x1 - x0) /
                       (static_cast<double>(W) * static_cast<double>(H));
  const bool use_region = box && !h.multi_scan && share <= o.region_full_fraction;
  if (use_region) {
    p.crop_x = static_cast<JDIMENSION>(x0);
    p.crop_w = (x0 == 0 && x1 == W) ? 0 : static_cast<JDIMENSION>(x1 - x0);
    p.skip = static_cast<JDIMENSION>(skip);
    p.first = static_cast<JDIMENSION>(b.top);
    p.last = static_cast<JDIMENSION>(b.top + b.height);
    p.box_left = static_cast<JDIMENSION>(b.left);
    p.box_width = static_cast<JDIMENSION>(b.width);
  } else {
    b = CropBox{0, 0, H, W};
    p.first = 0;
    p.last = H;
    p.box_left = 0;
    p.box_width = W;
  }
  p.stop_after_box = use_region && p.last < H && h.scan_offset < size &&
                     scan_ends_with_eoi(data + h.scan_offset, data + size);
  p.direct = p.conv == RowConvert::Copy && p.crop_w == 0 && p.box_left == 0 && p.box_width == W;
  Image out(b.height, b.width, out_channels);
  p.out = out.data();
  p.out_stride = static_cast<size_t>(b.width) * static_cast<size_t>(out_channels);
  p.scratch_stride = static_cast<size_t>(W) * static_cast<size_t>(h.out_components);
  p.scratch = d.scratch(p.scratch_stride * kScratchRows);
  if (!jpeg_run(d.cinfo(), d.err(), &p)) {
    const std::string msg = d.err().error;
    d.reset();
    if (msg.find("Premature end of JPEG file") != std::string::npos)
      throw ValueError(name + ": image file is truncated (libjpeg: " + msg + "); " + kFixHint);
    throw ValueError(name + ": cannot decode JPEG: " + msg + "; " + kFixHint);
  }
  jpeg_check_warnings(d, name);
  d.end();
  if (window) *window = b;
  if (region) *region = use_region;
  return out;
}

// ------------------------------------------------------------------ PNG (libpng)
uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

struct PngHeader {
  uint32_t width = 0, height = 0;
  int bit_depth = 0, color_type = 0;
};

// IHDR, read by hand (the signature was checked by sniff_format).
PngHeader png_header(const uint8_t* data, size_t size, const std::string& name) {
  if (size < 8 + 8 + 13 || std::memcmp(data + 12, "IHDR", 4) != 0 || be32(data + 8) != 13)
    throw ValueError(name + ": cannot decode PNG: the IHDR chunk is missing or truncated; " + kFixHint);
  PngHeader h;
  h.width = be32(data + 16);
  h.height = be32(data + 20);
  h.bit_depth = data[24];
  h.color_type = data[25];
  return h;
}

// PIL checks the CRC of every chunk before the first IDAT ("broken PNG file (bad header
// checksum in b'IHDR')") and none of IDAT's or after; libpng is told to ignore CRCs, and
// this does PIL's part.
void check_header_crcs(const uint8_t* data, size_t size, const std::string& name) {
  size_t pos = 8;
  while (pos + 12 <= size) {
    const uint32_t length = be32(data + pos);
    const uint8_t* type = data + pos + 4;
    if (std::memcmp(type, "IDAT", 4) == 0) return;
    if (length > size - pos - 12) return;  // truncated: libpng reports it
    const uint32_t crc = static_cast<uint32_t>(crc32(0, type, length + 4));
    if (crc != be32(data + pos + 8 + length))
      throw ValueError(name + ": broken PNG file (bad CRC in chunk '" + std::string(reinterpret_cast<const char*>(type), 4) +
                       "'); " + kFixHint);
    pos += 12 + size_t{length};
  }
}

// What the libpng callbacks share; plain data only (the decoding function longjmps).
struct PngContext {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char message[256];
};

void png_error_fn(png_structp png, png_const_charp msg) {
  auto* ctx = static_cast<PngContext*>(png_get_error_ptr(png));
  std::snprintf(ctx->message, sizeof ctx->message, "%s", msg ? msg : "unknown libpng error");
  png_longjmp(png, 1);
}
void png_warning_fn(png_structp, png_const_charp) {}  // PIL has none of libpng's warnings

void png_read_fn(png_structp png, png_bytep out, png_size_t n) {
  auto* ctx = static_cast<PngContext*>(png_get_io_ptr(png));
  if (n > ctx->size - ctx->pos) png_error(png, "image file is truncated (the data ends before the image)");
  std::memcpy(out, ctx->data + ctx->pos, n);
  ctx->pos += n;
}

// Owner of libpng's read structures.
class PngReader {
 public:
  explicit PngReader(PngContext* ctx) {
    png_ = png_create_read_struct(PNG_LIBPNG_VER_STRING, ctx, png_error_fn, png_warning_fn);
    if (png_) info_ = png_create_info_struct(png_);
  }
  ~PngReader() {
    if (png_) png_destroy_read_struct(&png_, info_ ? &info_ : nullptr, nullptr);
  }
  PngReader(const PngReader&) = delete;
  PngReader& operator=(const PngReader&) = delete;
  png_structp png() const noexcept { return png_; }
  png_infop info() const noexcept { return info_; }

 private:
  png_structp png_ = nullptr;
  png_infop info_ = nullptr;
};

// The rows as libpng gives them after the few transforms asked for: gray 1/2/4-bit
// scaled to 8 bits, palette indices one per byte, interlacing undone.  16-bit samples
// stay big-endian.  Plain data only between setjmp and the longjmps of the callbacks.
struct PngRaw {
  int channels;    // after the transforms (palette: 1 index)
  int bit_depth;   // 8 or 16
  int color_type;  // the file's
  png_colorp palette;
  int num_palette;
};

bool png_read_rows(const PngReader& r, uint8_t* rows, size_t row_bytes, uint32_t height, PngRaw* raw) {
  png_structp png = r.png();
  png_infop info = r.info();
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_crc_action(png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
  png_set_read_fn(png, png_get_error_ptr(png), png_read_fn);
  png_read_info(png, info);
  const int color_type = png_get_color_type(png, info);
  const int bit_depth = png_get_bit_depth(png, info);
  if (color_type == PNG_COLOR_TYPE_PALETTE) {
    png_set_packing(png);  // indices to bytes; the palette is applied below (as PIL does)
  } else if (bit_depth < 8) {
    png_set_expand_gray_1_2_4_to_8(png);  // v * 255 / (2^d - 1): PIL's "1", "L;2", "L;4"
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  raw->channels = png_get_channels(png, info);
  raw->bit_depth = png_get_bit_depth(png, info);
  raw->color_type = color_type;
  raw->palette = nullptr;
  raw->num_palette = 0;
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_get_PLTE(png, info, &raw->palette, &raw->num_palette);
  if (png_get_rowbytes(png, info) != row_bytes) png_error(png, "unexpected row size");
  for (int pass = png_set_interlace_handling(png); pass > 0; --pass)
    for (uint32_t y = 0; y < height; ++y) png_read_row(png, rows + y * row_bytes, nullptr);
  return true;
}

Image decode_png(const uint8_t* data, size_t size, const DecodeOptions& o, const std::string& name) {
  const PngHeader hd = png_header(data, size, name);
  if (hd.width > 0x7fffffffu || hd.height > 0x7fffffffu)
    throw ValueError(name + ": cannot decode PNG: the header gives a size beyond PNG's limit (" +
                     std::to_string(hd.width) + "x" + std::to_string(hd.height) + "); " + kFixHint);
  check_pixels(hd.width, hd.height, o.max_image_pixels, name);
  check_header_crcs(data, size, name);
  int channels_in = 0;
  switch (hd.color_type) {
    case PNG_COLOR_TYPE_GRAY: channels_in = 1; break;
    case PNG_COLOR_TYPE_PALETTE: channels_in = 1; break;
    case PNG_COLOR_TYPE_GRAY_ALPHA: channels_in = 2; break;
    case PNG_COLOR_TYPE_RGB: channels_in = 3; break;
    case PNG_COLOR_TYPE_RGB_ALPHA: channels_in = 4; break;
    default:
      throw ValueError(name + ": cannot decode PNG: unknown color type " + std::to_string(hd.color_type) + "; " +
                       kFixHint);
  }
  if (hd.bit_depth != 1 && hd.bit_depth != 2 && hd.bit_depth != 4 && hd.bit_depth != 8 && hd.bit_depth != 16)
    throw ValueError(name + ": cannot decode PNG: invalid bit depth " + std::to_string(hd.bit_depth) + "; " +
                     kFixHint);
  const int depth_out = hd.bit_depth == 16 ? 2 : 1;
  const size_t row_bytes = static_cast<size_t>(hd.width) * channels_in * depth_out;
  const int64_t width = hd.width, height = hd.height;
  const int64_t out_channels = mode_channels(o.mode);

  // An 8-bit file already in the output's layout is read straight into the result.
  const bool direct = depth_out == 1 && ((hd.color_type == PNG_COLOR_TYPE_RGB && o.mode == ColorMode::RGB) ||
                                         (hd.color_type == PNG_COLOR_TYPE_GRAY && o.mode == ColorMode::L));
  Image out(height, width, out_channels);
  Image rows_buf;
  if (!direct) rows_buf = Image(height, static_cast<int64_t>(row_bytes), 1);
  uint8_t* rows = direct ? out.data() : rows_buf.data();

  PngContext ctx{data, size, 0, {0}};
  PngReader reader(&ctx);
  if (!reader.png() || !reader.info()) throw RuntimeError(name + ": cannot create a libpng reader (out of memory?)");
  PngRaw raw{};
  if (!png_read_rows(reader, rows, row_bytes, hd.height, &raw))
    throw ValueError(name + ": cannot decode PNG: " + ctx.message + "; " + kFixHint);
  if (direct) return out;

  // Convert as PIL's convert("RGB") / convert("L") does.
  const int64_t n = width * height;
  uint8_t* dst = out.data();
  const uint8_t* in = rows;
  if (hd.color_type == PNG_COLOR_TYPE_PALETTE) {
    // PIL's palette: a gray ramp (i, i, i) with the PLTE entries over its first ones.
    uint8_t lut[256][3];
    for (int i = 0; i < 256; ++i) lut[i][0] = lut[i][1] = lut[i][2] = static_cast<uint8_t>(i);
    for (int i = 0; i < raw.num_palette && i < 256; ++i) {
      lut[i][0] = raw.palette[i].red;
      lut[i][1] = raw.palette[i].green;
      lut[i][2] = raw.palette[i].blue;
    }
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* c = lut[in[i]];
      if (out_channels == 3) {
        dst[3 * i] = c[0];
        dst[3 * i + 1] = c[1];
        dst[3 * i + 2] = c[2];
      } else {
        dst[i] = luma(c[0], c[1], c[2]);
      }
    }
    return out;
  }
  const int step = raw.channels * depth_out;  // bytes per pixel in the rows
  const bool color = raw.channels >= 3;
  if (!color && depth_out == 2 && raw.channels == 1) {
    // 16-bit gray is PIL's mode "I": convert clips the value to 0..255.
    for (int64_t i = 0; i < n; ++i, in += 2) {
      const unsigned v = (unsigned{in[0]} << 8) | in[1];
      const uint8_t g = static_cast<uint8_t>(v > 255 ? 255 : v);
      if (out_channels == 3) {
        dst[3 * i] = dst[3 * i + 1] = dst[3 * i + 2] = g;
      } else {
        dst[i] = g;
      }
    }
    return out;
  }
  // Everything else keeps the high byte of 16-bit samples; alpha is dropped.
  for (int64_t i = 0; i < n; ++i, in += step) {
    if (color) {
      const uint8_t r = in[0], g = in[depth_out], b = in[2 * depth_out];
      if (out_channels == 3) {
        dst[3 * i] = r;
        dst[3 * i + 1] = g;
        dst[3 * i + 2] = b;
      } else {
        dst[i] = luma(r, g, b);
      }
    } else {
      if (out_channels == 3) {
        dst[3 * i] = dst[3 * i + 1] = dst[3 * i + 2] = in[0];
      } else {
        dst[i] = in[0];
      }
    }
  }
  return out;
}

// ------------------------------------------------------------------ files
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const noexcept { return fd_; }

 private:
  int fd_;
};

}  // namespace

// ------------------------------------------------------------------ public
Image::Image(int64_t h, int64_t w, int64_t c) : height(h), width(w), channels(c) {
  const size_t n = static_cast<size_t>(h * w * c);
  pixels = std::shared_ptr<uint8_t[]>(new uint8_t[n > 0 ? n : 1]);
}

Tensor Image::to_tensor() const {
  Tensor t = Tensor::empty({height, width, channels}, DType::UInt8);
  if (bytes() > 0) std::memcpy(t.data_ptr(), data(), bytes());
  return t;
}

const char* format_name(ImageFormat f) noexcept {
  switch (f) {
    case ImageFormat::Jpeg: return "JPEG";
    case ImageFormat::Png: return "PNG";
    case ImageFormat::Bmp: return "BMP";
    case ImageFormat::Gif: return "GIF";
    case ImageFormat::Webp: return "WEBP";
    case ImageFormat::Tiff: return "TIFF";
    case ImageFormat::Ppm: return "PPM";
    case ImageFormat::Unknown: break;
  }
  return "unknown";
}

ImageFormat sniff_format(const uint8_t* d, size_t n) noexcept {
  if (n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff) return ImageFormat::Jpeg;
  if (n >= 8 && std::memcmp(d, "\x89PNG\r\n\x1a\n", 8) == 0) return ImageFormat::Png;
  if (n >= 2 && d[0] == 'B' && d[1] == 'M') return ImageFormat::Bmp;
  if (n >= 6 && (std::memcmp(d, "GIF87a", 6) == 0 || std::memcmp(d, "GIF89a", 6) == 0)) return ImageFormat::Gif;
  if (n >= 12 && std::memcmp(d, "RIFF", 4) == 0 && std::memcmp(d + 8, "WEBP", 4) == 0) return ImageFormat::Webp;
  if (n >= 4 && (std::memcmp(d, "II*\0", 4) == 0 || std::memcmp(d, "MM\0*", 4) == 0)) return ImageFormat::Tiff;
  if (n >= 2 && d[0] == 'P' && d[1] >= '1' && d[1] <= '7') return ImageFormat::Ppm;
  return ImageFormat::Unknown;
}

const char* mode_name(ColorMode m) noexcept { return m == ColorMode::L ? "L" : "RGB"; }

ColorMode parse_mode(const std::string& text, const std::string& what) {
  if (text == "RGB") return ColorMode::RGB;
  if (text == "L") return ColorMode::L;
  throw ValueError(what + ": unknown image mode '" + text + "'; the modes are \"RGB\" (3 channels) and \"L\" (1)");
}

ImageInfo probe(const uint8_t* data, size_t size, const std::string& name) {
  ImageInfo info;
  info.format = sniff_format(data, size);
  if (info.format == ImageFormat::Jpeg) {
    JpegDecoder& d = jpeg_decoder();
    const JpegHead h = jpeg_head(d, data, size, 1, -1, name);
    jpeg_check_warnings(d, name);
    d.end();
    info.width = h.image_width;
    info.height = h.image_height;
    info.channels = h.color_space == JCS_GRAYSCALE ? 1 : (h.color_space == JCS_CMYK || h.color_space == JCS_YCCK) ? 4 : 3;
    return info;
  }
  if (info.format == ImageFormat::Png) {
    const PngHeader hd = png_header(data, size, name);
    info.width = hd.width;
    info.height = hd.height;
    switch (hd.color_type) {
      case PNG_COLOR_TYPE_GRAY: info.channels = 1; break;
      case PNG_COLOR_TYPE_GRAY_ALPHA: info.channels = 2; break;
      case PNG_COLOR_TYPE_RGB_ALPHA: info.channels = 4; break;
      default: info.channels = 3; break;
    }
    return info;
  }
  refuse_format(info.format, data, size, name);
}

ImageInfo probe_file(const std::string& path) {
  const std::string bytes = read_file(path);
  return probe(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
}

Image decode(const uint8_t* data, size_t size, const DecodeOptions& options, const std::string& name) {
  const ImageFormat f = sniff_format(data, size);
  if (f == ImageFormat::Jpeg) return decode_jpeg(data, size, options, name, nullptr, nullptr, nullptr);
  if (f == ImageFormat::Png) return decode_png(data, size, options, name);
  refuse_format(f, data, size, name);
}

DecodedRegion decode_region(const uint8_t* data, size_t size, const CropBox& box, const DecodeOptions& options,
                            const std::string& name) {
  DecodedRegion r;
  if (sniff_format(data, size) == ImageFormat::Jpeg) {
    r.image = decode_jpeg(data, size, options, name, &box, &r.window, &r.region_decoded);
    return r;
  }
  r.image = decode(data, size, options, name);
  if (box.top < 0 || box.left < 0 || box.height <= 0 || box.width <= 0 || box.top + box.height > r.image.height ||
      box.left + box.width > r.image.width)
    throw ValueError(name + ": the region (top " + std::to_string(box.top) + ", left " + std::to_string(box.left) +
                     ", " + std::to_string(box.height) + "x" + std::to_string(box.width) + ") is not inside the " +
                     std::to_string(r.image.height) + "x" + std::to_string(r.image.width) + " image");
  r.window = CropBox{0, 0, r.image.height, r.image.width};
  return r;
}

Image decode_file(const std::string& path, const DecodeOptions& options) {
  const std::string bytes = read_file(path);
  return decode(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), options, path);
}

std::string read_file(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int e = errno;
    if (e == ENOENT)
      throw FileNotFoundError(path + ": no such file (" + std::strerror(e) +
                              "); check the path, or rebuild the dataset if files were removed");
    throw RuntimeError(path + ": cannot open the file: " + std::strerror(e));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw RuntimeError(path + ": cannot stat the file: " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw RuntimeError(path + ": is a directory, not an image file");
  std::string out;
  out.resize(S_ISREG(st.st_mode) ? static_cast<size_t>(st.st_size) : 0);
  size_t got = 0;
  while (true) {
    if (got == out.size()) out.resize(out.size() < 4096 ? 4096 : out.size() * 2);  // grew, or not a regular file
    const ssize_t r = ::read(fd.get(), &out[got], out.size() - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw RuntimeError(path + ": cannot read the file: " + std::strerror(errno));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

}  // namespace loader::image
