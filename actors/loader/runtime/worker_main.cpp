#include "loader/worker_main.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "loader/batch_copy.h"
#include "loader/error.h"
#include "loader/runtime/worker_rings.h"
#include "loader/runtime/rng_state_page.h"
#include "loader/runtime/shm.h"
#include "loader/runtime/wire.h"
#include "loader/runtime/worker_core.h"
#include "loader/runtime/worker_main_loop.h"

namespace loader::runtime {

namespace {

// The main process closed the link (or died): EOF or a hang-up on the socket.
bool peer_gone(int sock) {
  pollfd p{sock, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

// A Result goes into this worker's result ring (read by the main process without a
// reader-thread hop); everything else, and a Result too large for the ring, goes on the
// socket.
bool send_reply(int sock, const WorkerReply& r, WorkerRingEnd* ring) {
  auto [type, body] = encode_reply(r);
  if (ring && r.kind == WorkerReply::Kind::Result) {
    if (ring->write_result(static_cast<FrameType>(type), body, [sock] { return peer_gone(sock); })) return true;
  }
  return write_frame(sock, static_cast<FrameType>(type), body);
}

/// The worker's fatal error (InitError frame): `type` and `message` of what failed, and
/// `when` it failed, if not at start (the parent words its error with it).
bool send_error(int sock, const std::string& type, const std::string& message, const std::string& when = "") {
  std::string body;
  put_string(body, type);
  put_string(body, message);
  if (!when.empty()) put_string(body, when);
  return write_frame(sock, FrameType::InitError, body);
}

/// What the dataset's iter() threw when a stream was made again.
constexpr const char* kStreamAgain = "as its epoch began (the IterableDataset's iter())";

}  // namespace

int run_worker_loop(int sock, pid_t parent) {
  std::unique_ptr<WorkerCore> core;
  std::map<uint64_t, ShmMapping> mappings;
  ShmMapping state_mapping;
  std::unique_ptr<RngStatePage> state_page;
  ShmMapping rings_mapping;
  std::unique_ptr<WorkerRingEnd> ring;
  {
    std::string hello;
    put_u64(hello, static_cast<uint64_t>(parent ? getpid() : 0));
    if (!write_frame(sock, FrameType::Hello, hello)) return 0;
  }
  // Handles one frame: -1 to go on, else the loop's exit status.
  auto handle = [&](Frame& f) -> int {
    try {
      Reader in(f.body);
      switch (f.type) {
        case FrameType::Init: {
          try {
            core = std::make_unique<WorkerCore>(WorkerConfig::from_value(decode_value(f.body)));
          } catch (const Error& e) {
            send_error(sock, e.python_type(), e.what());
            return 1;
          } catch (const std::exception& e) {
            send_error(sock, "RuntimeError", e.what());
            return 1;
          }
          // A worker re-initialised for a new epoch keeps its slabs mapped.
          for (auto& [id, m] : mappings) core->add_slab(id, m.data(), m.size());
          std::string body;
          put_u64(body, static_cast<uint64_t>(parent ? getpid() : 0));
          if (!write_frame(sock, FrameType::Ready, body)) return 0;
          break;
        }
        case FrameType::StatePage: {
          uint64_t size = in.u64();
          if (f.fd < 0 || size < RngStatePage::bytes_for(1) || size > RngStatePage::bytes_for(RngStatePage::kMaxBeforeSlots))
            throw RuntimeError("StatePage frame without a usable page");
          state_mapping = ShmMapping(f.fd, size);
          f.fd = -1;
          state_page = std::make_unique<RngStatePage>(state_mapping.data(), state_mapping.size());
          break;
        }
        case FrameType::Rings: {
          RingLayout layout;
          layout.capacity = in.u64();
          const uint64_t workers = in.u64();
          const uint64_t index = in.u64();
          const uint64_t generation = in.u64();
          if (f.fd < 0 || workers == 0 || workers > 1u << 16 || index >= workers || layout.capacity < 4096 ||
              layout.capacity > (uint64_t{1} << 30))
            throw RuntimeError("Rings frame without usable rings");
          layout.workers = static_cast<int>(workers);
          rings_mapping = ShmMapping(f.fd, layout.bytes());
          f.fd = -1;
          ring = std::make_unique<WorkerRingEnd>(rings_mapping.data(), layout, static_cast<int>(index),
                                                 static_cast<uint32_t>(generation));
          break;
        }
        case FrameType::SetRng: {
          if (!core) throw RuntimeError("SetRng before Init");
          uint64_t task = in.u64();
          if (in.remaining() != Generator::kStateBytes) throw RuntimeError("SetRng frame of the wrong size");
          bool set = false;
          try {
            set = core->set_generator_state(std::string(in.pos(), Generator::kStateBytes));
          } catch (const Error& e) {  // an iterable dataset's iter(), made again from the state
            send_error(sock, e.python_type(), e.what(), kStreamAgain);
            return 1;
          }
          if (!set) throw RuntimeError("SetRng frame without a generator state (an engine index out of range)");
          // Recorded at once: if this incarnation dies before `task` starts, the next
          // one resumes from the same state.
          if (state_page) state_page->write(task, RngStatePage::Before, core->generator());
          break;
        }
        case FrameType::AddSlab: {
          uint64_t id = in.u64();
          uint64_t size = in.u64();
          if (f.fd < 0) throw RuntimeError("AddSlab frame without a descriptor");
          ShmMapping m(f.fd, size);
          f.fd = -1;
          if (core) core->add_slab(id, m.data(), m.size());
          mappings[id] = std::move(m);
          break;
        }
        case FrameType::DropSlab: {
          uint64_t id = in.u64();
          if (core) core->drop_slab(id);
          mappings.erase(id);
          break;
        }
        case FrameType::Task: {
          uint64_t task = in.u64();
          uint64_t slab = in.u64();
          uint64_t n = in.u64();
          if (n > in.remaining() / 8) throw RuntimeError("Task frame with a bad index count");
          IndexBatch indices(n);
          for (auto& i : indices) i = static_cast<int64_t>(in.u64());
          if (!core) throw RuntimeError("Task before Init");
          if (state_page) state_page->write(task, RngStatePage::Before, core->generator());
          WorkerReply reply = core->run_task(task, indices, slab);
          // Recorded before the result leaves: once the parent has the result, the
          // state after the task is on the page.
          if (state_page) state_page->write(task, RngStatePage::After, core->generator());
          if (!send_reply(sock, reply, ring.get())) return 0;
          break;
        }
        case FrameType::UseSlab: {
          uint64_t task = in.u64();
          uint64_t slab = in.u64();
          if (!core) throw RuntimeError("UseSlab before Init");
          if (!send_reply(sock, core->use_slab(task, slab), ring.get())) return 0;
          break;
        }
        case FrameType::Epoch:
          try {
            if (core) core->reset_epoch();
          } catch (const Error& e) {  // the dataset's iter(): its own error, as at Init
            send_error(sock, e.python_type(), e.what(), kStreamAgain);
            return 1;
          }
          break;
        case FrameType::Shutdown: return 0;
        default: throw RuntimeError(std::string("unexpected frame ") + frame_type_name(f.type));
      }
    } catch (const std::exception& e) {
      // A protocol error: tell the parent and stop.
      send_error(sock, "RuntimeError", std::string("worker protocol error: ") + e.what());
      return 2;
    }
    if (f.fd >= 0) {
      close(f.fd);
      f.fd = -1;
    }
    return -1;
  };
  // Frames come from the socket (every frame until the rings arrive, then whatever the
  // main process did not put in the task ring) and from the task ring.  A task from the
  // ring runs only after the socket frames queued before it were read, so frames are
  // handled in the order the main process queued them (worker_rings.h).
  uint64_t socket_read = 0;  // frames read from the socket, all of them counted
  auto read_socket = [&](Frame& f) {
    // Blocking: the worker ends on EOF, which also comes when the parent dies (and
    // PR_SET_PDEATHSIG kills it then anyway).
    if (read_frame(sock, f, -1) != ReadStatus::Ok) return false;  // EOF: the parent closed the link or died
    ++socket_read;
    return true;
  };
  Frame f;
  Frame g;
  while (true) {
    if (!ring) {
      if (!read_socket(f)) return 0;
      if (int rc = handle(f); rc >= 0) return rc;
      continue;
    }
    // 1: a task from the ring, 2: a socket frame is due, 0: nothing.
    uint64_t before = 0;
    auto look = [&]() -> int {
      try {
        const uint64_t written = ring->socket_frames();  // first: a task published before it is seen below
        if (ring->take_task(f, before)) return 1;
        return socket_read < written ? 2 : 0;
      } catch (const std::exception& e) {
        send_error(sock, "RuntimeError", std::string("worker protocol error: ") + e.what());
        return -1;
      }
    };
    const uint32_t seen = ring->bell().seq.load(std::memory_order_acquire);  // before the look
    int what = look();
    // Nothing to do: poll the bell a little before sleeping (a futex sleep and wake-up
    // cost both processes a context switch).
    if (what == 0 && !ring->closed() && spin_on(ring->bell(), seen, spin_budget())) continue;
    if (what == 0) {
      if (ring->closed()) return 0;
      const uint32_t seq = ring->prepare_sleep();
      what = look();  // once more after saying it sleeps: a frame posted meanwhile rings the bell
      bool timed_out = false;
      if (what == 0 && !ring->closed()) timed_out = ring->sleep(seq, std::chrono::milliseconds(100));
      ring->awake();
      if (what == 0) {
        if (timed_out && peer_gone(sock)) return 0;  // the main process vanished without closing
        continue;
      }
    }
    if (what < 0) return 2;
    if (what == 1) {
      while (socket_read < before) {
        if (!read_socket(g)) return 0;
        if (int rc = handle(g); rc >= 0) return rc;
      }
    } else if (!read_socket(f)) {
      return 0;
    }
    if (int rc = handle(f); rc >= 0) return rc;
  }
}

namespace {
// Set before main() runs when this process was started as a worker; cleared by
// run_worker_if_requested.  A process whose main() forgot that call must not start
// workers of its own (each would do the same: a process storm).
bool g_started_as_worker = std::getenv("LOADER_WORKER_FD") != nullptr;
}  // namespace

bool started_as_worker_without_worker_main() { return g_started_as_worker; }

void refuse_workers_in_worker_process() {
  const std::string msg =
      "this process was started as a DataLoader worker, but its main() did not call "
      "loader::runtime::run_worker_if_requested(argc, argv) before starting a DataLoader with workers. Call it "
      "first thing in main() (see loader/worker_main.h), or set DataLoaderOptions::worker_executable to a "
      "program that does; no worker was started";
  if (const char* fd_text = std::getenv("LOADER_WORKER_FD")) send_error(std::atoi(fd_text), "RuntimeError", msg);
  throw RuntimeError(msg);
}

std::optional<int> run_worker_if_requested(int /*argc*/, char** /*argv*/) {
  const char* fd_text = std::getenv("LOADER_WORKER_FD");
  if (fd_text == nullptr) return std::nullopt;
  g_started_as_worker = false;
  int sock = std::atoi(fd_text);
  const char* parent_text = std::getenv("LOADER_PARENT_PID");
  pid_t parent = parent_text ? static_cast<pid_t>(std::atol(parent_text)) : getppid();
  // Nothing below should think it is a worker again (e.g. a program it starts).
  unsetenv("LOADER_WORKER_FD");
  unsetenv("LOADER_WORKER_ID");
  unsetenv("LOADER_PARENT_PID");
  // Die with the parent; Ctrl-C in a terminal is the parent's to handle.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // A program the dataset starts (system(), popen()) must not inherit the link: it
  // would keep the socket open after this worker dies and hide the death.
  fcntl(sock, F_SETFD, FD_CLOEXEC);
  if (getppid() != parent) _exit(0);
  signal(SIGINT, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  // This process writes batches that the main process reads (loader/batch_copy.h).
  set_batch_copy_streaming(true);
  int rc = run_worker_loop(sock, parent);
  close(sock);
  // Skip static destructors of the host program: a worker has nothing to flush.
  std::fflush(nullptr);
  _exit(rc);
}

}  // namespace loader::runtime
