#include "loader/runtime/worker_exit.h"

#include <cstring>
#include <string>

namespace loader::runtime {

namespace {
const char* signal_abbrev(int sig) {
  switch (sig) {
    case 9: return "SIGKILL";
    case 11: return "SIGSEGV";
    case 7: return "SIGBUS";
    case 6: return "SIGABRT";
    case 15: return "SIGTERM";
    case 2: return "SIGINT";
    case 8: return "SIGFPE";
    case 4: return "SIGILL";
    case 1: return "SIGHUP";
    case 13: return "SIGPIPE";
    default: return nullptr;
  }
}
std::string signal_name(int sig) {
  const char* n = strsignal(sig);
  return n ? n : ("signal " + std::to_string(sig));
}
}  // namespace

std::string WorkerExit::pytorch_sentence(int pid) const {
  if (kind == Kind::HostLost) return "DataLoader worker on " + detail + ".";
  const std::string who = "DataLoader worker (pid " + std::to_string(pid) + ")";
  switch (kind) {
    case Kind::Signal:
      return who + " is killed by signal: " + signal_name(code) + "." +
             (oom_killed ? " The kernel's out-of-memory killer ended it (" + oom_evidence +
                               "): the workers and the main process together need more memory than their "
                               "cgroup or the machine allows. Lower batch_size, prefetch_factor or num_workers, "
                               "hold less of the dataset in each worker, or raise the memory limit."
                         : std::string());
    case Kind::ExitCode:
      return who + " exited unexpectedly with exit code " + std::to_string(code) + ".";
    case Kind::Frozen:
      return who + " exited unexpectedly: it was frozen (stopped by a signal such as SIGSTOP, or by a debugger) "
                   "and answered nothing for " + detail + "; it was killed.";
    case Kind::ClosedLink:
      return who + " exited unexpectedly: it closed its connection to the main process" +
             (detail.empty() ? std::string() : " (" + detail + ")") + ".";
    case Kind::StartFailed: return who + " exited unexpectedly: it could not start: " + detail + ".";
    case Kind::StatusLost:
      return who + " exited unexpectedly; its exit status is unknown because it was collected elsewhere in this "
                   "program (SIGCHLD is ignored, or something calls waitpid(-1)): leave the runtime's children "
                   "to it to see their signal or exit code.";
    case Kind::HostLost: break;
  }
  return who + " exited unexpectedly.";
}

std::string WorkerExit::describe() const {
  switch (kind) {
    case Kind::Signal: {
      const char* a = signal_abbrev(code);
      return "killed by signal: " + signal_name(code) + " (" + (a ? std::string(a) + ", " : "") +
             std::to_string(code) + (oom_killed ? ", by the kernel's out-of-memory killer" : "") + ")";
    }
    case Kind::ExitCode: return "exited with status " + std::to_string(code);
    case Kind::Frozen: return "was frozen for " + detail + " and killed";
    case Kind::ClosedLink: return "closed its connection" + (detail.empty() ? std::string() : " (" + detail + ")");
    case Kind::StartFailed: return "could not start";  // the sentence says why
    case Kind::StatusLost: return "exited, status collected elsewhere";
    case Kind::HostLost: return "was lost";  // the sentence says where and how
  }
  return "exited";
}

}  // namespace loader::runtime
