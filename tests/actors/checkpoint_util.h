// Helpers of the checkpoint suites (checkpoint, elastic, iterable-state and per-task
// seeding tests): batches compared as bytes, a checkpoint through the .pt format.
#pragma once

#include <string>
#include <vector>

#include "loader/dataloader.h"
#include "loader/serialization/pt.h"

namespace loader::testing {

/// A batch (x, y) as bytes: both tensors' contents, one after the other.
inline std::string bytes_of(const Value& batch) {
  const Tensor& x = batch[0].to_tensor();
  const Tensor& y = batch[1].to_tensor();
  return std::string(static_cast<const char*>(x.data_ptr()), x.nbytes()) +
         std::string(static_cast<const char*>(y.data_ptr()), y.nbytes());
}

/// The rest of an epoch, each batch as bytes.
inline std::vector<std::string> epoch_bytes(DataLoader::Iterator& it) {
  std::vector<std::string> out;
  while (auto b = it.next()) out.push_back(bytes_of(*b));
  return out;
}

/// A whole epoch of `dl`, each batch as bytes.
inline std::vector<std::string> epoch_bytes(DataLoader& dl) {
  auto it = dl.iter();
  return epoch_bytes(it);
}

/// The checkpoint as a user stores it: pt::save, then pt::load.
inline Value through_pt(const Value& state) { return pt::load_bytes(pt::save_bytes(state)); }

}  // namespace loader::testing
