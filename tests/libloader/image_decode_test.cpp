// JPEG / PNG decoding (loader/image/decode.h): pixels equal PIL 9.4's convert("RGB") and
// convert("L") for every file of tests/golden/images/files, and bad files give errors that
// name the file instead of crashing.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "image_test_util.h"
#include "loader/image/decode.h"
#include "pt_test_util.h"

namespace {

using namespace loader::testing;
using loader::image::ColorMode;
using loader::image::DecodeOptions;
using loader::image::Image;
using loader::image::ImageFormat;

std::string decode_error(const std::string& bytes, const std::string& name, const DecodeOptions& o = {}) {
  try {
    loader::image::decode(u8(bytes), bytes.size(), o, name);
  } catch (const loader::ValueError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ImageDecode, PixelsEqualPil) {
  const auto golden = image_json("decode.json");
  ASSERT_GE(golden["files"].size(), 20u);
  for (const auto& [name, rec] : golden["files"].items()) {
    SCOPED_TRACE(name + " (PIL mode " + rec["pil_mode"].get<std::string>() + ")");
    const std::string bytes = image_bytes(name);
    for (ColorMode mode : {ColorMode::RGB, ColorMode::L}) {
      DecodeOptions o;
      o.mode = mode;
      const Image img = loader::image::decode(u8(bytes), bytes.size(), o, name);
      EXPECT_EQ(img.width, rec["width"].get<int64_t>());
      EXPECT_EQ(img.height, rec["height"].get<int64_t>());
      EXPECT_EQ(img.channels, mode == ColorMode::RGB ? 3 : 1);
      const auto want = base64_decode(rec[mode == ColorMode::RGB ? "rgb" : "l"].get<std::string>());
      ASSERT_EQ(img.bytes(), want.size());
      const Diff d = byte_diff(img.data(), want.data(), want.size());
      EXPECT_EQ(d.differing, 0u) << loader::image::mode_name(mode) << ": " << d.differing << " of " << want.size()
                                 << " bytes differ, mean " << d.mean << ", max " << d.max;
    }
  }
}

TEST(ImageDecode, DecodeFileAndTensor) {
  const Image img = loader::image::decode_file(image_file("rgb444.jpg"));
  const loader::Tensor t = img.to_tensor();
  EXPECT_EQ(t.sizes(), (loader::Dims{21, 33, 3}));
  EXPECT_EQ(t.dtype(), loader::DType::UInt8);
  EXPECT_EQ(std::memcmp(t.data_ptr(), img.data(), img.bytes()), 0);
}

TEST(ImageDecode, ProbeReadsOnlyTheHeader) {
  struct Case {
    const char* file;
    ImageFormat format;
    int channels;
  } cases[] = {{"rgb420.jpg", ImageFormat::Jpeg, 3}, {"gray.jpg", ImageFormat::Jpeg, 1},
               {"cmyk.jpg", ImageFormat::Jpeg, 4},   {"rgb8.png", ImageFormat::Png, 3},
               {"rgba16.png", ImageFormat::Png, 4},  {"gray_alpha8.png", ImageFormat::Png, 2},
               {"palette8.png", ImageFormat::Png, 3}, {"gray1.png", ImageFormat::Png, 1}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    const auto info = loader::image::probe_file(image_file(c.file));
    EXPECT_EQ(info.format, c.format);
    EXPECT_EQ(info.width, 33);
    EXPECT_EQ(info.height, 21);
    EXPECT_EQ(info.channels, c.channels);
  }
}

TEST(ImageDecode, DctScaledDecodingGivesTheScaledSize) {
  const std::string bytes = image_bytes("rgb420_big.jpg");  // 97 x 61
  for (int d : {1, 2, 4, 8}) {
    DecodeOptions o;
    o.scale_denom = d;
    const Image img = loader::image::decode(u8(bytes), bytes.size(), o, "big");
    EXPECT_EQ(img.width, (97 + d - 1) / d) << d;
    EXPECT_EQ(img.height, (61 + d - 1) / d) << d;
  }
  DecodeOptions bad;
  bad.scale_denom = 3;
  EXPECT_NE(decode_error(bytes, "big", bad).find("scale_denom must be 1, 2, 4 or 8"), std::string::npos);
  // PNG ignores it.
  const std::string png = image_bytes("rgb8.png");
  const Image p = loader::image::decode(u8(png), png.size(), bad, "png");
  EXPECT_EQ(p.width, 33);
}

TEST(ImageDecode, BadFilesGiveErrorsNamingTheFile) {
  const std::string jpg = image_bytes("rgb420_big.jpg");
  const std::string prog = image_bytes("progressive.jpg");
  const std::string png = image_bytes("rgb8.png");
  // A PNG whose IHDR CRC is wrong (PIL: "broken PNG file (bad header checksum in b'IHDR')").
  std::string bad_crc = png;
  bad_crc[8 + 8 + 13] ^= 0x55;
  // A decompression bomb: the IHDR of a 20000 x 20000 image (400 M pixels), nothing else right.
  std::string bomb_png = png;
  const unsigned char dims[8] = {0, 0, 0x4e, 0x20, 0, 0, 0x4e, 0x20};
  std::memcpy(&bomb_png[16], dims, 8);
  // A JPEG whose SOF0 claims 30000 x 30000.
  std::string bomb_jpg = jpg;
  const size_t sof = bomb_jpg.find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  const unsigned char big[4] = {0x75, 0x30, 0x75, 0x30};
  std::memcpy(&bomb_jpg[sof + 5], big, 4);

  const struct {
    const char* name;
    std::string bytes;
    const char* says;
  } cases[] = {
      {"empty.jpg", "", "cannot identify image file: the file is empty (0 bytes)"},
      {"notes.jpg", "this is not an image\n", "cannot identify image file: neither JPEG nor PNG"},
      {"half.jpg", jpg.substr(0, jpg.size() / 2), "image file is truncated"},
      {"cut_progressive.jpg", prog.substr(0, prog.size() * 9 / 10), "image file is truncated"},
      {"half_progressive.jpg", prog.substr(0, prog.size() / 2), "cannot decode JPEG: Bogus marker length"},
      {"header_only.jpg", jpg.substr(0, 20), "cannot decode JPEG"},
      {"bad_crc.png", bad_crc, "broken PNG file (bad CRC in chunk 'IHDR')"},
      {"half.png", png.substr(0, png.size() / 2), "cannot decode PNG"},
      {"signature.png", png.substr(0, 8), "cannot decode PNG: the IHDR chunk is missing"},
      {"bomb.png", bomb_png, "exceeds the limit of 89478485 pixels, could be a decompression bomb"},
      {"bomb.jpg", bomb_jpg, "exceeds the limit of 89478485 pixels, could be a decompression bomb"},
      {"x.bmp", "BM\x36\0\0\0", "BMP images are not supported (only JPEG and PNG are decoded)"},
      {"x.gif", "GIF89a\x01\0\x01\0", "GIF images are not supported"},
      {"x.webp", std::string("RIFF\0\0\0\0WEBPVP8 ", 16), "WEBP images are not supported"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string msg = decode_error(c.bytes, std::string("/data/") + c.name);
    EXPECT_EQ(msg.rfind(std::string("/data/") + c.name + ": ", 0), 0u) << msg;  // names the file first
    EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
  }
  // The limit is configurable, and checked against the header only.
  DecodeOptions small;
  small.max_image_pixels = 33 * 21 - 1;
  EXPECT_NE(decode_error(png, "x.png", small).find("exceeds the limit of 692 pixels"), std::string::npos);
  small.max_image_pixels = 33 * 21;
  EXPECT_EQ(decode_error(png, "x.png", small), "(no error)");
}

TEST(ImageDecode, PngDataCrcIsIgnoredAsPilDoes) {
  // PIL checks the CRCs of the chunks before IDAT only.
  std::string png = image_bytes("rgb8.png");
  const size_t idat = png.find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  const uint32_t len = (uint32_t{static_cast<uint8_t>(png[idat - 4])} << 24) |
                       (uint32_t{static_cast<uint8_t>(png[idat - 3])} << 16) |
                       (uint32_t{static_cast<uint8_t>(png[idat - 2])} << 8) | static_cast<uint8_t>(png[idat - 1]);
  png[idat + 4 + len] ^= 0x01;  // the IDAT CRC
  const Image a = loader::image::decode(u8(png), png.size(), {}, "x.png");
  const Image b = loader::image::decode_file(image_file("rgb8.png"));
  ASSERT_EQ(a.bytes(), b.bytes());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.bytes()), 0);
}

TEST(ImageDecode, JpegWarningsAreToleratedAsPilToleratesThem) {
  // Bytes before the EOI marker: libjpeg warns "Corrupt JPEG data: 3 extraneous bytes before
  // marker 0xd9"; PIL decodes the file (to the same pixels), and so does decode().  Losing
  // only the EOI marker is a truncation for both ("image file is truncated").
  const std::string jpg = image_bytes("rgb420_big.jpg");
  const std::string extra = jpg.substr(0, jpg.size() - 2) + "\x01\x02\x03" + jpg.substr(jpg.size() - 2);
  const Image a = loader::image::decode(u8(extra), extra.size(), {}, "extra.jpg");
  const Image b = loader::image::decode(u8(jpg), jpg.size(), {}, "x.jpg");
  ASSERT_EQ(a.bytes(), b.bytes());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.bytes()), 0);
  EXPECT_NE(decode_error(jpg.substr(0, jpg.size() - 2), "no_eoi.jpg").find("image file is truncated"),
            std::string::npos);
}

TEST(ImageDecode, MissingAndUnreadableFiles) {
  TempDir dir;
  const std::string missing = dir.file("nope.jpg");
  try {
    loader::image::decode_file(missing);
    FAIL() << "no error";
  } catch (const loader::image::FileNotFoundError& e) {
    EXPECT_EQ(e.python_type(), "FileNotFoundError");
    EXPECT_NE(std::string(e.what()).find(missing + ": no such file"), std::string::npos) << e.what();
  }
  try {
    loader::image::decode_file(dir.path());
    FAIL() << "no error";
  } catch (const loader::RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

// Every prefix and many corrupted copies of every test file: a loader::Error or an
// image, never a crash (the fuzz target does this at scale: fuzz/image_decode_fuzzer.cpp).
TEST(ImageDecode, CorruptInputsNeverCrash) {
  const auto golden = image_json("decode.json");
  size_t decoded = 0, refused = 0;
  for (const auto& [name, rec] : golden["files"].items()) {
    (void)rec;
    const std::string bytes = image_bytes(name);
    auto attempt = [&](const std::string& b) {
      try {
        const Image img = loader::image::decode(u8(b), b.size(), {}, name);
        EXPECT_GT(img.bytes(), 0u);
        ++decoded;
      } catch (const loader::Error&) {
        ++refused;
      }
    };
    for (size_t cut = 0; cut < bytes.size(); cut += 5) attempt(bytes.substr(0, cut));
    uint32_t state = 12345;
    for (int k = 0; k < 60; ++k) {
      std::string b = bytes;
      for (int flips = 0; flips < 3; ++flips) {
        state = state * 1103515245u + 12345u;
        b[(state >> 8) % b.size()] = static_cast<char>(state >> 24);
      }
      attempt(b);
    }
  }
  EXPECT_GT(decoded, 0u);
  EXPECT_GT(refused, 0u);
}

TEST(ImageDecode, ModesAndFormatNames) {
  EXPECT_EQ(loader::image::parse_mode("RGB"), ColorMode::RGB);
  EXPECT_EQ(loader::image::parse_mode("L"), ColorMode::L);
  try {
    loader::image::parse_mode("RGBA", "image_folder mode");
    FAIL();
  } catch (const loader::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("image_folder mode: unknown image mode 'RGBA'"), std::string::npos);
  }
  EXPECT_STREQ(loader::image::format_name(ImageFormat::Png), "PNG");
  EXPECT_EQ(loader::image::luma(255, 255, 255), 255);
  EXPECT_EQ(loader::image::luma(0, 0, 0), 0);
  EXPECT_EQ(loader::image::luma(255, 0, 0), 76);  // PIL: Image.new("RGB", (1, 1), (255, 0, 0)).convert("L")
}

}  // namespace
