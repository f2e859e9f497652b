#include "loader/dataloader.h"

#include <chrono>
#include <cstring>
#include <cxxabi.h>
#include <set>
#include <typeinfo>

#include "loader/cuda_copy.h"
#include "loader/error.h"
#include "loader/fetch.h"
#include "loader/runtime/checkpoint.h"
#include "loader/runtime/epoch.h"
#include "loader/runtime/epoch_planner.h"
#include "loader/runtime/parent/autotuner.h"
#include "loader/samplers.h"
#include "loader/warnings.h"

namespace loader {

CollateFn LoaderState::collate() const {
  if (options.collate_fn) return options.collate_fn;
  if (!options.collate_fn_name.empty()) return find_collate_fn(options.collate_fn_name);
  return {};
}

Generator& LoaderState::generator() const {
  return options.generator ? *options.generator : default_generator();
}

// ------------------------------------------------------------------ verified replay
namespace {
/// The type of a sampler, demangled ("loader::RandomSampler").
template <class T>
std::string type_name(const T* object) {
  if (!object) return "";
  const char* mangled = typeid(*object).name();
  int status = 0;
  char* plain = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string out = status == 0 && plain ? plain : mangled;
  std::free(plain);
  return out;
}

/// An IterableDataset's result for the replay's check: each tensor's dtype, shape and
/// first and last 64 bytes (the bytes between are not read: a checkpoint costs no batch
/// copy or scan); a batch error counts as one fixed value.
uint64_t result_hash(const Value* batch) {
  if (!batch) return 0x6572726f72ULL;  // "error"
  uint64_t h = 0x726573756c74ULL;
  bool any = false;
  batch->for_each_tensor([&](const Tensor& t) {
    any = true;
    h = HashChain::chain(h, static_cast<uint64_t>(t.dtype()));
    h = HashChain::chain(h, static_cast<uint64_t>(t.dim()));
    for (int64_t d = 0; d < t.dim(); ++d) h = HashChain::chain(h, static_cast<uint64_t>(t.size(d)));
    Tensor c = t.is_contiguous() ? t : t.contiguous();
    const auto* p = static_cast<const unsigned char*>(c.data_ptr());
    const size_t n = c.nbytes();
    auto bytes = [&](size_t from, size_t len) {
      for (size_t i = 0; i < len; i += 8) {
        uint64_t w = 0;
        std::memcpy(&w, p + from + i, std::min<size_t>(8, len - i));
        h = HashChain::chain(h, w);
      }
    };
    const size_t head = std::min<size_t>(64, n);
    bytes(0, head);
    bytes(n - std::min<size_t>(64, n), std::min<size_t>(64, n));
  });
  if (!any) {  // a batch without tensors (plain values): its text
    const std::string text = batch->repr().substr(0, 256);
    for (char ch : text) h = HashChain::chain(h, static_cast<unsigned char>(ch));
  }
  return h;
}

/// "the checkpoint's sampler was A (batch sampler B), this loader's is C (D)".
std::string samplers_differ(const ResumePlan& plan, const LoaderState& s) {
  if (plan.sampler_type.empty() && plan.batch_sampler_type.empty()) return "";
  return " (the checkpoint's sampler was " + plan.sampler_type + ", batch sampler " +
         (plan.batch_sampler_type.empty() ? "none" : plan.batch_sampler_type) + "; this loader's is " +
         type_name(s.sampler.get()) + ", batch sampler " +
         (s.batch_sampler ? type_name(s.batch_sampler.get()) : std::string("none")) + ")";
}
}  // namespace

// ------------------------------------------------------------------ single process
namespace {
class SingleProcessEpoch final : public EpochBackend {
 public:
  SingleProcessEpoch(LoaderState& s, std::optional<TaskSource> source, uint64_t base_seed, uint64_t first_index,
                     std::optional<StreamResume> stream)
      : state_(s), base_seed_(base_seed), first_index_(first_index) {
    // worker_init_fn is not called with num_workers = 0, as in PyTorch.
    if (s.dataset) {
      tasks_ = std::move(source);
      map_fetcher_.emplace(s.dataset, s.auto_collation, s.collate());
    } else {
      // The stream begins as a worker's does (WorkerCore::start_stream): its state()
      // noted before iter(); a resumed one loads its checkpoint's state first and passes
      // the results taken of it after.
      if (stream) load_stream_state(*s.iterable, stream->state);
      stream_start_ = StreamStart{std::string(), s.iterable->state()};
      iter_fetcher_.emplace(s.iterable, s.auto_collation, s.collate(), s.options.drop_last);
      if (stream) skip_stream(*iter_fetcher_, *s.iterable, stream->skip, batch_samples());
    }
  }

  std::optional<Value> next() override {
    std::optional<Value> batch;
    if (map_fetcher_) {
      const auto start = std::chrono::steady_clock::now();
      auto indices = tasks_->next();
      sampler_ns_ += static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
      if (!indices) {
        exhausted_ = true;  // the sampler's pass made its last draws
        return std::nullopt;
      }
      const uint64_t index = first_index_ + consumed_;
      ++consumed_;  // consumed also when its fetch throws, as PyTorch's index is
      if (state_.options.worker_seeding == WorkerSeeding::PerTask) {
        // The batch draws from its own generator, as a worker's task would: the calling
        // thread's default generator (the sampler's and base_seed's, when no generator
        // was given) is left as it was.
        Generator task_generator(task_seed(base_seed_, index));
        DefaultGeneratorScope scope(task_generator);
        batch = map_fetcher_->fetch(*indices);
      } else {
        batch = map_fetcher_->fetch(*indices);
      }
    } else {
      try {
        batch = iter_fetcher_->fetch(batch_samples());
      } catch (...) {
        ++stream_taken_;  // its error is one of the stream's results
        throw;
      }
      if (batch) ++stream_taken_;
    }
    if (batch && state_.options.pin_memory) batch = pin_batch(*batch);
    if (batch) ++fetched_;
    return batch;
  }

  void stats(EpochStats& out) const override {
    out.tasks_sent = fetched_;  // fetched in the calling thread: nothing in flight or waiting
    out.in_flight = 0;
    out.ready = 0;
    out.waits = 0;
    out.sampler_s = static_cast<double>(sampler_ns_) * 1e-9;
  }

  EpochPosition position() const override {
    EpochPosition p;
    p.consumed = p.sent = consumed_;
    p.exhausted = exhausted_;
    if (iter_fetcher_) {
      p.stream_start = {stream_start_};
      p.stream_taken = {stream_taken_};
    }
    return p;
  }

 private:
  size_t batch_samples() const { return static_cast<size_t>(state_.options.batch_size.value_or(1)); }

  /// pin_memory=true without workers: PyTorch's pin_memory(batch), custom objects'
  /// pin_memory() hooks included; warns once per loader when tensors stay unpinned.
  Value pin_batch(const Value& batch) {
    PinResult how;
    Value out = pin_memory(batch, &how);
    if (state_.pin_tracker && state_.pin_tracker->record(how))
      warn("pin_memory=true but batches are not CUDA-pinned: " + how.reason);
    return out;
  }

  LoaderState& state_;
  const uint64_t base_seed_;
  const uint64_t first_index_;
  std::optional<TaskSource> tasks_;
  std::optional<MapFetcher> map_fetcher_;
  std::optional<IterableFetcher> iter_fetcher_;
  int64_t fetched_ = 0;
  uint64_t consumed_ = 0;  ///< tasks taken from the sampler (map-style)
  bool exhausted_ = false;  ///< the sampler was asked after its last task (map-style)
  uint64_t sampler_ns_ = 0;  ///< time in the sampler (TaskSource::next)
  StreamStart stream_start_;  ///< IterableDataset: how its stream began
  uint64_t stream_taken_ = 0;  ///< ... and the results of it given out (errors too)
};
}  // namespace

std::unique_ptr<EpochBackend> make_single_process_epoch(LoaderState& state, std::optional<TaskSource> source,
                                                         uint64_t base_seed, uint64_t first_index,
                                                         std::optional<StreamResume> stream) {
  return std::make_unique<SingleProcessEpoch>(state, std::move(source), base_seed, first_index, std::move(stream));
}

// ------------------------------------------------------------------ DataLoader
static std::shared_ptr<LoaderState> make_state(DataLoaderOptions options, bool iterable) {
  const bool auto_workers = resolve_auto_workers(options);  // num_workers = auto: its slots from here on
  validate_options(options, iterable);
  auto s = std::make_shared<LoaderState>();
  s->options = std::move(options);
  if (auto_workers) {
    s->auto_workers = true;
    s->epoch_mode = std::make_shared<runtime::EpochMode>(!iterable && s->options.autotune.min_workers == 0);
  }
  s->auto_collation = s->options.batch_sampler || s->options.batch_size.has_value();
  if (!s->options.pin_memory_device.empty()) {
    if (!s->options.pin_memory) {
      // PyTorch's warning, word for word (the two sentences run together there too).
      warn("pin memory device is set and pin_memory flag is not used then device pinned memory won't be used"
           "please set pin_memory to true, if you need to use the device pin memory");
    } else if (auto index = pin_device_index(s->options.pin_memory_device); index && cuda_device_available()) {
      try {
        (void)cuda_device_info(*index);
      } catch (const RuntimeError& e) {
        throw ValueError("pin_memory_device='" + s->options.pin_memory_device +
                         "' names no CUDA device of this machine (" + e.what() + "); use \"cuda\" or a valid index");
      }
    }
  }
  s->pin_tracker = std::make_shared<PinTracker>(s->options.pin_memory);
  // PyTorch warns about too many workers in __init__, before any iteration.
  if (s->options.pool_workers() > 0) runtime::check_worker_number(*s);
  return s;
}

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options)
    : state_(make_state(std::move(options), false)) {
  if (!dataset) throw ValueError("DataLoader: dataset is null");
  auto& s = *state_;
  s.dataset = std::move(dataset);
  const auto& o = s.options;
  if (o.sampler) {
    s.sampler = o.sampler;
  } else if (o.shuffle.value_or(false)) {
    s.sampler = std::make_shared<RandomSampler>(s.dataset, false, std::nullopt, o.generator);
  } else {
    s.sampler = std::make_shared<SequentialSampler>(s.dataset);
  }
  if (o.batch_sampler) {
    s.batch_sampler = o.batch_sampler;
  } else if (o.batch_size) {
    s.batch_sampler = std::make_shared<BatchSampler>(s.sampler, *o.batch_size, o.drop_last);
  }
  if (o.pool_workers() > 0 && !s.dataset->handle())
    throw ValueError(
        "num_workers > 0 needs a dataset that worker processes can rebuild: register its type "
        "with LOADER_REGISTER_DATASET and create it with loader::make_dataset({type, params}) "
        "(or use num_workers=0)");
}

DataLoader::DataLoader(std::shared_ptr<IterableDataset> dataset, DataLoaderOptions options)
    : state_(make_state(std::move(options), true)) {
  if (!dataset) throw ValueError("DataLoader: dataset is null");
  state_->iterable = std::move(dataset);
  if (state_->options.pool_workers() > 0 && !state_->iterable->handle())
    throw ValueError(
        "num_workers > 0 needs a dataset that worker processes can rebuild: register its type "
        "with LOADER_REGISTER_ITERABLE_DATASET and create it with loader::make_iterable_dataset"
        "({type, params}) (or use num_workers=0)");
}

DataLoader::~DataLoader() {
  if (state_) shutdown();
}
DataLoader::DataLoader(DataLoader&&) noexcept = default;
DataLoader& DataLoader::operator=(DataLoader&& o) noexcept {
  if (this != &o) {
    if (state_) shutdown();
    state_ = std::move(o.state_);
  }
  return *this;
}

const DataLoaderOptions& DataLoader::options() const { return state_->options; }
bool DataLoader::is_iterable() const { return static_cast<bool>(state_->iterable); }
std::shared_ptr<Sampler> DataLoader::sampler() const { return state_->sampler; }
std::shared_ptr<BatchSamplerBase> DataLoader::batch_sampler() const { return state_->batch_sampler; }

void DataLoader::shutdown() {
  state_->persistent_pool.reset();
  state_->idle_pool.reset();
  // The slabs go once no batch uses them (batches hold the store).
  state_->slab_store.reset();
}

PinStatus DataLoader::pin_memory_status() const { return state_->pin_tracker->status(); }

DataLoader::Iterator DataLoader::iter() {
  auto& s = *state_;
  std::optional<ResumePlan> plan = std::move(s.resume);
  s.resume.reset();
  s.resume_state.reset();  // applied now (or dropped, if the resume fails)
  const std::vector<RandomStream> streams = loader_streams(s);
  if (plan && plan->elastic) {
    // A fresh pass over this rank's stripe: nothing of the old ranks' epoch is replayed
    // (their streams were other ranks'), and the sampler is at the merged epoch, so that
    // the program's set_epoch(epoch + 1) starts the next one as usual.
    static_cast<DistributedSampler&>(*s.sampler).set_epoch(plan->elastic_epoch);
    s.elastic_pass = std::move(plan->elastic_indices);
    plan.reset();
  }
  if (plan) {
    // A resume that fails (a sampler that cannot replay the epoch) leaves the streams
    // as they were: the plan is dropped and the next iter() starts a plain epoch.
    const std::vector<std::string> before = save_streams(streams);
    try {
      return iter_from(plan, streams);
    } catch (...) {
      for (size_t i = 0; i < streams.size(); ++i) streams[i].load(before[i]);
      throw;
    }
  }
  return iter_from(plan, streams);
}

namespace {
/// What the epoch planner needs of the loader, read as iter() begins.
EpochSettings epoch_settings(const LoaderState& s) {
  EpochSettings e;
  e.pool_workers = s.options.pool_workers();
  e.persistent_workers = s.options.persistent_workers;
  e.worker_seeding = s.options.worker_seeding;
  if (e.pool_workers > 0) e.persistent_seed = runtime::persistent_base_seed(s);
  e.iterable = static_cast<bool>(s.iterable);
  return e;
}

/// The epoch's base_seed: drawn from the loader's generator when `planner` says so (a
/// replay's draw checked against the checkpointed epoch's), else the one it gives.
uint64_t take_base_seed(const EpochPlanner& planner, LoaderState& s) {
  const SeedPlan seed = planner.seed();
  if (!seed.draw) return seed.value;
  const auto drawn = static_cast<uint64_t>(s.generator().random_int64());
  planner.check_drawn(drawn);
  return drawn;
}

/// What the replay of an unfinished checkpointed epoch checks (its hashes and marks,
/// and the samplers' types for a refusal); nothing for another epoch.
ReplayCheck replay_check(const std::optional<ResumePlan>& plan, const LoaderState& s) {
  ReplayCheck check;
  if (plan && !plan->finished) {
    check = plan->check;
    check.differs = samplers_differ(*plan, s);
  }
  return check;
}

/// Replayed result `count` (counting from 1) of `replay` against the checkpoint's hashes:
/// checked where the checkpoint has a mark (the first 16, then powers of two: the first
/// that differs, or the range it lies in) and at the last; ValueError when it differs.
void verify_replayed(const ReplayCheck& check, const HashChain& hashes, uint64_t count, uint64_t replay) {
  if (!check.hash) return;
  const std::optional<uint64_t> want = count == replay ? check.hash : check.at(count);
  if (!want || hashes.at(count) == want) return;
  uint64_t low = 0;  // the last mark below `count`, which matched
  for (const auto& m : check.marks)
    if (m.first < count) low = std::max(low, m.first);
  throw ValueError(
      "DataLoader.load_state_dict: replaying the checkpointed epoch of the IterableDataset, " +
      (low + 1 == count ? "its result " + std::to_string(count)
                        : "one of its results " + std::to_string(low + 1) + ".." + std::to_string(count)) +
      " (counting from 1) differs from the checkpointed iterator's (shapes, dtypes, first and last 64 bytes): the "
      "dataset's stream is not the one checkpointed (other data, or another dataset)");
}
}  // namespace

DataLoader::Iterator DataLoader::iter_from(const std::optional<ResumePlan>& plan,
                                           const std::vector<RandomStream>& streams) {
  auto& s = *state_;
  const EpochPlanner planner(plan ? &*plan : nullptr, epoch_settings(s));
  // The streams as the checkpointed epoch began (or at a finished one's checkpoint),
  // noted before the epoch's first draw, which is its base_seed.
  if (const std::optional<StreamLoad> load = planner.start_streams())
    load_streams(streams, *load->states, load->what, load->settings_too);
  Iterator::Start start;
  start.streams = save_streams(streams);
  start.base_seed = take_base_seed(planner, s);
  start.base_seed_drawn = planner.seed().draw;
  // The tasks, the position resumed in them and the streams as at the checkpoint.
  std::optional<TaskSource> source = epoch_source(start);
  const ReplayCheck check = replay_check(plan, s);
  EpochPlan p = planner.plan();
  resume_position(plan, p, source, check, streams, start);
  // The epoch, counting what the resumed streams pass as given out, then an iterable
  // epoch's results replayed.
  choose_epoch_mode(p.mid_epoch, start);
  std::unique_ptr<EpochBackend> backend = epoch_backend(std::move(source), p, start);
  Iterator it(std::move(backend), state_, std::move(start));
  it.yielded_ = static_cast<int64_t>(it.start_.consumed + p.passed);
  it.taken_ = p.passed;
  replay(it, check, p.replay);
  return it;
}

std::optional<TaskSource> DataLoader::epoch_source(Iterator::Start& start) {
  auto& s = *state_;
  std::optional<TaskSource> source;
  if (s.dataset && s.elastic_pass) {
    // This pass only: the stripe, batched as the loader's BatchSampler would (the
    // loader's own; decode_elastic refused a batch_sampler of the program's).
    auto list = std::make_shared<ListSampler>(std::move(*s.elastic_pass));
    s.elastic_pass.reset();
    std::shared_ptr<BatchSamplerBase> batches;
    if (s.batch_sampler) batches = std::make_shared<BatchSampler>(list, *s.options.batch_size, s.options.drop_last);
    source.emplace(batches, list);
    start.hashes = source->hashes();
    start.elastic = true;
  } else if (s.dataset) {
    source.emplace(s.batch_sampler, s.sampler);
    start.hashes = source->hashes();  // the source moves into the epoch; its hashes stay here too
  } else {
    start.hashes = std::make_shared<HashChain>();
  }
  if (s.iterable) start.stream_hooks = s.iterable->state().has_value();
  return source;
}

void DataLoader::resume_position(const std::optional<ResumePlan>& plan, EpochPlan& p,
                                 std::optional<TaskSource>& source, const ReplayCheck& check,
                                 const std::vector<RandomStream>& streams, Iterator::Start& start) {
  if (p.hashes_restart_at) start.hashes->restart_at(*p.hashes_restart_at, plan->check.hash, plan->check.marks);
  if (p.fast_forward && source)
    source->fast_forward(p.fast_forward->consumed, p.fast_forward->sampled, p.fast_forward->exhausted, &check,
                         p.fast_forward->delivered);
  if (p.load_at_checkpoint)
    load_streams(streams, *p.load_at_checkpoint->states, p.load_at_checkpoint->what,
                 p.load_at_checkpoint->settings_too);
  StartPosition& at = p.start;
  start.consumed = at.consumed;
  start.pending = at.pending;
  start.delivered_above = std::move(at.delivered_above);
  start.sampled = at.sampled;
  start.pending_original = std::move(at.pending_original);
  start.remapped = at.remapped;
  start.exhausted = at.exhausted;
  start.stream_taken_before = std::move(at.stream_taken_before);
  start.iterable_rng = std::move(at.iterable_rng);
}

void DataLoader::choose_epoch_mode(bool mid_epoch, Iterator::Start& start) {
  // num_workers = auto: a map-style epoch may load in this thread when that costs less
  // per batch (a resumed epoch goes to the pool: the checkpoint's worker states are its).
  auto& s = *state_;
  start.autotuned = s.auto_workers;
  if (!s.auto_workers || !s.dataset || mid_epoch) return;
  std::string why;
  start.inline_auto = s.epoch_mode->next_inline(&why);
  const int pool_now = s.tuned_workers > 0 ? s.tuned_workers : s.options.pool_workers();
  const int prefetch_now = s.tuned_prefetch > 0 ? s.tuned_prefetch : s.options.effective_prefetch_factor();
  const bool was_inline =
      !s.epoch_stats.empty() && s.epoch_stats.back().autotuned && s.epoch_stats.back().workers_now == 0;
  if (start.inline_auto != was_inline && !why.empty())
    start.mode_decision = EpochStats::TuneDecision{0.0, was_inline ? 0 : pool_now, start.inline_auto ? 0 : pool_now,
                                                   was_inline ? 0 : prefetch_now, start.inline_auto ? 0 : prefetch_now,
                                                   "between epochs: " + why};
}

std::unique_ptr<EpochBackend> DataLoader::epoch_backend(std::optional<TaskSource> source, EpochPlan& p,
                                                        const Iterator::Start& start) {
  auto& s = *state_;
  if (s.options.pool_workers() == 0 || start.inline_auto)
    return make_single_process_epoch(s, std::move(source), start.base_seed, start.consumed, std::move(p.main_stream));
  return runtime::make_multi_process_epoch(state_, start.base_seed, std::move(source), std::move(p.resume));
}

void DataLoader::replay(Iterator& it, const ReplayCheck& check, uint64_t count) {
  if (count == 0) return;
  warn("DataLoader: resuming the IterableDataset " +
       it.state_->iterable->handle().value_or(DatasetHandle{"IterableDataset", {}}).type +
       " mid-epoch replays its first " + std::to_string(count) +
       " result(s) (its stream runs again from the epoch's start and they are dropped): "
       "an IterableDataset has no position the checkpoint can save");
  for (uint64_t k = 0; k < count; ++k) {
    std::optional<Value> batch;
    try {
      batch = it.next();
    } catch (...) {
      // A batch that failed was given to the checkpointed iterator as this error too;
      // an error that ended the epoch (a worker that died, a timeout) ends the resume.
      if (!it.backend_ || it.backend_->finished()) throw;
      verify_replayed(check, *it.start_.hashes, k + 1, count);
      continue;
    }
    if (!batch)
      throw ValueError("DataLoader.load_state_dict: replaying the checkpointed epoch of the IterableDataset, its stream "
                       "ended after " + std::to_string(k) + " batches, where the checkpointed iterator had given out " +
                       std::to_string(count) +
                       ": the dataset's stream is not the one checkpointed (other data, or another dataset)");
    verify_replayed(check, *it.start_.hashes, k + 1, count);
  }
}

Value DataLoader::state_dict() const {
  auto& s = *state_;
  check_resumable(s, "DataLoader.state_dict()");
  // A checkpoint loaded and not yet applied is where the next iter() starts: a trainer
  // that saves again before its first step after a restart must save that one, not the
  // position of an iterator from before load_state_dict (or a first epoch's start).
  if (s.resume_state) return copy_checkpoint(*s.resume_state);
  ResumePlan p;
  if (s.latest_iterator) {
    p = static_cast<const Iterator*>(s.latest_iterator)->plan();
  } else if (s.latest_plan) {
    p = *s.latest_plan;
  } else if (!s.latest_plan_error.empty()) {
    throw ValueError("DataLoader.state_dict(): the latest epoch left no checkpoint: " + s.latest_plan_error);
  } else {
    // No epoch yet: the next iter() is the first.  Its workers start as their Init
    // leaves them: one empty entry each, as load_state_dict reads one per worker.
    p.finished = true;
    p.pool_alive = runtime::persistent_base_seed(s).has_value();
    p.streams_at_start = save_streams(loader_streams(s));
    p.worker_rng.assign(static_cast<size_t>(s.options.pool_workers()), std::nullopt);
  }
  p.streams_now = save_streams(loader_streams(s));
  return encode_checkpoint(p, s);
}

void DataLoader::load_state_dict(const Value& state, bool strict) {
  auto& s = *state_;
  check_resumable(s, "DataLoader.load_state_dict()");
  if (is_elastic_checkpoint(state)) {
    if (strict)
      throw ValueError(
          "DataLoader.load_state_dict: an elastic checkpoint (merge_checkpoints) is loaded with strict=false: each "
          "rank of the new world takes its stripe of what the old ranks left, with its own num_replicas and rank");
    ResumePlan plan = decode_elastic(state, s);
    s.resume = std::move(plan);
    s.resume_state = copy_checkpoint(state);
    return;
  }
  const std::vector<RandomStream> streams = loader_streams(s);
  ResumePlan plan = decode_checkpoint(state, s, streams.size(), strict);
  check_streams(streams, plan.streams_at_start, "the epoch's start");
  check_streams(streams, plan.streams_now, "the checkpoint");
  Value loaded = copy_checkpoint(state);
  s.resume = std::move(plan);
  s.resume_state = std::move(loaded);
}

int64_t DataLoader::size() {
  auto& s = *state_;
  if (s.iterable) {
    auto n = s.iterable->size();
    if (!n) throw TypeError("object of type 'IterableDataset' has no len()");
    s.iterable_len_called = *n;
    int64_t len = *n;
    if (s.options.batch_size) {
      int64_t b = *s.options.batch_size;
      len = s.options.drop_last ? len / b : (len + b - 1) / b;
    }
    return len;
  }
  auto n = s.batch_sampler ? s.batch_sampler->size() : s.sampler->size();
  if (!n) throw TypeError("object of type 'Sampler' has no len()");
  return *n;
}

namespace {
/// Samples in a batch: the first dimension of its first tensor (1 without automatic
/// batching, or when it holds no tensor).
int64_t batch_length(const Value& v, bool auto_collation) {
  if (!auto_collation) return 1;
  const Value* x = &v;
  for (int depth = 0; depth < 16; ++depth) {
    switch (x->kind()) {
      case Value::Kind::Tensor: {
        const Tensor& t = x->to_tensor();
        return t.dim() == 0 ? 1 : t.size(0);
      }
      case Value::Kind::List:
      case Value::Kind::Tuple:
        if (x->items().empty()) return 1;
        switch (x->items().front().kind()) {  // a list of strings (default_collate): one per sample
          case Value::Kind::Tensor:
          case Value::Kind::List:
          case Value::Kind::Tuple:
          case Value::Kind::Dict: break;
          default: return static_cast<int64_t>(x->items().size());
        }
        x = &x->items().front();
        break;
      case Value::Kind::Dict:
        if (x->dict_items().empty()) return 1;
        x = &x->dict_items().front().second;
        break;
      default: return 1;
    }
  }
  return 1;
}
}  // namespace

// ------------------------------------------------------------------ Iterator
DataLoader::Iterator::Iterator(std::unique_ptr<EpochBackend> backend, std::shared_ptr<LoaderState> state, Start start)
    : backend_(std::move(backend)),
      state_(std::move(state)),
      start_(std::move(start)),
      len_called_(state_->iterable_len_called) {
  state_->latest_iterator = this;
  if (!state_->epoch_stats.empty()) rec_.previous_faults = state_->epoch_stats.back().minor_faults();
}

DataLoader::Iterator::Iterator(Iterator&& o) noexcept
    : backend_(std::move(o.backend_)),
      state_(std::move(o.state_)),
      start_(std::move(o.start_)),
      ended_at_(std::move(o.ended_at_)),
      yielded_(o.yielded_),
      taken_(o.taken_),
      next_s_(o.next_s_),
      ended_(std::move(o.ended_)),
      rec_(o.rec_),
      len_called_(o.len_called_) {
  if (state_ && state_->latest_iterator == &o) state_->latest_iterator = this;
}

DataLoader::Iterator& DataLoader::Iterator::operator=(Iterator&& o) noexcept {
  if (this == &o) return *this;
  keep_stats();
  leave_latest();
  backend_ = std::move(o.backend_);
  state_ = std::move(o.state_);
  start_ = std::move(o.start_);
  ended_at_ = std::move(o.ended_at_);
  yielded_ = o.yielded_;
  taken_ = o.taken_;
  next_s_ = o.next_s_;
  ended_ = std::move(o.ended_);
  rec_ = o.rec_;
  len_called_ = o.len_called_;
  if (state_ && state_->latest_iterator == &o) state_->latest_iterator = this;
  return *this;
}

DataLoader::Iterator::~Iterator() {
  keep_stats();
  leave_latest();
}

void DataLoader::Iterator::keep_stats() noexcept {
  if (!state_ || rec_.kept || (backend_ && yielded_ == 0)) return;
  rec_.kept = true;
  try {
    state_->epoch_stats.push_back(stats());
    if (state_->epoch_mode) {
      // What a batch cost this epoch, for the next one's choice of the pool or this thread.
      const EpochStats& e = state_->epoch_stats.back();
      double busy = 0;
      for (const auto& w : e.workers) busy += w.busy_s;
      state_->epoch_mode->ended(start_.inline_auto, static_cast<uint64_t>(e.batches), e.wall_s - e.first_batch_s,
                                busy, std::max(0.0, e.wall_s - e.next_s), e.sampler_s);
    }
  } catch (...) {
    // out of memory: the loader's history misses this epoch
  }
}

void DataLoader::Iterator::leave_latest() noexcept {
  if (!state_ || state_->latest_iterator != this) return;
  state_->latest_iterator = nullptr;
  // The loader keeps where its latest epoch stood (DataLoader::state_dict).
  state_->latest_plan_error.clear();
  try {
    if (resumable(*state_)) state_->latest_plan = plan();
  } catch (const std::exception& e) {
    // Nothing to resume from (a pool that failed, an epoch whose start is not known).
    state_->latest_plan.reset();
    state_->latest_plan_error = e.what();
  }
}

ResumePlan DataLoader::Iterator::plan() const {
  check_resumable(*state_, "DataLoader.state_dict()");
  if (start_.elastic && backend_)
    throw ValueError(
        "DataLoader.state_dict(): this epoch is an elastic checkpoint's stripe (merge_checkpoints), which a "
        "checkpoint cannot describe mid-way: save once it ended (the next epoch is the sampler's own), or merge the "
        "old ranks' checkpoints again to restart it");
  const int workers = state_->options.pool_workers();
  ResumePlan p;
  p.finished = !backend_;
  p.streams_at_start = start_.streams;
  p.base_seed_drawn = start_.base_seed_drawn;
  p.base_seed = start_.base_seed;
  p.pool_alive = workers > 0 && state_->options.persistent_workers;
  if (state_->iterable && backend_ && start_.stream_hooks) {
    stream_plan(p);
    return p;
  }
  if (state_->iterable && backend_) {
    // Replayed from its start on resume (iter_from): what it needs is how the epoch
    // began and how many results were taken.
    if (workers > 0 && !start_.iterable_rng)
      throw ValueError(
          "DataLoader.state_dict(): an IterableDataset's epoch is resumed by running it again from its start, which "
          "needs each worker's random stream as the epoch began; persistent workers' streams went on from an earlier "
          "epoch and were not recorded then: take the checkpoint between epochs (after an epoch ended: the next one "
          "resumes exactly), or in the loader's first epoch, or use persistent_workers=false");
    p.consumed = p.sampled = taken_;
    if (workers > 0) p.worker_rng = *start_.iterable_rng;
    add_check(p);
    return p;
  }
  EpochPosition pos = backend_ ? backend_->position() : ended_at_ ? *ended_at_ : EpochPosition{};
  if (!pos.exact)
    throw ValueError("DataLoader.state_dict(): prefetch_factor * num_workers is above 1023, more tasks in flight than "
                     "the workers' state pages record: lower prefetch_factor for a loader you checkpoint");
  if (!state_->options.in_order && !state_->iterable) {
    out_of_order_position(pos, p);
  } else {
    p.consumed = start_.consumed + pos.consumed;
    p.sampled = start_.consumed + std::max(pos.sent, start_.pending);
  }
  // A resumed epoch's sampler ran out in fast_forward if the checkpointed one had, before
  // this epoch asked it (without workers: at its end).
  p.exhausted = start_.exhausted || pos.exhausted;
  p.worker_rng = std::move(pos.worker_rng);
  // An epoch that ended without a position of its own (another epoch of its persistent
  // workers began first) knows no worker's state: one empty entry per worker, as
  // load_state_dict reads one per worker (they start as their Init leaves them).
  if (p.worker_rng.empty()) p.worker_rng.assign(static_cast<size_t>(workers), std::nullopt);
  if (state_->iterable) p.consumed = p.sampled = taken_;  // finished: its batches
  if (backend_) add_check(p);
  return p;
}

void DataLoader::Iterator::stream_plan(ResumePlan& p) const {
  // State hooks: each stream resumes from the state it began from, passing the results
  // taken of it (iter_from); the round robin goes on where it stood.
  const EpochPosition pos = backend_->position();  // waits for the workers' reports
  const int workers = state_->options.pool_workers();
  const std::string name = state_->iterable->handle().value_or(DatasetHandle{"IterableDataset", {}}).type;
  const size_t n = static_cast<size_t>(std::max(1, workers));
  if (pos.stream_start.size() != n || pos.stream_taken.size() != n)
    throw ValueError("DataLoader.state_dict(): the epoch ended without a position of its own (another epoch of its "
                     "workers began, or an error ended it): take the checkpoint while it runs, or after it ended");
  p.consumed = p.sampled = taken_;
  for (size_t w = 0; w < n; ++w) {
    const std::string who = workers > 0 ? "DataLoader worker " + std::to_string(w) : std::string("the loader");
    const std::optional<StreamStart>& start = pos.stream_start[w];
    if (!start)
      throw ValueError("DataLoader.state_dict(): " + who + " has not reported how its stream of the IterableDataset " +
                       name + " began (it did not run its first task of the epoch in time, or it died): take the "
                       "checkpoint once it runs");
    if (!start->state)
      throw ValueError("DataLoader.state_dict(): the IterableDataset " + name + " returned a state() in this process " +
                       "but not in " + who + "'s copy as its stream began: state() must return a value in every copy "
                       "or in none");
    p.stream_states.push_back(*start->state);
    const uint64_t before = w < start_.stream_taken_before.size() ? start_.stream_taken_before[w] : 0;
    p.stream_taken.push_back(before + pos.stream_taken[w]);
    if (workers > 0) p.worker_rng.push_back(start->rng);
  }
  p.stream_next = pos.stream_next;
  add_check(p);
}

void DataLoader::Iterator::out_of_order_position(const EpochPosition& pos, ResumePlan& p) const {
  // In the checkpointed epoch's numbering (this epoch may itself be a resumed one that
  // sent the tasks it had given out first and skipped the ones delivered): every task
  // below `consumed` was delivered, and those in `delivered_above`.
  const uint64_t P = start_.remapped ? start_.pending_original.size() : 0;
  const uint64_t base = start_.remapped ? start_.sampled : start_.consumed;  // this epoch's task P
  auto original = [&](uint64_t j) { return j < P ? start_.pending_original[j] : base + (j - P); };
  std::set<uint64_t> had(start_.delivered_above.begin(), start_.delivered_above.end());
  for (uint64_t j = 0; j < std::min<uint64_t>(pos.consumed, P); ++j) had.insert(original(j));
  for (uint64_t j : pos.delivered_above) had.insert(original(j));
  // This epoch's tasks P .. pos.consumed-1 were all delivered: one range of the original.
  const uint64_t tail_end = base + (pos.consumed > P ? pos.consumed - P : 0);
  uint64_t low = start_.consumed;
  while (true) {
    if (auto it = had.find(low); it != had.end()) {
      had.erase(it);
      ++low;
    } else if (low >= base && low < tail_end) {
      low = tail_end;
    } else {
      break;
    }
  }
  p.consumed = low;
  for (uint64_t x = std::max(low, base); x < tail_end; ++x) had.insert(x);  // a range above a hole
  for (uint64_t x : had)
    if (x > low) p.delivered_above.push_back(x);
  p.sampled = start_.remapped ? start_.sampled + (pos.sent > P ? pos.sent - P : 0)
                              : start_.consumed + std::max(pos.sent, start_.pending);
}

void DataLoader::Iterator::add_check(ResumePlan& p) const {
  p.sampler_type = type_name(state_->sampler.get());
  p.batch_sampler_type = type_name(state_->batch_sampler.get());
  if (!start_.hashes) return;
  p.check.hash = start_.hashes->at(p.sampled);
  if (!p.check.hash) return;  // not known (resumed from a checkpoint without hashes)
  p.check.marks = start_.hashes->marks(p.sampled);
  if (p.consumed > 0 && !p.check.at(p.consumed))
    if (std::optional<uint64_t> h = start_.hashes->at(p.consumed)) p.check.marks.emplace_back(p.consumed, *h);
}

Value DataLoader::Iterator::state_dict() const {
  ResumePlan p = plan();
  p.streams_now = save_streams(loader_streams(*state_));
  return encode_checkpoint(p, *state_);
}

std::optional<Value> DataLoader::Iterator::next() {
  if (!backend_) return std::nullopt;
  const auto t0 = std::chrono::steady_clock::now();
  struct Clock {  // time inside next(), also when it throws; per batch into the histogram
    double& total;
    DurationHistogram* wait;  // null: not a batch (the end), or LOADER_STATS=0
    std::chrono::steady_clock::time_point t0;
    ~Clock() {
      const auto dt = std::chrono::steady_clock::now() - t0;
      total += std::chrono::duration<double>(dt).count();
      if (wait) wait->add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(dt).count()));
    }
  } clock{next_s_, stats_recording() ? &rec_.wait : nullptr, t0};
  std::optional<Value> batch;
  try {
    batch = backend_->next();
  } catch (...) {
    ++taken_;  // a batch that failed was delivered too (as its error)
    if (state_->iterable && start_.hashes) start_.hashes->add(result_hash(nullptr));
    throw;
  }
  if (!batch) {
    clock.wait = nullptr;
    rec_.ended_wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_.began).count();
    backend_->stats(ended_);
    if (resumable(*state_)) {
      try {
        ended_at_ = std::make_unique<EpochPosition>(backend_->position());  // for a checkpoint after the end
      } catch (const std::exception&) {
        ended_at_.reset();  // a checkpoint after this epoch then says the position is not known
      }
    }
    backend_.reset();  // ends the epoch: workers released now, not at destruction
    keep_stats();
    return std::nullopt;
  }
  ++taken_;
  if (yielded_ == 0)
    rec_.first_batch_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_.began).count();
  ++yielded_;
  rec_.samples += batch_length(*batch, state_->auto_collation);
  if (state_->iterable && start_.hashes) start_.hashes->add(result_hash(&*batch));
  if (state_->iterable && len_called_ && yielded_ > *len_called_) {
    warn("Length of IterableDataset " + state_->iterable->handle().value_or(DatasetHandle{"IterableDataset", {}}).type +
         " was reported to be " + std::to_string(*len_called_) +
         " (when accessing len(dataloader)), but " + std::to_string(yielded_) +
         " samples have been fetched. For multiprocessing data-loading, this could be caused by not "
         "properly configuring the IterableDataset replica at each worker. Please see "
         "https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset for examples.");
  }
  return batch;
}

std::vector<int> DataLoader::Iterator::worker_pids() {
  return backend_ ? backend_->worker_pids() : std::vector<int>{};
}

EpochStats DataLoader::Iterator::stats() const {
  EpochStats out = ended_;
  if (backend_) backend_->stats(out);
  out.batches = yielded_;
  out.next_s = next_s_;
  out.samples = rec_.samples;
  out.first_batch_s = rec_.first_batch_s;
  out.wait = rec_.wait;
  out.wall_s = rec_.ended_wall_s >= 0
                   ? rec_.ended_wall_s
                   : std::chrono::duration<double>(std::chrono::steady_clock::now() - start_.began).count();
  out.previous_minor_faults = rec_.previous_faults;
  if (start_.autotuned) {
    out.autotuned = true;
    if (start_.inline_auto) out.workers_now = out.prefetch_now = 0;
    if (start_.mode_decision) out.autotune.insert(out.autotune.begin(), *start_.mode_decision);
  }
  return out;
}

LoaderStats DataLoader::stats() const {
  LoaderStats out;
  out.epochs = state_->epoch_stats;
  for (const auto& e : out.epochs) out.total.add(e);
  return out;
}

DataLoader::RangeIterator::RangeIterator(std::shared_ptr<Iterator> it) : it_(std::move(it)) {
  current_ = it_->next();
}

DataLoader::RangeIterator& DataLoader::RangeIterator::operator++() {
  current_ = it_->next();
  return *this;
}

DataLoader::RangeIterator DataLoader::begin() {
  return RangeIterator(std::make_shared<Iterator>(iter()));
}

Value merge_checkpoints(const std::vector<Value>& checkpoints) { return merge_elastic(checkpoints); }

}  // namespace loader
