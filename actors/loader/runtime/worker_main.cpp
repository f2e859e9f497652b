#include "loader/runtime/worker_main.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "loader/error.h"
#include "loader/runtime/shm.h"
#include "loader/runtime/wire.h"
#include "loader/runtime/worker_core.h"

namespace loader::runtime {

namespace {

bool send_reply(int sock, const WorkerReply& r) {
  auto [type, body] = encode_reply(r);
  return write_frame(sock, static_cast<FrameType>(type), body);
}

int worker_loop(int sock, pid_t parent) {
  std::unique_ptr<WorkerCore> core;
  std::map<uint64_t, ShmMapping> mappings;
  Frame f;
  while (true) {
    ReadStatus st = read_frame(sock, f, 1000);
    if (st == ReadStatus::Timeout) {
      if (getppid() != parent) return 0;  // orphaned: the parent is gone
      continue;
    }
    if (st != ReadStatus::Ok) return 0;  // EOF: the parent closed the link or died
    try {
      Reader in(f.body);
      switch (f.type) {
        case FrameType::Init: {
          try {
            core = std::make_unique<WorkerCore>(WorkerConfig::from_value(decode_value(f.body)));
          } catch (const Error& e) {
            std::string body;
            put_string(body, e.python_type());
            put_string(body, e.what());
            write_frame(sock, FrameType::InitError, body);
            return 1;
          } catch (const std::exception& e) {
            std::string body;
            put_string(body, "RuntimeError");
            put_string(body, e.what());
            write_frame(sock, FrameType::InitError, body);
            return 1;
          }
          std::string body;
          put_u64(body, static_cast<uint64_t>(getpid()));
          if (!write_frame(sock, FrameType::Ready, body)) return 0;
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
          if (!send_reply(sock, core->run_task(task, indices, slab))) return 0;
          break;
        }
        case FrameType::UseSlab: {
          uint64_t task = in.u64();
          uint64_t slab = in.u64();
          if (!core) throw RuntimeError("UseSlab before Init");
          if (!send_reply(sock, core->use_slab(task, slab))) return 0;
          break;
        }
        case FrameType::Epoch:
          if (core) core->reset_epoch();
          break;
        case FrameType::Shutdown: return 0;
        default: throw RuntimeError(std::string("unexpected frame ") + frame_type_name(f.type));
      }
    } catch (const std::exception& e) {
      // A protocol error: tell the parent (as an init error) and stop.
      std::string body;
      put_string(body, "RuntimeError");
      put_string(body, std::string("worker protocol error: ") + e.what());
      write_frame(sock, FrameType::InitError, body);
      return 2;
    }
    if (f.fd >= 0) {
      close(f.fd);
      f.fd = -1;
    }
  }
}

}  // namespace

std::optional<int> run_worker_if_requested(int /*argc*/, char** /*argv*/) {
  const char* fd_text = std::getenv("LOADER_WORKER_FD");
  if (fd_text == nullptr) return std::nullopt;
  int sock = std::atoi(fd_text);
  const char* parent_text = std::getenv("LOADER_PARENT_PID");
  pid_t parent = parent_text ? static_cast<pid_t>(std::atol(parent_text)) : getppid();
  // Nothing below should think it is a worker again (e.g. a program it starts).
  unsetenv("LOADER_WORKER_FD");
  unsetenv("LOADER_WORKER_ID");
  unsetenv("LOADER_PARENT_PID");
  // Die with the parent; Ctrl-C in a terminal is the parent's to handle.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) return 0;
  signal(SIGINT, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  int rc = worker_loop(sock, parent);
  close(sock);
  // Skip static destructors of the host program: a worker has nothing to flush.
  std::fflush(nullptr);
  _exit(rc);
}

}  // namespace loader::runtime
