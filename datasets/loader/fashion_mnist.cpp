#include "loader/fashion_mnist.h"

#include <sys/stat.h>

#include <cmath>
#include <cstring>

#include "loader/error.h"
#include "loader/idx.h"
#include "loader/image/image_folder.h"

namespace loader {

namespace {

constexpr const char* kInstallHint =
    "install the data set with `apt-get install dataset-fashion-mnist` (or scripts/setup.sh), "
    "or pass \"root\" naming a directory that holds the IDX files";

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The IDX file for `stem` in `root`: stem.gz, else stem uncompressed.
std::string find_idx_file(const std::string& root, const std::string& stem) {
  std::string dir = root.empty() ? std::string(".") : root;
  if (dir.back() == '/') dir.pop_back();
  std::string gz = dir + "/" + stem + ".gz";
  if (file_exists(gz)) return gz;
  std::string plain = dir + "/" + stem;
  if (file_exists(plain)) return plain;
  throw ValueError("Fashion-MNIST file not found: " + gz + " (nor " + plain + "); " + kInstallHint);
}

}  // namespace

// ------------------------------------------------------------------ FashionMNIST
FashionMNIST::FashionMNIST(std::string root, bool train, std::optional<double> mean,
                           std::optional<double> std_dev)
    : root_(std::move(root)), train_(train) {
  if (mean.has_value() != std_dev.has_value())
    throw ValueError("FashionMNIST: give both \"mean\" and \"std\" for normalisation, or neither");
  if (std_dev && static_cast<float>(*std_dev) == 0.0f)
    throw ValueError(
        "FashionMNIST: std evaluated to zero after conversion to torch.float32, leading to division "
        "by zero.");
  if (mean && !std::isfinite(*mean)) throw ValueError("FashionMNIST: mean must be finite");

  const std::string prefix = train ? "train" : "t10k";
  std::string images_path = find_idx_file(root_, prefix + "-images-idx3-ubyte");
  std::string labels_path = find_idx_file(root_, prefix + "-labels-idx1-ubyte");
  IdxArray images = read_idx_ubyte(images_path, 3);
  IdxArray labels = read_idx_ubyte(labels_path, 1);
  if (images.dims[1] != kRows || images.dims[2] != kCols)
    throw ValueError(images_path + ": images are " + std::to_string(images.dims[1]) + "x" +
                     std::to_string(images.dims[2]) + ", Fashion-MNIST's are 28x28");
  if (images.dims[0] != labels.dims[0])
    throw ValueError("Fashion-MNIST files disagree: " + images_path + " holds " +
                     std::to_string(images.dims[0]) + " images but " + labels_path + " holds " +
                     std::to_string(labels.dims[0]) + " labels");
  for (size_t i = 0; i < labels.data.size(); ++i)
    if (labels.data[i] >= kNumClasses)
      throw ValueError(labels_path + ": label " + std::to_string(labels.data[i]) + " at index " +
                       std::to_string(i) + " is outside the 10 classes [0, 10)");
  count_ = images.dims[0];
  images_ = std::move(images.data);
  labels_ = std::move(labels.data);

  // ToTensor: uint8 -> float32 / 255 (in float32, as torch's div); then
  // Normalize: (x - mean) / std with mean and std as float32.
  for (int p = 0; p < 256; ++p) {
    float x = static_cast<float>(p) / 255.0f;
    if (mean) x = (x - static_cast<float>(*mean)) / static_cast<float>(*std_dev);
    lut_[p] = x;
  }
}

int64_t FashionMNIST::check_index(int64_t index) const {
  int64_t i = index < 0 ? index + count_ : index;
  if (i < 0 || i >= count_)
    throw IndexError("FashionMNIST (" + std::string(train_ ? "train" : "test") + "): index " +
                     std::to_string(index) + " is out of range for " + std::to_string(count_) +
                     " samples");
  return i;
}

const uint8_t* FashionMNIST::pixels(int64_t index) const {
  return images_.data() + check_index(index) * kRows * kCols;
}

int64_t FashionMNIST::label(int64_t index) const { return labels_[static_cast<size_t>(check_index(index))]; }

Value FashionMNIST::get(int64_t index) {
  int64_t i = check_index(index);
  Tensor image = Tensor::empty({1, kRows, kCols}, DType::Float32);
  float* dst = static_cast<float*>(image.data_ptr());
  const uint8_t* src = images_.data() + i * kRows * kCols;
  for (int64_t k = 0; k < kRows * kCols; ++k) dst[k] = lut_[src[k]];
  return Value::tuple({Value(std::move(image)), Value(int64_t{labels_[static_cast<size_t>(i)]})});
}

std::optional<Value> FashionMNIST::sample_spec() const {
  return Value::tuple({Value(Tensor::empty({1, kRows, kCols}, DType::Float32)),
                       Value(Tensor::scalar(int64_t{0}))});
}

void FashionMNIST::get_into(int64_t index, void* const* leaves) {
  int64_t i = check_index(index);
  float* dst = static_cast<float*>(leaves[0]);
  const uint8_t* src = images_.data() + i * kRows * kCols;
  for (int64_t k = 0; k < kRows * kCols; ++k) dst[k] = lut_[src[k]];
  int64_t label = labels_[static_cast<size_t>(i)];
  std::memcpy(leaves[1], &label, sizeof label);
}

const std::vector<std::string>& FashionMNIST::classes() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                 "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

// ------------------------------------------------------------------ registration
namespace {

std::shared_ptr<Dataset> make_fashion_mnist(const Value& params) {
  if (!params.is_none() && !params.is_dict())
    throw TypeError("fashion_mnist parameters must be a dict, got " + params.python_type());
  std::string root = FashionMNIST::kDefaultRoot;
  bool train = true;
  std::optional<double> mean, std_dev;
  if (params.is_dict()) {
    for (const auto& [key, v] : params.dict_items()) {
      const std::string k = key.is_string() ? key.to_string() : key.repr();
      if (k == "root") {
        if (!v.is_none()) root = v.to_string();
      } else if (k == "train") {
        train = v.to_bool();
      } else if (k == "mean") {
        if (!v.is_none()) mean = v.to_double();
      } else if (k == "std") {
        if (!v.is_none()) std_dev = v.to_double();
      } else {
        throw ValueError("unknown parameter '" + k +
                         "' for fashion_mnist; accepted: root, train, mean, std");
      }
    }
  }
  return std::make_shared<FashionMNIST>(root, train, mean, std_dev);
}

}  // namespace

void register_fashion_mnist() {
  if (!is_registered_dataset("fashion_mnist")) register_dataset("fashion_mnist", make_fashion_mnist);
}

}  // namespace loader

// Called by the dataset registry (libloader/loader/dataset.cpp) on its first use: the
// built-in types of this library, without a static initialiser that a static link
// would drop.  loader::loader links with --undefined=loader_datasets_register_builtins,
// which keeps this object file in every program that links the package.
extern "C" void loader_datasets_register_builtins() {
  loader::register_fashion_mnist();
  loader::image::register_image_datasets();  // "image_folder", "image_list"
}
