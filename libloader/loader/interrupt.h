// A check that the calling thread's waits for a batch make every few milliseconds, so a
// program embedding the loader can stop a wait that would otherwise block until the next
// batch comes (Ctrl-C in Python: the binding's check reacquires the interpreter lock and
// raises KeyboardInterrupt when a signal is pending).
//
//   loader::InterruptCheck check([] { if (stop_requested()) throw Stopped(); },
//                                std::chrono::milliseconds(20));
//   auto batch = it.next();   // waits in slices of 20 ms; the check's exception leaves next()
//
// The check runs on the thread that waits, between slices, with no lock of the loader held;
// what it throws leaves next() as it is.  The iterator stays usable (next() again waits
// on), or is destroyed as usual.  Scoped to the thread and nestable (the innermost counts).
#pragma once

#include <chrono>
#include <functional>

namespace loader {

class InterruptCheck {
 public:
  InterruptCheck(std::function<void()> check, std::chrono::milliseconds interval);
  ~InterruptCheck();
  InterruptCheck(const InterruptCheck&) = delete;
  InterruptCheck& operator=(const InterruptCheck&) = delete;

  /// The calling thread's innermost check, or null.
  static const InterruptCheck* current() noexcept;
  /// Runs the check (it may throw).
  void operator()() const { check_(); }
  std::chrono::milliseconds interval() const noexcept { return interval_; }

 private:
  std::function<void()> check_;
  std::chrono::milliseconds interval_;
  const InterruptCheck* previous_;
};

}  // namespace loader
