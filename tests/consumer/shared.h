// What the consumer's translation units share.
#pragma once

namespace consumer {
/// Set by the worker_init_fn "consumer_init" (worker_init_only.cpp) in each worker.
extern bool init_ran;
}  // namespace consumer
