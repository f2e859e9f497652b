#include "loader/runtime/child/worker_core.h"

#include <algorithm>
#include <chrono>

#include "loader/collate.h"
#include "loader/epoch_stats.h"
#include "loader/error.h"
#include "loader/runtime/batch_codec.h"
#include "loader/runtime/wire.h"

namespace loader::runtime {

Value WorkerConfig::to_value() const {
  return Value::dict({{"worker_id", worker_id},
                      {"num_workers", num_workers},
                      {"seed", static_cast<int64_t>(seed)},
                      {"dataset_type", dataset.type},
                      {"dataset_params", dataset.params},
                      {"iterable", iterable},
                      {"auto_collation", auto_collation},
                      {"batch_size", batch_size},
                      {"drop_last", drop_last},
                      {"collate_fn_name", collate_fn_name},
                      {"worker_init_fn_name", worker_init_fn_name},
                      {"per_task_seeding", per_task_seeding},
                      {"base_seed", static_cast<int64_t>(base_seed)},
                      {"task_base", static_cast<int64_t>(task_base)}});
}

WorkerConfig WorkerConfig::from_value(const Value& v) {
  WorkerConfig c;
  c.worker_id = static_cast<int>(v.at("worker_id").to_int());
  c.num_workers = static_cast<int>(v.at("num_workers").to_int());
  c.seed = static_cast<uint64_t>(v.at("seed").to_int());
  c.dataset = DatasetHandle{v.at("dataset_type").to_string(), v.at("dataset_params")};
  c.iterable = v.at("iterable").to_bool();
  c.auto_collation = v.at("auto_collation").to_bool();
  c.batch_size = v.at("batch_size").to_int();
  c.drop_last = v.at("drop_last").to_bool();
  c.collate_fn_name = v.at("collate_fn_name").to_string();
  c.worker_init_fn_name = v.at("worker_init_fn_name").to_string();
  c.per_task_seeding = v.at("per_task_seeding").to_bool();
  c.base_seed = static_cast<uint64_t>(v.at("base_seed").to_int());
  c.task_base = static_cast<uint64_t>(v.at("task_base").to_int());
  return c;
}

namespace {
/// Installs the worker's view of the world for the duration of one call: its
/// default generator, its worker info.
struct WorkerScope {
  WorkerScope(Generator& g, const WorkerInfo& info) : gen(g), winfo(&info) {}
  DefaultGeneratorScope gen;
  WorkerInfoScope winfo;
};
}  // namespace

WorkerCore::WorkerCore(const WorkerConfig& config) : config_(config), generator_(config.seed) {
  info_.id = config.worker_id;
  info_.num_workers = config.num_workers;
  info_.seed = config.seed;
  WorkerScope scope(generator_, info_);
  CollateFn collate;
  if (!config.collate_fn_name.empty()) collate = find_collate_fn(config.collate_fn_name);
  if (config.iterable) {
    info_.iterable_dataset = make_iterable_dataset(config.dataset);
  } else {
    info_.dataset = make_dataset(config.dataset);
  }
  if (!config.worker_init_fn_name.empty()) {
    WorkerInitFn init = find_worker_init_fn(config.worker_init_fn_name);
    init(config.worker_id);
  }
  // The fetcher is made after worker_init_fn, which may configure the dataset copy
  // (PyTorch's docstring example 2 splits the stream there).
  if (config.iterable) {
    start_stream();
  } else {
    map_fetcher_.emplace(info_.dataset, config.auto_collation, collate);
  }
}

void WorkerCore::start_stream() {
  CollateFn collate;
  if (!config_.collate_fn_name.empty()) collate = find_collate_fn(config_.collate_fn_name);
  // Noted before iter(), which may draw or move the copy on (an epoch counter): a
  // resumed stream starts from exactly this.
  StreamStart start{generator_.state(), info_.iterable_dataset->state()};
  iter_fetcher_.emplace(info_.iterable_dataset, config_.auto_collation, collate, config_.drop_last);
  unreported_ = std::move(start);
}

std::optional<StreamStart> WorkerCore::take_stream_start() {
  std::optional<StreamStart> out = std::move(unreported_);
  unreported_.reset();
  return out;
}

void WorkerCore::resume_stream(const StreamResume& r) {
  if (!config_.iterable) throw RuntimeError("ResumeStream frame for a map-style dataset");
  if (!generator_.set_state(r.rng)) throw RuntimeError("ResumeStream frame without a generator state");
  pending_.clear();
  pending_ns_.clear();
  WorkerScope scope(generator_, info_);
  load_stream_state(*info_.iterable_dataset, r.state);
  start_stream();
  skip_stream(*iter_fetcher_, *info_.iterable_dataset, r.skip,
              static_cast<size_t>(config_.auto_collation ? config_.batch_size : 1));
}

void WorkerCore::add_slab(uint64_t id, void* base, size_t size) { slabs_[id] = Slab{base, size}; }

void WorkerCore::drop_slab(uint64_t id) { slabs_.erase(id); }

void WorkerCore::reset_epoch() {
  pending_.clear();
  pending_ns_.clear();
  if (config_.iterable) {
    WorkerScope scope(generator_, info_);
    start_stream();
  }
}

bool WorkerCore::set_generator_state(const std::string& state) {
  if (!generator_.set_state(state)) return false;
  if (config_.iterable) reset_epoch();
  return true;
}

WorkerReply WorkerCore::error_reply(uint64_t task, const std::string& type, const std::string& what) const {
  WorkerReply r;
  r.kind = WorkerReply::Kind::Error;
  r.task = task;
  r.error_type = type;
  r.error_message = "Caught " + type + " in DataLoader worker process " + std::to_string(config_.worker_id) +
                    ".\nOriginal Traceback (most recent call last):\n  (C++ worker, task " +
                    std::to_string(task) + ")\n" + type + ": " + what;
  return r;
}

WorkerReply WorkerCore::place(uint64_t task, const Value& batch, uint64_t slab) {
  auto it = slab == 0 ? slabs_.end() : slabs_.find(slab);
  SlabAllocator alloc(slab, it == slabs_.end() ? nullptr : it->second.base,
                      it == slabs_.end() ? 0 : it->second.size);
  Value placed = place_in_slab(batch, alloc);
  WorkerReply r;
  r.task = task;
  r.slab = slab;
  if (alloc.overflowed()) {
    r.kind = WorkerReply::Kind::Need;
    r.bytes = alloc.required();
    pending_[task] = batch;
    return r;
  }
  r.kind = WorkerReply::Kind::Result;
  r.bytes = alloc.required();
  r.payload = encode_batch(placed, slab);
  return r;
}

std::optional<Value> WorkerCore::fetch(const IndexBatch& indices) {
  if (map_fetcher_) {
    Value v = map_fetcher_->fetch(indices);
    collate_ns_ += map_fetcher_->last_collate_ns();
    return v;
  }
  auto v = iter_fetcher_->fetch(static_cast<size_t>(config_.auto_collation ? config_.batch_size : 1));
  collate_ns_ += iter_fetcher_->last_collate_ns();
  return v;
}

namespace {
/// Times a write of the batch (into its slab, or encoded inline) into `ns`: collate_s.
struct WriteClock {
  uint64_t& ns;
  bool on = stats_recording();
  std::chrono::steady_clock::time_point t0 = on ? std::chrono::steady_clock::now()
                                                : std::chrono::steady_clock::time_point{};
  explicit WriteClock(uint64_t& n) : ns(n) {}
  ~WriteClock() {
    if (on)
      ns += static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  }
};
}  // namespace

WorkerReply WorkerCore::run_task(uint64_t task, const IndexBatch& indices, uint64_t slab) {
  const auto start = std::chrono::steady_clock::now();
  collate_ns_ = 0;
  WorkerReply r = run(task, indices, slab);
  account(r, start);
  return r;
}

WorkerReply WorkerCore::use_slab(uint64_t task, uint64_t slab) {
  const auto start = std::chrono::steady_clock::now();
  collate_ns_ = 0;
  WorkerReply r = retry(task, slab);
  account(r, start);
  return r;
}

void WorkerCore::account(WorkerReply& r, std::chrono::steady_clock::time_point start) {
  uint64_t ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  uint64_t collate = std::min(collate_ns_, ns);
  auto earlier = pending_ns_.find(r.task);
  if (earlier != pending_ns_.end()) {
    ns += earlier->second.first;
    collate += earlier->second.second;
    pending_ns_.erase(earlier);
  }
  if (r.kind == WorkerReply::Kind::Need) {
    pending_ns_[r.task] = {ns, collate};
  } else {
    r.busy_ns = ns;
    r.collate_ns = collate;
  }
}

WorkerReply WorkerCore::run(uint64_t task, const IndexBatch& indices, uint64_t slab) {
  // Seeded here, so a task run again (a restarted worker's held tasks, after a SetRng
  // from the state page) draws what its first run drew.  Task ids wrap as u64 do.
  if (config_.per_task_seeding) generator_.manual_seed(task_seed(config_.base_seed, task - config_.task_base));
  WorkerScope scope(generator_, info_);
  WorkerReply r;
  r.task = task;
  try {
    if (slab == kInlineSlab) {
      // Collated on the heap and sent whole: the main process decodes it without a
      // slab.  Kept as it is: what sends it encodes it (the bulk stream, no copy).
      std::optional<Value> batch;
      {
        AllocatorScope pooled(inline_pool_);
        batch = fetch(indices);
      }
      if (!batch) r.kind = WorkerReply::Kind::IterEnd;
      else r.value = std::make_shared<Value>(std::move(*batch));
      return r;
    }
    auto it = slab == 0 ? slabs_.end() : slabs_.find(slab);
    SlabAllocator alloc(slab, it == slabs_.end() ? nullptr : it->second.base,
                        it == slabs_.end() ? 0 : it->second.size);
    std::optional<Value> batch;
    {
      AllocatorScope in_slab(alloc);
      batch = fetch(indices);
    }
    if (!batch) {
      r.kind = WorkerReply::Kind::IterEnd;
      return r;
    }
    r.slab = slab;
    WriteClock write(collate_ns_);
    if (!alloc.overflowed()) {
      // Tensors collated in place stay; others (custom collate) are copied in.
      Value placed = place_in_slab(*batch, alloc);
      if (!alloc.overflowed()) {
        r.bytes = alloc.required();
        r.payload = encode_batch(placed, slab);
        return r;
      }
    }
    r.kind = WorkerReply::Kind::Need;
    // What the whole batch needs when copied into a fresh slab.
    SlabAllocator measure(0, nullptr, 0);
    (void)place_in_slab(*batch, measure);
    r.bytes = measure.required();
    pending_[task] = std::move(*batch);
    return r;
  } catch (const Error& e) {
    return error_reply(task, e.python_type(), e.what());
  } catch (const std::exception& e) {
    return error_reply(task, "RuntimeError", e.what());
  }
}

WorkerReply WorkerCore::retry(uint64_t task, uint64_t slab) {
  WorkerScope scope(generator_, info_);
  auto it = pending_.find(task);
  if (it == pending_.end())
    return error_reply(task, "RuntimeError", "internal: no batch waiting for a slab for task " + std::to_string(task));
  Value batch = std::move(it->second);
  pending_.erase(it);
  try {
    WriteClock write(collate_ns_);
    return place(task, batch, slab);
  } catch (const Error& e) {
    return error_reply(task, e.python_type(), e.what());
  } catch (const std::exception& e) {
    return error_reply(task, "RuntimeError", e.what());
  }
}

}  // namespace loader::runtime
