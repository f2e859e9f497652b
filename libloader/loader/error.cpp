#include "loader/error.h"

namespace loader {

void throw_error(const std::string& python_type, const std::string& message) {
  if (python_type == "ValueError") throw ValueError(message);
  if (python_type == "TypeError") throw TypeError(message);
  if (python_type == "IndexError") throw IndexError(message);
  if (python_type == "KeyError") throw KeyError(message);
  if (python_type == "AssertionError") throw AssertionError(message);
  if (python_type == "NotImplementedError") throw NotImplementedError(message);
  if (python_type == "StopIteration") throw StopIteration(message);
  throw RuntimeError(message);
}

}  // namespace loader
