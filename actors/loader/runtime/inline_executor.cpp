#include "loader/runtime/inline_executor.h"

namespace loader::runtime {

size_t InlineExecutor::run() {
  size_t activations = 0;
  while (!jobs_.empty()) {
    caf::resumable* job = jobs_.front();
    jobs_.pop_front();
    ++activations;
    // As CAF's own workers do: the reference taken when the job was scheduled is
    // released once the actor waits for a message again (or is done).
    switch (job->resume(this, kThroughput)) {
      case caf::resumable::resume_later: jobs_.push_back(job); break;
      case caf::resumable::awaiting_message:
      case caf::resumable::done: intrusive_ptr_release(job); break;
      case caf::resumable::shutdown_execution_unit: break;
    }
  }
  return activations;
}

}  // namespace loader::runtime
