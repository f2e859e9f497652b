#include "loader/runtime/child/worker_host.h"

#include <unistd.h>

#include <chrono>
#include <exception>

#include "loader/error.h"
#include "loader/generator.h"
#include "loader/runtime/actor_system.h"
#include "loader/runtime/child/uplink_actor.h"
#include "loader/runtime/child/worker_actor.h"
#include "loader/runtime/child/worker_core.h"
#include "loader/runtime/frames.h"
#include "loader/runtime/os/os_error.h"
#include "loader/runtime/rng_state_page.h"

namespace loader::runtime {

namespace {

/// The socket a worker process reports on when its actor system's constructor ends in
/// std::terminate (see run_worker_loop).
int g_terminate_sock = -1;

[[noreturn]] void report_system_start_failure() {
  Uplink::write_error(g_terminate_sock, "RuntimeError",
                      "DataLoader worker could not start the actor system that hosts its worker actor: a thread "
                      "could not be created" + thread_limits_text());
  _exit(1);
}

uint64_t address_of(const ShmMapping& m) { return reinterpret_cast<uint64_t>(m.data()); }

/// The actor system of a worker process: one scheduler thread (the worker host runs
/// the worker's actors on its own thread; CAF's threads only see what another thread
/// of the process sends, which nothing does today), quiet, the guarded scheduler
/// (guard_scheduler_start: a thread it cannot start is an error, not a crash).
/// The threads CAF starts for it: the scheduler's one, its clock, and one for detached work.
constexpr int kWorkerSystemThreads = 3;

}  // namespace

WorkerHost::WorkerHost(caf::actor_system& sys, int sock, pid_t parent)
    : sock_(sock),
      uplink_(sock, parent ? getpid() : 0),
      exec_(sys),
      uplink_actor_(spawn_uplink_actor(sys, &uplink_)),
      worker_(spawn_worker_actor(sys, uplink_actor_)) {}

WorkerHost::~WorkerHost() {
  // exit messages with this unit as the context: both actors end here, before the
  // mappings they point into go.
  for (caf::abstract_actor* a : {caf::actor_cast<caf::abstract_actor*>(worker_),
                                 caf::actor_cast<caf::abstract_actor*>(uplink_actor_)})
    if (a) a->eq_impl(caf::make_message_id(), nullptr, &exec_, caf::exit_msg{a->address(), caf::exit_reason::user_shutdown});
  exec_.run();
}

int WorkerHost::run_actors() {
  exec_.run();
  return uplink_.status() ? *uplink_.status() : -1;
}

int WorkerHost::protocol_error(const std::string& what) {
  Uplink::write_error(sock_, "RuntimeError", "worker protocol error: " + what);
  return 2;
}

int WorkerHost::deliver_frame(Frame& f) {
  // Every body is read by its frame type (frames.h), which checks it.
  switch (f.type) {
    case FrameType::Task: {
      TaskFrame t = TaskFrame::decode(f.body);
      exec_.send(worker_, task_msg{t.task, std::move(t.indices), t.slab});
      break;
    }
    case FrameType::UseSlab: {
      const UseSlabFrame u = UseSlabFrame::decode(f.body);
      exec_.send(worker_, use_slab_atom::value, u.task, u.slab);
      break;
    }
    case FrameType::Init: exec_.send(worker_, init_atom::value, std::move(f.body)); break;
    case FrameType::StatePage: {
      const uint64_t size = StatePageFrame::decode(f.body).size;
      if (!f.fd || size < RngStatePage::bytes_for(1) || size > RngStatePage::bytes_for(RngStatePage::kMaxBeforeSlots))
        throw RuntimeError("StatePage frame without a usable page");
      state_mapping_ = ShmMapping(std::move(f.fd), size);
      exec_.send(worker_, page_atom::value, address_of(state_mapping_), uint64_t{state_mapping_.size()});
      break;
    }
    case FrameType::Rings: {
      const RingsFrame r = RingsFrame::decode(f.body);
      if (!f.fd) throw RuntimeError("Rings frame without a descriptor");
      RingLayout layout;
      layout.capacity = r.capacity;
      layout.workers = static_cast<int>(r.workers);
      rings_mapping_ = ShmMapping(std::move(f.fd), layout.bytes());
      ring_ = std::make_unique<WorkerRingEnd>(rings_mapping_.data(), layout, static_cast<int>(r.index),
                                              static_cast<uint32_t>(r.generation));
      uplink_.set_ring(ring_.get());
      break;
    }
    case FrameType::SetRng: {
      SetRngFrame s = SetRngFrame::decode(f.body);
      exec_.send(worker_, set_rng_atom::value, s.task, std::move(s.state));
      break;
    }
    case FrameType::AddSlab: {
      const AddSlabFrame a = AddSlabFrame::decode(f.body);
      if (!f.fd) throw RuntimeError("AddSlab frame without a descriptor");
      ShmMapping m(std::move(f.fd), a.size);
      exec_.send(worker_, slab_atom::value, a.id, address_of(m), uint64_t{m.size()});
      slabs_[a.id] = std::move(m);
      break;
    }
    case FrameType::DropSlab: {
      const uint64_t id = DropSlabFrame::decode(f.body).id;
      exec_.send(worker_, slab_atom::value, id, uint64_t{0}, uint64_t{0});
      exec_.run();  // the actor forgets the slab before it is unmapped
      slabs_.erase(id);
      break;
    }
    case FrameType::Epoch: exec_.send(worker_, epoch_atom::value); break;
    case FrameType::TaskSeeds: {
      const TaskSeedsFrame s = TaskSeedsFrame::decode(f.body);
      exec_.send(worker_, seeds_atom::value, s.base_seed, s.task_base);
      break;
    }
    case FrameType::ResumeStream: {
      StreamResume r = decode_stream_resume(f.body);
      exec_.send(worker_, resume_atom::value, r.skip, std::move(r.rng), std::move(r.state));
      break;
    }
    case FrameType::Shutdown: shutdown_ = true; break;
    default: throw RuntimeError(std::string("unexpected frame ") + frame_type_name(f.type));
  }
  return -1;
}

int WorkerHost::handle(Frame& f) {
  int rc;
  try {
    rc = deliver_frame(f);
  } catch (const std::exception& e) {
    // A frame the worker cannot act on: tell the main process and stop.
    return protocol_error(e.what());
  }
  f.fd.reset();  // a descriptor the frame should not have carried
  if (rc >= 0) return rc;
  if (int status = run_actors(); status >= 0) return status;
  return shutdown_ ? 0 : -1;
}

bool WorkerHost::read_socket(Frame& f) {
  // Blocking: the worker ends on EOF, which also comes when the parent dies (and
  // PR_SET_PDEATHSIG kills it then anyway).
  if (read_frame(sock_, f, -1) != ReadStatus::Ok) return false;  // EOF: the parent closed the link or died
  ++socket_read_;
  return true;
}

int WorkerHost::run() {
  // Frames come from the socket (every frame until the rings arrive, then whatever the
  // main process did not put in the task ring) and from the task ring.  A task from the
  // ring runs only after the socket frames queued before it were read, so frames are
  // handled in the order the main process queued them (worker_rings.h).
  Frame f;
  Frame g;
  while (true) {
    if (!ring_) {
      if (!read_socket(f)) return 0;
      if (int rc = handle(f); rc >= 0) return rc;
      continue;
    }
    // 1: a task from the ring, 2: a socket frame is due, 0: nothing, -1: a bad ring.
    uint64_t before = 0;
    auto look = [&]() -> int {
      try {
        const uint64_t written = ring_->socket_frames();  // first: a task published before it is seen below
        if (ring_->take_task(f, before)) return 1;
        return socket_read_ < written ? 2 : 0;
      } catch (const std::exception& e) {
        protocol_error(e.what());
        return -1;
      }
    };
    const uint32_t seen = ring_->bell().seq.load(std::memory_order_acquire);  // before the look
    int what = look();
    // Nothing to do: poll the bell a little before sleeping (a futex sleep and wake-up
    // cost both processes a context switch).
    if (what == 0 && !ring_->closed() && spin_on(ring_->bell(), seen, spin_budget())) continue;
    if (what == 0) {
      if (ring_->closed()) return 0;
      const uint32_t seq = ring_->prepare_sleep();
      what = look();  // once more after saying it sleeps: a frame posted meanwhile rings the bell
      bool timed_out = false;
      if (what == 0 && !ring_->closed()) timed_out = ring_->sleep(seq, std::chrono::milliseconds(100));
      ring_->awake();
      if (what == 0) {
        if (timed_out && uplink_.peer_gone()) return 0;  // the main process vanished without closing
        continue;
      }
    }
    if (what < 0) return 2;
    if (what == 1) {
      while (socket_read_ < before) {
        if (!read_socket(g)) return 0;
        if (int rc = handle(g); rc >= 0) return rc;
      }
    } else if (!read_socket(f)) {
      return 0;
    }
    if (int rc = handle(f); rc >= 0) return rc;
  }
}

int run_worker_loop(int sock, pid_t parent) {
  // The start-up handshake comes first: the main process then knows this is a worker
  // program, and reports whatever follows as this worker's error.
  if (!Uplink(sock, parent ? getpid() : 0).hello()) return 0;
  std::shared_ptr<caf::actor_system> shared;
  std::unique_ptr<caf::actor_system> own;
  try {
    if (parent) {
      // A worker process: an actor system of its own, for the worker actor it hosts.
      SystemSpec spec;
      spec.scheduler_threads = 1;
      static RuntimeConfig* cfg = new RuntimeConfig(spec);  // systems keep a reference
      probe_system_threads(kWorkerSystemThreads);
      // The probe can pass and CAF still fail to start a thread: the main process and
      // the other workers share a process limit (a pids cgroup) and start threads
      // meanwhile.  The guarded scheduler turns that into start_actor_system's
      // RuntimeError (reported below); unguarded, CAF's constructor unwound the
      // half-started system and crashed (SIGSEGV in actor_system::clock(), seen with
      // pids.max 13) or called std::terminate.  Should its constructor still end in
      // std::terminate, that too becomes this worker's error, never an abort.
      g_terminate_sock = sock;
      const std::terminate_handler previous = std::set_terminate(report_system_start_failure);
      own = start_actor_system(*cfg);
      std::set_terminate(previous);
    } else {
      shared = acquire_system();  // a thread of the main process: the main process's system
    }
  } catch (const std::exception& e) {
    Uplink::write_error(sock, "RuntimeError",
                        std::string("DataLoader worker could not start the actor system that hosts its worker actor: ") +
                            e.what());
    return 1;
  }
  caf::actor_system& sys = own ? *own : *shared;
  int rc;
  {
    WorkerHost host(sys, sock, parent);
    rc = host.run();
  }
  if (own) {
    // A worker process ends with _exit (run_worker_if_requested): nothing of the system
    // needs tearing down, and its threads must not delay the exit.
    (void)own.release();
  }
  return rc;
}

}  // namespace loader::runtime
