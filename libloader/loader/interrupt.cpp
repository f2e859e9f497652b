#include "loader/interrupt.h"

#include <utility>

namespace loader {

namespace {
thread_local const InterruptCheck* tls_check = nullptr;
}

InterruptCheck::InterruptCheck(std::function<void()> check, std::chrono::milliseconds interval)
    : check_(std::move(check)), interval_(interval.count() > 0 ? interval : std::chrono::milliseconds(1)),
      previous_(tls_check) {
  tls_check = this;
}

InterruptCheck::~InterruptCheck() { tls_check = previous_; }

const InterruptCheck* InterruptCheck::current() noexcept { return tls_check; }

}  // namespace loader
