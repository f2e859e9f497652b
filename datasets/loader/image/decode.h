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
//   // The pixels of a box only (torchvision's (top, left, height, width)), equal to the box of
//   // decode(): a JPEG is decoded only as far as the box needs.
//   auto r = loader::image::decode_region(bytes.data(), bytes.size(), {10, 20, 100, 150});
//   r.image;            // the pixels of r.window, which holds the box
//   r.region_decoded;   // false: the whole file was decoded (PNG, progressive JPEG, box nearly all)
//
// JPEG: libjpeg-turbo's libjpeg API with its decompression defaults (PIL's): the
// accurate integer IDCT (JDCT_ISLOW) and smooth ("fancy") chroma upsampling; the same
// library as Debian's PIL, so the pixels are identical (tests/libloader/image_decode_test.cpp
// checks 4:2:0, 4:4:4, grayscale, progressive and CMYK files).  decode_region() decodes
// only the rows and columns a box needs (plus the margin that keeps its pixels those of a
// full decode: tests/libloader/image_region_test.cpp compares them byte for byte).  CMYK and YCCK files are converted as PIL does: PIL reads every CMYK JPEG
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

/// A box of an image as torchvision's get_params returns it: (i, j, h, w) = (top, left,
/// height, width).
struct CropBox {
  int64_t top = 0;
  int64_t left = 0;
  int64_t height = 0;
  int64_t width = 0;
  bool operator==(const CropBox& o) const noexcept {
    return top == o.top && left == o.left && height == o.height && width == o.width;
  }
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
  /// decode_region() of a JPEG only: decode the whole file instead when the rows and
  /// columns the region needs (with its margin, widened to iMCU columns) hold more than
  /// this share of the image's pixels: region decoding then saves too little to pay for
  /// its cropped copy.  1.0: always decode the region where it is exact (tests).
  double region_full_fraction = 0.9;
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
/// What decode_region() returns: the pixels of `window`, a box of the (DCT-scaled) image
/// that holds the box asked for.
struct DecodedRegion {
  Image image;
  CropBox window;
  /// true: a JPEG decoded only as far as the box needs (then window is the box); false:
  /// the whole image was decoded (window is the whole image): a PNG, a progressive (or
  /// multi-scan) JPEG, which libjpeg entropy-decodes whole before any row, or a box that
  /// needs more than DecodeOptions::region_full_fraction of the image.
  bool region_decoded = false;
};

/// The pixels of `box` (in the coordinates of the image decode() gives with `options`,
/// DCT scaling included), equal byte for byte to the same box of decode()'s result.  A
/// sequential JPEG is decoded only as far as the box needs: the columns of the box plus
/// two chroma samples on each side, widened to iMCU columns (jpeg_crop_scanline); the
/// rows above skipped once from the top to one iMCU row above the box
/// (jpeg_skip_scanlines: Huffman-decoded only); the rows below not at all when the scan's
/// data ends at an EOI marker (they cannot make decode() fail then), else Huffman-decoded,
/// so that a truncated file gives the error decode() gives.  ValueError when the
/// box is not inside the image, and every error decode() gives.
DecodedRegion decode_region(const uint8_t* data, size_t size, const CropBox& box, const DecodeOptions& options = {},
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
