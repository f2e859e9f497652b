// Datasets shared by the test programs and the runtime tests that start them.
#pragma once

#include "loader/dataset.h"
#include "loader/tensor.h"
#include "loader/value.h"

namespace loader::testing {

/// Sample i: (float64 i, int64 i*i).
class ExeSquares : public Dataset {
 public:
  explicit ExeSquares(int64_t n) : n_(n) {}
  Value get(int64_t i) override { return Value::tuple({Tensor::scalar(static_cast<double>(i)), Value(i * i)}); }
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

inline void register_exe_squares() {
  static bool done = [] {
    register_dataset("test_exe_squares",
                     [](const Value& p) { return std::make_shared<ExeSquares>(p.at("n").to_int()); });
    return true;
  }();
  (void)done;
}

}  // namespace loader::testing
