// Fashion-MNIST (Zalando's 28x28 grayscale clothing images, 10 classes) as a
// map-style dataset, read from the IDX files Debian's `dataset-fashion-mnist`
// package installs.  Part of loader_datasets (linked by loader::loader).  A sample is
// what torchvision's `FashionMNIST(root, train, transform=ToTensor())` gives: a tuple
// of a float32 image [1, 28, 28] with values pixel / 255 and the int label, so that
// default_collate makes `[float32[B, 1, 28, 28], int64[B]]`.
//
//   auto train = loader::make_dataset({"fashion_mnist", loader::Value::dict({{"train", true}})});
//   loader::Value s = train->get(0);    // (image, 9)
//
//   loader::FashionMNIST test("/usr/share/datasets/fashion-mnist", /*train=*/false);
//   test.size();                        // 10000
//
// Registered as "fashion_mnist" with parameters
//   {"root": path (default /usr/share/datasets/fashion-mnist), "train": bool (default true),
//    "mean": float, "std": float (optional, together: (x/255 - mean) / std, torchvision's Normalize)}.
// The name is always available in a program that links loader_datasets through
// loader::loader: the dataset registry adds it on first use (no static initialiser
// for the linker to drop).  A program that links the loader_datasets archive by hand
// without loader::loader's `--undefined=loader_datasets_register_builtins` can call
// register_fashion_mnist() (idempotent) in main() instead.
//
// The files are `{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz` (an uncompressed
// file without `.gz` is used when the `.gz` one is absent), read with idx.h.  They are
// decoded once into uint8 arrays held by the dataset (47 MB for the training set); the
// float conversion happens per sample.  Bad files give a ValueError naming the file and
// what is wrong (magic number, sizes, truncation, label range).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loader/dataset.h"
#include "loader/idx.h"

namespace loader {

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

/// Registers the "fashion_mnist" dataset type unless a factory is registered under
/// that name already (idempotent).  Not needed with loader::loader (see above).
void register_fashion_mnist();

}  // namespace loader
