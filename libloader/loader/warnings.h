// Python-style warnings (PyTorch's `warnings.warn`), with a hook for tests.
//
// By default a warning is printed to stderr as "UserWarning: <message>", once per
// distinct (category, message), as Python's default filter shows it once per place.
// A handler replaces the printing (every call reaches it, repeats included), the
// counterpart of `warnings.catch_warnings(record=True)`:
//
//   loader::warn("Length of split at index 0 is 0. This might result in an empty dataset.");
//
//   loader::WarningCapture capture;          // tests: record instead of print
//   run_something();
//   EXPECT_EQ(capture.messages(), std::vector<std::string>{"..."});
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace loader {

/// One warning: the Python category name ("UserWarning", "RuntimeWarning", ...) and text.
struct Warning {
  std::string category;
  std::string message;
};

using WarningHandler = std::function<void(const Warning&)>;

/// warnings.warn(message): a UserWarning.
void warn(const std::string& message);
/// warnings.warn(message, category): `category` is the Python class name it prints as.
void warn_as(const std::string& category, const std::string& message);

/// Installs `handler` for every thread of the process and returns the previous one.
/// An empty handler restores the default (print to stderr once per message).
/// The handler runs on the thread that warns, outside any loader lock.
WarningHandler set_warning_handler(WarningHandler handler);

/// Forgets which messages the default printer has already shown (tests use it).
void reset_warning_registry();

/// Records every warning while alive (RAII: installs a handler, restores the previous
/// one on destruction).  Thread-safe: warnings from other threads are recorded too.
class WarningCapture {
 public:
  WarningCapture();
  ~WarningCapture();
  WarningCapture(const WarningCapture&) = delete;
  WarningCapture& operator=(const WarningCapture&) = delete;

  std::vector<Warning> warnings() const;
  /// Just the messages, in the order they were issued.
  std::vector<std::string> messages() const;
  void clear();

 private:
  struct State {
    mutable std::mutex mutex;
    std::vector<Warning> warnings;
  };
  std::shared_ptr<State> state_;
  WarningHandler previous_;
};

}  // namespace loader
