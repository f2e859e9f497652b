// A user's extension module in miniature (python/tests/test_extension.py): it registers a
// C++ dataset, "test_squares" {n, offset}, whose sample i is (i*i + offset as int64, i as
// float32 [3] filled with i).  loader.load_library(path) loads it in the trainer and, through
// LOADER_EXTENSION_LIBRARIES, in every worker process.
#include <loader/dataset.h>
#include <loader/error.h>
#include <loader/tensor.h>
#include <loader/value.h>

#include <memory>

namespace {

class Squares final : public loader::Dataset {
 public:
  Squares(int64_t n, int64_t offset) : n_(n), offset_(offset) {}
  loader::Value get(int64_t i) override {
    if (i < 0) i += n_;
    if (i < 0 || i >= n_) throw loader::IndexError("test_squares: index out of range");
    loader::Tensor v = loader::Tensor::from_vector<float>({float(i), float(i), float(i)});
    return loader::Value::tuple({loader::Value(i * i + offset_), loader::Value(v)});
  }
  int64_t size() const override { return n_; }

 private:
  int64_t n_, offset_;
};

}  // namespace

LOADER_REGISTER_DATASET("test_squares", [](const loader::Value& p) -> std::shared_ptr<loader::Dataset> {
  return std::make_shared<Squares>(p.at("n").to_int(), p.get("offset", loader::Value(0)).to_int());
});
