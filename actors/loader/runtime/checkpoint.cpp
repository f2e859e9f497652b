#include "loader/runtime/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <sstream>
#include <optional>
#include <set>

#include "loader/error.h"
#include "loader/generator.h"
#include "loader/samplers.h"
#include "loader/tensor.h"

namespace loader {

namespace {

// Format 2 (written): 'format' 2, every random state a 1-D uint8 tensor, nothing but
// ints, bools, strings, None, lists and tensors, so that torch 1.13's
// torch.load(weights_only=True) opens it (its unpickler has no bytes, _codecs.encode or
// float).  Format 1 (read too): 'format' the string below, the states Python bytes.
constexpr int64_t kFormat = 2;
constexpr const char* kFormat1 = "loader.DataLoader.state_dict/1";

RandomStream stream_of(Generator* g) {
  return RandomStream{g, [g] { return g->state(); }, [g](const std::string& b) { return g->set_state(b); }};
}

[[noreturn]] void bad(const std::string& what) {
  throw ValueError("DataLoader.load_state_dict: " + what);
}

const Value& field(const Value& state, const std::string& key) {
  if (!state.contains(key))
    bad("the checkpoint has no '" + key + "' entry: pass a dict made by DataLoader::state_dict() (or "
        "Iterator::state_dict()), saved and loaded whole");
  return state.at(key);
}

int64_t int_of(const Value& state, const std::string& key) {
  const Value& v = field(state, key);
  if (!v.is_int()) bad("'" + key + "' must be an int, got " + v.repr());
  return v.to_int();
}

uint64_t count_of(const Value& state, const std::string& key) {
  const int64_t v = int_of(state, key);
  if (v < 0) bad("'" + key + "' must be a non-negative int, got " + std::to_string(v));
  return static_cast<uint64_t>(v);
}

bool flag_of(const Value& state, const std::string& key) {
  const Value& v = field(state, key);
  if (!v.is_bool()) bad("'" + key + "' must be a bool, got " + v.repr());
  return v.to_bool();
}

/// A random state as the checkpoint holds it: a 1-D uint8 tensor (format 2), as
/// torch.Generator.get_state() returns one.
Value state_value(const std::string& bytes) {
  Tensor t = Tensor::empty({static_cast<int64_t>(bytes.size())}, DType::UInt8);
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return Value(std::move(t));
}

/// The bytes of a random state: a 1-D uint8 tensor (format 2) or bytes (format 1, also
/// accepted in format 2); nullopt for anything else.
std::optional<std::string> state_bytes(const Value& v) {
  if (v.is_bytes()) return v.to_string();
  if (!v.is_tensor()) return std::nullopt;
  const Tensor& t = v.to_tensor();
  if (!t.defined() || t.dtype() != DType::UInt8 || t.dim() != 1) return std::nullopt;
  std::string out(static_cast<size_t>(t.numel()), '\0');
  const auto* p = static_cast<const unsigned char*>(t.data_ptr());
  const int64_t stride = t.stride(0);
  for (int64_t i = 0; i < t.numel(); ++i) out[static_cast<size_t>(i)] = static_cast<char>(p[i * stride]);
  return out;
}

std::vector<std::string> state_list(const Value& state, const std::string& key) {
  const Value& v = field(state, key);
  if (!v.is_list()) bad("'" + key + "' must be a list of random states (1-D uint8 tensors), got " + v.repr().substr(0, 80));
  std::vector<std::string> out;
  for (const Value& item : v.items()) {
    std::optional<std::string> b = state_bytes(item);
    if (!b)
      bad("'" + key + "' must be a list of random states (1-D uint8 tensors), and holds " + item.repr().substr(0, 80));
    out.push_back(std::move(*b));
  }
  return out;
}

/// What must match between the checkpointed loader and the one resuming it, beyond the
/// options checked by name: -1 where the loader has no such figure.
struct Shape {
  int64_t dataset_size = -1;
  int64_t batch_size = -1;
  bool drop_last = false;
  int64_t batches_per_epoch = -1;
};

Shape shape_of(const LoaderState& s) {
  Shape out;
  if (s.dataset) out.dataset_size = s.dataset->size();
  if (s.options.batch_size) out.batch_size = *s.options.batch_size;
  out.drop_last = s.options.drop_last;
  std::optional<int64_t> n = s.batch_sampler ? s.batch_sampler->size() : s.sampler ? s.sampler->size() : std::nullopt;
  if (n) out.batches_per_epoch = *n;
  return out;
}

Value int_list(const std::vector<uint64_t>& items) {
  std::vector<Value> out;
  for (uint64_t x : items) out.push_back(Value(static_cast<int64_t>(x)));
  return Value::list(std::move(out));
}

Value state_values(const std::vector<std::string>& items) {
  std::vector<Value> out;
  for (const auto& b : items) out.push_back(state_value(b));
  return Value::list(std::move(out));
}

/// The IterableDataset state hooks' entries of a checkpoint (absent in older ones, None
/// without hooks) into `p`, and the refusals of a checkpoint whose hooks this loader's
/// dataset does not match.  After the rest of `p` was read (same workers: checked).
void decode_streams(const Value& state, const LoaderState& loader, uint64_t workers, ResumePlan& p) {
  const bool theirs = state.contains("stream_states") && !state.at("stream_states").is_none();
  const size_t n = static_cast<size_t>(std::max<uint64_t>(1, workers));
  if (theirs) {
    const Value& v = state.at("stream_states");
    if (!v.is_list() || v.size() != n)
      bad("'stream_states' must be a list of " + std::to_string(n) + " states (1-D uint8 tensors), got " +
          v.repr().substr(0, 80) + ": the checkpoint is damaged");
    for (const Value& item : v.items()) {
      std::optional<std::string> b = state_bytes(item);
      if (!b) bad("an entry of 'stream_states' is not a 1-D uint8 tensor (" + item.repr().substr(0, 40) +
                  "): the checkpoint is damaged");
      p.stream_states.push_back(std::move(*b));
    }
    const Value& taken = field(state, "stream_taken");
    if (!taken.is_list() || taken.size() != n)
      bad("'stream_taken' must be a list of " + std::to_string(n) + " ints, got " + taken.repr().substr(0, 80) +
          ": the checkpoint is damaged");
    uint64_t total = 0;
    for (const Value& x : taken.items()) {
      if (!x.is_int() || x.to_int() < 0)
        bad("'stream_taken' must hold non-negative ints, and holds " + x.repr().substr(0, 40) +
            ": the checkpoint is damaged");
      p.stream_taken.push_back(static_cast<uint64_t>(x.to_int()));
      total += p.stream_taken.back();
    }
    if (total != p.consumed)
      bad("'stream_taken' adds up to " + std::to_string(total) + " results, 'batches_consumed' is " +
          std::to_string(p.consumed) + ": the checkpoint is damaged");
    const int64_t next = int_of(state, "stream_next");
    if (next < 0 || static_cast<uint64_t>(next) >= n)
      bad("'stream_next' must be a stream between 0 and " + std::to_string(n - 1) + ", got " + std::to_string(next) +
          ": the checkpoint is damaged");
    p.stream_next = static_cast<int>(next);
    if (p.finished) bad("a finished epoch's checkpoint has 'stream_states': the checkpoint is damaged");
    for (const auto& rng : p.worker_rng)
      if (!rng) bad("'worker_rng' must hold each worker's generator state as its stream began (it has None): the "
                    "checkpoint is damaged");
  }
  if (!loader.iterable || p.finished) return;
  const bool mine = loader.iterable->state().has_value();
  const std::string name = loader.iterable->handle().value_or(DatasetHandle{"IterableDataset", {}}).type;
  if (theirs && !mine)
    bad("the checkpoint holds the state each stream of its IterableDataset began from (the dataset's state hooks), "
        "but this loader's dataset " + name + " has no state hooks (its state() returns nothing): resume it with the "
        "dataset checkpointed, whose state() and load_state() carry its streams");
  if (!theirs && mine)
    bad("the checkpoint was taken without state hooks (its IterableDataset's epoch is resumed by replaying its "
        "streams from their start), but this loader's dataset " + name + " has them (its state() returns a state): "
        "resume it with the dataset as it was checkpointed (without state()), or take the checkpoint again with "
        "this one");
}

}  // namespace

std::vector<RandomStream> loader_streams(const LoaderState& state) {
  std::vector<RandomStream> out;
  std::set<const void*> seen;
  auto add = [&](RandomStream s) {
    if (s.identity && seen.insert(s.identity).second) out.push_back(std::move(s));
  };
  add(stream_of(&default_generator()));
  if (state.options.generator) add(stream_of(state.options.generator.get()));
  if (state.batch_sampler)
    for (auto& s : state.batch_sampler->random_streams()) add(std::move(s));
  if (state.sampler)
    for (auto& s : state.sampler->random_streams()) add(std::move(s));
  return out;
}

std::vector<std::string> save_streams(const std::vector<RandomStream>& streams) {
  std::vector<std::string> out;
  out.reserve(streams.size());
  for (const auto& s : streams) out.push_back(s.save());
  return out;
}

void load_streams(const std::vector<RandomStream>& streams, const std::vector<std::string>& states,
                  const std::string& what, bool settings_too) {
  if (states.size() != streams.size())
    bad("the checkpoint saved " + std::to_string(states.size()) + " random streams for " + what + ", this loader has " +
        std::to_string(streams.size()) +
        " (the default generator, the loader's generator, its samplers' generators): build the loader with the same "
        "generator and sampler options as the one checkpointed");
  // Checked first, loaded after: a bad checkpoint changes no stream.
  std::vector<std::string> before = save_streams(streams);
  for (size_t i = 0; i < streams.size(); ++i) {
    bool loaded = false;
    std::string why;
    try {
      loaded = streams[i].load(states[i]);
    } catch (const ValueError& e) {
      why = e.what();  // the stream says what differs (a sampler's options)
    }
    if (!loaded) {
      for (size_t j = 0; j < i; ++j) streams[j].load(before[j]);
      if (!why.empty()) bad("random stream " + std::to_string(i) + " of " + what + ": " + why);
      bad("random stream " + std::to_string(i) + " of " + what + " is not a state of this loader's stream " +
          std::to_string(i) + " (" + std::to_string(states[i].size()) +
          " bytes): the checkpoint is damaged or comes from a loader with other generators");
    }
  }
  if (!settings_too)
    for (size_t i = 0; i < streams.size(); ++i)
      if (streams[i].per_epoch_setting) streams[i].load(before[i]);
}

void check_streams(const std::vector<RandomStream>& streams, const std::vector<std::string>& states,
                   const std::string& what) {
  const std::vector<std::string> before = save_streams(streams);
  load_streams(streams, states, what);
  for (size_t i = 0; i < streams.size(); ++i) streams[i].load(before[i]);
}

Value encode_checkpoint(const ResumePlan& p, const LoaderState& loader) {
  const DataLoaderOptions& o = loader.options;
  const Shape shape = shape_of(loader);
  std::vector<Value> workers;
  for (const auto& w : p.worker_rng) workers.push_back(w ? state_value(*w) : Value());
  std::vector<Value> marks;
  for (const auto& [count, hash] : p.check.marks)
    marks.push_back(Value::list({Value(static_cast<int64_t>(count)), Value(static_cast<int64_t>(hash))}));
  return Value::dict({
      {"format", Value(kFormat)},
      {"num_workers", Value(static_cast<int64_t>(o.pool_workers()))},
      {"persistent_workers", Value(o.persistent_workers)},
      // How the workers' generators were seeded: a per-task epoch resumes byte for byte
      // into any num_workers, a per-worker one only into the same workers.
      {"worker_seeding", Value(std::string(worker_seeding_name(o.worker_seeding)))},
      {"dataset_size", Value(shape.dataset_size)},
      {"batch_size", Value(shape.batch_size)},
      {"drop_last", Value(shape.drop_last)},
      {"batches_per_epoch", Value(shape.batches_per_epoch)},
      {"finished", Value(p.finished)},
      {"batches_consumed", Value(static_cast<int64_t>(p.consumed))},
      {"batches_sampled", Value(static_cast<int64_t>(p.sampled))},
      {"sampler_exhausted", Value(p.exhausted)},
      {"batches_delivered_above", int_list(p.delivered_above)},
      {"streams_at_start", state_values(p.streams_at_start)},
      {"streams_now", state_values(p.streams_now)},
      {"base_seed_drawn", Value(p.base_seed_drawn)},
      // As an int64 bit pattern: pt files hold signed ints.
      {"base_seed", Value(static_cast<int64_t>(p.base_seed))},
      {"pool_alive", Value(p.pool_alive)},
      // IterableDataset state hooks (an unfinished epoch; None without them): per stream
      // the dataset's state() as it began (uint8 tensors, as the random states), the
      // results taken of it, and the stream whose result came next; worker_rng then holds
      // each worker's generator state as its stream began.
      {"stream_states", p.stream_states.empty() ? Value() : state_values(p.stream_states)},
      {"stream_taken", int_list(p.stream_taken)},
      {"stream_next", Value(static_cast<int64_t>(p.stream_next))},
      {"worker_rng", Value::list(std::move(workers))},
      // Verified replay: what the epoch handed out (index batches; an IterableDataset's
      // results), hashes as int64 bit patterns; None where not known.
      {"sampler_type", Value(p.sampler_type)},
      {"batch_sampler_type", Value(p.batch_sampler_type)},
      {"batches_hash", p.check.hash ? Value(static_cast<int64_t>(*p.check.hash)) : Value()},
      {"batches_hash_at", Value::list(std::move(marks))},
  });
}

namespace {

/// 'format': this loader's format, or format 1.
void check_format(const Value& state) {
  if (!state.is_dict()) bad("expected the dict DataLoader::state_dict() returned, got " + state.repr().substr(0, 80));
  const Value& format = field(state, "format");
  const bool format1 = format.is_string() && format.to_string() == kFormat1;
  if (!format1 && !(format.is_int() && format.to_int() == kFormat))
    bad("'format' is " + format.repr().substr(0, 80) + ", expected " + std::to_string(kFormat) + " (or format 1's '" +
        kFormat1 + "'): not a checkpoint of this loader's version");
}

/// 'num_workers', 'persistent_workers' against this loader's (`strict`: both the same;
/// an iterable dataset: always).  Returns the checkpoint's worker count; `same_workers`:
/// both settings are this loader's.
uint64_t check_workers(const Value& state, const DataLoaderOptions& o, bool iterable, bool strict, bool& same_workers) {
  const uint64_t workers = count_of(state, "num_workers");
  const bool persistent = flag_of(state, "persistent_workers");
  same_workers = workers == static_cast<uint64_t>(o.pool_workers()) && persistent == o.persistent_workers;
  if (iterable && !same_workers)
    bad("the checkpoint is of a loader with num_workers=" + std::to_string(workers) + std::string(", persistent_workers=") +
        (persistent ? "true" : "false") + ", this one has num_workers=" + std::to_string(o.pool_workers()) +
        ", persistent_workers=" + (o.persistent_workers ? "true" : "false") +
        ": an IterableDataset's epoch is resumed by running it again, and what its workers yield depends on "
        "these settings: use the ones of the loader checkpointed");
  if (strict && workers != static_cast<uint64_t>(o.pool_workers()))
    bad("the checkpoint is of a loader with num_workers=" + std::to_string(workers) + ", this one has num_workers=" +
        std::to_string(o.pool_workers()) +
        (o.worker_seeding == WorkerSeeding::PerTask
             ? ": load_state_dict(state, /*strict=*/false) resumes it into this loader (seeded per task: the same "
               "batches, random draws included), or use the same num_workers"
             : ": each worker's random stream is resumed, so use the same num_workers as the loader checkpointed (or "
               "load_state_dict(state, /*strict=*/false): the same batches of indices, other random draws in the "
               "workers)"));
  if (strict && persistent != o.persistent_workers)
    bad(std::string("the checkpoint is of a loader with persistent_workers=") +
        (o.persistent_workers ? "false" : "true") + ", this one has persistent_workers=" +
        (o.persistent_workers ? "true" : "false") +
        ": use the same setting as the loader checkpointed (or load_state_dict(state, /*strict=*/false))");
  return workers;
}

/// 'worker_seeding' against this loader's.
void check_seeding(const Value& state, const DataLoaderOptions& o) {
  // Absent (format 1, earlier format 2): the loader seeded per worker, PyTorch's way.
  std::string theirs_seeding = "per-worker";
  if (state.contains("worker_seeding")) {
    const Value& v = state.at("worker_seeding");
    if (!v.is_string())
      bad("'worker_seeding' must be a string (\"per-worker\" or \"per-task\"), got " + v.repr().substr(0, 80) +
          ": the checkpoint is damaged");
    theirs_seeding = v.to_string();
  }
  if (theirs_seeding != worker_seeding_name(o.worker_seeding))
    bad("the checkpoint is of a loader with worker_seeding=" + theirs_seeding + ", this one has worker_seeding=" +
        worker_seeding_name(o.worker_seeding) +
        ": the workers' random draws of the rest of the epoch follow the seeding, so set "
        "DataLoaderOptions::worker_seeding as the loader checkpointed did");
}

/// The dataset's size and the batching against this loader's.
void check_shape(const Value& state, const Shape& shape) {
  auto same = [&](const std::string& key, int64_t mine, const std::string& what) {
    const int64_t theirs = int_of(state, key);
    if (theirs != mine)
      bad("the checkpoint is of a loader with " + what + " " + std::to_string(theirs) + ", this one has " +
          std::to_string(mine) + " (-1: none): resume with a loader over the same dataset, sampler and batching");
  };
  same("dataset_size", shape.dataset_size, "a dataset of size");
  same("batch_size", shape.batch_size, "batch_size");
  if (flag_of(state, "drop_last") != shape.drop_last)
    bad(std::string("the checkpoint is of a loader with drop_last=") + (shape.drop_last ? "false" : "true") +
        ": resume with the same drop_last");
  same("batches_per_epoch", shape.batches_per_epoch, "batches per epoch (len(loader))");
}

/// Where the epoch stood: finished, consumed, sampled, exhausted, delivered above.
void decode_position(const Value& state, const Shape& shape, bool in_order, ResumePlan& p) {
  p.finished = flag_of(state, "finished");
  p.consumed = count_of(state, "batches_consumed");
  p.sampled = count_of(state, "batches_sampled");
  if (p.sampled < p.consumed)
    bad("'batches_sampled' (" + std::to_string(p.sampled) + ") is below 'batches_consumed' (" +
        std::to_string(p.consumed) + "): the checkpoint is damaged");
  if (shape.batches_per_epoch >= 0 && p.sampled > static_cast<uint64_t>(shape.batches_per_epoch))
    bad("'batches_sampled' (" + std::to_string(p.sampled) + ") is above the " +
        std::to_string(shape.batches_per_epoch) + " batches of an epoch: the checkpoint is damaged");
  // Format 1 has no 'sampler_exhausted' (its loaders did not record it): not run out.
  if (state.contains("sampler_exhausted")) p.exhausted = flag_of(state, "sampler_exhausted");
  // An in_order=false epoch: the batches above 'batches_consumed' the application had
  // (absent in older checkpoints: none).
  if (state.contains("batches_delivered_above")) {
    const Value& v = field(state, "batches_delivered_above");
    if (!v.is_list()) bad("'batches_delivered_above' must be a list of ints, got " + v.repr().substr(0, 80));
    for (const Value& x : v.items()) {
      if (!x.is_int() || x.to_int() <= static_cast<int64_t>(p.consumed) || x.to_int() >= static_cast<int64_t>(p.sampled) ||
          (!p.delivered_above.empty() && static_cast<uint64_t>(x.to_int()) <= p.delivered_above.back()))
        bad("'batches_delivered_above' must list, ascending, batches between 'batches_consumed' (" +
            std::to_string(p.consumed) + ") and 'batches_sampled' (" + std::to_string(p.sampled) + "), and holds " +
            x.repr().substr(0, 40) + ": the checkpoint is damaged");
      p.delivered_above.push_back(static_cast<uint64_t>(x.to_int()));
    }
    if (!p.delivered_above.empty() && in_order)
      bad("the checkpoint is of a loader with in_order=false (batches after the first one not delivered were "
          "delivered), this loader has in_order=true: load it into a loader with in_order=false");
  }
}

/// The random streams, base_seed and each worker's generator state (`workers` entries).
void decode_random(const Value& state, size_t streams, uint64_t workers, ResumePlan& p) {
  p.streams_at_start = state_list(state, "streams_at_start");
  p.streams_now = state_list(state, "streams_now");
  for (const auto* list : {&p.streams_at_start, &p.streams_now})
    if (list->size() != streams)
      bad("the checkpoint saved " + std::to_string(list->size()) + " random streams, this loader has " +
          std::to_string(streams) +
          " (the default generator, the loader's generator, its samplers' generators): build the loader with the "
          "same generator and sampler options as the one checkpointed");
  p.base_seed_drawn = flag_of(state, "base_seed_drawn");
  p.base_seed = static_cast<uint64_t>(int_of(state, "base_seed"));
  p.pool_alive = flag_of(state, "pool_alive");
  const Value& rng = field(state, "worker_rng");
  if (!rng.is_list() || rng.size() != workers)
    bad("'worker_rng' must be a list of " + std::to_string(workers) + " entries (uint8 tensors or None), got " +
        rng.repr().substr(0, 80));
  for (const Value& w : rng.items()) {
    std::optional<std::string> b = w.is_none() ? std::nullopt : state_bytes(w);
    if (w.is_none()) {
      p.worker_rng.emplace_back();
    } else if (b && b->size() == Generator::kStateBytes && Generator().set_state(*b)) {
      p.worker_rng.emplace_back(std::move(*b));
    } else {
      bad("an entry of 'worker_rng' is not a worker's generator state (" + w.repr().substr(0, 40) +
          "): the checkpoint is damaged");
    }
  }
}

/// The verified replay's records (optional: format 1 and earlier format 2 checkpoints
/// have none of these, and resume unverified).
void decode_replay_check(const Value& state, ResumePlan& p) {
  auto text_of = [&](const std::string& key) {
    if (!state.contains(key)) return std::string();
    const Value& v = state.at(key);
    if (!v.is_string()) bad("'" + key + "' must be a string (a sampler's type), got " + v.repr().substr(0, 80));
    return v.to_string();
  };
  p.sampler_type = text_of("sampler_type");
  p.batch_sampler_type = text_of("batch_sampler_type");
  if (state.contains("batches_hash") && !state.at("batches_hash").is_none()) {
    p.check.hash = static_cast<uint64_t>(int_of(state, "batches_hash"));
    const Value& marks = field(state, "batches_hash_at");
    const std::string expected = "'batches_hash_at' must be a list of [count, hash] pairs of ints";
    if (!marks.is_list()) bad(expected + ", got " + marks.repr().substr(0, 80));
    for (const Value& m : marks.items()) {
      if (!m.is_sequence() || m.size() != 2 || !m[0].is_int() || !m[1].is_int() || m[0].to_int() < 0 ||
          static_cast<uint64_t>(m[0].to_int()) > p.sampled)
        bad(expected + " (counts up to 'batches_sampled'), and holds " + m.repr().substr(0, 80) +
            ": the checkpoint is damaged");
      p.check.marks.emplace_back(static_cast<uint64_t>(m[0].to_int()), static_cast<uint64_t>(m[1].to_int()));
    }
  }
}

}  // namespace

ResumePlan decode_checkpoint(const Value& state, const LoaderState& loader, size_t streams, bool strict) {
  const DataLoaderOptions& o = loader.options;
  check_format(state);
  ResumePlan p;
  const uint64_t workers = check_workers(state, o, loader.iterable != nullptr, strict, p.same_workers);
  check_seeding(state, o);
  const Shape shape = shape_of(loader);
  check_shape(state, shape);
  decode_position(state, shape, o.in_order, p);
  decode_random(state, streams, workers, p);
  decode_replay_check(state, p);
  decode_streams(state, loader, workers, p);
  // Other workers than the checkpointed ones: they start as their Init leaves them.
  if (!p.same_workers) p.worker_rng.clear();
  return p;
}

Value copy_checkpoint(const Value& state) {
  if (state.is_sequence()) {
    std::vector<Value> items;
    items.reserve(state.size());
    for (const Value& item : state.items()) items.push_back(copy_checkpoint(item));
    if (!state.field_names().empty())
      return Value::namedtuple(state.type_name(), state.field_names(), std::move(items));
    return state.is_list() ? Value::list(std::move(items), state.type_name())
                           : Value::tuple(std::move(items), state.type_name());
  }
  if (state.is_dict()) {
    std::vector<std::pair<Value, Value>> items;
    items.reserve(state.size());
    for (const auto& [key, value] : state.dict_items())
      items.emplace_back(copy_checkpoint(key), copy_checkpoint(value));
    return Value::dict(std::move(items), state.type_name());
  }
  // A tensor (a random state) is copied too: the caller may write into its bytes.
  if (state.is_tensor() && state.to_tensor().defined()) return Value(state.to_tensor().clone());
  return state;  // held inline
}

// ------------------------------------------------------------------ elastic ranks
namespace {

constexpr int64_t kElastic = 1;  // the 'elastic' entry of a merged checkpoint: its version
constexpr const char* kDistributedTag = "DistributedSampler/1";

/// DistributedSampler's share of n samples among `replicas` (its num_samples).
int64_t share_of(int64_t n, int64_t replicas, bool drop_last) {
  if (drop_last && n % replicas != 0) return n / replicas;  // ceil((n - W) / W), n not a multiple
  return (n + replicas - 1) / replicas;
}

/// One rank's checkpoint as merge_checkpoints reads it.
struct RankCheckpoint {
  int64_t replicas = 0, rank = 0, seed = 0, n = 0, epoch = 0;
  bool shuffle = false, sampler_drop_last = false;
  int64_t dataset_size = 0, batch_size = -1;
  bool drop_last = false;
  int64_t batches_consumed = 0;
};

RankCheckpoint read_rank(const Value& state, size_t i) {
  const std::string where = "merge_checkpoints: checkpoint " + std::to_string(i) + " ";
  auto fail = [&](const std::string& what) -> void { throw ValueError(where + what); };
  if (!state.is_dict()) fail("is not a dict made by DataLoader::state_dict(): got " + state.repr().substr(0, 80));
  if (state.contains("elastic"))
    fail("is itself merged (an elastic checkpoint): merge the old ranks' own checkpoints, each once");
  auto get = [&](const std::string& key) -> const Value& {
    if (!state.contains(key))
      fail("has no '" + key + "' entry: pass each rank's DataLoader::state_dict() (format 2), saved and loaded whole");
    return state.at(key);
  };
  auto integer = [&](const std::string& key) {
    const Value& v = get(key);
    if (!v.is_int()) fail("has '" + key + "' " + v.repr().substr(0, 40) + ", not an int: the checkpoint is damaged");
    return v.to_int();
  };
  auto flag = [&](const std::string& key) {
    const Value& v = get(key);
    if (!v.is_bool()) fail("has '" + key + "' " + v.repr().substr(0, 40) + ", not a bool: the checkpoint is damaged");
    return v.to_bool();
  };
  const Value& format = get("format");
  if (!(format.is_int() && format.to_int() == kFormat))
    fail("has 'format' " + format.repr().substr(0, 40) + ", expected " + std::to_string(kFormat) +
         ": save the ranks' checkpoints with this loader's version");
  RankCheckpoint r;
  r.dataset_size = integer("dataset_size");
  r.batch_size = integer("batch_size");
  r.drop_last = flag("drop_last");
  r.batches_consumed = integer("batches_consumed");
  if (r.batches_consumed < 0) fail("has a negative 'batches_consumed': the checkpoint is damaged");
  if (state.contains("batch_sampler_type")) {
    const Value& t = state.at("batch_sampler_type");
    if (t.is_string() && !t.to_string().empty() && t.to_string() != "loader::BatchSampler")
      fail("is of a loader with the batch sampler " + t.to_string() +
           ": the samples a rank consumed are known from its count of batches only with the loader's own "
           "BatchSampler (batch_size and drop_last options)");
  }
  // The DistributedSampler's state names its settings and the epoch (samplers.cpp).
  const Value& streams = get("streams_at_start");
  bool found = false;
  if (streams.is_list())
    for (const Value& item : streams.items()) {
      std::optional<std::string> b = state_bytes(item);
      if (!b || b->rfind(std::string(kDistributedTag) + " ", 0) != 0) continue;
      std::istringstream in(*b);
      std::string tag;
      long long replicas = 0, rank = 0, seed = 0, n = 0, epoch = 0;
      int shuffle = -1, dl = -1;
      if (!(in >> tag >> replicas >> rank >> seed >> shuffle >> dl >> n >> epoch) || replicas <= 0 || rank < 0 ||
          rank >= replicas || n < 0)
        fail("has a DistributedSampler state that does not parse ('" + b->substr(0, 80) + "'): the checkpoint is damaged");
      r.replicas = replicas, r.rank = rank, r.seed = seed, r.n = n, r.epoch = epoch;
      r.shuffle = shuffle == 1, r.sampler_drop_last = dl == 1;
      found = true;
      break;
    }
  if (!found)
    fail("has no DistributedSampler among its random streams: merge_checkpoints merges the checkpoints of loaders "
         "whose sampler is a DistributedSampler");
  if (r.n != r.dataset_size)
    fail("has a DistributedSampler over " + std::to_string(r.n) + " samples and a dataset of " +
         std::to_string(r.dataset_size) + ": the checkpoint is damaged");
  return r;
}

}  // namespace

std::vector<int64_t> elastic_remaining(const ElasticEpoch& e) {
  const int64_t n = e.dataset_size, w = e.num_replicas;
  const int64_t total = share_of(n, w, e.sampler_drop_last) * w;
  std::vector<int64_t> order;
  if (e.shuffle) {
    Generator g(static_cast<uint64_t>(e.seed) + static_cast<uint64_t>(e.epoch));  // as DistributedSampler::iter
    order = randperm(n, g);
  } else {
    order.resize(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  std::vector<char> taken(static_cast<size_t>(n), 0);
  for (int64_t r = 0; r < w; ++r)
    for (int64_t k = 0; k < e.consumed[static_cast<size_t>(r)]; ++k) {
      const int64_t p = r + k * w;  // position in the padded order; padding repeats from the start
      taken[static_cast<size_t>(order[static_cast<size_t>(p < n ? p : (p - n) % n)])] = 1;
    }
  std::vector<int64_t> out;
  for (int64_t p = 0; p < std::min(total, n); ++p)
    if (!taken[static_cast<size_t>(order[static_cast<size_t>(p)])]) out.push_back(order[static_cast<size_t>(p)]);
  return out;
}

std::vector<int64_t> elastic_stripe(const std::vector<int64_t>& remaining, int64_t replicas, int64_t rank,
                                    bool drop_last) {
  const int64_t m = static_cast<int64_t>(remaining.size());
  std::vector<int64_t> out;
  if (m == 0) return out;
  const int64_t total = share_of(m, replicas, drop_last) * replicas;
  for (int64_t i = rank; i < total; i += replicas) out.push_back(remaining[static_cast<size_t>(i < m ? i : (i - m) % m)]);
  return out;
}

Value merge_elastic(const std::vector<Value>& checkpoints) {
  if (checkpoints.empty())
    throw ValueError("merge_checkpoints: no checkpoints given: pass the DataLoader::state_dict() of every rank of one "
                     "DistributedSampler epoch (one is enough when all ranks consumed the same number of batches)");
  std::vector<RankCheckpoint> ranks;
  for (size_t i = 0; i < checkpoints.size(); ++i) ranks.push_back(read_rank(checkpoints[i], i));
  const RankCheckpoint& first = ranks[0];
  auto differs = [&](size_t i, const std::string& what, const std::string& mine, const std::string& theirs) {
    throw ValueError("merge_checkpoints: checkpoint " + std::to_string(i) + " (rank " + std::to_string(ranks[i].rank) +
                     ") has " + what + " " + mine + ", checkpoint 0 (rank " + std::to_string(first.rank) + ") has " +
                     theirs + ": merge the checkpoints that the ranks of one run saved in the same epoch");
  };
  auto text = [](int64_t v) { return std::to_string(v); };
  auto yes = [](bool v) { return std::string(v ? "true" : "false"); };
  std::map<int64_t, size_t> by_rank;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankCheckpoint& r = ranks[i];
    if (r.replicas != first.replicas) differs(i, "num_replicas", text(r.replicas), text(first.replicas));
    if (r.epoch != first.epoch) differs(i, "epoch", text(r.epoch), text(first.epoch));
    if (r.seed != first.seed) differs(i, "seed", text(r.seed), text(first.seed));
    if (r.shuffle != first.shuffle) differs(i, "shuffle", yes(r.shuffle), yes(first.shuffle));
    if (r.sampler_drop_last != first.sampler_drop_last)
      differs(i, "the DistributedSampler's drop_last", yes(r.sampler_drop_last), yes(first.sampler_drop_last));
    if (r.dataset_size != first.dataset_size) differs(i, "dataset_size", text(r.dataset_size), text(first.dataset_size));
    if (r.batch_size != first.batch_size) differs(i, "batch_size", text(r.batch_size), text(first.batch_size));
    if (r.drop_last != first.drop_last) differs(i, "the loader's drop_last", yes(r.drop_last), yes(first.drop_last));
    auto [at, fresh] = by_rank.emplace(r.rank, i);
    if (!fresh)
      throw ValueError("merge_checkpoints: checkpoints " + std::to_string(at->second) + " and " + std::to_string(i) +
                       " are both of rank " + std::to_string(r.rank) + ": pass each rank's checkpoint once");
  }
  ElasticEpoch e;
  e.dataset_size = first.dataset_size;
  e.batch_size = first.batch_size;
  e.drop_last = first.drop_last;
  e.seed = first.seed;
  e.epoch = first.epoch;
  e.shuffle = first.shuffle;
  e.sampler_drop_last = first.sampler_drop_last;
  e.num_replicas = first.replicas;
  const int64_t share = share_of(e.dataset_size, e.num_replicas, e.sampler_drop_last);
  const int64_t per_batch = e.batch_size > 0 ? e.batch_size : 1;
  // A rank's batches are its stripe's first samples, batch after batch (also in a
  // finished epoch: with drop_last the tail it dropped is not consumed, and goes on).
  auto samples = [&](const RankCheckpoint& r) {
    return r.batches_consumed >= share ? share : std::min(share, r.batches_consumed * per_batch);
  };
  // A rank not given consumed what the given ones did, which is known only when they
  // all consumed the same.
  const int64_t first_count = samples(first);
  const bool equal = std::all_of(ranks.begin(), ranks.end(), [&](const auto& r) { return samples(r) == first_count; });
  e.consumed.assign(static_cast<size_t>(e.num_replicas), 0);
  std::string missing;
  for (int64_t r = 0; r < e.num_replicas; ++r) {
    auto at = by_rank.find(r);
    if (at != by_rank.end()) e.consumed[static_cast<size_t>(r)] = samples(ranks[at->second]);
    else if (equal) e.consumed[static_cast<size_t>(r)] = first_count;
    else missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!missing.empty())
    throw ValueError("merge_checkpoints: the ranks consumed different numbers of samples, and the checkpoints of "
                     "rank(s) " + missing + " of " + std::to_string(e.num_replicas) +
                     " are missing: pass every rank's checkpoint (one is enough only when all ranks consumed the same "
                     "number of batches)");
  std::vector<Value> consumed;
  for (int64_t c : e.consumed) consumed.emplace_back(c);
  // Ints, bools and a list of ints: torch.load(weights_only=True) reads it (format 2).
  return Value::dict({
      {"format", Value(kFormat)},
      {"elastic", Value(kElastic)},
      {"dataset_size", Value(e.dataset_size)},
      {"batch_size", Value(e.batch_size)},
      {"drop_last", Value(e.drop_last)},
      {"seed", Value(e.seed)},
      {"epoch", Value(e.epoch)},
      {"shuffle", Value(e.shuffle)},
      {"sampler_drop_last", Value(e.sampler_drop_last)},
      {"num_replicas", Value(e.num_replicas)},
      {"samples_consumed", Value::list(std::move(consumed))},
  });
}

bool is_elastic_checkpoint(const Value& state) { return state.is_dict() && state.contains("elastic"); }

ResumePlan decode_elastic(const Value& state, const LoaderState& loader) {
  if (int_of(state, "format") != kFormat || int_of(state, "elastic") != kElastic)
    bad("an elastic checkpoint of format " + std::to_string(int_of(state, "format")) + ", version " +
        std::to_string(int_of(state, "elastic")) + ": expected format " + std::to_string(kFormat) + ", version " +
        std::to_string(kElastic) + " (merge_checkpoints of this loader's version)");
  auto* sampler = dynamic_cast<DistributedSampler*>(loader.sampler.get());
  if (!loader.dataset || !sampler)
    bad("an elastic checkpoint (merge_checkpoints) resumes a loader whose sampler is a DistributedSampler over a "
        "map-style dataset; this loader's sampler is not one: pass sampler=DistributedSampler(dataset, num_replicas, "
        "rank, ...) with the checkpointed seed, shuffle and drop_last");
  if (loader.options.batch_sampler)
    bad("an elastic checkpoint resumes a loader that batches with its own BatchSampler (batch_size, drop_last); this "
        "one was given a batch_sampler: use batch_size instead");
  ElasticEpoch e;
  e.dataset_size = int_of(state, "dataset_size");
  e.batch_size = int_of(state, "batch_size");
  e.drop_last = flag_of(state, "drop_last");
  e.seed = int_of(state, "seed");
  e.epoch = int_of(state, "epoch");
  e.shuffle = flag_of(state, "shuffle");
  e.sampler_drop_last = flag_of(state, "sampler_drop_last");
  e.num_replicas = int_of(state, "num_replicas");
  auto same = [&](const std::string& what, const std::string& theirs, const std::string& mine) {
    if (theirs != mine)
      bad("the elastic checkpoint is of ranks with " + what + " " + theirs + ", this loader has " + mine +
          ": a new rank must use the old ranks' dataset, sampler options (but num_replicas and rank) and batching");
  };
  auto yes = [](bool v) { return std::string(v ? "true" : "false"); };
  same("a dataset of size", std::to_string(e.dataset_size), std::to_string(loader.dataset->size()));
  same("batch_size", std::to_string(e.batch_size), std::to_string(loader.options.batch_size.value_or(-1)));
  same("drop_last", yes(e.drop_last), yes(loader.options.drop_last));
  same("the DistributedSampler's seed", std::to_string(e.seed), std::to_string(sampler->seed()));
  same("the DistributedSampler's shuffle", yes(e.shuffle), yes(sampler->shuffle()));
  same("the DistributedSampler's drop_last", yes(e.sampler_drop_last), yes(sampler->drop_last()));
  if (e.num_replicas <= 0) bad("'num_replicas' must be positive, got " + std::to_string(e.num_replicas));
  const Value& list = field(state, "samples_consumed");
  const int64_t share = share_of(e.dataset_size, e.num_replicas, e.sampler_drop_last);
  if (!list.is_list() || static_cast<int64_t>(list.size()) != e.num_replicas)
    bad("'samples_consumed' must be a list of " + std::to_string(e.num_replicas) + " ints (one per old rank), got " +
        list.repr().substr(0, 80));
  for (const Value& c : list.items()) {
    if (!c.is_int() || c.to_int() < 0 || c.to_int() > share)
      bad("'samples_consumed' holds " + c.repr().substr(0, 40) + ", not a count of samples 0.." +
          std::to_string(share) + " (an old rank's share): the checkpoint is damaged");
    e.consumed.push_back(c.to_int());
  }
  ResumePlan p;
  p.elastic = true;
  p.elastic_epoch = e.epoch;
  p.elastic_indices = elastic_stripe(elastic_remaining(e), sampler->num_replicas(), sampler->rank(), e.sampler_drop_last);
  return p;
}

bool resumable(const LoaderState& state) {
  // An IterableDataset's epoch is resumed by taking its results again in order: with
  // in_order=false and workers, the order it was taken in cannot be made again.
  return state.options.in_order || !state.iterable || state.options.pool_workers() == 0;
}

void check_resumable(const LoaderState& state, const char* what) {
  if (!resumable(state))
    throw ValueError(std::string(what) +
                     ": an IterableDataset's epoch is resumed by running its workers' streams again and dropping the "
                     "results already taken, which needs them in the order they were taken; with in_order=false and "
                     "workers that order is the workers' timing: use in_order=true for an IterableDataset you "
                     "checkpoint");
}

}  // namespace loader
