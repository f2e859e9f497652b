// Fashion-MNIST (Zalando's 28x28 grayscale clothing images, 10 classes) as a
// map-style dataset, read from the IDX files Debian's `dataset-fashion-mnist`
// package installs.  A sample is what torchvision's
// `FashionMNIST(root, train, transform=ToTensor())` gives: a tuple of a float32
// image [1, 28, 28] with values pixel / 255 and the int label, so that
// default_collate makes `[float32[B, 1, 28, 28], int64[B]]`.
//
//   loader::register_fashion_mnist();   // once, before make_dataset (see below)
//   auto train = loader::make_dataset({"fashion_mnist", loader::Value::dict({{"train", true}})});
//   loader::Value s = train->get(0);    // (image, 9)
//
//   loader::FashionMNIST test("/usr/share/datasets/fashion-mnist", /*train=*/false);
//   test.size();                        // 10000
//
// Registered as "fashion_mnist" with parameters
//   {"root": path (default /usr/share/datasets/fashion-mnist), "train": bool (default true),
//    "mean": float, "std": float (optional, together: (x/255 - mean) / std, torchvision's Normalize)}.
// The registration lives in this library's object file, which a static link drops
// unless the program refers to it: call register_fashion_mnist() (idempotent) in
// main() before the DataLoader starts, then worker processes register it too.
//
// The files are `{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz` (an uncompressed
// file without `.gz` is used when the `.gz` one is absent).  They are decoded once
// into uint8 arrays held by the dataset (47 MB for the training set); the float
// conversion happens per sample.  Bad files give a ValueError naming the file and
// what is wrong (magic number, sizes, truncation, label range).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loader/dataset.h"

namespace loader {

/// One array read from an IDX file (the MNIST file format): unsigned bytes only.
struct IdxArray {
  std::vector<int64_t> dims;  ///< e.g. [60000, 28, 28]
  std::vector<uint8_t> data;  ///< row-major, numel_of(dims) bytes
};

/// Reads an IDX file of unsigned bytes (magic 0x0000080N, N = number of dims),
/// gzip-compressed or not.  Throws ValueError naming `path` when the file is
/// missing, not unsigned-byte IDX, has `expected_ndim` != N, or is truncated.
IdxArray read_idx_ubyte(const std::string& path, int expected_ndim);

class FashionMNIST final : public Dataset {
 public:
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist";
  static constexpr int64_t kRows = 28;
  static constexpr int64_t kCols = 28;
  static constexpr int64_t kNumClasses = 10;

  /// Loads the training (60,000) or test (10,000) split from `root`.  With `mean`
  /// and `std_dev` (both or neither; std_dev != 0) images are normalised as
  /// torchvision's Normalize((mean,), (std,)) after ToTensor.
  explicit FashionMNIST(std::string root = kDefaultRoot, bool train = true,
                        std::optional<double> mean = std::nullopt,
                        std::optional<double> std_dev = std::nullopt);

  /// (float32 image [1, 28, 28], int label).  Negative indices count from the end,
  /// as in Python; anything else out of range is an IndexError.
  Value get(int64_t index) override;
  int64_t size() const override { return count_; }
  /// (float32 [1, 28, 28], int64 0-dim): the fast path writes pixels straight into the batch.
  std::optional<Value> sample_spec() const override;
  void get_into(int64_t index, void* const* leaves) override;

  bool train() const noexcept { return train_; }
  const std::string& root() const noexcept { return root_; }
  /// Label of sample `index` (0..9), without building the image.
  int64_t label(int64_t index) const;
  /// All labels, in dataset order.
  const std::vector<uint8_t>& labels() const noexcept { return labels_; }
  /// Raw pixels of sample `index`: 784 bytes, row-major.
  const uint8_t* pixels(int64_t index) const;
  /// torchvision's class names: "T-shirt/top", "Trouser", ..., "Ankle boot".
  static const std::vector<std::string>& classes();

 private:
  int64_t check_index(int64_t index) const;
  std::string root_;
  bool train_;
  int64_t count_ = 0;
  std::vector<uint8_t> images_;  // count_ * 784 bytes
  std::vector<uint8_t> labels_;  // count_ bytes
  float lut_[256];               // pixel value -> transformed float
};

/// Registers the "fashion_mnist" dataset type (idempotent).  Call it in main()
/// before creating a DataLoader with num_workers > 0.
void register_fashion_mnist();

}  // namespace loader
