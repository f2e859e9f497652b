#include "loader/runtime/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>

#include "loader/error.h"
#include "loader/generator.h"
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

Value state_values(const std::vector<std::string>& items) {
  std::vector<Value> out;
  for (const auto& b : items) out.push_back(state_value(b));
  return Value::list(std::move(out));
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
      {"num_workers", Value(static_cast<int64_t>(o.num_workers))},
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
      {"streams_at_start", state_values(p.streams_at_start)},
      {"streams_now", state_values(p.streams_now)},
      {"base_seed_drawn", Value(p.base_seed_drawn)},
      // As an int64 bit pattern: pt files hold signed ints.
      {"base_seed", Value(static_cast<int64_t>(p.base_seed))},
      {"pool_alive", Value(p.pool_alive)},
      {"worker_rng", Value::list(std::move(workers))},
      // Verified replay: what the epoch handed out (index batches; an IterableDataset's
      // results), hashes as int64 bit patterns; None where not known.
      {"sampler_type", Value(p.sampler_type)},
      {"batch_sampler_type", Value(p.batch_sampler_type)},
      {"batches_hash", p.check.hash ? Value(static_cast<int64_t>(*p.check.hash)) : Value()},
      {"batches_hash_at", Value::list(std::move(marks))},
  });
}

ResumePlan decode_checkpoint(const Value& state, const LoaderState& loader, size_t streams, bool strict) {
  const DataLoaderOptions& o = loader.options;
  if (!state.is_dict()) bad("expected the dict DataLoader::state_dict() returned, got " + state.repr().substr(0, 80));
  const Value& format = field(state, "format");
  const bool format1 = format.is_string() && format.to_string() == kFormat1;
  if (!format1 && !(format.is_int() && format.to_int() == kFormat))
    bad("'format' is " + format.repr().substr(0, 80) + ", expected " + std::to_string(kFormat) + " (or format 1's '" +
        kFormat1 + "'): not a checkpoint of this loader's version");
  const uint64_t workers = count_of(state, "num_workers");
  const bool persistent = flag_of(state, "persistent_workers");
  const bool same_workers = workers == static_cast<uint64_t>(o.num_workers) && persistent == o.persistent_workers;
  if (loader.iterable && !same_workers)
    bad("the checkpoint is of a loader with num_workers=" + std::to_string(workers) + std::string(", persistent_workers=") +
        (persistent ? "true" : "false") + ", this one has num_workers=" + std::to_string(o.num_workers) +
        ", persistent_workers=" + (o.persistent_workers ? "true" : "false") +
        ": an IterableDataset's epoch is resumed by running it again, and what its workers yield depends on "
        "these settings: use the ones of the loader checkpointed");
  if (strict && workers != static_cast<uint64_t>(o.num_workers))
    bad("the checkpoint is of a loader with num_workers=" + std::to_string(workers) + ", this one has num_workers=" +
        std::to_string(o.num_workers) +
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
  const Shape shape = shape_of(loader);
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
  ResumePlan p;
  p.same_workers = same_workers;
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
  // Verified replay (optional: format 1 and earlier format 2 checkpoints have none of
  // these, and resume unverified).
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
  // Other workers than the checkpointed ones: they start as their Init leaves them.
  if (!same_workers) p.worker_rng.clear();
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

bool resumable(const LoaderState& state) { return state.options.in_order; }

void check_resumable(const LoaderState& state, const char* what) {
  if (!state.options.in_order)
    throw ValueError(std::string(what) +
                     ": with in_order=false the batches delivered so far are not a prefix of the epoch's tasks; "
                     "use in_order=true (the default) for a loader you checkpoint");
}

}  // namespace loader
