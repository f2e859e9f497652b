// ShmTransport: the transport of a local worker (worker_transport.h), a child process
// or, for WorkerMode::InProcess, a thread.  Tasks go out in the worker's task ring and
// results come back in its result ring (the pool's WorkerRings, worker_rings.h), each
// batch written into a shared-memory slab; every other frame, and one too large for a
// ring, travels on the worker's Unix socket (the incarnation's Link: worker_link.h),
// the frames that carry a descriptor (AddSlab, StatePage, Rings) always.  It keeps
// which slabs the incarnation has mapped (AddSlab before the first task into a slab,
// DropSlab once the store let it go) and the worker's generator state page
// (rng_state_page.h), which outlives incarnations: a restarted worker resumes from it.
//
// The frame protocol is this transport's own: what the worker is told becomes a frame
// (frames.h), and each frame its link's reader brings (LinkFrames) becomes one typed
// event for the pool (LinkEvents): hello, ready, stream_start, init_error, a result on
// the socket, or unreadable.
//
// Thread use as worker_transport.h says; the frames queued for the socket are the one
// thing both the strand (queueing) and the owner (flush) touch, under out_mu_; the
// link's reader thread calls on_frame/on_down, which touch nothing of this object but
// `events_` (set at construction).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "loader/runtime/os/shm.h"
#include "loader/runtime/parent/worker_link.h"
#include "loader/runtime/parent/worker_transport.h"

namespace loader::runtime {

class SlabStore;
class WorkerRings;

class ShmTransport final : public WorkerTransport, private LinkFrames {
 public:
  /// `rings`, `slabs`, `events` outlive the transport.  `spec`: the worker's id, mode and
  /// program (the generation is set per start).  `make`: each incarnation's link (a
  /// WorkerLink, or a scripted one in tests).  `rng_slots`: before-records on the state
  /// page.
  ShmTransport(Link::Spec spec, LinkFactory make, WorkerRings& rings, SlabStore& slabs, uint64_t rng_slots,
               LinkEvents* events);
  ~ShmTransport() override;

  bool shares_memory() const override { return true; }

  void start(uint32_t gen) override;
  void stop() override;
  void say_shutdown() override;
  void flush() override;
  void watch(const Liveness& seen, std::chrono::milliseconds tick, std::chrono::milliseconds hello_deadline) override;
  int pid() const override { return pid_.load(std::memory_order_acquire); }

  void reset(uint32_t gen) override;
  void prepare(std::string init) override;
  void init(std::string config) override;
  void set_rng(uint64_t task, std::string state) override;
  void task_seeds(const TaskSeeds& seeds) override;
  void restart_stream() override;
  void resume_stream(const StreamResume& resume) override;
  void send_task(uint64_t task, uint64_t slab, const IndexBatch& indices) override;
  void use_slab(uint64_t task, uint64_t slab) override;
  bool dirty() const override;
  size_t take_results(const std::function<void(WorkerReply&&)>& sink) override;
  std::optional<std::string> state_before(uint64_t task, uint64_t floor) const override;
  std::optional<uint64_t> last_started() const override;
  std::optional<std::pair<uint64_t, std::string>> last_state() const override;
  void carry_state(uint64_t task, const std::string& state) override;

 private:
  struct OutFrame {
    FrameType type;
    std::string body;
    std::shared_ptr<ShmSegment> fd_owner;  ///< passes its descriptor, kept alive until written
  };
  /// Strand: queues a socket frame.
  void queue(FrameType type, std::string body, std::shared_ptr<ShmSegment> fd_owner = nullptr);
  /// Strand: the state page, made on first need (kept across incarnations).
  void make_state_page();
  /// Strand: AddSlab for `slab` unless the incarnation has it, DropSlab for slabs gone.
  void announce(uint64_t slab);
  /// The link's reader thread (LinkFrames): each frame as its typed event.
  void on_frame(int worker, uint32_t gen, Frame& frame) override;
  void on_down(int worker, uint32_t gen, const WorkerExit& how) override;

  const int worker_;
  Link::Spec spec_;
  LinkFactory make_;
  LinkEvents* const events_;
  WorkerRings& rings_;
  SlabStore& slabs_;
  const uint64_t rng_slots_;

  // The owner's (under the slot's owner lock).
  std::unique_ptr<Link> link_;
  bool closed_ = false;
  int stopped_ticks_ = 0;
  std::atomic<int> pid_{-1};

  // The strand's.
  uint32_t gen_ = 0;
  uint64_t socket_queued_ = 0;             ///< socket frames queued for this incarnation (worker_rings.h)
  std::set<uint64_t> announced_;           ///< slabs the incarnation has mapped
  size_t dropped_cursor_ = 0;              ///< SlabStore::dropped_since
  std::shared_ptr<ShmSegment> state_page_; ///< RngStatePage, made by the first prepare()

  mutable std::mutex out_mu_;
  std::vector<OutFrame> outbox_;  ///< under out_mu_
  /// outbox_ is not empty (written under out_mu_; read without it by dirty(), asked
  /// for every worker on every next()).
  std::atomic<bool> queued_{false};
};

}  // namespace loader::runtime
