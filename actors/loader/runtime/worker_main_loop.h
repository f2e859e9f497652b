// Internal: the frame loop a worker runs, in a worker process (run_worker_if_requested)
// or in a thread of the main process (WorkerMode::InProcess).  Same frames, same code.
#pragma once

#include <sys/types.h>

namespace loader::runtime {

/// Serves frames on `sock` until EOF or Shutdown; returns the exit status.  `parent`:
/// the parent's pid (the loop ends when the process is orphaned), 0 in a thread.
int run_worker_loop(int sock, pid_t parent);

/// True in a process started as a DataLoader worker whose main() has not called
/// run_worker_if_requested (yet): such a process must never start workers itself.
bool started_as_worker_without_worker_main();

/// In such a process: tells the parent (an InitError on the worker socket, so its
/// DataLoader reports the mistake at once) and throws RuntimeError saying what to do.
[[noreturn]] void refuse_workers_in_worker_process();

}  // namespace loader::runtime
