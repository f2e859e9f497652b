// Region decoding (loader/image/decode.h, decode_region; transforms.h, LoadOptions::
// region_decoding): the pixels of a box decoded alone equal, byte for byte, the same box
// of a full decode, for JPEGs encoded here with libjpeg in every sampling libjpeg-turbo
// upsamples differently (4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1), grayscale, CMYK and YCCK,
// baseline and progressive, with and without restart markers, at odd sizes; boxes on
// every edge and corner, 1x1, the full image, one starting at every row and every column
// (every phase of the iMCU grid, so every skip and crop margin), and thousands drawn by
// RandomResizedCrop.get_params.  Then the pipelines of tests/golden/images/transforms.json
// through load() (region decoding on) against torchvision's bytes.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <jpeglib.h>  // after <cstdio>

#include "image_test_util.h"
#include "loader/generator.h"
#include "loader/image/decode.h"
#include "loader/image/transforms.h"

namespace {

using namespace loader::testing;
using loader::image::ColorMode;
using loader::image::Compose;
using loader::image::CropBox;
using loader::image::DecodeOptions;
using loader::image::Image;

// A JPEG made here: what it is and its bytes.
struct Jpeg {
  std::string label;
  int width = 0, height = 0;
  bool sequential = true;  // one interleaved scan: region decoding applies
  std::string bytes;
};

enum class Space { YCbCr, Gray, Cmyk, Ycck };

// libjpeg's compressor into memory.  Plain data between its calls: it exits through
// error_exit (the default one aborts the process on an encoder bug, which is what a test
// wants).
std::string encode(const std::vector<uint8_t>& pixels, int w, int h, Space space, int hs, int vs, bool progressive,
                   int restart_rows, int quality) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* out = nullptr;
  unsigned long out_size = 0;
  jpeg_mem_dest(&c, &out, &out_size);
  c.image_width = static_cast<JDIMENSION>(w);
  c.image_height = static_cast<JDIMENSION>(h);
  c.input_components = space == Space::Gray ? 1 : space == Space::YCbCr ? 3 : 4;
  c.in_color_space = space == Space::Gray ? JCS_GRAYSCALE : space == Space::YCbCr ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&c);
  if (space == Space::Ycck) jpeg_set_colorspace(&c, JCS_YCCK);
  jpeg_set_quality(&c, quality, TRUE);
  if (space != Space::Gray) {
    c.comp_info[0].h_samp_factor = hs;
    c.comp_info[0].v_samp_factor = vs;
    for (int i = 1; i < c.num_components; ++i) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
    if (space != Space::YCbCr) {  // K at luma's sampling, as Photoshop writes YCCK
      c.comp_info[3].h_samp_factor = hs;
      c.comp_info[3].v_samp_factor = vs;
    }
  }
  c.restart_in_rows = restart_rows;
  if (progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  const size_t stride = static_cast<size_t>(w) * static_cast<size_t>(c.input_components);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(pixels.data()) + c.next_scanline * stride;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::string bytes(reinterpret_cast<const char*>(out), out_size);
  jpeg_destroy_compress(&c);
  std::free(out);
  return bytes;
}

// Smooth colour fields plus noise: chroma that changes from sample to sample, so a wrong
// upsampling neighbour changes the pixel.
std::vector<uint8_t> pattern(int w, int h, int channels, uint64_t seed) {
  loader::Generator g(seed);
  std::vector<uint8_t> p(static_cast<size_t>(w) * h * channels);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < channels; ++c) {
        const int base = (x * (37 + 11 * c) + y * (23 + 7 * c)) % 256;
        const int noise = static_cast<int>(g.random() % 64) - 32;
        const int v = base + noise;
        p[(static_cast<size_t>(y) * w + x) * channels + c] = static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
      }
  return p;
}

struct Sampling {
  const char* name;
  Space space;
  int hs, vs;
};

const Sampling kSamplings[] = {
    {"444", Space::YCbCr, 1, 1}, {"422", Space::YCbCr, 2, 1}, {"420", Space::YCbCr, 2, 2},
    {"440", Space::YCbCr, 1, 2}, {"411", Space::YCbCr, 4, 1}, {"gray", Space::Gray, 1, 1},
    {"cmyk", Space::Cmyk, 2, 2}, {"ycck", Space::Ycck, 2, 2},
};

Jpeg make_jpeg(const Sampling& s, int w, int h, bool progressive, int restart_rows, uint64_t seed) {
  Jpeg j;
  j.width = w;
  j.height = h;
  j.sequential = !progressive;
  j.label = std::string(s.name) + " " + std::to_string(w) + "x" + std::to_string(h) +
            (progressive ? " progressive" : " baseline") + (restart_rows ? " restart" : "");
  const int channels = s.space == Space::Gray ? 1 : s.space == Space::YCbCr ? 3 : 4;
  j.bytes = encode(pattern(w, h, channels, seed), w, h, s.space, s.hs, s.vs, progressive, restart_rows, 90);
  return j;
}

// The boxes of a w x h image: corners, edges, 1x1 ones, the full image, a box starting at
// every row and at every column (every `step`-th of them), and `random` from get_params.
std::vector<CropBox> boxes_for(int64_t w, int64_t h, int random, uint64_t seed, int64_t step = 1) {
  std::vector<CropBox> b;
  b.push_back({0, 0, h, w});
  b.push_back({0, 0, 1, 1});
  b.push_back({h - 1, w - 1, 1, 1});
  b.push_back({0, w - 1, 1, 1});
  b.push_back({h - 1, 0, 1, 1});
  const int64_t hh = (h + 1) / 2, hw = (w + 1) / 2;
  b.push_back({0, 0, hh, hw});                  // top-left corner
  b.push_back({0, w - hw, hh, hw});             // top-right
  b.push_back({h - hh, 0, hh, hw});             // bottom-left
  b.push_back({h - hh, w - hw, hh, hw});        // bottom-right
  b.push_back({0, 0, h, hw});                   // left edge, all rows
  b.push_back({0, w - hw, h, hw});              // right edge
  b.push_back({0, 0, hh, w});                   // top edge, all columns
  b.push_back({h - hh, 0, hh, w});              // bottom edge
  b.push_back({h / 3, w / 3, (h + 2) / 3, (w + 2) / 3});  // the middle
  for (int64_t y = 0; y < h; y += step) {
    b.push_back({y, w / 4, std::min<int64_t>(h - y, 1 + y % 5), std::max<int64_t>(1, w / 2)});
    b.push_back({y, 0, h - y, w});  // every skip from the top, to the bottom
  }
  for (int64_t x = 0; x < w; x += step) {
    b.push_back({h / 4, x, std::max<int64_t>(1, h / 2), std::min<int64_t>(w - x, 1 + x % 5)});
    b.push_back({0, x, h, w - x});  // every crop from the left, to the right edge
    b.push_back({0, 0, h, x + 1});  // every crop from the left edge
  }
  loader::Generator g(seed);
  for (int i = 0; i < random; ++i)
    b.push_back(loader::image::random_resized_crop_params(h, w, {{0.08, 1.0}}, {{3.0 / 4.0, 4.0 / 3.0}}, g));
  return b;
}

// Compares decode_region(box) with the box of `full`; counts the boxes and the
// region-decoded ones.
struct Tally {
  size_t boxes = 0;
  size_t region = 0;
  size_t differing = 0;
};

void compare_boxes(const Jpeg& j, const DecodeOptions& o, const std::vector<CropBox>& boxes, Tally* t) {
  const auto* data = reinterpret_cast<const uint8_t*>(j.bytes.data());
  const Image full = loader::image::decode(data, j.bytes.size(), o, j.label);
  DecodeOptions ro = o;
  ro.region_full_fraction = 1.0;  // decode the region wherever it is exact
  for (const CropBox& b : boxes) {
    if (b.top + b.height > full.height || b.left + b.width > full.width) continue;  // scaled sizes
    const auto r = loader::image::decode_region(data, j.bytes.size(), b, ro, j.label);
    ++t->boxes;
    ASSERT_EQ(r.image.channels, full.channels);
    if (r.region_decoded) {
      ++t->region;
      ASSERT_EQ(r.window, b) << j.label;
    }
    EXPECT_EQ(r.region_decoded, j.sequential) << j.label;
    ASSERT_GE(b.top - r.window.top, 0);
    ASSERT_GE(b.left - r.window.left, 0);
    const int64_t C = full.channels;
    size_t bad = 0;
    for (int64_t y = 0; y < b.height; ++y) {
      const uint8_t* want = full.data() + ((b.top + y) * full.width + b.left) * C;
      const uint8_t* got =
          r.image.data() + ((b.top - r.window.top + y) * r.image.width + (b.left - r.window.left)) * C;
      if (std::memcmp(want, got, static_cast<size_t>(b.width * C)) != 0) ++bad;
    }
    if (bad) {
      ++t->differing;
      ADD_FAILURE() << j.label << " scale 1/" << o.scale_denom << " " << loader::image::mode_name(o.mode)
                    << ": box (top " << b.top << ", left " << b.left << ", " << b.height << "x" << b.width
                    << ") differs from the full decode in " << bad << " rows";
      if (t->differing > 20) FAIL() << "more than 20 boxes differ";
    }
  }
}

TEST(ImageRegion, RegionDecodeEqualsFullDecodeByteForByte) {
  struct Size {
    int w, h, random, step;  // step: a box at every step-th row and column
  } sizes[] = {{1, 1, 20, 1},      {7, 15, 40, 1},    {15, 7, 40, 1},     {17, 17, 60, 1},     {1023, 17, 60, 11},
               {17, 1023, 60, 11}, {97, 61, 300, 1}, {250, 190, 100, 3}, {1023, 1023, 8, 255}};
  Tally t;
  size_t files = 0;
  uint64_t seed = 1;
  for (const Sampling& s : kSamplings)
    for (const Size& sz : sizes)
      for (bool progressive : {false, true})
        for (int restart : {0, 1}) {
          // The 1023 x 1023 files: baseline only, without and with restarts (their cost).
          if (sz.w == 1023 && sz.h == 1023 && progressive) continue;
          const Jpeg j = make_jpeg(s, sz.w, sz.h, progressive, restart, seed++);
          SCOPED_TRACE(j.label);
          ++files;
          // Progressive files are decoded whole (the fallback): a few boxes show it.
          const auto boxes = progressive ? boxes_for(sz.w, sz.h, 8, seed, std::max(sz.w, sz.h))
                                         : boxes_for(sz.w, sz.h, sz.random, seed, sz.step);
          DecodeOptions o;
          compare_boxes(j, o, boxes, &t);
          if ((sz.w == 97 || sz.w == 250) && !progressive) {  // mode L; DCT scaling with region decoding
            o.mode = ColorMode::L;
            compare_boxes(j, o, boxes_for(sz.w, sz.h, 40, seed, 17), &t);
            o.mode = ColorMode::RGB;
            for (int d : {2, 4, 8}) {
              o.scale_denom = d;
              compare_boxes(j, o, boxes_for((sz.w + d - 1) / d, (sz.h + d - 1) / d, 40, seed, 5), &t);
            }
          }
          if (t.differing > 20) return;
        }
  std::printf("[ImageRegion] %zu JPEG files, %zu boxes compared with the full decode, %zu of them region-decoded, "
              "%zu differing\n",
              files, t.boxes, t.region, t.differing);
  EXPECT_EQ(t.differing, 0u);
  EXPECT_GT(t.region, 20000u);  // the boxes of the sequential files
}

TEST(ImageRegion, ProgressiveAndNearlyFullBoxesFallBackToFullDecode) {
  const Jpeg prog = make_jpeg(kSamplings[2], 97, 61, true, 0, 7);
  const Jpeg base = make_jpeg(kSamplings[2], 97, 61, false, 0, 7);
  const CropBox small{10, 20, 30, 40};
  auto region = [](const Jpeg& j, const CropBox& b, double fraction) {
    DecodeOptions o;
    o.region_full_fraction = fraction;
    return loader::image::decode_region(reinterpret_cast<const uint8_t*>(j.bytes.data()), j.bytes.size(), b, o,
                                        j.label);
  };
  const auto p = region(prog, small, 1.0);
  EXPECT_FALSE(p.region_decoded);
  EXPECT_EQ(p.window, (CropBox{0, 0, 61, 97}));
  const auto s = region(base, small, 0.9);
  EXPECT_TRUE(s.region_decoded);
  EXPECT_EQ(s.window, small);
  const auto n = region(base, CropBox{0, 1, 61, 95}, 0.9);  // nearly the whole image
  EXPECT_FALSE(n.region_decoded);
  EXPECT_EQ(n.window, (CropBox{0, 0, 61, 97}));
  // A box outside the image is an error naming the file and the box.
  try {
    region(base, CropBox{50, 0, 20, 10}, 1.0);
    ADD_FAILURE() << "no error";
  } catch (const loader::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(base.label + ": the region (top 50, left 0, 20x10) is not inside the 61x97"),
              std::string::npos)
        << e.what();
  }
}

TEST(ImageRegion, TruncatedFilesFailAsTheFullDecodeFails) {
  // The box lies in the part of the file that is there; the decode still reads to the end
  // of the data, as PIL does, and reports the truncation.
  const Jpeg j = make_jpeg(kSamplings[2], 250, 190, false, 0, 11);
  const std::string cut = j.bytes.substr(0, j.bytes.size() * 2 / 3);
  const std::string no_eoi = j.bytes.substr(0, j.bytes.size() - 2);
  for (const std::string& bytes : {cut, no_eoi}) {
    try {
      loader::image::decode_region(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), {0, 0, 16, 16}, {},
                                   "/data/cut.jpg");
      ADD_FAILURE() << "no error for " << bytes.size() << " bytes";
    } catch (const loader::ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("/data/cut.jpg: image file is truncated"), std::string::npos) << e.what();
    }
  }
}

TEST(ImageRegion, PipelinesWithRegionDecodingEqualTorchvision) {
  // The golden pipelines (torchvision 0.14 on PIL 9.4) through load(): the JPEG ones are
  // planned from the header and region-decoded.
  const auto g = image_json("transforms.json");
  size_t cases = 0, region = 0;
  for (const auto& c : g["pipelines"]) {
    const std::string file = c["file"], preset = c["preset"];
    const uint64_t seed = c["seed"];
    const int64_t size = c["size"];
    SCOPED_TRACE(file + " " + preset + "(" + std::to_string(size) + ") seed " + std::to_string(seed));
    std::vector<loader::image::TransformStep> steps;
    const Compose full = Compose::preset(preset, size);
    for (const auto& s : full.steps())
      if (s.kind != loader::image::TransformStep::Kind::ToTensor &&
          s.kind != loader::image::TransformStep::Kind::Normalize)
        steps.push_back(s);
    steps.push_back(loader::image::TransformStep::pil_to_tensor());
    const Compose pipeline(steps);
    const std::string bytes = image_bytes(file);
    loader::image::LoadOptions o;
    o.decode.region_full_fraction = 1.0;
    loader::Generator gen(seed);
    loader::image::Trace trace;
    const loader::Tensor t = pipeline.load(u8(bytes), bytes.size(), o, gen, file, &trace);
    const auto got = chw_to_hwc(t);
    const auto want = base64_decode(c["uint8_hwc"].get<std::string>());
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0);
    ++cases;
    if (trace.region_decoded) ++region;
    if (c.contains("float32_chw")) {
      loader::Generator gen2(seed);
      const loader::Tensor f = Compose::preset(preset, size).load(u8(bytes), bytes.size(), o, gen2, file);
      const auto wantf = base64_decode(c["float32_chw"].get<std::string>());
      ASSERT_EQ(f.nbytes(), wantf.size());
      EXPECT_EQ(std::memcmp(f.data_ptr(), wantf.data(), wantf.size()), 0) << "float32 output differs";
    }
  }
  EXPECT_EQ(cases, 24u);
  EXPECT_GE(region, 5u);  // the train cases of the JPEG file
  std::printf("[ImageRegion] %zu golden pipelines equal torchvision's, %zu of them region-decoded\n", cases, region);
}

TEST(ImageRegion, LoadDrawsAsTorchvisionWithAndWithoutRegionDecoding) {
  // Region decoding plans from the header: the same draws, the same output, as decoding
  // first (region_decoding = false), for a sequence of samples from one generator.
  const Jpeg j = make_jpeg(kSamplings[2], 250, 190, false, 1, 3);
  const Compose train = Compose::preset("train", 32);
  loader::image::LoadOptions on, off;
  off.region_decoding = false;
  loader::Generator ga(5), gb(5);
  size_t region = 0;
  for (int i = 0; i < 200; ++i) {
    loader::image::Trace ta, tb;
    const auto* d = reinterpret_cast<const uint8_t*>(j.bytes.data());
    const loader::Tensor a = train.load(d, j.bytes.size(), on, ga, j.label, &ta);
    const loader::Tensor b = train.load(d, j.bytes.size(), off, gb, j.label, &tb);
    ASSERT_EQ(ta.crops, tb.crops);
    ASSERT_EQ(ta.flips, tb.flips);
    EXPECT_FALSE(tb.region_decoded);
    if (ta.region_decoded) ++region;
    ASSERT_EQ(a.nbytes(), b.nbytes());
    ASSERT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0) << "sample " << i;
  }
  EXPECT_GT(region, 100u);
  EXPECT_EQ(ga.state(), gb.state());
}

}  // namespace
