#include "loader/runtime/child/remote_session.h"

#include "loader/runtime/child/worker_actor.h"
#include "loader/runtime/frames.h"
#include "loader/runtime/remote_protocol.h"
#include "loader/runtime/rng_state_page.h"

namespace loader::runtime {

namespace {
/// Before-records on a session's page: tasks run one at a time, so a few suffice.
constexpr uint64_t kSessionPageSlots = 16;
}  // namespace

RemoteSession::RemoteSession(caf::actor_system& sys, caf::actor client, ServeCounters& counters,
                             std::shared_ptr<BulkSink> bulk)
    : client_(std::move(client)),
      counters_(counters),
      bulk_(std::move(bulk)),
      page_bytes_(RngStatePage::bytes_for(kSessionPageSlots)),
      exec_(sys),
      uplink_(spawn_uplink_actor(sys, this)),
      worker_(spawn_worker_actor(sys, uplink_)) {
  page_.reset(new uint64_t[(page_bytes_ + 7) / 8]());
  RngStatePage::format(page_.get(), kSessionPageSlots);
  deliver(page_atom::value, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(page_.get())),
          static_cast<uint64_t>(page_bytes_));
}

RemoteSession::~RemoteSession() {
  // Exit messages with this unit as the context: both actors end here, before the page
  // they point into goes.
  for (caf::abstract_actor* a :
       {caf::actor_cast<caf::abstract_actor*>(worker_), caf::actor_cast<caf::abstract_actor*>(uplink_)})
    if (a) a->eq_impl(caf::make_message_id(), nullptr, &exec_, caf::exit_msg{a->address(), caf::exit_reason::user_shutdown});
  exec_.run();
}

void RemoteSession::result(WorkerReply& r) {
  RngStatePage page(page_.get(), page_bytes_);
  std::string before;
  if (auto s = page.state_before(r.task)) before.assign(reinterpret_cast<const char*>(s->data()), s->size());
  std::string after;
  if (auto a = page.last_after(); a && a->first == r.task) after = std::move(a->second);
  counters_.tasks_done.fetch_add(1, std::memory_order_relaxed);
  if (bulk_ && bulk_->attached()) {
    RemoteReplyFrame f = RemoteReplyFrame::encode(r, before, after);
    int64_t bytes = 0;
    for (const Tensor& t : f.tensors) bytes += static_cast<int64_t>(t.nbytes());
    if (bulk_sent(bulk_->send_reply(std::move(f)))) {
      counters_.bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
      counters_.bytes_bulk.fetch_add(bytes, std::memory_order_relaxed);
      return;
    }
  }
  encode_inline_batch(r);  // CAF serializes the payload
  counters_.bytes_sent.fetch_add(static_cast<int64_t>(r.payload.size()), std::memory_order_relaxed);
  const uint64_t task = r.task;
  caf::anon_send(client_, result_msg{task, std::move(r), -1}, std::move(before), std::move(after));
}

bool RemoteSession::bulk_sent(BulkSink::Sent s) {
  if (s == BulkSink::Sent::Broken) ended_ = true;  // the client is gone: nothing more to send
  return s != BulkSink::Sent::NotAttached;
}

void RemoteSession::ready() {
  if (bulk_ && bulk_sent(bulk_->send(FrameType::Ready, PidFrame{-1}.encode()))) return;
  caf::anon_send(client_, ready_atom::value);
}

void RemoteSession::stream_start(uint64_t task, const StreamStart& start) {
  if (bulk_ && bulk_sent(bulk_->send(FrameType::StreamStart, encode_stream_start(task, start)))) return;
  caf::anon_send(client_, stream_atom::value, task, start.rng, start.state.has_value(),
                 start.state.value_or(std::string()));
}

void RemoteSession::fatal(const std::string& type, const std::string& message, const std::string& when, int status) {
  ended_ = true;
  if (bulk_ && bulk_sent(bulk_->send(FrameType::InitError, InitErrorFrame{type, message, when}.encode()))) return;
  caf::anon_send(client_, fatal_atom::value, type, message, when, static_cast<int32_t>(status));
}

}  // namespace loader::runtime
