// Generated image folders for benchmarks and demos (tools/images_make_cmd.cpp), shared by
// `loader images make`, `loader images export` and `loader bench --workload W5`.
//
//   auto s = loader::tool::make_image_folder({"/tmp/w5", 3000, 10, 0});
//   // /tmp/w5/n0000000/n0000000_00000000.JPEG, ... (ImageFolder layout)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loader::tool {

/// What `loader images make` writes: `n` JPEG files (quality `quality`, 4:2:0) in
/// `classes` class folders n0000000, n0000001, ...; image i is class i % classes,
/// file <class>/<class>_<i, 8 digits>.JPEG.  Every image is drawn from (seed, i) alone
/// (its size like ImageNet's: mostly 500x375 or 375x500, some 500x333, 333x500, 500x500
/// and other sizes and aspect ratios between 200 and 800 px; content: smooth gradients,
/// soft shapes, fractal texture and grain, about 70-110 KB per 500x375 file at quality
/// 90), so the same arguments give byte-identical files with any number of threads.
struct MakeImagesOptions {
  std::string out;
  int64_t n = 3000;
  int64_t classes = 10;
  uint64_t seed = 0;
  int quality = 90;
  int threads = 0;  ///< 0: one per CPU
};

struct ImageFolderSummary {
  std::string out;
  int64_t files = 0;
  int64_t classes = 0;
  int64_t bytes = 0;       ///< sum of the file sizes
  uint64_t digest = 0;     ///< FNV-1a 64 over every file's bytes, in file order (determinism checks)
  int64_t pixels = 0;      ///< sum of width * height
  double seconds = 0;
};

/// Class folder name of class k of a generated folder: "n" and 7 digits.
std::string generated_class_name(int64_t k);

/// Writes the folder (creating `out` and its class folders).  `out` must not exist or
/// be empty (ValueError otherwise: stale files would become part of the dataset).
/// RuntimeError when a file cannot be written, naming it.
ImageFolderSummary make_image_folder(const MakeImagesOptions& o);

/// Sum over i < n of (i % classes): the label sum of one epoch over a generated folder
/// of n files (torchvision's ImageFolder: labels are class indices, class folders sorted).
int64_t generated_label_sum(int64_t n, int64_t classes);

/// Fashion-MNIST's class folder names for `loader images export`: "0_T-shirt_top",
/// "1_Trouser", ..., "9_Ankle_boot" (the index first, so that sorting the names, as
/// torchvision's ImageFolder does, gives the dataset's label order; '/' and ' ' become '_').
std::vector<std::string> fashion_mnist_folder_names();

}  // namespace loader::tool
