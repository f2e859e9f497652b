// Image datasets: torchvision's ImageFolder (one directory per class) and ImageList (a
// list file of `path,label` lines), decoding JPEG and PNG (decode.h) and applying a
// torchvision pipeline (transforms.h).  A sample is torchvision's: (image, class index),
// the image a uint8 [C, H, W] tensor without transforms (PILToTensor of the decoded image),
// float32 [C, H, W] after ToTensor.
//
//   using namespace loader::image;
//   ImageDatasetOptions o;
//   o.transform = Compose::preset("train", 224);
//   ImageFolder train("/data/imagenet/train", o);
//   train.classes();                         // sorted class directory names
//   loader::Value s = train.get(0);          // (float32 [3, 224, 224], 0)
//
//   // By name, as a worker rebuilds it (registered built-ins, like "fashion_mnist"):
//   auto ds = loader::make_dataset({"image_folder", loader::Value::dict({
//       {"root", "/data/imagenet/train"}, {"transform", "train"}, {"size", 224}})});
//
// Handle parameters ("image_folder" and "image_list"):
//   root              image_folder: the class directories' parent (required);
//                     image_list: the directory relative paths are resolved against
//                     (default: the list file's directory)
//   list              image_list: the list file (required)
//   transform         "none" (default), "train", "eval" (Compose::preset), or a list of step
//                     dicts [{"name": "RandomResizedCrop", "size": 224}, {"name": "ToTensor"}, ...]
//   size              the presets' output size (default 224)
//   mode              "RGB" (default, torchvision's pil_loader) or "L"
//   decode_scaling    bool (default false): transforms.h, LoadOptions
//   max_image_pixels  int (default PIL's 89,478,485; 0 or None: no limit)
//   extensions        image_folder: the accepted file name endings (default torchvision's
//                     IMG_EXTENSIONS), compared case-insensitively
// target_transform and is_valid_file are functions: C++ only (ImageDatasetOptions,
// the ImageFolder constructor), not carried by a handle.
//
// Random draws come from loader::default_generator(): after manual_seed(S) with 0
// workers a sequence of get() equals torchvision's; in a worker the generator is seeded
// base_seed + worker id, as torch seeds its own.  sample_spec()/get_into() (the batch
// written in place) are offered when every image gives the same shape (a pipeline ending
// in a fixed size, e.g. the train and eval presets) and no target_transform is set; they
// give exactly what get() gives.
//
// Errors name the dataset, the sample index and the file:
//   ImageFolder: sample 17 (/data/train/cat/x.jpg): cannot decode JPEG: ...
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loader/dataset.h"
#include "loader/image/decode.h"
#include "loader/image/transforms.h"

namespace loader::image {

/// torchvision's IMG_EXTENSIONS: .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp (only the
/// JPEG and PNG ones are decoded; the others give an error naming the file at get()).
const std::vector<std::string>& img_extensions();
/// torchvision's has_file_allowed_extension: filename.lower().endswith(any of extensions)
/// (ASCII lower-casing; the extensions are compared as given, lower-case them).
bool has_file_allowed_extension(const std::string& filename, const std::vector<std::string>& extensions);

/// One sample: a path and its class index.
struct Sample {
  std::string path;
  int64_t target = 0;
  bool operator==(const Sample& o) const { return path == o.path && target == o.target; }
};

/// torchvision's find_classes: the sorted names of the directories in `directory`
/// (symbolic links to directories count).  FileNotFoundError "Couldn't find any class
/// folder in DIR." when there is none; FileNotFoundError / RuntimeError when `directory`
/// cannot be listed.
std::vector<std::string> find_classes(const std::string& directory);
/// torchvision's make_dataset: for each class in sorted order, the files of
/// os.walk(class_dir, followlinks=True) sorted by directory path, then by file name,
/// that are accepted by `extensions` (when given) or by `is_valid_file` (exactly one of
/// the two).  FileNotFoundError with torchvision's message for classes without any file:
/// "Found no valid file for the classes X, Y. Supported extensions are: .jpg, ...".
/// One difference: a symbolic link to a directory the walk is inside already (a loop) is
/// not entered again (os.walk enters it until the kernel refuses the path, ELOOP).
std::vector<Sample> make_dataset(const std::string& directory, const std::map<std::string, int64_t>& class_to_idx,
                                 const std::optional<std::vector<std::string>>& extensions,
                                 const std::function<bool(const std::string&)>& is_valid_file = nullptr);

/// What the image datasets do with a file.
struct ImageDatasetOptions {
  /// The pipeline (default: none, uint8 [C, H, W]).
  Compose transform;
  /// RGB (torchvision's pil_loader) or L.
  ColorMode mode = ColorMode::RGB;
  /// JPEG DCT-scaled decoding when the first resample shrinks by >= 2 (transforms.h).
  bool decode_scaling = false;
  /// Images above this many pixels are refused before decoding; <= 0: no limit.
  int64_t max_image_pixels = kDefaultMaxImagePixels;
  /// torchvision's target_transform (C++ only): the class index -> the sample's target.
  /// With one, sample_spec() is not offered.
  std::function<Value(int64_t)> target_transform;
};

/// The common part of ImageFolder and ImageList: samples decoded and transformed.
class ImageDataset : public Dataset {
 public:
  /// (image, target).  Negative indices count from the end; others out of range: IndexError.
  Value get(int64_t index) override;
  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  /// (output dtype [C, h, w], int64 0-dim) when the pipeline's output shape is fixed and
  /// there is no target_transform; nullopt otherwise.
  std::optional<Value> sample_spec() const override;
  void get_into(int64_t index, void* const* leaves) override;

  /// The image of sample `index` after the pipeline, drawing from default_generator();
  /// `trace` receives the draws.
  Tensor image(int64_t index, Trace* trace = nullptr);
  const std::vector<Sample>& samples() const noexcept { return samples_; }
  /// The class index of each sample, in order.
  std::vector<int64_t> targets() const;
  const ImageDatasetOptions& options() const noexcept { return options_; }
  /// "ImageFolder" / "ImageList" (the prefix of error messages).
  const std::string& kind() const noexcept { return kind_; }

 protected:
  ImageDataset(std::string kind, ImageDatasetOptions options);
  void set_samples(std::vector<Sample> samples) { samples_ = std::move(samples); }

 private:
  int64_t check_index(int64_t index) const;
  std::string sample_name(int64_t index) const;
  std::string kind_;
  ImageDatasetOptions options_;
  LoadOptions load_;
  std::vector<Sample> samples_;
};

/// torchvision.datasets.ImageFolder.
class ImageFolder : public ImageDataset {
 public:
  /// Scans `root` (a leading "~" is expanded, as torchvision's expanduser).  `extensions`
  /// defaults to img_extensions(); give `is_valid_file` instead to choose files yourself
  /// (then `extensions` must be nullopt, as in torchvision: ValueError otherwise).
  explicit ImageFolder(std::string root, ImageDatasetOptions options = {},
                       std::optional<std::vector<std::string>> extensions = std::nullopt,
                       std::function<bool(const std::string&)> is_valid_file = nullptr);
  const std::string& root() const noexcept { return root_; }
  /// Sorted class names; class_to_idx maps each to its position.
  const std::vector<std::string>& classes() const noexcept { return classes_; }
  const std::map<std::string, int64_t>& class_to_idx() const noexcept { return class_to_idx_; }

 private:
  std::string root_;
  std::vector<std::string> classes_;
  std::map<std::string, int64_t> class_to_idx_;
};

/// A dataset listed in a text file, one sample per line: `path,label`.
///   - the label is the integer (>= 0) after the line's last comma; a line without a comma
///     splits at its last run of blanks instead (`path label`, as Caffe's lists);
///   - the path may be double-quoted ("a, b.jpg",3), with "" for a quote inside;
///   - a relative path is resolved against `root` (default: the list file's directory);
///   - blank lines and lines starting with '#' are skipped, and so is a first line
///     `path,label` (a CSV header);
///   - spaces around the fields of a comma line are dropped.
/// ValueError naming the file and line number for a line that is not one of these.
class ImageList : public ImageDataset {
 public:
  explicit ImageList(std::string list_file, ImageDatasetOptions options = {}, std::string root = "");
  const std::string& list_file() const noexcept { return list_file_; }

 private:
  std::string list_file_;
};

/// Parses the handle parameters shared by both types (transform, size, mode,
/// decode_scaling, max_image_pixels) from `params`; keys it does not know are left for
/// the caller.  ValueError / TypeError naming `type` and the key.
ImageDatasetOptions image_dataset_options(const Value& params, const std::string& type);

/// Registers "image_folder" and "image_list" unless registered already (idempotent).  Not
/// needed with loader::loader: the registry adds them on first use, as "fashion_mnist".
void register_image_datasets();

}  // namespace loader::image
