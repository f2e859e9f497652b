// transport_bench: measures the two candidate links between the main process and a
// worker process, in one run, and prints one JSON object per measurement.
//
//   transport_bench                          # everything, about a minute on 2 cores
//   transport_bench --round-trips 20000 --pipelined 50000 --spawns 5 --configs default,tuned,runtime
//
// Transports (docs/transport.md has the numbers and the decision):
//   bridge-raw    the runtime's frames (wire.h) on the socketpair of
//                 ChildProcess::spawn_worker, driven by a plain thread: the floor.
//   bridge-actor  the same link as the runtime drives it: a scoped_actor (or a pooled
//                 driver actor) requests a detached proxy actor, which writes a Task
//                 frame; a reader thread anon_sends each Result frame to the proxy,
//                 which delivers the response promise (the design of the runtime's first WorkerLink).
//   caf-io        CAF's io middleman on loopback: the parent io::publish()es a
//                 registrar, the child io::remote_actor()s it and registers its worker.
//   in-process    scoped_actor request -> reply to a pooled / detached actor.
// Scheduler configurations:
//   default   CAF's defaults (work-stealing, max(cores, 4) threads)
//   tuned     work-stealing.aggressive-poll-attempts = moderate-poll-attempts = 0
//   runtime   the runtime's RuntimeConfig (tuned + scheduler.max-threads = 2)
//
// Worker processes are this program again (fork+exec through ChildProcess), told
// what to be by TRANSPORT_BENCH_CHILD.  A request is (task, 64 indices); a reply is
// (task, ~200 bytes), the size of a Result frame for a two-tensor batch descriptor.
// Requests whose task number is >= kHold are held by the worker and never answered:
// the SIGKILL measurements use them to have requests in flight when the worker dies.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "proc_util.h"
#include "loader/runtime/frames.h"
#include "loader/runtime/os/child_process.h"
#include "loader/runtime/actor_system.h"
#include "loader/runtime/protocol.h"
#include "loader/runtime/wire.h"
#include "loader/runtime/child/worker_core.h"

using loader::runtime::ChildProcess;
using loader::runtime::Frame;
using loader::runtime::FrameType;
using loader::runtime::ReadStatus;
using loader::runtime::read_frame;
using loader::runtime::write_frame;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

namespace {

constexpr uint64_t kHold = uint64_t{1} << 62;  // tasks from here on are held, never answered
constexpr size_t kIndices = 64;                 // a Task-sized request
constexpr size_t kReplyPayload = 176;           // + task, slab, bytes = a 200-byte Result body
constexpr int kKillWindow = 64;                 // requests in flight when the worker is killed
using failed_atom = caf::atom_constant<caf::atom("failed")>;

double us_since(Clock::time_point t0, Clock::time_point t1 = Clock::now()) {
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

/// CPU time (user + system, all threads) of this process and of one worker process
/// over a phase, per request: the cost of a transport, which a loaded machine does
/// not inflate as much as it inflates wall-clock rates.
class CpuMeter {
 public:
  explicit CpuMeter(pid_t child = -1) : child_(child) { restart(); }
  void restart() {
    self0_ = self_us();
    child0_ = child_us();
  }
  json per_request(uint64_t n) const {
    double self = self_us() - self0_, child = child_us() - child0_;
    double dn = static_cast<double>(n);
    return {{"parent", self / dn}, {"worker", child_ > 0 ? json(child / dn) : json(nullptr)},
            {"total", (self + (child_ > 0 ? child : 0)) / dn}};
  }

 private:
  static double self_us() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  }
  double child_us() const { return child_ > 0 ? loader::bench_util::process_cpu_us(child_) : 0; }
  pid_t child_;
  double self0_ = 0, child0_ = 0;
};

std::vector<int64_t> task_indices() {
  std::vector<int64_t> v(kIndices);
  for (size_t i = 0; i < kIndices; ++i) v[i] = static_cast<int64_t>(i * 7919 % 60000);
  return v;
}

json stats(std::vector<double> v) {
  json j;
  if (v.empty()) return j;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  j["n"] = v.size();
  j["min"] = v.front();
  j["median"] = v[v.size() / 2];
  j["p99"] = v[std::min(v.size() - 1, v.size() * 99 / 100)];
  j["max"] = v.back();
  j["mean"] = sum / static_cast<double>(v.size());
  return j;
}

int g_run = 0;
void emit(json j) {
  j["run"] = g_run;
  std::cout << j.dump() << std::endl;
}

// ------------------------------------------------------------------ CAF types
using bench_worker =
    caf::typed_actor<caf::replies_to<uint64_t, std::vector<int64_t>>::with<uint64_t, std::string>>;
/// The notices a reader thread posts to the proxy of a bridged worker (the design
/// the runtime used before its batch path moved out of actors; kept here as the
/// measured alternative, see docs/transport.md).
using frame_atom = caf::atom_constant<caf::atom("frame")>;
using linkdown_atom = caf::atom_constant<caf::atom("linkdown")>;
/// The parent-side proxy of a bridged worker: the worker interface plus the notices
/// of its reader thread.
using bridge_proxy_actor =
    bench_worker::extend<caf::reacts_to<frame_atom, uint8_t, std::string>, caf::reacts_to<linkdown_atom>>;

void quiet_logger(caf::actor_system_config& cfg) {
  cfg.set("logger.verbosity", caf::atom("quiet"));
  cfg.set("logger.console", caf::atom("none"));
}

/// The three scheduler configurations, all with the io middleman loaded.
struct DefaultConfig : caf::actor_system_config {
  DefaultConfig() {
    load<caf::io::middleman>();
    add_message_type<std::vector<int64_t>>("std::vector<int64_t>");
    quiet_logger(*this);
  }
};
struct TunedConfig : DefaultConfig {
  TunedConfig() {
    set("work-stealing.aggressive-poll-attempts", 0);
    set("work-stealing.moderate-poll-attempts", 0);
  }
};
struct RuntimeIoConfig : loader::runtime::RuntimeConfig {
  RuntimeIoConfig() { load<caf::io::middleman>(); }
};

std::unique_ptr<caf::actor_system_config> make_config(const std::string& name) {
  std::unique_ptr<caf::actor_system_config> cfg;
  if (name == "default") cfg = std::make_unique<DefaultConfig>();
  else if (name == "tuned") cfg = std::make_unique<TunedConfig>();
  else if (name == "runtime") cfg = std::make_unique<RuntimeIoConfig>();
  else throw std::runtime_error("transport_bench: unknown --configs entry '" + name +
                                "'; use default, tuned or runtime");
  // As acquire_system() does: no program arguments reach CAF.
  char arg0[] = "transport_bench";
  char* argv[] = {arg0, nullptr};
  cfg->parse(1, argv);
  return cfg;
}

// ------------------------------------------------------------------ worker processes
int bridge_child(int sock) {
  Frame f;
  const std::string payload(kReplyPayload, 'p');
  while (true) {
    if (read_frame(sock, f, -1) != ReadStatus::Ok) return 0;
    if (f.type == FrameType::Shutdown) return 0;
    if (f.type != FrameType::Task) continue;
    // Parsed as worker_main.cpp parses a Task frame.
    loader::runtime::Reader in(f.body);
    uint64_t task = in.u64();
    uint64_t slab = in.u64();
    uint64_t n = in.u64();
    if (n > in.remaining() / 8) return 2;
    std::vector<int64_t> indices(n);
    for (auto& i : indices) i = static_cast<int64_t>(in.u64());
    if (task >= kHold) continue;
    loader::runtime::WorkerReply r;
    r.kind = loader::runtime::WorkerReply::Kind::Result;
    r.task = task;
    r.slab = slab;
    r.bytes = n * 8;
    r.payload = payload;
    auto [type, body] = loader::runtime::encode_reply(r);
    if (!write_frame(sock, static_cast<FrameType>(type), body)) return 0;
  }
}

struct HoldState {
  std::vector<caf::typed_response_promise<uint64_t, std::string>> held;
};

bench_worker::behavior_type caf_worker(bench_worker::stateful_pointer<HoldState> self) {
  return {
      [self](uint64_t task, const std::vector<int64_t>& indices) -> caf::result<uint64_t, std::string> {
        if (task >= kHold) {
          auto rp = self->make_response_promise<uint64_t, std::string>();
          self->state.held.push_back(rp);
          return rp;
        }
        if (indices.size() != kIndices) return caf::make_error(caf::sec::invalid_argument, "bad task");
        // (uint64 task, 192-byte string): the 200 bytes of a Result frame body.
        return {task, std::string(200 - 8, 'p')};
      },
  };
}

int caf_child() {
  const char* port_text = std::getenv("TRANSPORT_BENCH_CAF_PORT");
  const char* config_text = std::getenv("TRANSPORT_BENCH_CAF_CONFIG");
  if (!port_text || !config_text) return 3;
  auto cfg = make_config(config_text);
  caf::actor_system sys{*cfg};
  auto registrar = sys.middleman().remote_actor("127.0.0.1", static_cast<uint16_t>(std::atoi(port_text)));
  if (!registrar) {
    std::cerr << "transport_bench child: remote_actor failed: " << sys.render(registrar.error()) << "\n";
    return 4;
  }
  // Detached, as a worker that blocks on loading must be.
  auto worker = sys.spawn<caf::detached>(caf_worker);
  caf::anon_send(*registrar, caf::put_atom::value, caf::actor_cast<caf::actor>(worker));
  // Live until the parent closes our end of the spawn socket (or dies).
  char c;
  while (true) {
    ssize_t r = read(3, &c, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
  }
  std::fflush(nullptr);
  _exit(0);
}

std::optional<int> run_child_if_requested() {
  const char* fd_text = std::getenv("LOADER_WORKER_FD");
  const char* mode = std::getenv("TRANSPORT_BENCH_CHILD");
  if (!fd_text || !mode) return std::nullopt;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  signal(SIGPIPE, SIG_IGN);
  if (std::strcmp(mode, "bridge") == 0) _exit(bridge_child(std::atoi(fd_text)));
  if (std::strcmp(mode, "caf") == 0) return caf_child();
  return 5;
}

ChildProcess spawn_child(const char* mode) {
  setenv("TRANSPORT_BENCH_CHILD", mode, 1);
  return ChildProcess::spawn_worker(0);
}

// ------------------------------------------------------------------ bridge, raw
std::string task_body(uint64_t task, const std::vector<int64_t>& ind) {
  // As ProcessBackend::task builds it.
  std::string b;
  b.reserve(24 + ind.size() * 8);
  loader::runtime::put_u64(b, task);
  loader::runtime::put_u64(b, 1);  // slab
  loader::runtime::put_u64(b, ind.size());
  for (int64_t i : ind) loader::runtime::put_u64(b, static_cast<uint64_t>(i));
  return b;
}

bool raw_round_trip(int sock, uint64_t task, const std::vector<int64_t>& ind, Frame& f) {
  if (!write_frame(sock, FrameType::Task, task_body(task, ind))) return false;
  return read_frame(sock, f, 5000) == ReadStatus::Ok && f.type == FrameType::Result;
}

void bench_bridge_raw(int round_trips, int pipelined, int spawns) {
  const auto ind = task_indices();
  Frame f;
  std::vector<double> spawn_us;
  for (int i = 0; i < spawns; ++i) {
    auto t0 = Clock::now();
    ChildProcess c = spawn_child("bridge");
    if (!raw_round_trip(c.socket(), 0, ind, f)) throw std::runtime_error("bridge-raw: no first reply");
    spawn_us.push_back(us_since(t0));
  }
  emit({{"transport", "bridge-raw"}, {"scheduler", "none"}, {"metric", "spawn_to_first_reply_us"},
        {"stats", stats(spawn_us)}});

  ChildProcess c = spawn_child("bridge");
  int sock = c.socket();
  for (int i = 0; i < 1000; ++i) raw_round_trip(sock, static_cast<uint64_t>(i), ind, f);
  std::vector<double> rtt;
  rtt.reserve(static_cast<size_t>(round_trips));
  CpuMeter cpu(c.pid());
  for (int i = 0; i < round_trips; ++i) {
    auto t0 = Clock::now();
    if (!raw_round_trip(sock, static_cast<uint64_t>(i), ind, f)) throw std::runtime_error("bridge-raw: lost a reply");
    rtt.push_back(us_since(t0));
  }
  emit({{"transport", "bridge-raw"}, {"scheduler", "none"}, {"metric", "rtt_us"}, {"stats", stats(rtt)},
        {"cpu_us_per_request", cpu.per_request(static_cast<uint64_t>(round_trips))},
        {"request_frame_bytes", 5 + 24 + kIndices * 8}, {"reply_frame_bytes", 5 + f.body.size()}});

  // Pipelined: keep 64 requests in flight.
  cpu.restart();
  auto t0 = Clock::now();
  uint64_t sent = 0, done = 0;
  const uint64_t total = static_cast<uint64_t>(pipelined);
  while (sent < 64 && sent < total) write_frame(sock, FrameType::Task, task_body(sent++, ind));
  while (done < total) {
    if (read_frame(sock, f, 5000) != ReadStatus::Ok) throw std::runtime_error("bridge-raw: pipelined read failed");
    ++done;
    if (sent < total) write_frame(sock, FrameType::Task, task_body(sent++, ind));
  }
  double secs = us_since(t0) / 1e6;
  emit({{"transport", "bridge-raw"}, {"scheduler", "none"}, {"metric", "pipelined_per_s"}, {"window", 64},
        {"requests", total}, {"value", static_cast<double>(total) / secs},
        {"cpu_us_per_request", cpu.per_request(total)}});

  // SIGKILL with 64 requests held by the worker.  A last ordinary request proves
  // the worker has read all of them.
  for (int i = 0; i < kKillWindow; ++i) write_frame(sock, FrameType::Task, task_body(kHold + static_cast<uint64_t>(i), ind));
  if (!raw_round_trip(sock, 1, ind, f)) throw std::runtime_error("bridge-raw: sentinel lost");
  auto k0 = Clock::now();
  c.kill(SIGKILL);
  ReadStatus st = read_frame(sock, f, 5000);
  double eof_us = us_since(k0);
  auto status = c.wait_exit(1000);
  double status_us = us_since(k0);
  emit({{"transport", "bridge-raw"}, {"scheduler", "none"}, {"metric", "sigkill"}, {"in_flight", kKillWindow},
        {"read_result", st == ReadStatus::Eof ? "EOF" : "other"}, {"eof_us", eof_us}, {"exit_status_us", status_us},
        {"pending_failed_with", status ? status->describe() : "no exit status"}});
}

// ------------------------------------------------------------------ bridge, actor
/// The worker process and its reader thread (the runtime's first WorkerLink, reduced).
struct BridgeLink {
  ChildProcess child;
  std::thread reader;
  void start_reader(const bridge_proxy_actor& proxy) {
    int sock = child.socket();
    reader = std::thread([sock, proxy] {
      Frame f;
      while (read_frame(sock, f, -1) == ReadStatus::Ok) {
        caf::anon_send(proxy, frame_atom::value, static_cast<uint8_t>(f.type), std::move(f.body));
        f.body.clear();
      }
      caf::anon_send(proxy, linkdown_atom::value);
    });
  }
  void stop() {
    child.shutdown_socket();
    if (reader.joinable()) reader.join();
    child.terminate();
  }
  ~BridgeLink() { stop(); }
};

struct ProxyState {
  std::shared_ptr<BridgeLink> link;
  std::unordered_map<uint64_t, caf::typed_response_promise<uint64_t, std::string>> pending;
  std::string down;  ///< how the worker ended, once it has
};

bridge_proxy_actor::behavior_type proxy_behavior(bridge_proxy_actor::stateful_pointer<ProxyState> self,
                                                 std::shared_ptr<BridgeLink> link) {
  self->state.link = std::move(link);
  return {
      [self](uint64_t task, const std::vector<int64_t>& ind) -> caf::result<uint64_t, std::string> {
        auto& s = self->state;
        if (!s.down.empty()) return caf::make_error(caf::sec::request_receiver_down, s.down);
        auto rp = self->make_response_promise<uint64_t, std::string>();
        if (!write_frame(s.link->child.socket(), FrameType::Task, task_body(task, ind)))
          return caf::make_error(caf::sec::request_receiver_down, "the worker's socket is closed");
        s.pending.emplace(task, rp);
        return rp;
      },
      [self](frame_atom, uint8_t type, const std::string& body) {
        auto r = loader::runtime::decode_reply(type, body);
        auto it = self->state.pending.find(r.task);
        if (it == self->state.pending.end()) return;
        it->second.deliver(r.task, std::move(r.payload));
        self->state.pending.erase(it);
      },
      [self](linkdown_atom) {
        // As on_link_down(): reap, then fail every request the worker held.
        auto& s = self->state;
        auto status = s.link->child.wait_exit(1000);
        s.down = "DataLoader worker (pid " + std::to_string(s.link->child.pid()) + ") " +
                 (status ? status->describe() : "closed its connection but is still running");
        for (auto& [task, rp] : s.pending) rp.deliver(caf::make_error(caf::sec::request_receiver_down, s.down));
        s.pending.clear();
      },
  };
}

struct BridgeWorker {
  std::shared_ptr<BridgeLink> link;
  bench_worker handle;
  pid_t pid() const { return link->child.pid(); }
};

BridgeWorker start_bridge_worker(caf::actor_system& sys) {
  BridgeWorker w;
  w.link = std::make_shared<BridgeLink>();
  w.link->child = spawn_child("bridge");
  auto proxy = sys.spawn<caf::detached>(proxy_behavior, w.link);
  w.link->start_reader(proxy);
  w.handle = proxy;
  return w;
}

void stop_bridge_worker(BridgeWorker& w) {
  caf::anon_send_exit(w.handle, caf::exit_reason::user_shutdown);
  w.link->stop();
}

// ------------------------------------------------------------------ caf io
struct RegistrarState {
  std::deque<caf::actor> arrived;
  std::deque<caf::response_promise> waiting;
};

caf::behavior registrar_behavior(caf::stateful_actor<RegistrarState>* self) {
  return {
      [self](caf::put_atom, const caf::actor& w) {
        auto& s = self->state;
        if (!s.waiting.empty()) {
          s.waiting.front().deliver(w);
          s.waiting.pop_front();
        } else {
          s.arrived.push_back(w);
        }
      },
      [self](caf::get_atom) -> caf::result<caf::actor> {
        auto& s = self->state;
        if (!s.arrived.empty()) {
          auto w = s.arrived.front();
          s.arrived.pop_front();
          return w;
        }
        auto rp = self->make_response_promise();
        s.waiting.push_back(rp);
        return rp;
      },
  };
}

struct CafWorker {
  ChildProcess child;
  bench_worker handle;
  double registered_us = 0;  ///< spawn -> worker handle in the parent
};

CafWorker start_caf_worker(caf::actor_system& sys, const caf::actor& registrar, uint16_t port,
                           const std::string& config, Clock::time_point t0) {
  setenv("TRANSPORT_BENCH_CAF_PORT", std::to_string(port).c_str(), 1);
  setenv("TRANSPORT_BENCH_CAF_CONFIG", config.c_str(), 1);
  CafWorker w;
  w.child = spawn_child("caf");
  caf::scoped_actor self{sys};
  self->request(registrar, std::chrono::seconds(10), caf::get_atom::value)
      .receive([&](const caf::actor& a) { w.handle = caf::actor_cast<bench_worker>(a); },
               [&](caf::error& e) {
                 throw std::runtime_error("caf-io: the worker did not register: " + sys.render(e));
               });
  w.registered_us = us_since(t0);
  return w;
}

// ------------------------------------------------------------------ shared measurements
bool scoped_round_trip(caf::scoped_actor& self, const bench_worker& w, uint64_t task, const std::vector<int64_t>& ind) {
  bool ok = false;
  self->request(w, std::chrono::seconds(5), task, ind)
      .receive([&](uint64_t, const std::string&) { ok = true; }, [&](caf::error&) { ok = false; });
  return ok;
}

std::vector<double> scoped_rtts(caf::actor_system& sys, const bench_worker& w, int n, CpuMeter& cpu) {
  caf::scoped_actor self{sys};
  const auto ind = task_indices();
  for (int i = 0; i < std::min(n, 1000); ++i) scoped_round_trip(self, w, static_cast<uint64_t>(i), ind);
  std::vector<double> rtt;
  rtt.reserve(static_cast<size_t>(n));
  cpu.restart();
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    if (!scoped_round_trip(self, w, static_cast<uint64_t>(i), ind)) throw std::runtime_error("round trip failed");
    rtt.push_back(us_since(t0));
  }
  return rtt;
}

/// A pooled actor that keeps `window` requests in flight until `total` are answered
/// (the sampler's role in the runtime).
struct DriverState {
  uint64_t sent = 0;
  uint64_t done = 0;
  std::vector<int64_t> indices = task_indices();
};

void driver_send(caf::stateful_actor<DriverState>* self, bench_worker w, uint64_t total, caf::actor reporter) {
  auto task = self->state.sent++;
  self->request(w, std::chrono::seconds(10), task, self->state.indices)
      .then(
          [self, w, total, reporter](uint64_t, const std::string&) {
            auto& s = self->state;
            if (++s.done == total) {
              self->send(reporter, caf::ok_atom::value);
              self->quit();
            } else if (s.sent < total) {
              driver_send(self, w, total, reporter);
            }
          },
          [self, reporter](caf::error& e) {
            self->send(reporter, failed_atom::value, self->system().render(e));
            self->quit();
          });
}

caf::behavior driver_behavior(caf::stateful_actor<DriverState>* self, bench_worker w, uint64_t total, int window,
                              caf::actor reporter) {
  for (int i = 0; i < window && self->state.sent < total; ++i) driver_send(self, w, total, reporter);
  return {[](caf::ok_atom) {}};
}

double pipelined_rate(caf::actor_system& sys, const bench_worker& w, uint64_t total, int window, CpuMeter& cpu) {
  caf::scoped_actor self{sys};
  cpu.restart();
  auto t0 = Clock::now();
  sys.spawn(driver_behavior, w, total, window, caf::actor_cast<caf::actor>(self));
  double rate = 0;
  self->receive([&](caf::ok_atom) { rate = static_cast<double>(total) / (us_since(t0) / 1e6); },
                [&](failed_atom, const std::string& e) {
                  throw std::runtime_error("pipelined requests failed: " + e);
                },
                caf::after(std::chrono::seconds(120)) >> [] { throw std::runtime_error("pipelined: timeout"); });
  return rate;
}

/// Round-trip latency (scoped_actor request -> reply) and pipelined rate (window 64)
/// against `w`, each with the CPU time it cost (`worker_pid`: -1 when in-process).
void measure_requests(caf::actor_system& sys, const std::string& transport, const std::string& config,
                      const bench_worker& w, pid_t worker_pid, int round_trips, int pipelined) {
  CpuMeter cpu(worker_pid);
  auto rtt = scoped_rtts(sys, w, round_trips, cpu);
  auto rtt_cpu = cpu.per_request(static_cast<uint64_t>(round_trips));
  emit({{"transport", transport}, {"scheduler", config}, {"metric", "rtt_us"}, {"stats", stats(rtt)},
        {"cpu_us_per_request", rtt_cpu}});
  double rate = pipelined_rate(sys, w, static_cast<uint64_t>(pipelined), 64, cpu);
  auto rate_cpu = cpu.per_request(static_cast<uint64_t>(pipelined));
  emit({{"transport", transport}, {"scheduler", config}, {"metric", "pipelined_per_s"}, {"window", 64},
        {"requests", pipelined}, {"value", rate}, {"cpu_us_per_request", rate_cpu}});
}

/// What happened to requests that were in flight when the worker was killed.
struct KillRecord {
  std::mutex mu;
  Clock::time_point killed;
  std::vector<double> resolved_us;  ///< since the kill
  int answered = 0;
  std::map<std::string, int> errors;  ///< rendered error -> count
  double down_us = -1;
  std::string down_reason;
};

caf::behavior collector_behavior(caf::event_based_actor* self, bench_worker w, std::shared_ptr<KillRecord> rec,
                                 caf::actor reporter) {
  self->monitor(w);
  self->set_down_handler([rec](caf::down_msg& m) {
    std::lock_guard<std::mutex> lock(rec->mu);
    rec->down_us = us_since(rec->killed);
    rec->down_reason = to_string(m.reason);
  });
  auto ind = task_indices();
  auto resolved = std::make_shared<int>(0);
  auto finish = [self, rec, reporter, resolved] {
    if (++*resolved == kKillWindow) self->send(reporter, caf::ok_atom::value);
  };
  for (int i = 0; i < kKillWindow; ++i) {
    // A finite timeout, so that a request the transport never fails ends as request_timeout.
    self->request(w, std::chrono::seconds(2), kHold + static_cast<uint64_t>(i), ind)
        .then(
            [rec, finish](uint64_t, const std::string&) {
              {
                std::lock_guard<std::mutex> lock(rec->mu);
                rec->resolved_us.push_back(us_since(rec->killed));
                ++rec->answered;
              }
              finish();
            },
            [self, rec, finish](caf::error& e) {
              {
                std::lock_guard<std::mutex> lock(rec->mu);
                rec->resolved_us.push_back(us_since(rec->killed));
                ++rec->errors[self->system().render(e)];
              }
              finish();
            });
  }
  // Same sender, same link, in order: when this one returns the worker holds all 64.
  self->request(w, std::chrono::seconds(5), uint64_t{1}, ind)
      .then([self, reporter](uint64_t, const std::string&) { self->send(reporter, caf::get_atom::value); },
            [](caf::error&) {});
  return {[](caf::ok_atom) {}};
}

void kill_test(caf::actor_system& sys, const std::string& transport, const std::string& config, const bench_worker& w,
               ChildProcess& child) {
  auto rec = std::make_shared<KillRecord>();
  caf::scoped_actor self{sys};
  auto collector = sys.spawn(collector_behavior, w, rec, caf::actor_cast<caf::actor>(self));
  bool armed = false;
  self->receive([&](caf::get_atom) { armed = true; }, caf::after(std::chrono::seconds(5)) >> [] {});
  if (!armed) throw std::runtime_error(transport + ": the held requests never reached the worker");
  {
    std::lock_guard<std::mutex> lock(rec->mu);
    rec->killed = Clock::now();
  }
  child.kill(SIGKILL);
  bool all = false;
  self->receive([&](caf::ok_atom) { all = true; }, caf::after(std::chrono::seconds(6)) >> [] {});
  // Give a down_msg that comes after the failures a moment to arrive.
  if (rec->down_us < 0) self->receive(caf::after(std::chrono::milliseconds(200)) >> [] {});
  auto status = child.wait_exit(1000);
  std::lock_guard<std::mutex> lock(rec->mu);
  json errors = json::object();
  for (auto& [e, n] : rec->errors) errors[e] = n;
  emit({{"transport", transport},
        {"scheduler", config},
        {"metric", "sigkill"},
        {"in_flight", kKillWindow},
        {"all_resolved", all},
        {"answered", rec->answered},
        {"errors", errors},
        {"resolved_us", stats(rec->resolved_us)},
        // null: no down_msg (the bridge's proxy outlives its worker process, as in the runtime)
        {"down_us", rec->down_us < 0 ? json(nullptr) : json(rec->down_us)},
        {"down_reason", rec->down_reason},
        {"exit_status", status ? status->describe() : "not reaped"}});
  caf::anon_send_exit(collector, caf::exit_reason::user_shutdown);
}

// ------------------------------------------------------------------ per configuration
caf::behavior echo_behavior(caf::event_based_actor*) {
  return {[](uint64_t task, const std::vector<int64_t>&) { return caf::make_message(task, std::string(192, 'p')); }};
}

void bench_config(const std::string& config, int round_trips, int pipelined, int spawns) {
  auto cfg = make_config(config);
  caf::actor_system sys{*cfg};
  json settings = {{"scheduler.max-threads", sys.scheduler().num_workers()},
                   {"aggressive-poll-attempts",
                    caf::get_or(sys.config(), "work-stealing.aggressive-poll-attempts", size_t{999999})},
                   {"moderate-poll-attempts",
                    caf::get_or(sys.config(), "work-stealing.moderate-poll-attempts", size_t{999999})}};
  emit({{"metric", "config"}, {"scheduler", config}, {"settings", settings}});

  // In-process: scoped_actor request -> reply.
  for (bool detached : {false, true}) {
    bench_worker echo = detached ? caf::actor_cast<bench_worker>(sys.spawn<caf::detached>(echo_behavior))
                                 : caf::actor_cast<bench_worker>(sys.spawn(echo_behavior));
    measure_requests(sys, detached ? "in-process-detached" : "in-process-pooled", config, echo, -1, round_trips,
                     pipelined);
    caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
  }

  // Bridge through the proxy actor.
  {
    const auto ind = task_indices();
    std::vector<double> spawn_us;
    for (int i = 0; i < spawns; ++i) {
      auto t0 = Clock::now();
      auto w = start_bridge_worker(sys);
      caf::scoped_actor self{sys};
      if (!scoped_round_trip(self, w.handle, 0, ind)) throw std::runtime_error("bridge-actor: no first reply");
      spawn_us.push_back(us_since(t0));
      stop_bridge_worker(w);
    }
    emit({{"transport", "bridge-actor"}, {"scheduler", config}, {"metric", "spawn_to_first_reply_us"},
          {"stats", stats(spawn_us)}});
    auto w = start_bridge_worker(sys);
    measure_requests(sys, "bridge-actor", config, w.handle, w.pid(), round_trips, pipelined);
    kill_test(sys, "bridge-actor", config, w.handle, w.link->child);
    stop_bridge_worker(w);
  }

  // CAF io middleman on loopback.
  {
    auto registrar = sys.spawn(registrar_behavior);
    auto t_pub = Clock::now();
    auto port = sys.middleman().publish(registrar, 0, "127.0.0.1");
    if (!port) throw std::runtime_error("caf-io: publish failed: " + sys.render(port.error()));
    double publish_us = us_since(t_pub);
    const auto ind = task_indices();
    std::vector<double> spawn_us, registered_us;
    for (int i = 0; i < spawns; ++i) {
      auto t0 = Clock::now();
      auto w = start_caf_worker(sys, registrar, *port, config, t0);
      caf::scoped_actor self{sys};
      if (!scoped_round_trip(self, w.handle, 0, ind)) throw std::runtime_error("caf-io: no first reply");
      spawn_us.push_back(us_since(t0));
      registered_us.push_back(w.registered_us);
    }
    emit({{"transport", "caf-io"}, {"scheduler", config}, {"metric", "spawn_to_first_reply_us"},
          {"stats", stats(spawn_us)}, {"spawn_to_registered", stats(registered_us)}, {"publish_us", publish_us}});
    auto w = start_caf_worker(sys, registrar, *port, config, Clock::now());
    measure_requests(sys, "caf-io", config, w.handle, w.child.pid(), round_trips, pipelined);
    kill_test(sys, "caf-io", config, w.handle, w.child);
    sys.middleman().unpublish(registrar, *port);
    caf::anon_send_exit(registrar, caf::exit_reason::user_shutdown);
  }
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

int usage() {
  std::cerr << "usage: transport_bench [--round-trips N] [--pipelined N] [--spawns N] "
               "[--configs default,tuned,runtime] [--run K]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (auto rc = run_child_if_requested()) return *rc;
  int round_trips = 20000, pipelined = 50000, spawns = 5;
  std::string configs = "default,tuned,runtime";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    std::string v = argv[++i];
    if (a == "--round-trips") round_trips = std::atoi(v.c_str());
    else if (a == "--pipelined") pipelined = std::atoi(v.c_str());
    else if (a == "--spawns") spawns = std::atoi(v.c_str());
    else if (a == "--configs") configs = v;
    else if (a == "--run") g_run = std::atoi(v.c_str());
    else return usage();
  }
  if (round_trips <= 0 || pipelined <= 0 || spawns <= 0) return usage();
  signal(SIGPIPE, SIG_IGN);
  emit({{"metric", "machine"},
        {"cpus", std::thread::hardware_concurrency()},
        {"loadavg", read_first_line("/proc/loadavg")},
        {"caf_version", CAF_VERSION}});
  try {
    bench_bridge_raw(round_trips, pipelined, spawns);
    for (const auto& c : loader::bench_util::split_list(configs)) bench_config(c, round_trips, pipelined, spawns);
  } catch (const std::exception& e) {
    std::cerr << "transport_bench: " << e.what() << "\n";
    return 1;
  }
  emit({{"metric", "done"}, {"loadavg", read_first_line("/proc/loadavg")}});
  return 0;
}
