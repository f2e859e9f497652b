// The worker pool and the multi-process epoch the DataLoader iterates: they spawn
// and wire the actors of actors.cpp.
#include <caf/all.hpp>

#include <chrono>
#include <sstream>

#include "loader/error.h"
#include "loader/runtime/actors.h"
#include "loader/runtime/batch_codec.h"
#include "loader/runtime/epoch.h"
#include "loader/runtime/pool.h"
#include "loader/runtime/protocol.h"

namespace loader::runtime {

// ------------------------------------------------------------------ worker pool
class WorkerPool {
 public:
  WorkerPool(const LoaderState& state, uint64_t base_seed) : system_(acquire_system()) {
    static std::once_flag swept;
    std::call_once(swept, [] { sweep_dead_segments(); });
    const auto& o = state.options;
    directory_ = std::make_shared<SlabDirectory>();
    prefetch_factor_ = o.effective_prefetch_factor();
    in_order_ = o.in_order;
    SlabPolicy policy;
    policy.num_workers = o.num_workers;
    policy.slabs_per_worker = std::max(1, prefetch_factor_) + 2;
    policy.shm_limit_bytes = o.shm_limit_bytes;
    if (o.pin_memory) pin_ = spawn_pin_memory(*system_, directory_, state.pin_tracker);
    const DatasetBase* ds = state.dataset ? static_cast<const DatasetBase*>(state.dataset.get())
                                          : static_cast<const DatasetBase*>(state.iterable.get());
    for (int w = 0; w < o.num_workers; ++w) {
      WorkerSetup setup;
      setup.config.worker_id = w;
      setup.config.num_workers = o.num_workers;
      setup.config.seed = base_seed + static_cast<uint64_t>(w);
      setup.config.dataset = *ds->handle();
      setup.config.iterable = static_cast<bool>(state.iterable);
      setup.config.auto_collation = state.auto_collation;
      setup.config.batch_size = o.batch_size.value_or(1);
      setup.config.drop_last = o.drop_last;
      setup.config.collate_fn_name = o.collate_fn_name;
      setup.config.worker_init_fn_name = o.worker_init_fn_name;
      setup.policy = policy;
      setup.directory = directory_;
      setup.max_restarts = o.max_worker_restarts;
      setup.in_process = o.worker_mode == WorkerMode::InProcess;
      setup.pin = pin_;
      setup.stopper = std::make_shared<ProcessStopper>();
      stoppers_.push_back(setup.stopper);
      impls_.push_back(spawn_worker(*system_, setup));
      workers_.push_back(impls_.back());
    }
    sink_ = std::make_shared<ReleaseSink>(system_, workers_);
  }

  ~WorkerPool() {
    sink_->disarm();
    caf::scoped_actor self{*system_};
    for (auto& w : workers_) self->send_exit(w, caf::exit_reason::user_shutdown);
    for (auto& w : workers_) self->wait_for(w);
    // Every process is reaped before the pool is gone (the actors' own exit hooks
    // may not have run yet when wait_for returns).
    for (auto& st : stoppers_) st->run();
    if (pin_) {
      self->send_exit(pin_, caf::exit_reason::user_shutdown);
      self->wait_for(pin_);
    }
  }

  caf::actor_system& system() { return *system_; }
  const std::vector<worker_actor>& workers() const { return workers_; }
  const std::shared_ptr<SlabDirectory>& directory() const { return directory_; }
  const std::shared_ptr<ReleaseSink>& sink() const { return sink_; }
  int prefetch_factor() const { return prefetch_factor_; }
  bool in_order() const { return in_order_; }
  uint64_t next_epoch() { return ++epochs_; }
  uint64_t& next_task() { return next_task_; }
  /// Pids of the worker processes (-1 for in-process workers or ones not running).
  std::vector<int> pids() {
    std::vector<int> out;
    caf::scoped_actor self{*system_};
    for (auto& w : workers_) {
      int pid = -1;
      self->request(w, std::chrono::seconds(5), status_atom::value)
          .receive([&](int32_t p) { pid = p; }, [](caf::error&) {});
      out.push_back(pid);
    }
    return out;
  }

 private:
  std::shared_ptr<caf::actor_system> system_;
  std::shared_ptr<SlabDirectory> directory_;
  std::vector<worker_actor> workers_;
  std::vector<worker_impl_actor> impls_;
  std::vector<std::shared_ptr<ProcessStopper>> stoppers_;
  caf::actor pin_;
  std::shared_ptr<ReleaseSink> sink_;
  int prefetch_factor_ = 2;
  bool in_order_ = true;
  uint64_t epochs_ = 0;
  uint64_t next_task_ = 0;
};

std::shared_ptr<WorkerPool> make_worker_pool(const LoaderState& state, uint64_t base_seed) {
  return std::make_shared<WorkerPool>(state, base_seed);
}

std::vector<int> worker_pids(WorkerPool& pool) { return pool.pids(); }

// ------------------------------------------------------------------ the epoch
namespace {

class MultiProcessEpoch final : public EpochBackend {
 public:
  MultiProcessEpoch(const std::shared_ptr<LoaderState>& state, uint64_t base_seed) : state_(state) {
    auto& s = *state;
    if (s.live_persistent_epoch) s.live_persistent_epoch->end();
    if (s.options.persistent_workers && s.persistent_pool) {
      pool_ = s.persistent_pool;
    } else {
      pool_ = make_worker_pool(s, base_seed);
      if (s.options.persistent_workers) s.persistent_pool = pool_;
    }
    auto& sys = pool_->system();
    self_.emplace(sys);
    uint64_t first = pool_->next_task();
    first_task_ = first;
    reorder_ = spawn_reorder(sys, pool_->in_order(), first);
    auto setup = std::make_shared<SamplerSetup>();
    if (s.dataset) setup->source.emplace(s.batch_sampler, s.sampler);
    setup->workers = pool_->workers();
    setup->reorder = reorder_;
    setup->epoch = pool_->next_epoch();
    setup->first_task = first;
    setup->prefetch_factor = pool_->prefetch_factor();
    sampler_ = spawn_sampler(sys, setup);
    timeout_ = s.options.timeout;
    if (s.options.persistent_workers) s.live_persistent_epoch = this;
  }

  ~MultiProcessEpoch() override { finish(); }

  void end() override { finish(); }

  std::vector<int> worker_pids() override { return pool_ ? pool_->pids() : std::vector<int>{}; }

  std::optional<Value> next() override {
    if (finished_) return std::nullopt;
    batch_msg m;
    bool got = false;
    std::optional<std::string> failure;
    auto wait = timeout_ > 0 ? caf::duration(std::chrono::microseconds(static_cast<int64_t>(timeout_ * 1e6)))
                             : caf::duration(caf::infinite);
    (*self_)->request(reorder_, wait, next_atom::value)
        .receive([&](batch_msg& r) { m = std::move(r); got = true; },
                 [&](caf::error& e) {
                   if (e == caf::sec::request_timeout) {
                     std::string who = waiting_on();
                     failure = "DataLoader timed out after " + format_seconds(timeout_) + " seconds" + who;
                   } else {
                     failure = "DataLoader runtime error: " + (*self_)->system().render(e);
                   }
                 });
    if (!got) {
      finish();
      throw RuntimeError(*failure);
    }
    switch (m.status) {
      case batch_msg::End: finish(); return std::nullopt;
      case batch_msg::Fatal: finish(); throw_error(m.error_type.empty() ? "RuntimeError" : m.error_type, m.error_message);
      case batch_msg::Error:
        (*self_)->send(sampler_, credit_atom::value, m.task);
        throw_error(m.error_type, m.error_message);
      default: break;
    }
    Value batch = decode(m);
    (*self_)->send(sampler_, credit_atom::value, m.task);
    return batch;
  }

 private:
  static std::string format_seconds(double s) {
    std::ostringstream os;
    os << s;
    return os.str();
  }

  /// " waiting for batch 3 (task 3) from DataLoader worker 1 (pid 1234)", for timeouts.
  std::string waiting_on() {
    uint64_t task = 0;
    int32_t worker = -1;
    bool ok = false;
    (*self_)->request(reorder_, std::chrono::seconds(2), status_atom::value)
        .receive([&](uint64_t t) { task = t; ok = true; }, [](caf::error&) {});
    if (!ok) return "";
    (*self_)->request(sampler_, std::chrono::seconds(2), status_atom::value, task)
        .receive([&](int32_t w) { worker = w; }, [](caf::error&) {});
    std::string out = " waiting for batch " + std::to_string(task - first_task_) + " of the epoch";
    if (worker < 0) return out;
    out += " from DataLoader worker " + std::to_string(worker);
    auto pids = pool_->pids();
    if (static_cast<size_t>(worker) < pids.size() && pids[static_cast<size_t>(worker)] > 0)
      out += " (pid " + std::to_string(pids[static_cast<size_t>(worker)]) + ")";
    return out;
  }

  Value decode(const batch_msg& m) {
    auto seg = pool_->directory()->find(m.slab);
    if (!seg) {
      if (m.slab != 0) throw RuntimeError("internal: batch in unknown slab " + std::to_string(m.slab));
      return decode_value(m.payload);
    }
    auto sink = pool_->sink();
    int worker = m.worker;
    uint64_t slab = m.slab;
    auto lease = std::make_shared<BatchLease>(seg, [sink, worker, slab] { sink->release(worker, slab); },
                                              pool_->directory()->pinned(slab));
    return decode_batch(m.payload, m.slab, lease);
  }

  void finish() {
    if (finished_) return;
    finished_ = true;
    if (state_->live_persistent_epoch == this) state_->live_persistent_epoch = nullptr;
    if (sampler_) {
      // Stopped synchronously: no sampler draw may happen after the epoch ends.
      (*self_)->request(sampler_, std::chrono::seconds(10), stop_atom::value)
          .receive([&](uint64_t next_task) { pool_->next_task() = next_task; }, [](caf::error&) {});
      (*self_)->send_exit(sampler_, caf::exit_reason::user_shutdown);
    }
    if (reorder_) (*self_)->send_exit(reorder_, caf::exit_reason::user_shutdown);
    self_.reset();
    if (!state_->options.persistent_workers) pool_.reset();
  }

  std::shared_ptr<LoaderState> state_;
  std::shared_ptr<WorkerPool> pool_;
  std::optional<caf::scoped_actor> self_;
  caf::actor reorder_;
  caf::actor sampler_;
  double timeout_ = 0;
  uint64_t first_task_ = 0;
  bool finished_ = false;
};

}  // namespace

std::unique_ptr<EpochBackend> make_multi_process_epoch(const std::shared_ptr<LoaderState>& state,
                                                       uint64_t base_seed) {
  return std::make_unique<MultiProcessEpoch>(state, base_seed);
}

}  // namespace loader::runtime
