// The error thrown for a `.pt` file that cannot be read: truncated, corrupt, hostile,
// in the pre-0.4 tar format, a pickled nn.Module, or otherwise not what `torch.save` writes.
//
//   try { loader::pt::load("model.pt"); }
//   catch (const loader::pt::PtFormatError& e) { std::cerr << e.what(); }
//
// Messages name the file, the record ("archive/data.pkl") and the byte offset
// where the problem was found, and say what to do when there is something to do.
#pragma once

#include <cstdint>
#include <string>

#include "loader/error.h"

namespace loader::pt {

/// A `.pt` archive or pickle stream that loader refuses to read.  python_type()
/// is "RuntimeError", what torch.load raises for a corrupt archive.
class PtFormatError : public Error {
 public:
  explicit PtFormatError(const std::string& message) : Error("RuntimeError", message) {}
};

}  // namespace loader::pt
