// Helpers of the two TorchParity suites (tests/libloader/torch_parity_test.cpp, without
// workers, and tests/actors/torch_parity_workers_test.cpp, with them).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "loader/dataloader.h"
#include "loader/datasets.h"
#include "test_util.h"

namespace loader::testing {

/// A golden file of tests/golden, parsed; throws when it cannot be read.
inline nlohmann::json load_golden(const std::string& name) {
  std::string text = read_file(golden_path(name));
  if (text.empty()) throw std::runtime_error("cannot read golden file " + golden_path(name));
  return nlohmann::json::parse(text);
}

/// Every batch of one epoch.
inline std::vector<Value> run_epoch(DataLoader& dl) {
  std::vector<Value> out;
  auto it = dl.iter();
  while (auto b = it.next()) out.push_back(std::move(*b));
  return out;
}

/// The registered "range" (map-style) and "counting" (iterable) datasets of n items.
inline std::shared_ptr<Dataset> range_ds(int64_t n) { return make_dataset({"range", Value::dict({{"n", n}})}); }
inline std::shared_ptr<IterableDataset> counting(int64_t n) {
  return make_iterable_dataset({"counting", Value::dict({{"n", n}})});
}

}  // namespace loader::testing
