// Helpers shared by the test suites.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace loader::testing {

/// Path of a file in tests/golden (recorded from PyTorch; see tests/golden/README.md).
inline std::string golden_path(const std::string& name) {
  return std::string(LOADER_GOLDEN_DIR) + "/" + name;
}

/// Whole file as a string; empty when it cannot be read.
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace loader::testing
