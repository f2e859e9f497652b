// torchvision 0.14's image transforms on the PIL path, bit for bit where it can be: the
// random parameters drawn as torchvision draws them from torch's generator, and the
// bilinear resampling done as Pillow 9.4's Image.resize(size, BILINEAR) does it.
//
//   using namespace loader::image;
//   Compose train({TransformStep::random_resized_crop(224), TransformStep::random_horizontal_flip(),
//                  TransformStep::to_tensor(),
//                  TransformStep::normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225})});
//   Compose same = Compose::preset("train", 224);          // the same four steps
//   loader::manual_seed(0);
//   loader::Tensor x = train(decode_file("cat.jpg"), loader::default_generator());  // float32 [3, 224, 224]
//
//   // From the bytes of a file, with DCT-scaled JPEG decoding when it can shrink by >= 2:
//   LoadOptions o;
//   o.decode_scaling = true;
//   loader::Tensor y = train.load(bytes.data(), bytes.size(), o, loader::default_generator(), "cat.jpg");
//
// Steps (torchvision's names and defaults; a pipeline is torchvision's Compose):
//   RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3))   Resize(size[, max_size])
//   CenterCrop(size)   RandomHorizontalFlip(p=0.5)   ToTensor   PILToTensor
//   ConvertImageDtype(float32)   Normalize(mean, std)
// Geometric steps come before the tensor steps (torchvision's tensor path resamples
// differently; it is not reproduced).  A pipeline without ToTensor / PILToTensor ends as
// if PILToTensor closed it: uint8 [C, H, W].
//
// Random draws (torch's default generator in torchvision; here the Generator given,
// usually loader::default_generator(), which a worker seeds as torch seeds its own):
//   RandomResizedCrop.get_params: log_ratio = log(float32(ratio)) in float32; 10 tries of
//     target_area = area * float(uniform_(scale)), aspect = expf(float(uniform_(log_ratio))),
//     w = round(sqrt(target_area * aspect)), h = round(sqrt(target_area / aspect)) (Python's
//     round: half to even); when 0 < w <= width and 0 < h <= height: i = randint(0,
//     height - h + 1), j = randint(0, width - w + 1); else the central crop.  float32
//     uniform_(a, b) = (random() & (2^24 - 1)) * 2^-24 * (b - a) + a in float, randint(0, n)
//     = random() % n (random64() % n from 2^32 on).
//   RandomHorizontalFlip: flip when float32 rand(1) < p.
// tests/golden/images/transforms.json holds torchvision's boxes and flips for several seeds
// and image sizes; the tests compare them all.
//
// Resampling: Pillow's ImagingResample with the bilinear (triangle) filter, support 1 x
// the scale when shrinking (antialiased), coefficients normalised then rounded to 22-bit
// fixed point, the horizontal pass first into uint8 rows, then the vertical one.  Crop
// then resize (torchvision's resized_crop) clamps the filter to the crop's edges, as
// resizing the cropped copy does.  ToTensor / Normalize: x / 255 then (x - mean) / std in
// float32, as torch computes them, through a 256-entry table per channel.
//
// Fusion: the steps are planned from the image size first (the draws happen then), then
// run as few passes as they need: a crop, a resize, a crop of the resize (Resize then
// CenterCrop computes only the centre), and a flip fold into one resample; the flip,
// the dtype conversion and Normalize into the one pass that writes CHW output (into the
// batch row, with apply_into).  No per-pixel virtual call.
//
// Region decoding (LoadOptions::region_decoding, on by default): load() plans the steps
// from a JPEG's header (the draws need only its width and height), and when the first
// pass reads only a box of the image (RandomResizedCrop's crop, a CenterCrop or crop
// inside the image) it decodes only that box (decode.h, decode_region: the same pixels as
// a full decode, byte for byte), or the whole file where that would not save time
// (progressive files, a box of nearly the whole image; Trace::region_decoded says which).
//
// decode_scaling (LoadOptions, off by default): when the first resample shrinks its crop
// by 2x or more and the file is a JPEG, the file is decoded at 1/2, 1/4 or 1/8 scale with
// libjpeg's DCT scaling (the largest that keeps the crop at least the output size), the
// crop box mapped into the smaller image and resampled from there (and, with region
// decoding, only that box of the smaller image decoded).  Faster, not exact:
// docs/api.md ("Images") gives its measured difference from full decoding.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loader/generator.h"
#include "loader/image/decode.h"
#include "loader/tensor.h"
#include "loader/value.h"

namespace loader::image {

/// One step of a pipeline: a torchvision transform and its arguments.  Make it with the
/// factories; the fields say what each kind reads.
struct TransformStep {
  enum class Kind : uint8_t {
    RandomResizedCrop,
    Resize,
    CenterCrop,
    RandomHorizontalFlip,
    ToTensor,
    PILToTensor,
    ConvertImageDtype,
    Normalize,
  };
  Kind kind = Kind::ToTensor;
  /// Output (height, width): RandomResizedCrop, CenterCrop, Resize((h, w)).  Resize(int):
  /// size[0] is the smaller edge's length and size[1] is -1.
  std::array<int64_t, 2> size{{0, 0}};
  /// Resize(int) only: torchvision's max_size (the longer edge's cap), 0 for none.
  int64_t max_size = 0;
  /// RandomResizedCrop: the area fraction range and the aspect-ratio range.
  std::array<double, 2> scale{{0.08, 1.0}};
  std::array<double, 2> ratio{{3.0 / 4.0, 4.0 / 3.0}};
  /// RandomHorizontalFlip: the flip probability.
  double p = 0.5;
  /// Normalize: one value per channel (or one for all).
  std::vector<double> mean;
  std::vector<double> std_dev;
  /// ConvertImageDtype: the dtype asked for (Float32 is the one supported).
  DType dtype = DType::Float32;

  static TransformStep random_resized_crop(int64_t size) { return random_resized_crop(size, size); }
  static TransformStep random_resized_crop(int64_t height, int64_t width, std::array<double, 2> scale = {{0.08, 1.0}},
                                           std::array<double, 2> ratio = {{3.0 / 4.0, 4.0 / 3.0}});
  /// Resize(int): the smaller edge becomes `smaller_edge`, the other keeps the ratio
  /// (truncated, as torchvision's int(size * long / short)).
  static TransformStep resize(int64_t smaller_edge, int64_t max_size = 0);
  /// Resize((height, width)).
  static TransformStep resize_to(int64_t height, int64_t width);
  static TransformStep center_crop(int64_t size) { return center_crop(size, size); }
  static TransformStep center_crop(int64_t height, int64_t width);
  static TransformStep random_horizontal_flip(double p = 0.5);
  static TransformStep to_tensor();
  static TransformStep pil_to_tensor();
  static TransformStep convert_image_dtype(DType dtype = DType::Float32);
  static TransformStep normalize(std::vector<double> mean, std::vector<double> std_dev);

  /// torchvision's class name ("RandomResizedCrop", ...).
  const char* name() const noexcept;
  /// The description from_value() reads back: {"name": "RandomResizedCrop", "size": [h, w],
  /// "scale": [..], "ratio": [..]}, {"name": "Resize", "size": 256}, ...
  Value to_value() const;
  /// A dict {"name": ..., arguments}: "size" an int or [h, w] (Resize: an int is the smaller
  /// edge), "scale", "ratio", "p", "mean", "std", "max_size", "dtype" ("float32").  Unknown
  /// names or keys and bad values are ValueErrors naming them.
  static TransformStep from_value(const Value& description);
};

/// The random parameters one application drew, in order (tests, `loader images get`).
struct Trace {
  std::vector<CropBox> crops;  ///< one per RandomResizedCrop
  std::vector<bool> flips;     ///< one per RandomHorizontalFlip
  int scale_denom = 1;         ///< the JPEG DCT scaling used by load() (1: full size)
  bool region_decoded = false; ///< load() decoded only the region its first stage reads
};

/// torchvision's RandomResizedCrop.get_params for an image of height x width, drawing
/// from `g` exactly as torch does.
CropBox random_resized_crop_params(int64_t height, int64_t width, const std::array<double, 2>& scale,
                                   const std::array<double, 2>& ratio, Generator& g);
/// RandomHorizontalFlip's draw: float32 torch.rand(1) < p.
bool random_flip_draw(double p, Generator& g);
/// torch.empty(1).uniform_(from, to).item() (a float32 value).
float uniform_float(double from, double to, Generator& g);
/// torch.log / torch.exp of a float32 tensor as torch 1.13 computes them on x86-64 with its
/// AVX2 kernels: SLEEF's logf_u10 / expf_u10 (within 1 ulp, not always glibc's logf / expf).
float torch_log_float(float x);
float torch_exp_float(float x);

/// Pillow 9.4's image.crop(box).resize((out_width, out_height), BILINEAR): the box must lie
/// inside the image.  Exact (tests compare it with PIL).
Image resize_bilinear(const Image& image, const CropBox& box, int64_t out_height, int64_t out_width);
inline Image resize_bilinear(const Image& image, int64_t out_height, int64_t out_width) {
  return resize_bilinear(image, CropBox{0, 0, image.height, image.width}, out_height, out_width);
}

/// Which code runs the two resampling passes (resize_bilinear and every pipeline).  Both
/// compute Pillow's integer sums with the same rounding and clipping, so they give the same
/// bytes; tests/libloader/image_transforms_test.cpp (ImageTransforms.ScalarResampleEquals*)
/// checks it.  By default the AVX2 passes run when the CPU has AVX2 (asked once, at run
/// time), the portable scalar passes otherwise.  set_resample_avx2(false) forces the scalar
/// passes in this process (not in worker processes, which start with the default);
/// set_resample_avx2(true) restores the default (it cannot enable AVX2 on a CPU without
/// it).  Process-wide: call it while no transform runs (tests, benchmarks).
void set_resample_avx2(bool allowed) noexcept;
/// Whether the AVX2 passes run now: false after set_resample_avx2(false), on a CPU without
/// AVX2, or in a build for another architecture.
bool resample_avx2() noexcept;

/// How load() decodes.
struct LoadOptions {
  /// mode and max_image_pixels (scale_denom is chosen by decode_scaling, not read here).
  DecodeOptions decode;
  /// JPEG DCT-scaled decoding when the first resample shrinks by >= 2 (see above).
  bool decode_scaling = false;
  /// JPEG region decoding (see above): on by default, since the pixels are those of a
  /// full decode; false decodes every file whole (the probe's and tests' reference).
  bool region_decoding = true;
};

/// torchvision's Compose over the steps above, planned and fused (see above).  Immutable
/// after construction; safe to share between threads (each call draws from its own `g`).
class Compose {
 public:
  /// The empty pipeline: uint8 [C, H, W] of the decoded image.
  Compose() = default;
  /// Checks the order and the arguments (ValueError naming the step).
  explicit Compose(std::vector<TransformStep> steps);
  /// Named pipelines, for an output of `size` x `size`:
  ///   "none":  []  (uint8 [C, H, W], any size)
  ///   "train": RandomResizedCrop(size), RandomHorizontalFlip(), ToTensor(), Normalize(ImageNet)
  ///   "eval":  Resize(int(size * 256 / 224)), CenterCrop(size), ToTensor(), Normalize(ImageNet)
  /// ImageNet's mean (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225).
  static Compose preset(const std::string& name, int64_t size = 224);
  /// A preset name (a string, with `size`) or a list of step dicts (TransformStep::from_value).
  static Compose from_value(const Value& description, int64_t size = 224);
  /// The list of step dicts.
  Value to_value() const;
  const std::vector<TransformStep>& steps() const noexcept { return steps_; }
  bool empty() const noexcept { return steps_.empty(); }

  /// UInt8 or Float32.
  DType output_dtype() const noexcept { return output_dtype_; }
  /// [channels, h, w] for an image of height x width (no draw: every random step has a fixed
  /// output size).
  Dims output_shape(int64_t height, int64_t width, int64_t channels) const;
  /// The output shape when it does not depend on the image (the last step that sets the size
  /// is RandomResizedCrop, CenterCrop or Resize((h, w))); nullopt otherwise.
  std::optional<Dims> fixed_output_shape(int64_t channels) const;

  /// Applies the pipeline to decoded pixels, drawing from `g`.
  Tensor operator()(const Image& image, Generator& g, Trace* trace = nullptr) const;
  /// The same, written into `dst`: contiguous, output_shape() elements of output_dtype().
  void apply_into(const Image& image, Generator& g, void* dst, Trace* trace = nullptr) const;

  /// Decodes the file in `data` (`name` for errors) and applies the pipeline.  When the
  /// decoding fails, `g` is left as it was (torchvision draws nothing for a file PIL cannot
  /// open).
  Tensor load(const uint8_t* data, size_t size, const LoadOptions& options, Generator& g,
              const std::string& name, Trace* trace = nullptr) const;
  /// load() into `dst` (as apply_into); the output must have `expected_shape` (the
  /// fixed_output_shape() a batch was laid out with), else a ValueError naming `name`.
  void load_into(const uint8_t* data, size_t size, const LoadOptions& options, Generator& g,
                 const std::string& name, void* dst, const Dims& expected_shape, Trace* trace = nullptr) const;

 private:
  std::vector<TransformStep> steps_;
  DType output_dtype_ = DType::UInt8;
};

}  // namespace loader::image
