#include "loader/worker_main.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "loader/batch_copy.h"
#include "loader/error.h"
#include "loader/runtime/child/uplink.h"
#include "loader/runtime/child/worker_host.h"
#include "loader/runtime/worker_main_loop.h"

namespace loader::runtime {

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
  if (const char* fd_text = std::getenv("LOADER_WORKER_FD")) Uplink::write_error(std::atoi(fd_text), "RuntimeError", msg);
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
