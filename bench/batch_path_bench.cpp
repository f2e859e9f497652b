// batch_path_bench: what one batch costs the main process on each candidate batch path,
// measured in one run with the same worker processes and the same load; one JSON object
// per measurement on stdout.  docs/transport.md has the numbers and the decision.
//
//   batch_path_bench                                  # all paths, defaults below
//   batch_path_bench --batches 20000 --workers 2 --prefetch 2 --work-us 30 --consume-us 2
//
// Every path runs the runtime's dispatch rule: at most workers x prefetch tasks in flight,
// task t goes to worker t % workers, results are consumed in task order, and the task
// that replaces a consumed one is sent before the batch is used (PyTorch's order).  A
// task carries 256 indices (a W1 batch); a worker spins --work-us per task (its fetch and
// collate) and answers with a 200-byte result (a batch descriptor); the application
// spins --consume-us per batch.
//
// Paths:
//   socket-reader  the runtime's path (pipeline.cpp): Task/Result frames (wire.h) on the
//                  socketpair of ChildProcess::spawn_worker; one reader thread per worker
//                  takes its frames into a buffer under one mutex and wakes the
//                  application thread through a condition variable only when it waits.
//   socket-direct  the same frames, read by the application thread itself (no reader
//                  threads): one wake-up per batch at most, but nobody watches a worker
//                  while the application is not in next().
//   shm-ring       Boost.Interprocess primitives in a name-less segment both processes map
//                  (the candidate): one single-producer ring per direction, an
//                  interprocess_mutex + interprocess_condition to sleep on, a notify only
//                  when the peer sleeps.
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <boost/interprocess/sync/interprocess_condition.hpp>
#include <boost/interprocess/sync/interprocess_mutex.hpp>
#include <boost/interprocess/sync/scoped_lock.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "proc_util.h"
#include "loader/runtime/os/child_process.h"
#include "loader/runtime/os/shm.h"
#include "loader/runtime/wire.h"

namespace bi = boost::interprocess;
using loader::runtime::ChildProcess;
using loader::runtime::Frame;
using loader::runtime::FrameType;
using loader::runtime::ReadStatus;
using loader::runtime::read_frame;
using loader::runtime::write_frame;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

namespace {

constexpr size_t kIndices = 256;     // a W1 batch
constexpr size_t kResultBytes = 200;  // a batch descriptor
constexpr size_t kSlots = 64;         // ring capacity (tasks in flight per worker must fit)
constexpr size_t kSlotBytes = 2304;   // 256 indices + header

void spin_us(double us) {
  if (us <= 0) return;
  auto end = Clock::now() + std::chrono::duration<double, std::micro>(us);
  while (Clock::now() < end) {
  }
}

struct Usage {
  double cpu_us = 0;
  long voluntary = 0, involuntary = 0;
  static Usage self() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    Usage r;
    r.cpu_us = static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 +
               static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
    r.voluntary = u.ru_nvcsw;
    r.involuntary = u.ru_nivcsw;
    return r;
  }
};

std::string task_body(uint64_t task) {  // as Pipeline::send_task_locked builds it
  std::string b;
  b.reserve(24 + kIndices * 8);
  loader::runtime::put_u64(b, task);
  loader::runtime::put_u64(b, 1);  // slab
  loader::runtime::put_u64(b, kIndices);
  std::vector<int64_t> ind(kIndices);
  for (size_t i = 0; i < kIndices; ++i) ind[i] = static_cast<int64_t>((task * kIndices + i) * 7919 % 1000000);
  b.append(reinterpret_cast<const char*>(ind.data()), ind.size() * 8);
  return b;
}

uint64_t task_of(const std::string& body) {
  uint64_t t;
  std::memcpy(&t, body.data(), 8);
  return t;
}

// ------------------------------------------------------------------ shared-memory ring
struct Ring {
  std::atomic<uint64_t> head{0};  // messages pushed (producer)
  std::atomic<uint64_t> tail{0};  // messages popped (consumer)
  std::atomic<int> waiting{0};    // the consumer sleeps (or is about to)
  bi::interprocess_mutex mu;
  bi::interprocess_condition cv;
  uint32_t len[kSlots];
  char slots[kSlots][kSlotBytes];

  // Producer side.  The caller keeps at most kSlots messages unconsumed (the window).
  void push(const std::string& m) {
    const uint64_t h = head.load(std::memory_order_relaxed);
    len[h % kSlots] = static_cast<uint32_t>(m.size());
    std::memcpy(slots[h % kSlots], m.data(), m.size());
    head.store(h + 1, std::memory_order_seq_cst);
    if (waiting.load(std::memory_order_seq_cst)) {  // only a sleeping consumer costs a wake-up
      bi::scoped_lock<bi::interprocess_mutex> lock(mu);
      cv.notify_one();
    }
  }
  // Consumer side; false when `stop` was set while it waited.
  bool pop(std::string& out, const std::atomic<int>* stop = nullptr) {
    const uint64_t t = tail.load(std::memory_order_relaxed);
    while (head.load(std::memory_order_acquire) == t) {
      bi::scoped_lock<bi::interprocess_mutex> lock(mu);
      waiting.store(1, std::memory_order_seq_cst);
      if (head.load(std::memory_order_seq_cst) == t) {
        if (stop && stop->load()) {
          waiting.store(0);
          return false;
        }
        cv.wait(lock);
      }
      waiting.store(0, std::memory_order_relaxed);
    }
    out.assign(slots[t % kSlots], len[t % kSlots]);
    tail.store(t + 1, std::memory_order_release);
    return true;
  }
};

struct Channel {  // one worker's two rings, in one segment both processes map
  Ring tasks;
  Ring results;
  std::atomic<int> stop{0};
};

// ------------------------------------------------------------------ the worker process
int child_main(int sock) {
  const char* mode = std::getenv("BATCH_BENCH_CHILD");
  const double work_us = std::atof(std::getenv("BATCH_BENCH_WORK_US"));
  std::string result(kResultBytes, 'r');
  std::vector<int64_t> indices(kIndices);
  auto run = [&](const std::string& body) {
    std::memcpy(indices.data(), body.data() + 24, kIndices * 8);  // parsed as the worker does
    spin_us(work_us);
    std::memcpy(result.data(), body.data(), 8);  // the task number
  };
  Frame f;
  if (std::strcmp(mode, "socket") == 0) {
    while (read_frame(sock, f, -1) == ReadStatus::Ok && f.type == FrameType::Task) {
      run(f.body);
      if (!write_frame(sock, FrameType::Result, result)) return 0;
    }
    return 0;
  }
  // shm: the first frame brings the segment's descriptor.
  if (read_frame(sock, f, -1) != ReadStatus::Ok || !f.fd) return 3;
  void* p = mmap(nullptr, sizeof(Channel), PROT_READ | PROT_WRITE, MAP_SHARED, f.fd.get(), 0);
  if (p == MAP_FAILED) return 4;
  auto* ch = static_cast<Channel*>(p);
  std::string body;
  while (ch->tasks.pop(body, &ch->stop)) {
    run(body);
    ch->results.push(result);
  }
  return 0;
}

// ------------------------------------------------------------------ the three paths
struct Options {
  int workers = 2, prefetch = 2;
  uint64_t batches = 20000;
  double work_us = 30, consume_us = 2;
};

std::vector<ChildProcess> spawn(const Options& o, const char* mode) {
  setenv("BATCH_BENCH_CHILD", mode, 1);
  setenv("BATCH_BENCH_WORK_US", std::to_string(o.work_us).c_str(), 1);
  std::vector<ChildProcess> c;
  for (int w = 0; w < o.workers; ++w) c.push_back(ChildProcess::spawn_worker(w));
  return c;
}

// Runs the dispatch rule over `send(worker, task)` and `receive(worker, task)`, which
// returns when task's result is in the application's hands.
template <class Send, class Receive>
json drive(const Options& o, const std::string& path, std::vector<ChildProcess>& children, Send send,
           Receive receive) {
  const auto window = static_cast<uint64_t>(o.workers * o.prefetch);
  const auto k = static_cast<uint64_t>(o.workers);
  auto one_pass = [&](uint64_t first, uint64_t n) {
    uint64_t sent = first;
    while (sent < first + n && sent < first + window) send(static_cast<int>(sent % k), sent), ++sent;
    for (uint64_t t = first; t < first + n; ++t) {
      receive(static_cast<int>(t % k), t);
      if (sent < first + n) send(static_cast<int>(sent % k), sent), ++sent;
      spin_us(o.consume_us);
    }
  };
  one_pass(0, 1000);  // warm-up
  Usage u0 = Usage::self();
  std::vector<double> c0;
  for (auto& c : children) c0.push_back(loader::bench_util::process_cpu_us(c.pid()));
  auto t0 = Clock::now();
  one_pass(1000, o.batches);
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  Usage u1 = Usage::self();
  double child = 0;
  for (size_t i = 0; i < children.size(); ++i) child += loader::bench_util::process_cpu_us(children[i].pid()) - c0[i];
  const auto n = static_cast<double>(o.batches);
  return {{"path", path},
          {"batches", o.batches},
          {"workers", o.workers},
          {"prefetch", o.prefetch},
          {"work_us", o.work_us},
          {"consume_us", o.consume_us},
          {"batches_per_s", n / secs},
          {"parent_cpu_us_per_batch", (u1.cpu_us - u0.cpu_us) / n},
          {"parent_cpu_us_per_batch_beyond_consume", (u1.cpu_us - u0.cpu_us) / n - o.consume_us},
          {"parent_voluntary_switches_per_batch", static_cast<double>(u1.voluntary - u0.voluntary) / n},
          {"parent_involuntary_switches_per_batch", static_cast<double>(u1.involuntary - u0.involuntary) / n},
          {"workers_cpu_us_per_batch", child / n}};
}

json socket_reader(const Options& o) {
  auto children = spawn(o, "socket");
  std::mutex mu;
  std::condition_variable cv;
  bool waiting = false;
  std::map<uint64_t, std::string> ready;  // the reorder buffer
  std::vector<std::thread> readers;
  for (auto& c : children)
    readers.emplace_back([&, sock = c.socket()] {
      Frame f;
      while (read_frame(sock, f, -1) == ReadStatus::Ok) {
        std::unique_lock<std::mutex> lock(mu);
        ready.emplace(task_of(f.body), std::move(f.body));
        if (waiting) {
          lock.unlock();
          cv.notify_one();
        }
      }
    });
  auto send = [&](int w, uint64_t t) { write_frame(children[static_cast<size_t>(w)].socket(), FrameType::Task, task_body(t)); };
  auto receive = [&](int, uint64_t t) {
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      auto it = ready.find(t);
      if (it != ready.end()) {
        ready.erase(it);
        return;
      }
      waiting = true;
      cv.wait(lock);
      waiting = false;
    }
  };
  json r = drive(o, "socket-reader", children, send, receive);
  for (auto& c : children) c.shutdown_socket();
  for (auto& t : readers) t.join();
  return r;
}

json socket_direct(const Options& o) {
  auto children = spawn(o, "socket");
  Frame f;
  auto send = [&](int w, uint64_t t) { write_frame(children[static_cast<size_t>(w)].socket(), FrameType::Task, task_body(t)); };
  auto receive = [&](int w, uint64_t t) {  // a worker answers its tasks in order
    if (read_frame(children[static_cast<size_t>(w)].socket(), f, 5000) != ReadStatus::Ok || task_of(f.body) != t)
      throw std::runtime_error("socket-direct: lost result " + std::to_string(t));
  };
  return drive(o, "socket-direct", children, send, receive);
}

json shm_ring(const Options& o) {
  auto children = spawn(o, "shm");
  std::vector<std::shared_ptr<loader::runtime::ShmSegment>> segments;  // name-less, as slabs are
  std::vector<Channel*> ch;
  for (auto& c : children) {
    segments.push_back(loader::runtime::ShmSegment::create(sizeof(Channel)));
    ch.push_back(new (segments.back()->data()) Channel());
    write_frame(c.socket(), FrameType::AddSlab, "", segments.back()->fd());
  }
  std::string body;
  auto send = [&](int w, uint64_t t) { ch[static_cast<size_t>(w)]->tasks.push(task_body(t)); };
  auto receive = [&](int w, uint64_t t) {
    ch[static_cast<size_t>(w)]->results.pop(body);
    if (task_of(body) != t) throw std::runtime_error("shm-ring: lost result " + std::to_string(t));
  };
  json r = drive(o, "shm-ring", children, send, receive);
  for (auto* c : ch) {
    c->stop.store(1);
    bi::scoped_lock<bi::interprocess_mutex> lock(c->tasks.mu);
    c->tasks.cv.notify_all();
  }
  for (auto& c : children) c.wait_exit(2000);
  return r;
}

int usage() {
  std::cerr << "usage: batch_path_bench [--batches N] [--workers K] [--prefetch P] [--work-us W] "
               "[--consume-us C] [--paths socket-reader,socket-direct,shm-ring] [--rounds R]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* fd = std::getenv("LOADER_WORKER_FD"); fd && std::getenv("BATCH_BENCH_CHILD")) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    signal(SIGPIPE, SIG_IGN);
    _exit(child_main(std::atoi(fd)));
  }
  Options o;
  std::string paths = "socket-reader,socket-direct,shm-ring";
  int rounds = 3;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    std::string v = argv[++i];
    if (a == "--batches") o.batches = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--workers") o.workers = std::atoi(v.c_str());
    else if (a == "--prefetch") o.prefetch = std::atoi(v.c_str());
    else if (a == "--work-us") o.work_us = std::atof(v.c_str());
    else if (a == "--consume-us") o.consume_us = std::atof(v.c_str());
    else if (a == "--paths") paths = v;
    else if (a == "--rounds") rounds = std::atoi(v.c_str());
    else return usage();
  }
  if (o.batches == 0 || o.workers <= 0 || o.prefetch <= 0 || rounds <= 0 ||
      static_cast<size_t>(o.prefetch) > kSlots)
    return usage();
  signal(SIGPIPE, SIG_IGN);
  const std::vector<std::string> list = loader::bench_util::split_list(paths);
  try {
    for (int r = 1; r <= rounds; ++r)  // paths alternate, so the machine's drift hits each
      for (const auto& p : list) {
        json j;
        if (p == "socket-reader") j = socket_reader(o);
        else if (p == "socket-direct") j = socket_direct(o);
        else if (p == "shm-ring") j = shm_ring(o);
        else return usage();
        j["round"] = r;
        std::cout << j.dump() << std::endl;
      }
  } catch (const std::exception& e) {
    std::cerr << "batch_path_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
