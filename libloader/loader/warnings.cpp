#include "loader/warnings.h"

#include <iostream>
#include <memory>
#include <set>
#include <utility>

namespace loader {

namespace {

struct Registry {
  std::mutex mutex;
  WarningHandler handler;                             // empty: print to stderr
  std::set<std::pair<std::string, std::string>> shown;  // (category, message) printed once
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void warn_as(const std::string& category, const std::string& message) {
  Registry& r = registry();
  WarningHandler handler;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    handler = r.handler;
    if (!handler) {
      if (!r.shown.insert({category, message}).second) return;
      std::cerr << category << ": " << message << std::endl;
      return;
    }
  }
  handler(Warning{category, message});
}

void warn(const std::string& message) { warn_as("UserWarning", message); }

WarningHandler set_warning_handler(WarningHandler handler) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::swap(r.handler, handler);
  return handler;
}

void reset_warning_registry() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.shown.clear();
}

WarningCapture::WarningCapture() : state_(std::make_shared<State>()) {
  std::shared_ptr<State> state = state_;
  previous_ = set_warning_handler([state](const Warning& w) {
    std::lock_guard<std::mutex> lock(state->mutex);
    state->warnings.push_back(w);
  });
}

WarningCapture::~WarningCapture() { set_warning_handler(std::move(previous_)); }

std::vector<Warning> WarningCapture::warnings() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->warnings;
}

std::vector<std::string> WarningCapture::messages() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::vector<std::string> out;
  out.reserve(state_->warnings.size());
  for (const auto& w : state_->warnings) out.push_back(w.message);
  return out;
}

void WarningCapture::clear() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->warnings.clear();
}

}  // namespace loader
