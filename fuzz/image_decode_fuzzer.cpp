// libFuzzer target for the image decoders (datasets/loader/image/decode.cpp), built with
// clang++ by fuzz/CMakeLists.txt.  Every input is tried
//   1. as a file: probe(), then decode() in RGB and L, at full size and DCT-scaled by 4;
//   2. through a transform pipeline (train preset of 16 x 16 with decode_scaling, and eval
//      without), as a dataset's get() would run it.
// A small pixel limit keeps a mutated header from asking for gigabytes.  The only
// acceptable failure is a loader::Error.
#include <cstddef>
#include <cstdint>

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
  return 0;
}
