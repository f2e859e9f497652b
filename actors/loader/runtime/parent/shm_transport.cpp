#include "loader/runtime/parent/shm_transport.h"

#include "loader/error.h"
#include "loader/runtime/frames.h"
#include "loader/runtime/parent/slab_store.h"
#include "loader/runtime/rng_state_page.h"
#include "loader/runtime/worker_rings.h"

namespace loader::runtime {

ShmTransport::ShmTransport(Link::Spec spec, LinkFactory make, WorkerRings& rings, SlabStore& slabs,
                           uint64_t rng_slots, LinkEvents* events)
    : worker_(spec.worker_id),
      spec_(std::move(spec)),
      make_(std::move(make)),
      events_(events),
      rings_(rings),
      slabs_(slabs),
      rng_slots_(rng_slots) {}

ShmTransport::~ShmTransport() {
  if (link_) link_->stop();
}

// ------------------------------------------------------------------ the owner

void ShmTransport::start(uint32_t gen) {
  Link::Spec spec = spec_;
  spec.generation = gen;
  stopped_ticks_ = 0;
  link_ = make_(spec, this);  // throws when the worker cannot start
  pid_.store(link_->pid(), std::memory_order_release);
}

void ShmTransport::stop() {
  if (!link_) return;
  link_->stop();  // its reader has ended (it reported the incarnation down, or was stopped first)
  link_.reset();
  pid_.store(-1, std::memory_order_release);
}

void ShmTransport::say_shutdown() {
  closed_ = true;
  {
    std::lock_guard<std::mutex> l(out_mu_);
    outbox_.clear();
    queued_.store(false, std::memory_order_relaxed);
  }
  rings_.close(worker_);  // a worker asleep on its task ring wakes and ends
  if (link_) link_->send(FrameType::Shutdown, {});
}

void ShmTransport::flush() {
  if (!link_ || closed_) return;
  std::vector<OutFrame> frames;
  {
    std::lock_guard<std::mutex> l(out_mu_);
    if (outbox_.empty()) return;
    frames.swap(outbox_);
    queued_.store(false, std::memory_order_relaxed);
  }
  // Said first: the worker starts reading while they are written, so a frame larger
  // than the socket's buffer (a task of 8,000+ indices) cannot leave both sides
  // waiting.  If a write fails the link is broken and the worker's read ends too.
  rings_.socket_frames_coming(worker_, link_->generation(), frames.size());
  for (auto& f : frames)
    if (!link_->send(f.type, f.body, f.fd_owner ? f.fd_owner->fd() : -1)) break;  // the reader reports the loss
}

void ShmTransport::watch(const Liveness& seen, std::chrono::milliseconds tick, std::chrono::milliseconds hello_deadline) {
  if (!link_ || closed_ || link_->pid() <= 0) return;  // none, or a thread
  if (auto how = link_->exited_with_socket_open()) {
    link_->kill_with_reason(*how);
    return;
  }
  const char st = link_->process_state();
  if (st == 'T' || st == 't') {
    if (++stopped_ticks_ * tick >= std::chrono::milliseconds(1000))
      link_->kill_with_reason(
          WorkerExit{WorkerExit::Kind::Frozen, 0, std::to_string(stopped_ticks_ * tick.count()) + " ms"});
    return;
  }
  stopped_ticks_ = 0;
  if (!seen.hello && std::chrono::steady_clock::now() - seen.started > hello_deadline)
    link_->kill_with_reason(WorkerExit{
        WorkerExit::Kind::StartFailed, 0,
        "it did not enter the worker loop within " +
            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(hello_deadline).count()) +
            " s: the worker program's main() must call loader::runtime::run_worker_if_requested(argc, argv) "
            "before anything else"});
}

// ------------------------------------------------------------------ the strand

void ShmTransport::reset(uint32_t gen) {
  gen_ = gen;
  {
    std::lock_guard<std::mutex> l(out_mu_);
    outbox_.clear();  // frames for an older incarnation
    queued_.store(false, std::memory_order_relaxed);
  }
  socket_queued_ = 0;
  announced_.clear();
  // The rings are the new incarnation's: the previous one is dead (reaped) or never ran,
  // and its down report took what it had published.
  rings_.reset(worker_, gen);
}

void ShmTransport::prepare(std::string init) {
  // First frames of every incarnation: the RNG state page, the rings, then the configuration.
  make_state_page();
  queue(FrameType::StatePage, StatePageFrame{state_page_->size()}.encode(), state_page_);
  RingsFrame rings;
  rings.capacity = rings_.layout().capacity;
  rings.workers = static_cast<uint64_t>(rings_.layout().workers);
  rings.index = static_cast<uint64_t>(worker_);
  rings.generation = gen_;
  queue(FrameType::Rings, rings.encode(), rings_.segment());
  queue(FrameType::Init, std::move(init));
}

void ShmTransport::make_state_page() {
  if (state_page_) return;
  state_page_ = ShmSegment::create(RngStatePage::bytes_for(rng_slots_));
  RngStatePage::format(state_page_->data(), rng_slots_);
}

void ShmTransport::queue(FrameType type, std::string body, std::shared_ptr<ShmSegment> fd_owner) {
  {
    std::lock_guard<std::mutex> l(out_mu_);
    outbox_.push_back(OutFrame{type, std::move(body), std::move(fd_owner)});
    queued_.store(true, std::memory_order_relaxed);
  }
  ++socket_queued_;
}

void ShmTransport::init(std::string config) { queue(FrameType::Init, std::move(config)); }

void ShmTransport::set_rng(uint64_t task, std::string state) {
  queue(FrameType::SetRng, SetRngFrame{task, std::move(state)}.encode());
}

void ShmTransport::task_seeds(const TaskSeeds& seeds) {
  queue(FrameType::TaskSeeds, TaskSeedsFrame{seeds.base_seed, seeds.task_base}.encode());
}

void ShmTransport::restart_stream() { queue(FrameType::Epoch, {}); }

void ShmTransport::resume_stream(const StreamResume& resume) {
  queue(FrameType::ResumeStream, encode_stream_resume(resume));
}

void ShmTransport::announce(uint64_t slab) {
  for (uint64_t id : slabs_.dropped_since(dropped_cursor_))
    if (announced_.erase(id)) queue(FrameType::DropSlab, DropSlabFrame{id}.encode());
  if (slab == 0 || slab == kInlineSlab || announced_.count(slab)) return;
  auto seg = slabs_.segment(slab);
  if (!seg) return;
  queue(FrameType::AddSlab, AddSlabFrame{slab, seg->size()}.encode(), seg);
  announced_.insert(slab);
}

void ShmTransport::send_task(uint64_t task, uint64_t slab, const IndexBatch& indices) {
  announce(slab);
  std::string body = TaskFrame::encode(task, slab, indices);
  // Through the task ring, after the socket frames queued so far (the AddSlab above);
  // on the socket when the ring is full or the task too large for it.
  if (rings_.post_task(worker_, socket_queued_, body)) return;
  queue(FrameType::Task, std::move(body));
}

void ShmTransport::use_slab(uint64_t task, uint64_t slab) {
  announce(slab);
  queue(FrameType::UseSlab, UseSlabFrame{task, slab}.encode());
}

bool ShmTransport::dirty() const {
  // Queued on the strand, the caller's thread; a flush that empties it meanwhile makes a
  // later flush find nothing to write.
  return queued_.load(std::memory_order_relaxed);
}

size_t ShmTransport::take_results(const std::function<void(WorkerReply&&)>& sink) {
  size_t taken = 0;
  Frame f;
  try {
    while (rings_.take(worker_, f)) {
      ++taken;
      sink(decode_reply(static_cast<uint8_t>(f.type), f.body));
    }
  } catch (const std::exception& e) {
    rings_.reset(worker_, 0);  // nothing more of this incarnation is read
    throw RuntimeError(std::string("DataLoader worker ") + std::to_string(worker_) +
                       " sent a result the main process cannot read (" + frame_type_name(f.type) + "): " + e.what());
  }
  return taken;
}

std::optional<std::string> ShmTransport::state_before(uint64_t task, uint64_t floor) const {
  if (!state_page_) return std::nullopt;
  RngStatePage page(state_page_->data(), state_page_->size());
  if (auto state = page.state_before(task, floor))
    return std::string(reinterpret_cast<const char*>(state->data()), state->size());
  return std::nullopt;
}

std::optional<uint64_t> ShmTransport::last_started() const {
  if (!state_page_) return std::nullopt;
  return RngStatePage(state_page_->data(), state_page_->size()).last_before();
}

std::optional<std::pair<uint64_t, std::string>> ShmTransport::last_state() const {
  if (!state_page_) return std::nullopt;
  return RngStatePage(state_page_->data(), state_page_->size()).last_after();
}

// ------------------------------------------------------------------ the link's reader thread

void ShmTransport::on_frame(int worker, uint32_t gen, Frame& f) {
  try {
    switch (f.type) {
      case FrameType::Hello: events_->on_hello(worker, gen); return;
      case FrameType::Ready: events_->on_ready(worker, gen); return;
      case FrameType::StreamStart: {
        auto [task, start] = decode_stream_start(f.body);
        events_->on_stream_start(worker, gen, task, std::move(start));
        return;
      }
      case FrameType::InitError: {
        const InitErrorFrame e = InitErrorFrame::decode(f.body);
        events_->on_init_error(worker, gen, e.type, e.message, e.when);
        return;
      }
      default: {
        // A result on the socket (too large for the ring, or the ring was full).
        WorkerReply r = decode_reply(static_cast<uint8_t>(f.type), f.body);
        events_->on_result(worker, gen, std::move(r));
        return;
      }
    }
  } catch (const std::exception& e) {
    events_->on_unreadable(worker, gen,
                           std::string("a frame the main process cannot read (") + frame_type_name(f.type) +
                               "): " + e.what());
  }
}

void ShmTransport::on_down(int worker, uint32_t gen, const WorkerExit& how) { events_->on_down(worker, gen, how); }

void ShmTransport::carry_state(uint64_t task, const std::string& state) {
  make_state_page();
  RngStatePage(state_page_->data(), state_page_->size()).write(task, RngStatePage::After, state);
}

}  // namespace loader::runtime
