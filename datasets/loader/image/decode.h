// Decoding JPEG and PNG files into uint8 pixels equal to what PIL 9.4 gives for
// `Image.open(f).convert("RGB")` (torchvision's pil_loader) or `.convert("L")`.
//
//   loader::image::Image img = loader::image::decode_file("cat.jpg");   // RGB, HWC
//   img.height; img.width; img.channels;                                // channels 3
//   loader::Tensor t = img.to_tensor();                                 // uint8 [H, W, 3]
//
//   loader::image::DecodeOptions o;
//   o.mode = loader::image::ColorMode::L;      // PIL's convert("L")
//   o.scale_denom = 4;                          // JPEG only: DCT-scaled to 1/4 per side
//   auto small = loader::image::decode(bytes.data(), bytes.size(), o, "cat.jpg");
//
//   loader::image::ImageInfo info = loader::image::probe(bytes.data(), bytes.size());
//
// JPEG: libjpeg-turbo's TurboJPEG API with its decompression defaults, which are
// libjpeg's (PIL's): the accurate integer IDCT (JDCT_ISLOW) and smooth ("fancy")
// chroma upsampling; the same library as Debian's PIL, so the pixels are identical
// (tests/libloader/image_decode_test.cpp checks 4:2:0, 4:4:4, grayscale, progressive and
// CMYK files).  CMYK and YCCK files are converted as PIL does: PIL reads every CMYK JPEG
// as Adobe-inverted ("CMYK;I": c = 255 - stored) and converts with Convert.c's cmyk2rgb,
// r = 255 - k' - c*(255 - k')/255 in its rounded integer form.  A file whose data ends
// early (libjpeg's "Premature end of JPEG file") is an error, as PIL's "image file is
// truncated"; other libjpeg warnings (extraneous bytes before a marker) are not, as in PIL.
//
// PNG: libpng.  Gray, gray+alpha, RGB, RGBA and palette files (with or without tRNS), bit
// depths 1 to 16.  As PIL: alpha is dropped (convert("RGB") does not composite), 16-bit
// samples keep their high byte (PIL's "RGB;16B" unpackers), except 16-bit grayscale, which
// PIL opens as mode "I" and whose convert clips the 0..65535 value to 0..255; gAMA, cHRM,
// sRGB and iCCP chunks are ignored (PIL applies none of them).
//
// L (one channel) is PIL's convert("L") from RGB: L = (19595 R + 38470 G + 7471 B +
// 0x8000) >> 16, the ITU-R 601-2 luma in PIL's fixed point; gray files give their values.
//
// Bad input never crashes: every failure is a loader::Error naming the file (the `name`
// argument) and what is wrong.  ValueError for content (not an image, an unsupported
// format, corrupt or truncated data, more pixels than DecodeOptions::max_image_pixels,
// checked from the header before any pixel is decoded), FileNotFoundError (below) for a
// missing file, RuntimeError for a file that cannot be read.  Thread-safe: each thread
// keeps its own decoder handles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "loader/error.h"
#include "loader/tensor.h"

namespace loader::image {

/// Python's FileNotFoundError (torchvision raises it for a folder without classes or a
/// class without files, and open() for a missing file).  In a worker process it reaches
/// the main process as a RuntimeError with the same message (loader::throw_error knows
/// only the types of error.h).
class FileNotFoundError : public Error {
 public:
  explicit FileNotFoundError(const std::string& message) : Error("FileNotFoundError", message) {}
};

/// PIL's Image.MAX_IMAGE_PIXELS (1024 * 1024 * 1024 // 4 // 3).  PIL warns above it and
/// refuses above twice as many; decode() refuses anything above the limit.
constexpr int64_t kDefaultMaxImagePixels = 89478485;

/// The file formats recognised by their first bytes.  Only JPEG and PNG are decoded; the
/// others are named in the error that refuses them.
enum class ImageFormat : uint8_t { Unknown, Jpeg, Png, Bmp, Gif, Webp, Tiff, Ppm };
/// "JPEG", "PNG", "BMP", "GIF", "WEBP", "TIFF", "PPM", "unknown".
const char* format_name(ImageFormat format) noexcept;
/// The format of `data` from its signature (Unknown when none matches).
ImageFormat sniff_format(const uint8_t* data, size_t size) noexcept;

/// The pixel layout decoded: PIL's mode after convert().
enum class ColorMode : uint8_t {
  RGB,  ///< 3 channels (convert("RGB"))
  L,    ///< 1 channel (convert("L"))
};
/// "RGB" / "L".
const char* mode_name(ColorMode mode) noexcept;
/// Parses "RGB" or "L"; ValueError naming `what` otherwise.
ColorMode parse_mode(const std::string& text, const std::string& what = "mode");
inline int64_t mode_channels(ColorMode mode) noexcept { return mode == ColorMode::L ? 1 : 3; }

/// What the header says, without decoding pixels.
struct ImageInfo {
  ImageFormat format = ImageFormat::Unknown;
  int64_t width = 0;
  int64_t height = 0;
  /// Channels stored in the file: 1 gray, 2 gray+alpha, 3 color, 4 RGBA or CMYK (PNG
  /// palette files: 3, or 4 with tRNS).
  int channels = 0;
};

struct DecodeOptions {
  /// Pixel layout of the result.
  ColorMode mode = ColorMode::RGB;
  /// Refuse (ValueError) an image of more than this many pixels, checked from the header
  /// before decoding (a decompression bomb costs nothing).  <= 0: no limit.
  int64_t max_image_pixels = kDefaultMaxImagePixels;
  /// JPEG only: decode at 1/scale_denom of the size per side with libjpeg's DCT scaling
  /// (1, 2, 4 or 8); the result is ceil(width / scale_denom) x ceil(height / scale_denom).
  /// This is not PIL's full-size decode followed by a resize: transforms.h uses it only
  /// with decode_scaling (see there for its measured accuracy).  PNG ignores it.
  int scale_denom = 1;
};

/// Decoded pixels: uint8, height x width x channels, row-major (HWC), contiguous.
struct Image {
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;
  std::shared_ptr<uint8_t[]> pixels;  ///< height * width * channels bytes

  Image() = default;
  /// Uninitialised pixels of the given size.
  Image(int64_t height, int64_t width, int64_t channels);
  uint8_t* data() const noexcept { return pixels.get(); }
  size_t bytes() const noexcept { return static_cast<size_t>(height * width * channels); }
  ColorMode mode() const noexcept { return channels == 1 ? ColorMode::L : ColorMode::RGB; }
  /// A uint8 tensor [height, width, channels] sharing the pixels.
  Tensor to_tensor() const;
};

/// The header of an in-memory file.  ValueError naming `name` when it is not a
/// readable JPEG or PNG header (other formats: a ValueError saying which one it is).
ImageInfo probe(const uint8_t* data, size_t size, const std::string& name = "<memory>");
/// probe() of a file (reads the file).
ImageInfo probe_file(const std::string& path);

/// Decodes an in-memory JPEG or PNG file.  `name` (usually the path) is named by every
/// error message.
Image decode(const uint8_t* data, size_t size, const DecodeOptions& options = {},
             const std::string& name = "<memory>");
/// Reads `path` and decodes it.
Image decode_file(const std::string& path, const DecodeOptions& options = {});

/// The whole file as bytes.  FileNotFoundError for a missing file, RuntimeError for one
/// that cannot be read (a directory, no permission, an I/O error), naming the path.
std::string read_file(const std::string& path);

/// PIL's RGB -> L conversion of one pixel (see above).
inline uint8_t luma(uint8_t r, uint8_t g, uint8_t b) noexcept {
  return static_cast<uint8_t>((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

}  // namespace loader::image
