// A transport that does nothing (every WorkerTransport method a no-op, no state), for
// tests whose fakes override only what they record.  `Base`: WorkerTransport, or
// HostedTransport for a fake of a remote slot's.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "loader/runtime/parent/worker_transport.h"

namespace loader::runtime {

template <class Base = WorkerTransport>
class NullTransport : public Base {
 public:
  bool shares_memory() const override { return false; }
  void start(uint32_t) override {}
  void stop() override {}
  void say_shutdown() override {}
  void flush() override {}
  void watch(const Liveness&, std::chrono::milliseconds, std::chrono::milliseconds) override {}
  int pid() const override { return -1; }
  void reset(uint32_t) override {}
  void prepare(std::string) override {}
  void init(std::string) override {}
  void set_rng(uint64_t, std::string) override {}
  void task_seeds(const TaskSeeds&) override {}
  void restart_stream() override {}
  void resume_stream(const StreamResume&) override {}
  void send_task(uint64_t, uint64_t, const IndexBatch&) override {}
  void use_slab(uint64_t, uint64_t) override {}
  bool dirty() const override { return false; }
  size_t take_results(const std::function<void(WorkerReply&&)>&) override { return 0; }
  std::optional<std::string> state_before(uint64_t, uint64_t) const override { return std::nullopt; }
  std::optional<uint64_t> last_started() const override { return std::nullopt; }
  std::optional<std::pair<uint64_t, std::string>> last_state() const override { return std::nullopt; }
  void carry_state(uint64_t, const std::string&) override {}
};

}  // namespace loader::runtime
