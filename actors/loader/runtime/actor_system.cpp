#include "loader/runtime/actor_system.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include <caf/policy/work_stealing.hpp>
#include <caf/scheduler/coordinator.hpp>

#include <caf/io/all.hpp>
#ifndef LOADER_WITH_CAF_OPENSSL
#define LOADER_WITH_CAF_OPENSSL 0
#endif
#if LOADER_WITH_CAF_OPENSSL
#include <caf/openssl/manager.hpp>
#endif

#include "loader/error.h"
#include "loader/runtime/os/os_error.h"
#include "loader/runtime/remote_protocol.h"

namespace loader::runtime {

RuntimeConfig::RuntimeConfig(const SystemSpec& spec) {
  guard_scheduler_start(*this);
  if (spec.scheduler_threads > 0) set("scheduler.max-threads", spec.scheduler_threads);
  if (!spec.poll) {
    set("work-stealing.aggressive-poll-attempts", 0);
    set("work-stealing.moderate-poll-attempts", 0);
  }
  if (spec.network) {
    add_remote_types(*this);
    load<caf::io::middleman>();
    set("middleman.heartbeat-interval", caf::timespan{std::chrono::milliseconds(500)});
  }
  const int tls_given = !spec.tls_cert.empty() + !spec.tls_key.empty() + !spec.tls_ca.empty();
  if (tls_given) {
    if (!spec.network || tls_given != 3) throw RuntimeError("internal: TLS needs the network layer and all three files");
#if LOADER_WITH_CAF_OPENSSL
    load<caf::openssl::manager>();
    set("openssl.certificate", spec.tls_cert);
    set("openssl.key", spec.tls_key);
    set("openssl.cafile", spec.tls_ca);
#else
    throw ValueError("TLS needs libcaf-openssl, and this build has none");
#endif
  }
  set("logger.verbosity", caf::atom("quiet"));
  set("logger.console", caf::atom("none"));
}

namespace {
using StealingCoordinator = caf::scheduler::coordinator<caf::policy::work_stealing>;

/// The clock thread of CAF's coordinator is a private member; the guarded scheduler must
/// join it when the coordinator's start failed after starting it.  Naming a private
/// member in an explicit instantiation is allowed (C++17 [temp.explicit]: access is not
/// checked for the names an explicit instantiation uses), and this is the one
/// place that does: ClockThread{} yields &coordinator::timer_.
struct ClockThread {
  using type = std::thread StealingCoordinator::*;
  friend type member_of(ClockThread);
};
template <typename Tag, typename Tag::type Member>
struct ExposeMember {
  friend typename Tag::type member_of(Tag) { return Member; }
};
template struct ExposeMember<ClockThread, &StealingCoordinator::timer_>;

/// A job that ends the scheduler worker that runs it (CAF's own shutdown job, as in
/// coordinator::stop()).  Its reference count is kept above zero by its owner's
/// intrusive_ptr: the workers release nothing they did not take.
class EndWorker final : public caf::resumable, public caf::ref_counted {
 public:
  resume_result resume(caf::execution_unit*, size_t) override { return resumable::shutdown_execution_unit; }
  void intrusive_ptr_add_ref_impl() override { intrusive_ptr_add_ref(this); }
  void intrusive_ptr_release_impl() override { intrusive_ptr_release(this); }
};

/// CAF's default scheduler, loaded in its place (guard_scheduler_start).  start() runs
/// in caf::actor_system's constructor, on the thread building the system: it starts
/// the scheduler's worker threads, its clock thread and the printer actor's thread
/// (detached), and the first of these that cannot be created throws.  Caught here, the
/// exception never unwinds the system's constructor (which CAF cannot survive); the
/// threads not started yet are never started, and failure() says what failed.
///
/// The threads that did start are ended and joined before start() returns: a
/// half-started system whose threads ran on was a crash waiting for the process's exit
/// (a thread that began after start() returned read its system's configuration,
/// cfg.thread_hooks_ in actor_system::thread_started(), after the program had destroyed
/// it: SIGSEGV in about 1 run in 10 of `loader_test_address_space system` at pids.max
/// 2 to 4, seen in a core dump).  Such a system runs nothing, holds no thread, and is
/// left undestroyed (start_actor_system): its destructor would wait for threads that
/// never ran.
class GuardedScheduler final : public StealingCoordinator {
 public:
  using StealingCoordinator::StealingCoordinator;
  static caf::actor_system::module* make(caf::actor_system& sys, caf::detail::type_list<>) {
    return new GuardedScheduler(sys);
  }
  /// Empty when start() started every thread; else what failed, in words.
  const std::string& failure() const { return failure_; }

 protected:
  void start() override {
    try {
      StealingCoordinator::start();
    } catch (const std::system_error& e) {
      failure_ = "a thread of its scheduler could not be created (" + std::string(e.what()) +
                 (e.code() == std::errc::resource_unavailable_try_again ? thread_limits_text() : std::string()) + ")";
    } catch (const std::exception& e) {
      failure_ = "its scheduler could not start (" + std::string(e.what()) + ")";
    }
    if (!failure_.empty()) end_started_threads();
  }

 private:
  /// Called by start(), on the thread building the system, after a thread could not be
  /// created: ends and joins the worker threads and the clock thread that were created.
  /// No actor ran yet, so their queues hold nothing but the EndWorker jobs sent here.
  /// (A failed printer thread leaves the printer actor unstarted and holding nothing.)
  void end_started_threads() {
    std::vector<caf::scheduler::worker<caf::policy::work_stealing>*> running;
    for (size_t i = 0; i < num_workers(); ++i) {
      auto* w = worker_by_id(i);
      if (w && w->get_thread().joinable()) running.push_back(w);
    }
    // One job per running worker, each ends the worker that takes it: a job stolen by
    // another running worker ends that one, and the one it was meant for takes another.
    std::vector<caf::intrusive_ptr<EndWorker>> jobs;
    for (auto* w : running) {
      jobs.emplace_back(caf::make_counted<EndWorker>());
      w->external_enqueue(jobs.back().get());
    }
    for (auto* w : running) w->get_thread().join();
    std::thread& clock_thread = this->*member_of(ClockThread{});
    if (clock_thread.joinable()) {
      clock().cancel_dispatch_loop();
      clock_thread.join();
    }
  }

  std::string failure_;
};

/// The holders of one process.  A child forked from it inherits a copy of its
/// parent's registry and exit handlers: it must not end its parent's pools, so it
/// leaves that copy alone and makes its own on first use.
struct ExitRegistry {
  pid_t owner = getpid();
  std::mutex mu;
  std::set<ExitTeardown*> holders;
  std::vector<std::shared_ptr<void>> kept;  ///< never destroyed (see keep_until_process_end)
};
std::atomic<ExitRegistry*> g_exit_registry{nullptr};

ExitRegistry& exit_registry() {
  ExitRegistry* r = g_exit_registry.load();
  while (!r || r->owner != getpid()) {
    auto* fresh = new ExitRegistry;  // never freed: destructors that run at exit use it
    if (g_exit_registry.compare_exchange_strong(r, fresh)) return *fresh;
    delete fresh;  // another thread made it first; `r` is now that one
  }
  return *r;
}

void tear_down_at_exit() {
  ExitRegistry* r = g_exit_registry.load();
  if (!r || r->owner != getpid()) return;  // nothing registered here, or a forked child's copy
  std::vector<ExitTeardown*> holders;
  {
    std::lock_guard<std::mutex> lock(r->mu);
    holders.assign(r->holders.begin(), r->holders.end());
    r->holders.clear();
  }
  for (ExitTeardown* h : holders) h->teardown_at_exit();
}
}  // namespace

void register_at_exit(ExitTeardown* holder) {
  {
    ExitRegistry& r = exit_registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.holders.insert(holder);
  }
  // Registered after the holder's owner was made: exit() runs it before it destroys
  // that owner.  Later runs find the registry empty.
  std::atexit(tear_down_at_exit);
}

void unregister_at_exit(ExitTeardown* holder) {
  ExitRegistry& r = exit_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.holders.erase(holder);
}

void keep_until_process_end(std::shared_ptr<void> object) {
  ExitRegistry& r = exit_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.kept.push_back(std::move(object));
}

namespace {
/// The threads CAF's actor system starts in its constructor: 2 scheduler workers
/// (RuntimeConfig), its clock, and one more for detached work.
constexpr int kSystemThreads = 4;
}  // namespace

/// Starts `count` threads and joins them.  CAF's constructor unwinds a thread
/// it could not start by destroying the ones it already started, still joinable, and
/// that calls std::terminate (measured: an address-space limit, `prlimit --as`, just
/// above what the process maps; a pids cgroup of 2 to 5 tasks).  Failing here first
/// turns that abort into a clear error; glibc keeps the stacks and arenas of these
/// threads for the next ones, so CAF's threads, started right after, find them.
void probe_system_threads(int count) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::vector<std::thread> threads;
  std::vector<pid_t> tids(static_cast<size_t>(count), 0);
  std::string failure;
  try {
    for (int i = 0; i < count; ++i) {
      threads.emplace_back([&, i] {
        void* p = std::malloc(64);  // the thread's malloc arena, as CAF's would make
        std::free(p);
        std::unique_lock<std::mutex> lock(mu);
        tids[static_cast<size_t>(i)] = static_cast<pid_t>(::syscall(SYS_gettid));
        cv.wait(lock, [&] { return release; });
      });
    }
  } catch (const std::system_error& e) {
    failure = std::string(e.what()) +
              (e.code() == std::errc::resource_unavailable_try_again ? thread_limits_text() : std::string());
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  for (auto& t : threads) t.join();
  // join() returns once a thread has left its code, a little before the kernel counts
  // it out of RLIMIT_NPROC and the cgroup's pids (release_task); CAF's threads started
  // in between were refused under a tight limit (seen in CI: pids.max 5).  The task
  // leaves /proc/self/task after it is counted out: wait for that (at most 1 s).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (pid_t tid : tids) {
    if (tid == 0) continue;
    const std::string path = "/proc/self/task/" + std::to_string(tid);
    while (::access(path.c_str(), F_OK) == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (!failure.empty())
    throw RuntimeError("DataLoader: cannot start the actor system: " + std::to_string(threads.size()) + " of its " +
                       std::to_string(count) + " threads could be created (" + failure + ")");
}

void guard_scheduler_start(caf::actor_system_config& cfg) { cfg.load<GuardedScheduler>(); }

std::unique_ptr<caf::actor_system> start_actor_system(caf::actor_system_config& cfg) {
  auto sys = std::make_unique<caf::actor_system>(cfg);
  const auto* sched = dynamic_cast<const GuardedScheduler*>(&sys->scheduler());
  if (sched == nullptr || sched->failure().empty()) return sys;
  const std::string failure = sched->failure();
  // Left undestroyed: stopping the scheduler waits for every worker thread it has, and
  // the ones it could not create never answer.  Those it did create were ended and
  // joined by the scheduler's start(): nothing of this system runs any more.
  (void)sys.release();
  throw RuntimeError(failure);
}

std::shared_ptr<caf::actor_system> acquire_system() {
  static std::mutex mu;
  static std::weak_ptr<caf::actor_system> current;
  std::lock_guard<std::mutex> lock(mu);
  if (auto sys = current.lock()) return sys;
  static RuntimeConfig* cfg = nullptr;
  if (!cfg) {
    cfg = new RuntimeConfig();  // lives as long as the process: systems keep a reference
    char arg0[] = "loader";
    char* argv[] = {arg0, nullptr};
    cfg->parse(1, argv);  // without an argv CAF reads no config file
  }
  probe_system_threads(kSystemThreads);
  std::shared_ptr<caf::actor_system> sys;
  try {
    sys = start_actor_system(*cfg);
  } catch (const RuntimeError& e) {  // a thread of CAF's scheduler (the probe passed, another process won the race)
    throw RuntimeError(std::string("DataLoader: cannot start the actor system: ") + e.what());
  } catch (const std::exception& e) {
    throw RuntimeError(std::string("DataLoader: cannot start the actor system (") + e.what() + ")" +
                       thread_limits_text());
  }
  current = sys;
  return sys;
}

}  // namespace loader::runtime
