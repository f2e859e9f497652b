// Workers on other hosts (RemoteTransport, `loader serve`), over loopback: a worker host
// is this test binary started with `serve` (test_main.cpp), so it knows the tests'
// datasets.  Bytes as with local workers, authentication, garbage on the port, a host
// killed or frozen mid-epoch (declared lost naming host:port, within the timeout), a
// restart on the same host byte for byte, a handle naming a local resource refused.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "loader/dataloader.h"
#include "loader/error.h"
#include "loader/generator.h"
#include "loader/serve.h"
#include "loader/warnings.h"
#include "process_leaks.h"

extern char** environ;

namespace loader {
namespace {

/// Sample i: 4 draws of the worker's generator and a 4 KiB ramp (so batches are more
/// than a few bytes), after `delay_ms`.
class RemoteDraws : public Dataset {
 public:
  RemoteDraws(int64_t n, int64_t delay_ms) : n_(n), delay_ms_(delay_ms) {}
  Value get(int64_t i) override {
    if (delay_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    std::vector<double> v(4);
    for (auto& x : v) x = static_cast<double>(default_generator().random64());
    std::vector<int32_t> ramp(1024);
    for (size_t k = 0; k < ramp.size(); ++k) ramp[k] = static_cast<int32_t>(i * 7 + static_cast<int64_t>(k));
    return Value::tuple({Value(Tensor::from_vector(v)), Value(Tensor::from_vector(ramp)), Value(i)});
  }
  int64_t size() const override { return n_; }

 private:
  int64_t n_, delay_ms_;
};
LOADER_REGISTER_DATASET("remote_test_draws", [](const Value& p) {
  return std::make_shared<RemoteDraws>(p.at("n").to_int(), p.get("delay_ms", Value(0)).to_int());
});

std::shared_ptr<Dataset> draws(int64_t n, int64_t delay_ms = 0) {
  return make_dataset({"remote_test_draws", Value::dict({{"n", n}, {"delay_ms", delay_ms}})});
}

/// A file holding `secret`, removed when the test ends (whatever way it ends).
class TokenFile {
 public:
  explicit TokenFile(const std::string& secret) {
    char path[] = "/tmp/loader_remote_test_tokenXXXXXX";
    const int fd = mkstemp(path);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(write(fd, secret.data(), secret.size()), static_cast<ssize_t>(secret.size()));
    close(fd);
    path_ = path;
  }
  ~TokenFile() { unlink(path_.c_str()); }
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  operator const std::string&() const { return path_; }  // NOLINT: used as the path
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// A worker host on 127.0.0.1, a port of its choosing: this binary with `serve`.
class Host {
 public:
  /// `netns`: run it in that network namespace (`ip netns exec`), listening on `listen`.
  explicit Host(const std::string& token_file, int64_t timeout_ms = 3000, std::vector<std::string> extra = {},
                const std::string& listen = "127.0.0.1:0", const std::string& netns = "") {
    int out[2];
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    char self[4096] = {};
    EXPECT_GT(readlink("/proc/self/exe", self, sizeof self - 1), 0);
    std::vector<std::string> args = {self, "serve", "--listen", listen, "--token-file", token_file,
                                     "--stats-every-ms", "100", "--timeout-ms", std::to_string(timeout_ms)};
    args.insert(args.end(), extra.begin(), extra.end());
    // `ip netns exec` execs the program in the namespace: the pid stays the host's.
    if (!netns.empty()) args.insert(args.begin(), {"/usr/sbin/ip", "netns", "exec", netns});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    out_ = fdopen(out[0], "r");
    const std::string first = line(std::chrono::seconds(20));
    const auto at = first.find("\"listening\": \"");
    EXPECT_NE(at, std::string::npos) << "the host said: " << first;
    if (at != std::string::npos) {
      const auto begin = at + 14;
      address_ = first.substr(begin, first.find('"', begin) - begin);
    }
    const auto bulk = first.find("\"bulk_port\": ");
    EXPECT_NE(bulk, std::string::npos) << "the host said: " << first;
    if (bulk != std::string::npos) bulk_port_ = std::stoi(first.substr(bulk + 13));
  }
  ~Host() {
    stop(SIGKILL);
    if (out_) fclose(out_);
  }
  const std::string& address() const { return address_; }
  /// The host's bulk stream port (0: none).
  int bulk_port() const { return bulk_port_; }
  pid_t pid() const { return pid_; }
  /// The next line the host prints (its stats every 100 ms), within `limit`.
  std::string line(std::chrono::milliseconds limit) {
    pollfd p{fileno(out_), POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(limit.count())) <= 0) return "";
    char buf[1024];
    return fgets(buf, sizeof buf, out_) ? std::string(buf) : std::string();
  }
  /// Waits for a stats line with at least `tasks` tasks done.
  bool wait_tasks_done(int64_t tasks) { return wait_stat("tasks_done", tasks); }
  /// Waits for a stats line whose `key` is at least `least`.
  bool wait_stat(const std::string& key, int64_t least) {
    const std::string k = "\"" + key + "\": ";
    for (int i = 0; i < 600; ++i) {
      const std::string l = line(std::chrono::milliseconds(1000));
      const auto at = l.find(k);
      if (at != std::string::npos && std::stoll(l.substr(at + k.size())) >= least) return true;
    }
    return false;
  }
  void signal(int sig) { kill(pid_, sig); }
  void stop(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, SIGCONT);
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  std::string address_;
  int bulk_port_ = 0;
};

DataLoaderOptions options(int local, const std::vector<std::string>& remote, const std::string& token_file) {
  DataLoaderOptions o;
  o.batch_size = 8;
  o.num_workers = local;
  o.remote_workers = remote;
  o.remote_token_file = token_file;
  o.generator = std::make_shared<Generator>(11);
  o.shuffle = true;
  return o;
}

std::vector<Value> all_batches(DataLoader& dl) {
  std::vector<Value> out;
  for (Value& b : dl) out.push_back(b);
  return out;
}

void expect_same_batches(const std::vector<Value>& got, const std::vector<Value>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    for (size_t k = 0; k < 3; ++k)
      EXPECT_TRUE(got[i][k].to_tensor().bitwise_equal(want[i][k].to_tensor())) << what << ": batch " << i << ", field " << k;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Remote, OneLocalAndOneRemoteWorkerGiveTheBytesOfTwoLocalOnes) {
  const TokenFile token("remote-secret-1");
  std::vector<Value> want, want_second;
  {
    DataLoader dl(draws(200), options(2, {}, ""));
    want = all_batches(dl);
    want_second = all_batches(dl);
  }
  {
    Host host(token);
    DataLoader dl(draws(200), options(1, {host.address()}, token));
    expect_same_batches(all_batches(dl), want, "1 local + 1 remote");
    expect_same_batches(all_batches(dl), want_second, "1 local + 1 remote, second epoch");
    // Two workers on hosts and none here: the same bytes.
    Host other(token);
    DataLoader both(draws(200), options(0, {host.address(), other.address()}, token));
    expect_same_batches(all_batches(both), want, "2 remote");
  }
}

TEST(Remote, AWrongTokenIsRefusedNamingTheHostAndTheHostServesTheNextClient) {
  const TokenFile token("the-right-one");
  const TokenFile wrong("not-the-right-one");
  Host host(token);
  const std::string e = error_of([&] {
    DataLoader dl(draws(40), options(0, {host.address()}, wrong));
    all_batches(dl);
  });
  EXPECT_NE(e.find("authentication failed at " + host.address()), std::string::npos) << e;
  DataLoader dl(draws(40), options(0, {host.address()}, token));
  EXPECT_EQ(all_batches(dl).size(), 5u);
}

TEST(Remote, RandomBytesOnThePortNeverStopTheHost) {
  const TokenFile token("garbage-test");
  Host host(token);
  const auto colon = host.address().rfind(':');
  const int port = std::stoi(host.address().substr(colon + 1));
  std::mt19937_64 rng(7);
  for (int round = 0; round < 4; ++round) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    std::string junk(64 * 1024, '\0');
    for (auto& c : junk) c = static_cast<char>(rng());
    // The host may close the connection at any point of it.
    (void)!send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    close(fd);
  }
  DataLoader dl(draws(40), options(0, {host.address()}, token));
  EXPECT_EQ(all_batches(dl).size(), 5u);
}

/// A TCP connection to 127.0.0.1:`port` (-1 when it cannot be made).
int connect_local(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/// Whether the peer closes `fd` within `limit` (reads whatever it sends meanwhile).
bool closed_by_peer(int fd, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  char buf[256];
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) == 1) {
      const ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    }
  }
  return false;
}

// The bulk port takes a session's greeting and nothing else: random bytes, the magic
// with a key no session has, a greeting cut short and silence are each closed (within
// the host's timeout, 3 s here) and counted, and the host serves the next client, its
// batches on the bulk stream.
TEST(Remote, TheBulkPortClosesAnythingButASessionsGreetingAndTheHostServesOn) {
  const TokenFile token("bulk-test");
  Host host(token);
  ASSERT_GT(host.bulk_port(), 0);
  std::mt19937_64 rng(11);
  std::string junk(64 * 1024, '\0');
  for (auto& c : junk) c = static_cast<char>(rng());
  const std::string wrong_key = std::string("LDRBULK1") + std::string(16, '\x5a');
  const std::string tries[] = {junk, wrong_key, wrong_key.substr(0, 10), std::string()};
  for (const std::string& bytes : tries) {
    const int fd = connect_local(host.bulk_port());
    ASSERT_GE(fd, 0);
    (void)!send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    EXPECT_TRUE(closed_by_peer(fd, std::chrono::seconds(8))) << "the host kept a connection that sent "
                                                             << bytes.size() << " bytes";
    close(fd);
  }
  EXPECT_TRUE(host.wait_stat("bulk_refused", 4));
  std::vector<Value> want;
  {
    DataLoader dl(draws(40), options(2, {}, ""));
    want = all_batches(dl);
  }
  DataLoader dl(draws(40), options(1, {host.address()}, token));
  expect_same_batches(all_batches(dl), want, "1 local + 1 remote after the bulk port's refusals");
  EXPECT_TRUE(host.wait_stat("bytes_bulk", 1)) << "the batches did not come on the bulk stream";
}

// A host started with --no-bulk sends every batch over CAF's connection: the same bytes.
TEST(Remote, AHostWithoutABulkStreamGivesTheSameBytes) {
  const TokenFile token("no-bulk-test");
  Host host(token, 3000, {"--no-bulk"});
  EXPECT_EQ(host.bulk_port(), 0);
  std::vector<Value> want;
  {
    DataLoader dl(draws(40), options(2, {}, ""));
    want = all_batches(dl);
  }
  DataLoader dl(draws(40), options(1, {host.address()}, token));
  expect_same_batches(all_batches(dl), want, "1 local + 1 remote over BASP alone");
  EXPECT_TRUE(host.wait_tasks_done(2));
}

TEST(Remote, AHandleNamingALocalResourceIsRefusedNamingTheParameter) {
  const TokenFile token("resource-test");
  const std::string e = error_of([&] {
    auto ds = make_dataset({"remote_test_draws", Value::dict({{"n", 8}, {"path", "/proc/1234/fd/5"}})});
    DataLoader dl(ds, options(0, {"127.0.0.1:9"}, token));
    all_batches(dl);
  });
  EXPECT_NE(e.find("'path'"), std::string::npos) << e;
  EXPECT_NE(e.find("/proc/1234/fd/5"), std::string::npos) << e;
}

/// What an epoch with a fault gave.
struct FaultRun {
  std::vector<Value> batches;
  std::string error;
  double fault_to_end_s = 0;  ///< from the fault to the end of the epoch
  std::vector<std::string> warnings;
};

/// An epoch of draws(n, 2) with `o`, doing `fault` to `host` once it has answered 3
/// tasks (SIGCONT `cont_after` later, if given).
FaultRun epoch_with_fault(Host& host, const DataLoaderOptions& o, int64_t n, int fault,
                          std::optional<std::chrono::milliseconds> cont_after = std::nullopt) {
  FaultRun run;
  WarningCapture capture;
  DataLoader dl(draws(n, 2), o);
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
  std::thread faulter([&] {
    if (!host.wait_tasks_done(3)) return;
    at = std::chrono::steady_clock::now();
    host.signal(fault);
    if (cont_after) {
      std::this_thread::sleep_for(*cont_after);
      host.signal(SIGCONT);
    }
  });
  run.error = error_of([&] { run.batches = all_batches(dl); });
  faulter.join();
  run.fault_to_end_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - at).count();
  run.warnings = capture.messages();
  return run;
}

std::vector<Value> two_local_workers(int64_t n, int epochs = 1, bool persistent = false) {
  DataLoaderOptions o = options(2, {}, "");
  o.persistent_workers = persistent;
  DataLoader dl(draws(n, 2), o);
  std::vector<Value> out;
  for (int e = 0; e < epochs; ++e) out = all_batches(dl);
  return out;
}

size_t warnings_naming(const std::vector<std::string>& warnings, const std::string& what) {
  size_t n = 0;
  for (const auto& w : warnings) n += w.find(what) != std::string::npos;
  return n;
}

TEST(Remote, AKilledHostsTasksGoToALocalStandInWithTheSameBytes) {
  const TokenFile token("kill-test");
  const auto want = two_local_workers(600);
  Host host(token);
  DataLoaderOptions o = options(1, {host.address()}, token);
  o.remote_timeout_ms = 3000;
  FaultRun run = epoch_with_fault(host, o, 600, SIGKILL);
  EXPECT_EQ(run.error, "");
  expect_same_batches(run.batches, want, "a host killed mid-epoch");
  EXPECT_EQ(warnings_naming(run.warnings, "DataLoader worker on " + host.address() + ": its connection closed"), 1u);
}

TEST(Remote, AFrozenHostIsLostWithinTheTimeoutAndItsTasksGoOnElsewhere) {
  const TokenFile token("freeze-test");
  const auto want = two_local_workers(600);
  Host host(token);
  DataLoaderOptions o = options(1, {host.address()}, token);
  o.remote_timeout_ms = 1500;
  FaultRun run = epoch_with_fault(host, o, 600, SIGSTOP);
  EXPECT_EQ(run.error, "");
  expect_same_batches(run.batches, want, "a host frozen mid-epoch");
  EXPECT_EQ(warnings_naming(run.warnings, "DataLoader worker on " + host.address()), 1u);
  EXPECT_GE(run.fault_to_end_s, 1.0);
  EXPECT_LT(run.fault_to_end_s, 1.5 + 5.0);
  host.stop(SIGKILL);
}

TEST(Remote, HostsFrozenTogetherAreAllLostWithinTheTimeoutAndTheEpochGoesOn) {
  // Each remote slot's restart probes the other hosts (a frozen one accepts the TCP
  // connection in its kernel and answers nothing until remote_timeout).  On the
  // scheduler's two threads, the restarts of the first two slots declared lost held
  // both (each trying the other frozen hosts, a timeout each), and the third slot's
  // watchdog look waited behind them: it was declared lost seconds late.  A remote
  // slot's actor has its own thread.
  const TokenFile token("freeze-three");
  std::vector<Value> want;
  {
    DataLoaderOptions four = options(4, {}, "");
    DataLoader dl(draws(600, 2), four);
    want = all_batches(dl);
  }
  Host a(token), b(token), c(token);
  DataLoaderOptions o = options(1, {a.address(), b.address(), c.address()}, token);
  o.remote_timeout_ms = 1000;
  std::mutex mu;
  std::vector<std::pair<std::string, std::chrono::steady_clock::time_point>> warned;
  WarningHandler previous = set_warning_handler([&](const Warning& w) {
    std::lock_guard<std::mutex> l(mu);
    warned.emplace_back(w.message, std::chrono::steady_clock::now());
  });
  std::vector<Value> got;
  std::chrono::steady_clock::time_point frozen_at{};
  std::string error;
  {
    DataLoader dl(draws(600, 2), o);
    std::thread faulter([&] {
      if (!a.wait_tasks_done(3) || !b.wait_tasks_done(3) || !c.wait_tasks_done(3)) return;
      frozen_at = std::chrono::steady_clock::now();
      for (Host* h : {&a, &b, &c}) h->signal(SIGSTOP);
    });
    error = error_of([&] { got = all_batches(dl); });
    faulter.join();
  }
  set_warning_handler(std::move(previous));
  EXPECT_EQ(error, "");
  expect_same_batches(got, want, "three hosts frozen together");
  ASSERT_NE(frozen_at, std::chrono::steady_clock::time_point{}) << "the hosts did not all answer 3 tasks";
  for (const Host* h : {&a, &b, &c}) {
    SCOPED_TRACE(h->address());
    std::optional<double> lost_after_s;
    for (const auto& [message, at] : warned)
      if (!lost_after_s && message.find("DataLoader worker on " + h->address()) != std::string::npos)
        lost_after_s = std::chrono::duration<double>(at - frozen_at).count();
    ASSERT_TRUE(lost_after_s.has_value()) << "no warning names the host";
    EXPECT_GE(*lost_after_s, 0.5);
    EXPECT_LT(*lost_after_s, 1.0 + 2.0) << "declared lost later than remote_timeout + 2 s";
  }
  for (Host* h : {&a, &b, &c}) h->stop(SIGKILL);
}

TEST(Remote, ALostHostsTasksGoToAnotherHost) {
  // No local worker: the second host takes the first one's slot too.
  const TokenFile token("two-hosts");
  const auto want = two_local_workers(600);
  Host host(token), other(token);
  DataLoaderOptions o = options(0, {host.address(), other.address()}, token);
  FaultRun run = epoch_with_fault(host, o, 600, SIGKILL);
  EXPECT_EQ(run.error, "");
  expect_same_batches(run.batches, want, "one of two hosts killed");
  EXPECT_EQ(warnings_naming(run.warnings, "DataLoader worker on " + host.address()), 1u);
}

TEST(Remote, WithNoWorkerLeftTheLoaderFailsNamingTheHostAndWhy) {
  const TokenFile token("alone");
  Host host(token);
  FaultRun run = epoch_with_fault(host, options(0, {host.address()}, token), 600, SIGKILL);
  EXPECT_NE(run.error.find("its host " + host.address() + " was lost"), std::string::npos) << run.error;
  EXPECT_NE(run.error.find("its connection closed"), std::string::npos) << run.error;
  EXPECT_NE(run.error.find("no other worker could take its tasks"), std::string::npos) << run.error;
}

TEST(Remote, AHostLostInOneEpochIsTriedAgainInTheNext) {
  const TokenFile token("home-again");
  const auto want2 = two_local_workers(600, 2, /*persistent=*/true);
  Host host(token);
  DataLoaderOptions o = options(1, {host.address()}, token);
  o.remote_timeout_ms = 800;
  o.persistent_workers = true;
  WarningCapture capture;
  DataLoader dl(draws(600, 2), o);
  std::thread faulter([&] {
    if (host.wait_tasks_done(3)) {
      host.signal(SIGSTOP);
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      host.signal(SIGCONT);
    }
  });
  std::string e = error_of([&] { all_batches(dl); });
  faulter.join();
  EXPECT_EQ(e, "");
  // The second epoch runs on the host again: its task count moves on.
  const auto line_tasks = [&] {
    int64_t tasks = -1;
    for (int i = 0; i < 5; ++i) {
      const std::string l = host.line(std::chrono::milliseconds(500));
      const auto at = l.find("\"tasks_done\": ");
      if (at != std::string::npos) tasks = std::stoll(l.substr(at + 14));
    }
    return tasks;
  };
  const int64_t before = line_tasks();
  std::vector<Value> second;
  e = error_of([&] { second = all_batches(dl); });
  EXPECT_EQ(e, "");
  expect_same_batches(second, want2, "the epoch after the loss");
  EXPECT_TRUE(host.wait_tasks_done(before + 10)) << "the host did not take its worker back";
}

TEST(Remote, ACheckpointWithARemoteWorkerResumesWithLocalOnesAndTheReverse) {
  const TokenFile token("checkpoint");
  const int64_t n = 400;
  std::vector<Value> want;
  {
    DataLoader dl(draws(n, 1), options(2, {}, ""));
    want = all_batches(dl);
  }
  Host host(token);
  // Each loader with a generator of its own, seeded alike.
  auto remote = [&] { return options(1, {host.address()}, token); };
  auto local = [] { return options(2, {}, ""); };
  for (const bool from_remote : {true, false}) {
    SCOPED_TRACE(from_remote ? "1 local + 1 remote -> 2 local" : "2 local -> 1 local + 1 remote");
    const size_t cut = 17;
    Value state;
    {
      DataLoader dl(draws(n, 1), from_remote ? remote() : local());
      auto it = dl.iter();
      for (size_t k = 0; k < cut; ++k) ASSERT_TRUE(it.next().has_value());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // tasks in flight, results waiting
      state = it.state_dict();
    }
    DataLoader resumed(draws(n, 1), from_remote ? local() : remote());
    resumed.load_state_dict(state);
    std::vector<Value> rest = all_batches(resumed);
    ASSERT_EQ(rest.size(), want.size() - cut);
    expect_same_batches(rest, std::vector<Value>(want.begin() + static_cast<long>(cut), want.end()), "resumed");
  }
}

/// A throwaway CA and a certificate for the host and one for a client, made with the
/// openssl command (nullopt when it is not installed).
std::optional<std::string> make_pki() {
  if (access("/usr/bin/openssl", X_OK) != 0) return std::nullopt;
  char dir[] = "/tmp/loader_remote_pkiXXXXXX";
  if (!mkdtemp(dir)) return std::nullopt;
  const std::string d = dir;
  std::string cmd = "cd " + d + " && /usr/bin/openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 "
                    "-subj /CN=loader-test-ca >/dev/null 2>&1";
  for (const char* n : {"host", "client"})
    cmd += std::string(" && /usr/bin/openssl req -newkey rsa:2048 -nodes -keyout ") + n + ".key -out " + n +
           ".csr -subj /CN=" + n + " >/dev/null 2>&1 && /usr/bin/openssl x509 -req -in " + n +
           ".csr -CA ca.pem -CAkey ca.key -CAcreateserial -out " + n + ".pem -days 1 >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) return std::nullopt;
  return d;
}

TEST(Remote, OverTlsAClientWithACertificateIsServedAndOneWithoutIsRefused) {
  if (!runtime::has_tls()) GTEST_SKIP() << "this build has no TLS (libcaf-openssl was not found)";
  const auto pki = make_pki();
  if (!pki) GTEST_SKIP() << "no /usr/bin/openssl to make a throwaway CA";
  const TokenFile token("tls-test");
  const std::string& d = *pki;
  Host host(token, 3000, {"--tls-cert", d + "/host.pem", "--tls-key", d + "/host.key", "--tls-ca", d + "/ca.pem"});
  char self[4096] = {};
  ASSERT_GT(readlink("/proc/self/exe", self, sizeof self - 1), 0);
  for (const std::string mode : {"served", "refused", "served"}) {
    const std::string cmd = "LOADER_REMOTE_TLS_CHILD=" + mode + "," + host.address() + "," + token.path() + "," + d + " '" +
                            self + "' --gtest_filter=RemoteTlsChild.* >/dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << "the client in another process was not " << mode;
  }
  std::system(("rm -rf " + d).c_str());
}

/// A network namespace with a veth pair to this one (10.201.N.1 here, .2 inside), made
/// and removed by the test; empty when this process may not (not root, no `ip`).
class Netns {
 public:
  Netns() {
    if (geteuid() != 0 || access("/usr/sbin/ip", X_OK) != 0) return;
    const int n = static_cast<int>(getpid() % 200) + 20;
    name_ = "ldrrt" + std::to_string(getpid());
    outside_ = "ldro" + std::to_string(getpid() % 100000);
    const std::string inside = "ldri" + std::to_string(getpid() % 100000);
    here_ = "10.201." + std::to_string(n) + ".1";
    there_ = "10.201." + std::to_string(n) + ".2";
    const std::string cmd = "/usr/sbin/ip netns add " + name_ + " && /usr/sbin/ip link add " + outside_ +
                            " type veth peer name " + inside + " && /usr/sbin/ip link set " + inside + " netns " +
                            name_ + " && /usr/sbin/ip addr add " + here_ + "/24 dev " + outside_ +
                            " && /usr/sbin/ip link set " + outside_ + " up && /usr/sbin/ip netns exec " + name_ +
                            " /usr/sbin/ip addr add " + there_ + "/24 dev " + inside + " && /usr/sbin/ip netns exec " +
                            name_ + " /usr/sbin/ip link set " + inside + " up && /usr/sbin/ip netns exec " + name_ +
                            " /usr/sbin/ip link set lo up";
    if (std::system((cmd + " 2>/dev/null").c_str()) != 0) {
      remove();
      name_.clear();
    }
  }
  ~Netns() { remove(); }
  bool ok() const { return !name_.empty(); }
  const std::string& name() const { return name_; }
  const std::string& there() const { return there_; }
  void link(bool up) {
    std::system(("/usr/sbin/ip link set " + outside_ + (up ? " up" : " down")).c_str());
  }

 private:
  void remove() {
    if (name_.empty()) return;
    // The namespace's end of the pair goes with it, and the other end with that.
    std::system(("/usr/sbin/ip netns del " + name_ + " 2>/dev/null; /usr/sbin/ip link del " + outside_ +
                 " 2>/dev/null").c_str());
  }
  std::string name_, outside_, here_, there_;
};

TEST(RemoteNetns, ALinkTakenDownLosesTheHostWithinTheTimeoutAndTheEpochGoesOn) {
  Netns ns;
  if (!ns.ok()) GTEST_SKIP() << "needs root and `ip` to make a network namespace and a veth pair";
  const TokenFile token("netns-test");
  const auto want = two_local_workers(600);
  {
    Host host(token, 3000, {}, ns.there() + ":0", ns.name());
    ASSERT_FALSE(host.address().empty());
    DataLoaderOptions o = options(1, {host.address()}, token);
    o.remote_timeout_ms = 1500;
    WarningCapture capture;
    DataLoader dl(draws(600, 2), o);
    std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
    std::thread cutter([&] {
      if (!host.wait_tasks_done(3)) return;
      at = std::chrono::steady_clock::now();
      ns.link(false);
    });
    std::vector<Value> got;
    const std::string e = error_of([&] { got = all_batches(dl); });
    cutter.join();
    const double after_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - at).count();
    EXPECT_EQ(e, "");
    expect_same_batches(got, want, "a link taken down mid-epoch");
    EXPECT_EQ(warnings_naming(capture.messages(), "DataLoader worker on " + host.address()), 1u);
    EXPECT_LT(after_s, 1.5 + 5.0);
    ns.link(true);
  }
}

// Run by OverTlsAClientWithACertificateIsServedAndOneWithoutIsRefused in a process of its
// own (skipped otherwise): LOADER_REMOTE_TLS_CHILD=mode,address,token file,pki folder.
TEST(RemoteTlsChild, AClientOfTheTlsTest) {
  const char* env = std::getenv("LOADER_REMOTE_TLS_CHILD");
  if (!env) GTEST_SKIP() << "run by Remote.OverTlsAClientWithACertificateIsServedAndOneWithoutIsRefused";
  std::vector<std::string> v;
  std::string rest = env;
  for (size_t at; (at = rest.find(',')) != std::string::npos; rest = rest.substr(at + 1)) v.push_back(rest.substr(0, at));
  v.push_back(rest);
  ASSERT_EQ(v.size(), 4u);
  DataLoaderOptions o = options(0, {v[1]}, v[2]);
  o.remote_timeout_ms = 3000;
  if (v[0] == "served") {
    o.remote_tls_cert = v[3] + "/client.pem";
    o.remote_tls_key = v[3] + "/client.key";
    o.remote_tls_ca = v[3] + "/ca.pem";
    DataLoader dl(draws(40), o);
    EXPECT_EQ(all_batches(dl).size(), 5u);
    return;
  }
  const std::string e = error_of([&] {
    DataLoader dl(draws(40), o);
    all_batches(dl);
  });
  EXPECT_NE(e.find("authentication failed at " + v[1]), std::string::npos) << e;
}

}  // namespace
}  // namespace loader
