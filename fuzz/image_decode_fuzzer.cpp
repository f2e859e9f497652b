// libFuzzer target for the image decoders (datasets/loader/image/decode.cpp), built with
// clang++ by fuzz/CMakeLists.txt.  Every input is tried
//   1. as a file: probe(), then decode() in RGB and L, at full size and DCT-scaled by 4;
//   2. through a transform pipeline (train preset of 16 x 16 with decode_scaling, and eval
//      without), as a dataset's get() would run it (a JPEG's train crop region-decoded);
//   3. region-decoded (decode_region) with boxes drawn by RandomResizedCrop.get_params
//      from a generator seeded by the input's size, plus a 1x1 box at the bottom-right
//      corner: where both the region and the full decode succeed, the box's pixels must
//      be equal (a difference traps, as a crash does).
// A small pixel limit keeps a mutated header from asking for gigabytes.  The only
// acceptable failure is a loader::Error.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "loader/generator.h"
#include "loader/image/decode.h"
#include "loader/image/transforms.h"

namespace {

constexpr int64_t kMaxPixels = 4 << 20;

void try_decode(const uint8_t* data, size_t size, loader::image::ColorMode mode, int scale) {
  loader::image::DecodeOptions o;
  o.mode = mode;
  o.scale_denom = scale;
  o.max_image_pixels = kMaxPixels;
  try {
    const loader::image::Image img = loader::image::decode(data, size, o, "fuzz");
    if (img.width <= 0 || img.height <= 0 || img.channels != loader::image::mode_channels(mode)) __builtin_trap();
  } catch (const loader::Error&) {
  }
}

void try_pipeline(const uint8_t* data, size_t size, const char* preset, bool scaling) {
  static const loader::image::Compose train = loader::image::Compose::preset("train", 16);
  static const loader::image::Compose eval = loader::image::Compose::preset("eval", 16);
  loader::image::LoadOptions o;
  o.decode.max_image_pixels = kMaxPixels;
  o.decode_scaling = scaling;
  loader::Generator g(1);
  try {
    const loader::Tensor t = (preset[0] == 't' ? train : eval).load(data, size, o, g, "fuzz");
    if (t.numel() != 3 * 16 * 16) __builtin_trap();
  } catch (const loader::Error&) {
  }
}

void try_regions(const uint8_t* data, size_t size) {
  loader::image::DecodeOptions o;
  o.max_image_pixels = kMaxPixels;
  o.region_full_fraction = 1.0;  // region-decode wherever it is exact
  loader::image::Image full;
  try {
    full = loader::image::decode(data, size, o, "fuzz");
  } catch (const loader::Error&) {
    return;
  }
  loader::Generator g(size);
  std::vector<loader::image::CropBox> boxes;
  for (int i = 0; i < 3; ++i)
    boxes.push_back(loader::image::random_resized_crop_params(full.height, full.width, {{0.08, 1.0}},
                                                              {{3.0 / 4.0, 4.0 / 3.0}}, g));
  boxes.push_back({full.height - 1, full.width - 1, 1, 1});
  for (const auto& b : boxes) {
    loader::image::DecodedRegion r;
    try {
      r = loader::image::decode_region(data, size, b, o, "fuzz");
    } catch (const loader::Error&) {
      continue;
    }
    const int64_t C = full.channels;
    if (r.image.channels != C || b.top < r.window.top || b.left < r.window.left ||
        b.top + b.height > r.window.top + r.window.height || b.left + b.width > r.window.left + r.window.width)
      __builtin_trap();
    for (int64_t y = 0; y < b.height; ++y) {
      const uint8_t* want = full.data() + ((b.top + y) * full.width + b.left) * C;
      const uint8_t* got =
          r.image.data() + ((b.top - r.window.top + y) * r.image.width + (b.left - r.window.left)) * C;
      if (std::memcmp(want, got, static_cast<size_t>(b.width * C)) != 0) __builtin_trap();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    loader::image::probe(data, size, "fuzz");
  } catch (const loader::Error&) {
  }
  try_decode(data, size, loader::image::ColorMode::RGB, 1);
  try_decode(data, size, loader::image::ColorMode::L, 1);
  try_decode(data, size, loader::image::ColorMode::RGB, 4);
  try_pipeline(data, size, "train", true);
  try_pipeline(data, size, "eval", false);
  try_regions(data, size);
  return 0;
}
