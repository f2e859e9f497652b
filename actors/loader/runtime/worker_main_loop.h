// Internal: what the main process knows of a process started as a worker (the worker
// itself is hosted by child/worker_host.h: run_worker_loop).
#pragma once

namespace loader::runtime {

/// True in a process started as a DataLoader worker whose main() has not called
/// run_worker_if_requested (yet): such a process must never start workers itself.
bool started_as_worker_without_worker_main();

/// In such a process: tells the parent (an InitError on the worker socket, so its
/// DataLoader reports the mistake at once) and throws RuntimeError saying what to do.
[[noreturn]] void refuse_workers_in_worker_process();

}  // namespace loader::runtime
