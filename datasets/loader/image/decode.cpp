#include "loader/image/decode.h"

#include <fcntl.h>
#include <png.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

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

// ------------------------------------------------------------------ JPEG (TurboJPEG)
// One decompressor per thread, destroyed with the thread.  libjpeg-turbo 2.1 can leave a
// handle unusable after a failed call (a failed tjDecompressHeader3 does not reset it:
// the next file then fails with "Bogus DQT index"), so a failure replaces it.
class TjHandle {
 public:
  TjHandle() : h_(tjInitDecompress()) {}
  ~TjHandle() { destroy(); }
  TjHandle(const TjHandle&) = delete;
  TjHandle& operator=(const TjHandle&) = delete;
  tjhandle get(const std::string& name) {
    if (!h_) h_ = tjInitDecompress();
    if (!h_) throw RuntimeError(name + ": cannot create a TurboJPEG decompressor: " + tjGetErrorStr2(nullptr));
    return h_;
  }
  void reset() noexcept { destroy(); }

 private:
  void destroy() noexcept {
    if (h_) tjDestroy(h_);
    h_ = nullptr;
  }
  tjhandle h_;
};

TjHandle& jpeg_handle() {
  thread_local TjHandle handle;
  return handle;
}

struct JpegHeader {
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
};

JpegHeader jpeg_header(const uint8_t* data, size_t size, const std::string& name) {
  JpegHeader hd;
  if (size > std::numeric_limits<unsigned long>::max())
    throw ValueError(name + ": the file is too large to decode");
  tjhandle h = jpeg_handle().get(name);
  if (tjDecompressHeader3(h, data, static_cast<unsigned long>(size), &hd.width, &hd.height, &hd.subsamp,
                          &hd.colorspace) != 0) {
    const std::string msg = tjGetErrorStr2(h);
    jpeg_handle().reset();
    throw ValueError(name + ": cannot decode JPEG: " + msg + "; " + kFixHint);
  }
  if (hd.width <= 0 || hd.height <= 0) {
    jpeg_handle().reset();
    throw ValueError(name + ": cannot decode JPEG: no frame header (the file ends before the image size); " +
                     kFixHint);
  }
  return hd;
}

// libjpeg's warnings (JWRN_*) but the end of the data: PIL decodes such files, and so
// does this.  TurboJPEG returns -1 for them too, with the first warning's text; after a
// fatal error the text is the error's.
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

void jpeg_decompress(const uint8_t* data, size_t size, uint8_t* out, int width, int height, int pixel_format,
                     const std::string& name) {
  // Default flags: accurate integer IDCT and smooth upsampling (libjpeg's and PIL's).  A
  // progressive file of more than 500 scans is refused (TJFLAG_LIMITSCANS): a CPU bomb.
  tjhandle h = jpeg_handle().get(name);
  if (tjDecompress2(h, data, static_cast<unsigned long>(size), out, width, 0, height, pixel_format,
                    TJFLAG_LIMITSCANS) == 0)
    return;
  const std::string msg = tjGetErrorStr2(h);
  jpeg_handle().reset();
  if (tolerated_warning(msg)) return;  // the image is complete
  if (msg.find("Premature end of JPEG file") != std::string::npos)
    throw ValueError(name + ": image file is truncated (libjpeg: " + msg + "); " + kFixHint);
  throw ValueError(name + ": cannot decode JPEG: " + msg + "; " + kFixHint);
}

Image decode_jpeg(const uint8_t* data, size_t size, const DecodeOptions& o, const std::string& name) {
  const JpegHeader hd = jpeg_header(data, size, name);
  check_pixels(hd.width, hd.height, o.max_image_pixels, name);
  const int denom = o.scale_denom;
  if (denom != 1 && denom != 2 && denom != 4 && denom != 8)
    throw ValueError(name + ": DecodeOptions::scale_denom must be 1, 2, 4 or 8, got " + std::to_string(denom));
  const tjscalingfactor sf{1, denom};
  const int w = TJSCALED(hd.width, sf);
  const int ht = TJSCALED(hd.height, sf);
  const bool cmyk = hd.colorspace == TJCS_CMYK || hd.colorspace == TJCS_YCCK;
  const bool gray = hd.colorspace == TJCS_GRAY;

  if (cmyk) {
    // PIL: every CMYK JPEG is Adobe-inverted ("CMYK;I"), then Convert.c's cmyk2rgb.
    Image tmp(ht, w, 4);
    jpeg_decompress(data, size, tmp.data(), w, ht, TJPF_CMYK, name);
    Image out(ht, w, mode_channels(o.mode));
    const uint8_t* in = tmp.data();
    uint8_t* dst = out.data();
    const int64_t n = static_cast<int64_t>(w) * ht;
    for (int64_t i = 0; i < n; ++i, in += 4) {
      const int nk = in[3];  // 255 - k, k = 255 - stored
      uint8_t rgb[3];
      for (int c = 0; c < 3; ++c) {
        const int cc = 255 - in[c];
        const int t = cc * nk + 128;
        const int v = nk - (((t >> 8) + t) >> 8);
        rgb[c] = static_cast<uint8_t>(v < 0 ? 0 : v);
      }
      if (o.mode == ColorMode::RGB) {
        dst[0] = rgb[0];
        dst[1] = rgb[1];
        dst[2] = rgb[2];
        dst += 3;
      } else {
        *dst++ = luma(rgb[0], rgb[1], rgb[2]);
      }
    }
    return out;
  }
  if (o.mode == ColorMode::L && gray) {
    Image out(ht, w, 1);
    jpeg_decompress(data, size, out.data(), w, ht, TJPF_GRAY, name);
    return out;
  }
  Image rgb(ht, w, 3);  // libjpeg's gray -> RGB replicates, as PIL's L -> RGB
  jpeg_decompress(data, size, rgb.data(), w, ht, TJPF_RGB, name);
  if (o.mode == ColorMode::RGB) return rgb;
  Image out(ht, w, 1);
  const uint8_t* in = rgb.data();
  uint8_t* dst = out.data();
  const int64_t n = static_cast<int64_t>(w) * ht;
  for (int64_t i = 0; i < n; ++i, in += 3) dst[i] = luma(in[0], in[1], in[2]);
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
    const JpegHeader hd = jpeg_header(data, size, name);
    info.width = hd.width;
    info.height = hd.height;
    info.channels = hd.colorspace == TJCS_GRAY ? 1 : (hd.colorspace == TJCS_CMYK || hd.colorspace == TJCS_YCCK) ? 4 : 3;
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
  if (f == ImageFormat::Jpeg) return decode_jpeg(data, size, options, name);
  if (f == ImageFormat::Png) return decode_png(data, size, options, name);
  refuse_format(f, data, size, name);
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
