// Exceptions thrown at the public edge of loader.
//
// They mirror the Python exception types that torch.utils.data raises, so that a
// message checked against PyTorch (tests/golden/errors.json) also has the same
// type.  Every message says what failed, where, and (when it helps) what to do.
//
//   try { loader::DataLoader dl(ds, opts); }
//   catch (const loader::ValueError& e) { std::cerr << e.what(); }
#pragma once

#include <stdexcept>
#include <string>

namespace loader {

/// Base of every loader exception. `python_type()` names the PyTorch equivalent.
class Error : public std::runtime_error {
 public:
  Error(std::string python_type, const std::string& message)
      : std::runtime_error(message), python_type_(std::move(python_type)) {}
  const std::string& python_type() const noexcept { return python_type_; }

 private:
  std::string python_type_;
};

#define LOADER_DEFINE_ERROR(Name)                                                  \
  class Name : public Error {                                                      \
   public:                                                                         \
    explicit Name(const std::string& message) : Error(#Name, message) {}           \
  };

LOADER_DEFINE_ERROR(ValueError)
LOADER_DEFINE_ERROR(TypeError)
LOADER_DEFINE_ERROR(IndexError)
LOADER_DEFINE_ERROR(KeyError)
LOADER_DEFINE_ERROR(RuntimeError)
LOADER_DEFINE_ERROR(AssertionError)
LOADER_DEFINE_ERROR(NotImplementedError)
LOADER_DEFINE_ERROR(StopIteration)
#undef LOADER_DEFINE_ERROR

/// Rethrows `message` as the exception class named `python_type` (falls back to
/// RuntimeError for unknown names).  Used to re-raise worker errors in the main
/// process with their original type, as PyTorch's ExceptionWrapper does.
[[noreturn]] void throw_error(const std::string& python_type, const std::string& message);

}  // namespace loader
