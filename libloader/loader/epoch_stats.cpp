#include "loader/epoch_stats.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace loader {

// ------------------------------------------------------------------ DurationHistogram

double DurationHistogram::lower_ns(int b) noexcept {
  if (b <= 0) return 0;
  const int i = b - 1;
  const int msb = (i >> kSubBits) + 8;
  const int sub = i & ((1 << kSubBits) - 1);
  return std::ldexp(1.0 + static_cast<double>(sub) / (1 << kSubBits), msb);  // 2^msb * (1 + sub / 8)
}

void DurationHistogram::merge(const DurationHistogram& o) noexcept {
  for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += o.counts_[i];
  count_ += o.count_;
  sum_ns_ += o.sum_ns_;
  max_ns_ = std::max(max_ns_, o.max_ns_);
}

double DurationHistogram::quantile_s(double q) const noexcept {
  if (count_ == 0) return 0;
  q = std::min(1.0, std::max(0.0, q));
  // The smallest bucket whose cumulative count reaches ceil(q * count) (at least 1).
  const auto rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_))));
  uint64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += counts_[static_cast<size_t>(b)];
    if (seen >= rank) {
      const double lo = lower_ns(b);
      const double hi = b + 1 < kBuckets ? lower_ns(b + 1) : lo;
      const double mid = b == 0 ? hi / 2 : (lo + hi) / 2;
      return std::min(mid, static_cast<double>(max_ns_)) * 1e-9;
    }
  }
  return max_s();
}

bool stats_recording() noexcept {
  static const bool on = [] {
    const char* v = std::getenv("LOADER_STATS");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

// ------------------------------------------------------------------ EpochStats

void EpochStats::add(const EpochStats& o) {
  const double w0 = wall_s, w1 = o.wall_s;
  const double w = w0 + w1;
  if (w > 0) {
    in_flight_mean = (in_flight_mean * w0 + o.in_flight_mean * w1) / w;
    ready_mean = (ready_mean * w0 + o.ready_mean * w1) / w;
  }
  batches += o.batches;
  samples += o.samples;
  wall_s = w;
  first_batch_s += o.first_batch_s;
  next_s += o.next_s;
  wait.merge(o.wait);
  waits += o.waits;
  tasks_sent += o.tasks_sent;
  in_flight = o.in_flight;  // "now": the latest
  ready = o.ready;
  in_flight_max = std::max(in_flight_max, o.in_flight_max);
  ready_max = std::max(ready_max, o.ready_max);
  sampler_s += o.sampler_s;
  slab_bytes_mapped = o.slab_bytes_mapped;
  slab_bytes_in_use = o.slab_bytes_in_use;
  slab_bytes_peak = std::max(slab_bytes_peak, o.slab_bytes_peak);
  slab_grown += o.slab_grown;
  inline_batches += o.inline_batches;
  restarts = std::max(restarts, o.restarts);  // restarts used: a count the pool keeps
  autotuned = autotuned || o.autotuned;
  autotune.insert(autotune.end(), o.autotune.begin(), o.autotune.end());
  workers_now = o.workers_now;
  prefetch_now = o.prefetch_now;
  previous_minor_faults = -1;
  if (workers.size() < o.workers.size()) workers.resize(o.workers.size());
  for (size_t k = 0; k < o.workers.size(); ++k) {
    Worker& a = workers[k];
    const Worker& b = o.workers[k];
    a.pid = b.pid;
    a.state = b.state;
    a.restarts = std::max(a.restarts, b.restarts);
    a.held = b.held;
    a.delivered += b.delivered;
    a.tasks += b.tasks;
    a.inline_batches += b.inline_batches;
    a.busy_s += b.busy_s;
    a.fetch_s += b.fetch_s;
    a.collate_s += b.collate_s;
    a.cpu_user_s += b.cpu_user_s;
    a.cpu_system_s += b.cpu_system_s;
    a.minor_faults += b.minor_faults;
  }
}

double EpochStats::busy_share() const {
  if (workers.empty() || wall_s <= 0) return 0;
  double busy = 0;
  for (const auto& w : workers) busy += w.busy_s;
  // After the first batch: a fresh worker's start is the start-up's, not idle time.
  const double span = std::max(wall_s - first_batch_s, 0.5 * wall_s);
  // Slots the autotuner kept parked all epoch did not work: they do not count.
  size_t n = 0;
  for (const auto& w : workers) n += w.state != "parked" || w.tasks > 0 ? 1 : 0;
  return busy / (span * static_cast<double>(std::max<size_t>(1, n)));
}

int64_t EpochStats::minor_faults() const {
  int64_t n = 0;
  for (const auto& w : workers) n += w.minor_faults;
  return n;
}

namespace {

std::string pct(double share) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * share);
  return buf;
}

std::string fixed(double v, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

std::string EpochStats::diagnosis() const {
  if (batches == 0 || wall_s <= 0) return "no batches yet";
  const int n = autotuned ? workers_now : static_cast<int>(workers.size());
  const double waited = next_s / wall_s;
  const double busy = busy_share();
  // What bounds the epoch once batches flow.
  auto steady = [&]() -> std::string {
    if (waited >= kWaitShare) {
      if (n == 0)
        return "input-bound: training waited " + pct(waited) +
               " of the epoch, loading in the main process: worker processes (0 -> 2) or cheaper samples";
      if (busy >= kBusyShare)
        return "input-bound: workers " + pct(busy) + " busy, training waited " + pct(waited) +
               " of the epoch: more workers (" + std::to_string(n) + " -> " + std::to_string(n + 1) +
               ") or cheaper samples";
      return "input-bound: training waited " + pct(waited) + " of the epoch while workers were only " + pct(busy) +
             " busy: a higher prefetch_factor, or look at the transport (results ready " + fixed(ready_mean, 1) +
             " on average)";
    }
    if (n > 0 && (busy < kBusyShare || ready_mean >= kReadyPileUp))
      return "consumer-bound: training waited " + pct(waited) + " of the epoch, " + fixed(ready_mean, 1) +
             " results ready on average (max " + std::to_string(ready_max) + "), workers " + pct(busy) + " busy: " +
             (n > 1 ? "fewer workers (" + std::to_string(n) + " -> " + std::to_string(n - 1) + ") or " : std::string()) +
             "a lower prefetch_factor would do; speed up the training step";
    if (n == 0) return "consumer-bound: loading took " + pct(waited) + " of the epoch: the training step is the cost";
    return "balanced: workers " + pct(busy) + " busy, training waited " + pct(waited) + " of the epoch";
  };
  std::string out;
  if (first_batch_s >= kStartupShare * wall_s) {
    out = "start-up-bound: the first batch took " + pct(first_batch_s / wall_s) + " of the epoch (" +
          fixed(first_batch_s * 1e3, 1) +
          " ms): persistent_workers=true, a cheaper dataset set-up, or longer epochs; after it " + steady();
  } else if (sampler_s >= kSamplerShare * wall_s) {
    out = "sampler-bound: drawing the index batches took " + pct(sampler_s / wall_s) +
          " of the epoch on the application thread: a cheaper sampler or batch_sampler";
  } else {
    out = steady();
  }
  const int64_t faults = minor_faults();
  if (previous_minor_faults > 0 && faults >= kWarmingFaults &&
      static_cast<double>(faults) <= kWarmingFall * static_cast<double>(previous_minor_faults)) {
    out += "; warming up: workers' minor page faults fell " + std::to_string(previous_minor_faults) + " -> " +
           std::to_string(faults) + " (still mapping their memory in): later epochs will be faster";
  }
  return out;
}

namespace {

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

struct Obj {
  std::string& out;
  bool first = true;
  explicit Obj(std::string& o) : out(o) { out += '{'; }
  void key(const char* k) {
    if (!first) out += ',';
    first = false;
    out += '"';
    out += k;
    out += "\":";
  }
  void num(const char* k, double v) {
    key(k);
    if (!std::isfinite(v)) {
      out += "null";
      return;
    }
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    out += buf;
  }
  void num(const char* k, int64_t v) {
    key(k);
    out += std::to_string(v);
  }
  void num(const char* k, int v) { num(k, static_cast<int64_t>(v)); }
  void str(const char* k, const std::string& v) {
    key(k);
    json_string(out, v);
  }
  void close() { out += '}'; }
};

}  // namespace

std::string EpochStats::to_json() const {
  std::string out;
  Obj o(out);
  o.num("batches", batches);
  o.num("samples", samples);
  o.num("wall_s", wall_s);
  o.num("first_batch_s", first_batch_s);
  o.num("next_s", next_s);
  o.num("wait_count", wait.count());
  o.num("wait_mean_s", wait.count() ? wait.sum_s() / static_cast<double>(wait.count()) : 0.0);
  o.num("wait_p50_s", wait.quantile_s(0.5));
  o.num("wait_p90_s", wait.quantile_s(0.9));
  o.num("wait_p99_s", wait.quantile_s(0.99));
  o.num("wait_max_s", wait.max_s());
  o.num("waits", waits);
  o.num("tasks_sent", tasks_sent);
  o.num("in_flight", in_flight);
  o.num("in_flight_mean", in_flight_mean);
  o.num("in_flight_max", in_flight_max);
  o.num("ready", ready);
  o.num("ready_mean", ready_mean);
  o.num("ready_max", ready_max);
  o.num("sampler_s", sampler_s);
  o.num("slab_bytes_mapped", slab_bytes_mapped);
  o.num("slab_bytes_in_use", slab_bytes_in_use);
  o.num("slab_bytes_peak", slab_bytes_peak);
  o.num("slab_grown", slab_grown);
  o.num("inline_batches", inline_batches);
  o.num("restarts", restarts);
  o.num("busy_share", busy_share());
  o.num("minor_faults", minor_faults());
  o.key("workers");
  out += '[';
  for (size_t k = 0; k < workers.size(); ++k) {
    const Worker& w = workers[k];
    if (k) out += ',';
    Obj x(out);
    x.num("pid", w.pid);
    x.str("state", w.state);
    x.num("restarts", w.restarts);
    x.num("held", w.held);
    x.num("tasks", w.tasks);
    x.num("delivered", w.delivered);
    x.num("inline_batches", w.inline_batches);
    x.num("busy_s", w.busy_s);
    x.num("fetch_s", w.fetch_s);
    x.num("collate_s", w.collate_s);
    x.num("cpu_user_s", w.cpu_user_s);
    x.num("cpu_system_s", w.cpu_system_s);
    x.num("minor_faults", w.minor_faults);
    x.close();
  }
  out += ']';
  if (autotuned) {
    o.num("workers_now", workers_now);
    o.num("prefetch_now", prefetch_now);
    o.key("autotune");
    out += '[';
    for (size_t k = 0; k < autotune.size(); ++k) {
      const TuneDecision& d = autotune[k];
      if (k) out += ',';
      Obj x(out);
      x.num("t_s", d.t_s);
      x.num("from_workers", d.from_workers);
      x.num("to_workers", d.to_workers);
      x.num("from_prefetch", d.from_prefetch);
      x.num("to_prefetch", d.to_prefetch);
      x.str("reason", d.reason);
      x.close();
    }
    out += ']';
  }
  o.str("diagnosis", diagnosis());
  o.close();
  return out;
}

std::string LoaderStats::to_json() const {
  std::string out = "{\"epochs\":[";
  for (size_t i = 0; i < epochs.size(); ++i) {
    if (i) out += ',';
    out += epochs[i].to_json();
  }
  out += "],\"total\":";
  out += total.to_json();
  out += '}';
  return out;
}

}  // namespace loader
