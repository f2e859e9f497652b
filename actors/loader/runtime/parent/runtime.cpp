// The worker pool and the multi-process epoch the DataLoader iterates.
#include <caf/all.hpp>

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <sstream>
#include <thread>

#include "loader/error.h"
#include "loader/interrupt.h"
#include "loader/runtime/actor_system.h"
#include "loader/runtime/batch_codec.h"
#include "loader/runtime/checkpoint.h"
#include "loader/runtime/epoch.h"
#include "loader/runtime/parent/autotuner.h"
#include "loader/runtime/parent/pipeline.h"
#include "loader/runtime/parent/pool.h"
#include "loader/runtime/parent/pool_actor.h"
#include "loader/runtime/protocol.h"
#include "loader/runtime/parent/slab_store.h"
#include "loader/runtime/worker_main_loop.h"
#include "loader/warnings.h"

namespace loader::runtime {

namespace {

/// Bytes a default-collated batch of `batch_size` samples like `spec` takes in a
/// slab (every tensor 64-byte aligned, as SlabAllocator places them).
uint64_t batch_bytes_of(const Value& spec, int64_t batch_size) {
  uint64_t total = 0;
  spec.for_each_tensor([&](const Tensor& t) {
    uint64_t b = static_cast<uint64_t>(t.numel()) * t.element_size() * static_cast<uint64_t>(batch_size);
    total += (b + 63) / 64 * 64;
  });
  return total;
}

}  // namespace

/// PyTorch's _check_worker_number_rationality: once per loader, from the DataLoader
/// constructor (PyTorch's __init__ warns before any iteration) or else the first pool.
void check_worker_number(LoaderState& state) {
  if (state.warned_worker_count) return;
  state.warned_worker_count = true;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return;
  const int cpus = CPU_COUNT(&set);
  const int workers = state.options.num_workers;
  if (workers <= cpus || state.auto_workers) return;  // auto: max_workers was checked against them
  warn("This DataLoader will create " + std::to_string(workers) +
       " worker processes in total. Our suggested max number of worker in current system is " + std::to_string(cpus) +
       ", which is smaller than what this DataLoader is going to create. Please be aware that excessive worker "
       "creation might get DataLoader running slow or even freeze, lower the worker number to avoid potential "
       "slowness/freeze if necessary.");
}

// ------------------------------------------------------------------ worker pool
class WorkerPool final : public ExitTeardown {
 public:
  WorkerPool(LoaderState& state, uint64_t base_seed, uint64_t first_index)
      : base_seed(base_seed), system_(acquire_system()) {
    start(state, base_seed, first_index);
    register_at_exit(this);
  }

  ~WorkerPool() override {
    unregister_at_exit(this);
    teardown();
  }

  /// exit() is destroying the process's statics while this pool's owner lives on: the
  /// workers end and the OS resources go; CAF, whose lazily made statics may be gone
  /// already, is not touched (the actors and the system are left to the process's end).
  void teardown_at_exit() override {
    if (torn_down_) return;
    if (getpid() != owner_) return teardown();  // a forked child's copy: leave it alone
    torn_down_ = true;
    if (pipeline_) pipeline_->shutdown();  // closed first: no actor is called from here on
    keep_until_process_end(std::shared_ptr<PoolActors>(actors_.release()));
    keep_until_process_end(std::move(system_));
  }

 private:
  void start(LoaderState& state, uint64_t base_seed, uint64_t first_index) {
    if (started_as_worker_without_worker_main()) refuse_workers_in_worker_process();
    const auto& o = state.options;
    check_worker_number(state);
    PipelineConfig cfg;
    cfg.system = system_.get();
    cfg.prefetch_factor = o.effective_prefetch_factor();
    cfg.in_order = o.in_order;
    cfg.max_restarts = o.max_worker_restarts;
    cfg.in_process = o.worker_mode == WorkerMode::InProcess;
    cfg.executable = o.worker_executable;
    cfg.workers = worker_configs(state, base_seed, 0 - first_index);  // a new pipeline's first task is 0
    if (!o.remote_workers.empty()) {
      // Workers on other hosts: checked before anything starts (their handle must name
      // nothing of this machine; their addresses must parse; the token file must read).
      const DatasetBase* ds = state.dataset ? static_cast<const DatasetBase*>(state.dataset.get())
                                            : static_cast<const DatasetBase*>(state.iterable.get());
      if (auto why = remote_resource_error(ds->handle()->params))
        throw ValueError("DataLoader: remote_workers: " + *why);
      RemoteWorkerSpec spec;
      spec.token = read_token_file(o.remote_token_file);
      spec.timeout = std::chrono::milliseconds(o.remote_timeout_ms);
      spec.tls_cert = o.remote_tls_cert;
      spec.tls_key = o.remote_tls_key;
      spec.tls_ca = o.remote_tls_ca;
      for (const std::string& a : o.remote_workers) {
        spec.address = parse_host_port(a, "DataLoader remote_workers");
        cfg.remote.push_back(spec);
      }
    }
    // Slabs sized before the first task when the dataset describes its samples.
    if (state.dataset && state.auto_collation && o.collate_fn_name.empty() && o.batch_size) {
      if (auto spec = state.dataset->sample_spec()) cfg.batch_bytes = batch_bytes_of(*spec, *o.batch_size);
    }
    if (!state.slab_store) {
      SlabPolicy policy;
      policy.num_workers = o.pool_workers();
      // One slab per task in flight (at most prefetch_factor, at most the tasks a
      // worker gets in an epoch), one being filled, one held by the application.
      uint64_t per_worker = static_cast<uint64_t>(std::max(1, cfg.prefetch_factor));
      if (state.batch_sampler) {
        if (auto n = state.batch_sampler->size())
          per_worker = std::min<uint64_t>(per_worker, static_cast<uint64_t>(*n / o.pool_workers() + 1));
      }
      policy.slabs_per_worker = static_cast<int>(std::min<uint64_t>(per_worker, 1u << 20)) + 2;
      policy.shm_limit_bytes = o.shm_limit_bytes;
      state.slab_store = std::make_shared<SlabStore>(o.pool_workers(), policy, o.pin_memory, state.pin_tracker);
    }
    if (state.auto_workers) {
      // num_workers = auto: the slots are max_workers; the first `workers_now` run (the
      // loader's last pool's setting, or all of them that fit the budget at first).
      const AutotuneOptions& a = o.autotune;
      PipelineConfig::Autotune t;
      t.limits.min_workers = std::max(1, a.min_workers);
      t.limits.max_workers = a.max_workers;
      t.limits.max_prefetch = std::max(a.max_prefetch_factor, cfg.prefetch_factor);
      t.limits.tune_prefetch = a.tune_prefetch;
      t.limits.fixed_workers = static_cast<bool>(state.iterable);  // each worker's shard is its stream
      t.limits.memory_budget = a.memory_budget_bytes;
      t.workers_now = state.tuned_workers > 0 ? state.tuned_workers : a.max_workers;
      t.prefetch_now = state.tuned_prefetch > 0 ? state.tuned_prefetch : cfg.prefetch_factor;
      if (state.iterable) t.workers_now = a.max_workers;
      if (a.memory_budget_bytes > 0 && cfg.batch_bytes)
        while (t.workers_now > t.limits.min_workers &&
               WorkerTuner::memory_of(t.workers_now, t.prefetch_now, *cfg.batch_bytes, 0) > a.memory_budget_bytes)
          --t.workers_now;
      cfg.autotune = t;
    }
    const int workers = static_cast<int>(cfg.workers.size());
    const int local = workers - static_cast<int>(cfg.remote.size());
    const bool tuned = cfg.autotune.has_value();
    pipeline_ = std::make_shared<Pipeline>(std::move(cfg), state.slab_store);
    // The actors exist before any worker can report anything.  A remote slot's actor has
    // a thread of its own: its starts block (up to remote_timeout each).
    actors_ = std::make_unique<PoolActors>(*system_, pipeline_, workers, std::chrono::milliseconds(250),
                                           std::chrono::milliseconds(tuned ? 100 : 0), local);
    pipeline_->set_hooks(actors_->hooks());
    pipeline_->start_workers();
  }

  void teardown() {
    if (torn_down_) return;
    torn_down_ = true;
    if (getpid() != owner_) {
      // A child forked from the process that made this pool: the workers, sockets and
      // actors are its parent's.  Ending them here would end the parent's epoch.
      keep_until_process_end(std::move(pipeline_));
      keep_until_process_end(std::shared_ptr<PoolActors>(actors_.release()));
      keep_until_process_end(std::move(system_));
      return;
    }
    if (actors_) actors_->stop();  // first: nothing restarts or watches a worker during teardown
    if (pipeline_) {
      pipeline_->shutdown();
      pipeline_->stop_stages();  // the stage actors end before the system can go
      // The hooks hold the slot actors' handles: a detached actor's thread ends only once
      // its actor is destroyed, and the system's destructor waits for that thread.
      pipeline_->set_hooks({});
    }
    actors_.reset();
    system_.reset();  // the last holder destroys the actor system
  }

 public:
  /// The configuration of every worker for an epoch seeded with `base_seed`, whose index
  /// batch 0 is (or would have been, for a resumed epoch) task `task_base`.
  static std::vector<WorkerConfig> worker_configs(const LoaderState& state, uint64_t base_seed, uint64_t task_base) {
    const auto& o = state.options;
    const DatasetBase* ds = state.dataset ? static_cast<const DatasetBase*>(state.dataset.get())
                                          : static_cast<const DatasetBase*>(state.iterable.get());
    std::vector<WorkerConfig> out;
    for (int w = 0; w < o.pool_workers(); ++w) {
      WorkerConfig c;
      c.worker_id = w;
      c.num_workers = o.pool_workers();
      c.seed = base_seed + static_cast<uint64_t>(w);
      c.dataset = *ds->handle();
      c.iterable = static_cast<bool>(state.iterable);
      c.auto_collation = state.auto_collation;
      c.batch_size = o.batch_size.value_or(1);
      c.drop_last = o.drop_last;
      c.collate_fn_name = o.collate_fn_name;
      c.worker_init_fn_name = o.worker_init_fn_name;
      c.per_task_seeding = o.worker_seeding == WorkerSeeding::PerTask;
      c.base_seed = base_seed;
      c.task_base = task_base;
      out.push_back(std::move(c));
    }
    return out;
  }

  /// Makes the (idle) workers start afresh for an epoch seeded with `base_seed`; false
  /// (nothing changed) when one of them is dead or restarting.
  bool reinit(const LoaderState& state, uint64_t seed, uint64_t first_index) {
    if (!pipeline_->reinit(worker_configs(state, seed, pipeline_->next_first_task() - first_index))) return false;
    base_seed = seed;
    return true;
  }

  Pipeline& pipeline() { return *pipeline_; }
  const std::shared_ptr<Pipeline>& pipeline_ptr() const { return pipeline_; }
  uint64_t epochs = 0;
  uint64_t base_seed;  ///< worker k is seeded base_seed + k

 private:
  std::shared_ptr<caf::actor_system> system_;  // released last (teardown)
  std::shared_ptr<Pipeline> pipeline_;
  std::unique_ptr<PoolActors> actors_;
  bool torn_down_ = false;  // by the owner's destructor or the exit handler, one of them
  const pid_t owner_ = getpid();  // the process whose workers these are
};

std::shared_ptr<WorkerPool> make_worker_pool(LoaderState& state, uint64_t base_seed, uint64_t first_index) {
  return std::make_shared<WorkerPool>(state, base_seed, first_index);
}


// ------------------------------------------------------------------ the epoch
namespace {

std::string format_seconds(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

class MultiProcessEpoch final : public EpochBackend {
 public:
  MultiProcessEpoch(const std::shared_ptr<LoaderState>& state, uint64_t base_seed, std::optional<TaskSource> source,
                    EpochResume resume)
      : state_(state) {
    auto& s = *state;
    // A resumed epoch whose persistent workers were seeded otherwise, or that needs a
    // worker as its Init leaves it, gets new ones.
    // With WorkerSeeding::PerTask every epoch draws base_seed, and the workers get it
    // before its first task (TaskSeeds); their own seeds stay those they started with.
    const bool per_task = s.options.worker_seeding == WorkerSeeding::PerTask;
    if (per_task) resume.task_seed_base = base_seed;
    if (s.persistent_pool && ((!per_task && s.persistent_pool->base_seed != base_seed) || resume.fresh_workers()))
      s.persistent_pool.reset();
    if (s.options.persistent_workers && s.persistent_pool) {
      pool_ = s.persistent_pool;
    } else if (!s.options.persistent_workers && s.idle_pool && s.idle_pool->reinit(s, base_seed, resume.consumed)) {
      // The workers of the last epoch start afresh: dataset rebuilt from its handle,
      // new seeds, worker_init_fn again, as new processes would; their processes,
      // mappings and slabs are kept (no spawn, no first-touch page faults).  A pool
      // with a worker that died meanwhile is replaced (below).
      pool_ = std::move(s.idle_pool);
    } else {
      s.idle_pool.reset();
      pool_ = make_worker_pool(s, base_seed, resume.consumed);
      if (s.options.persistent_workers) s.persistent_pool = pool_;
    }
    // On persistent workers a live epoch of an older iterator ends here: the
    // pipeline's epoch id moves on, and that iterator's next() returns the end.
    // Only persistent workers carry their iterable streams over into this epoch: they
    // make them again (an Epoch frame).  Re-initialised workers made theirs at Init, as
    // new processes do, once (a dataset's iter() may draw random numbers).
    const bool carried_over = s.options.persistent_workers && pool_->epochs > 0;
    if (s.iterable) {
      stream_taken_.assign(static_cast<size_t>(s.options.pool_workers()), 0);
      stream_next_ = resume.first_worker >= 0 ? resume.first_worker : 0;
    }
    epoch_ = pool_->pipeline().begin_epoch(std::move(source), carried_over, std::move(resume));
    ++pool_->epochs;
    timeout_ = s.options.timeout;
  }

  ~MultiProcessEpoch() override { finish(); }

  void end() override { finish(); }
  bool finished() const override { return finished_; }

  std::vector<int> worker_pids() override { return pool_ ? pool_->pipeline().pids() : std::vector<int>{}; }

  void stats(EpochStats& out) const override {
    if (finished_) out = ended_;  // the figures as the epoch ended (its pool may serve another)
    else pool_->pipeline().stats(epoch_, out);
  }

  EpochPosition position() const override {
    if (finished_) return ended_position_;
    if (!state_->iterable) return pool_->pipeline().position(epoch_);
    // An IterableDataset's running epoch is asked for its position only when its dataset
    // has state hooks (DataLoader::Iterator::plan): each worker reports how its stream
    // began with its first task of the epoch, on its socket, which the reader thread may
    // not have read yet while the worker's results (in its ring) were taken already.
    // Waited for, while the worker lives (a dead one never reports: the plan says so).
    const auto deadline = std::chrono::steady_clock::now() + report_wait();
    while (true) {
      EpochPosition p = pool_->pipeline().position(epoch_);
      bool waiting = false;
      for (size_t w = 0; w < p.stream_start.size(); ++w)
        if (!p.stream_start[w] &&
            pool_->pipeline().worker_state(static_cast<int>(w)) != WorkerLifecycle::State::Dead)
          waiting = true;
      if (!waiting || std::chrono::steady_clock::now() >= deadline) {
        p.stream_taken = stream_taken_;
        p.stream_next = stream_next_;
        return p;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  }

  std::optional<Value> next() override {
    if (finished_) return std::nullopt;
    std::optional<std::chrono::steady_clock::time_point> deadline;
    if (timeout_ > 0 && timeout_ < 1e9)  // longer than 30 years: no deadline
      deadline = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout_));
    // With an InterruptCheck (Ctrl-C from Python), the wait goes in slices of its
    // interval: a slice that ends without a batch is not the loader's timeout.
    const InterruptCheck* check = InterruptCheck::current();
    Delivery d;
    while (true) {
      auto until = deadline;
      if (check) {
        const auto slice = std::chrono::steady_clock::now() + check->interval();
        if (!until || slice < *until) until = slice;
      }
      d = pool_->pipeline().next(epoch_, until);
      if (d.kind != Delivery::Kind::Timeout || !check) break;
      if (deadline && std::chrono::steady_clock::now() >= *deadline) break;
      (*check)();  // may throw: the epoch goes on, as after any next()
    }
    switch (d.kind) {
      case Delivery::Kind::End: finish(); return std::nullopt;
      case Delivery::Kind::Fatal: finish(); throw_error(d.error_type, d.error_message);
      case Delivery::Kind::Timeout: {
        std::string msg = "DataLoader timed out after " + format_seconds(timeout_) + " seconds" + waiting_on();
        finish();
        throw RuntimeError(msg);
      }
      case Delivery::Kind::Error: taken_from(d.worker); throw_error(d.error_type, d.error_message);
      case Delivery::Kind::Batch: break;
    }
    taken_from(d.worker);
    return decode(d);
  }

 private:
  /// An IterableDataset's result (batch or error) from `worker` went to the application:
  /// counted for its stream, and the round robin's next stream is the one after it.
  void taken_from(int worker) {
    if (worker < 0 || static_cast<size_t>(worker) >= stream_taken_.size()) return;
    ++stream_taken_[static_cast<size_t>(worker)];
    stream_next_ = (worker + 1) % static_cast<int>(stream_taken_.size());
  }

  /// How long position() waits for a worker's StreamStart: the loader's timeout, else 60 s.
  std::chrono::steady_clock::duration report_wait() const {
    const double s = timeout_ > 0 && timeout_ < 1e9 ? timeout_ : 60.0;
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
  }

  /// " waiting for batch 3 of the epoch from DataLoader worker 1 (pid 1234)".
  std::string waiting_on() {
    auto [batch, worker] = pool_->pipeline().awaited();
    std::string out = " waiting for batch " + std::to_string(batch) + " of the epoch";
    if (worker < 0) return out;
    out += " from DataLoader worker " + std::to_string(worker);
    auto pids = pool_->pipeline().pids();
    if (static_cast<size_t>(worker) < pids.size() && pids[static_cast<size_t>(worker)] > 0)
      out += " (pid " + std::to_string(pids[static_cast<size_t>(worker)]) + ")";
    return out;
  }

  Value decode(const Delivery& d) {
    if (d.value) return std::move(*d.value);          // read into its tensors by a bulk stream
    if (d.slab == 0) return decode_value(d.payload);  // no tensor: the batch travelled inline
    auto store = pool_->pipeline().slabs();
    auto seg = store->segment(d.slab);
    if (!seg) throw RuntimeError("internal: batch in unknown slab " + std::to_string(d.slab));
    std::weak_ptr<Pipeline> pipe = pool_->pipeline_ptr();
    int worker = d.worker;
    uint64_t slab = d.slab;
    // Dropping the batch gives its slab back (to the pool if it is still there, so
    // a task waiting for a slab goes out; to the loader's store otherwise).
    auto lease = std::make_shared<BatchLease>(
        seg,
        [pipe, store, worker, slab] {
          if (auto p = pipe.lock()) p->release_slab(worker, slab);
          else store->release(worker, slab);
        },
        d.pinned);
    return decode_batch(d.payload, d.slab, lease);
  }

  void finish() {
    if (finished_) return;
    finished_ = true;
    pool_->pipeline().stats(epoch_, ended_);  // before end_epoch: the epoch's figures as it ended
    // Where it ended, for a checkpoint (the pool may serve another epoch later).
    if (resumable(*state_)) {
      try {
        ended_position_ = pool_->pipeline().position(epoch_);
        ended_position_.stream_taken = stream_taken_;
        ended_position_.stream_next = stream_next_;
      } catch (const Error&) {
        // another epoch of the pool began meanwhile: this one has no position of its own
      }
    }
    // Stopped synchronously: no sampler draw happens after the epoch ends.
    pool_->pipeline().end_epoch(epoch_);
    if (state_->auto_workers) {
      // The tuner's setting: the next epoch's pool starts with it (a new pool, too).
      const auto [workers, prefetch] = pool_->pipeline().tuned();
      state_->tuned_workers = workers;
      state_->tuned_prefetch = prefetch;
    }
    if (!state_->options.persistent_workers) {
      // Kept for the next epoch when it is the loader's only idle pool and healthy.
      if (!state_->idle_pool && pool_->pipeline().healthy()) state_->idle_pool = std::move(pool_);
      pool_.reset();
    }
  }

  std::shared_ptr<LoaderState> state_;
  std::shared_ptr<WorkerPool> pool_;
  double timeout_ = 0;
  uint64_t epoch_ = 0;  ///< this epoch's id in the pipeline
  bool finished_ = false;
  EpochStats ended_;     ///< the stage figures when the epoch ended
  EpochPosition ended_position_;  ///< where it stood when it ended
  /// IterableDataset: the results each worker's stream gave the application in this
  /// epoch, and the worker whose result comes next (application thread).
  std::vector<uint64_t> stream_taken_;
  int stream_next_ = 0;
};

}  // namespace

std::unique_ptr<EpochBackend> make_multi_process_epoch(const std::shared_ptr<LoaderState>& state,
                                                       uint64_t base_seed, std::optional<TaskSource> source,
                                                       EpochResume resume) {
  return std::make_unique<MultiProcessEpoch>(state, base_seed, std::move(source), std::move(resume));
}

std::optional<uint64_t> persistent_base_seed(const LoaderState& state) {
  if (!state.options.persistent_workers || !state.persistent_pool) return std::nullopt;
  return state.persistent_pool->base_seed;
}

}  // namespace loader::runtime
