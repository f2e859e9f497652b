#include "loader/runtime/parent/slot_placement.h"

#include <utility>

#include "loader/error.h"
#include "loader/warnings.h"

namespace loader::runtime {

SlotPlacement::SlotPlacement(int workers, std::vector<HostPort> remote_hosts, Hooks hooks)
    : hooks_(std::move(hooks)), remote_hosts_(std::move(remote_hosts)) {
  const int local = workers - static_cast<int>(remote_hosts_.size());
  if (local < 0) throw RuntimeError("internal: more remote workers than workers");
  for (int w = 0; w < workers; ++w) {
    auto s = std::make_unique<Slot>();
    if (w >= local) {
      std::unique_ptr<HostedTransport> remote = hooks_.make_remote(w, static_cast<size_t>(w - local));
      s->remote = remote.get();
      s->home = std::move(remote);
    } else {
      s->home = hooks_.make_local(w);
    }
    s->current = s->home.get();
    slots_.push_back(std::move(s));
  }
}

std::vector<WorkerTransport*> SlotPlacement::homes() const {
  std::vector<WorkerTransport*> out;
  for (const auto& s : slots_) out.push_back(s->home.get());
  return out;
}

void SlotPlacement::use(int worker, WorkerTransport* t) {
  const auto lock = hooks_.enter();
  hooks_.use(worker, t);
  slot(worker).current = t;
}

WorkerTransport& SlotPlacement::start(int worker, uint32_t gen, const std::optional<WorkerExit>& lost) {
  Slot& s = slot(worker);
  if (!lost || !s.remote) {
    s.current->start(gen);
    return *s.current;
  }
  // Its host is gone: another worker host takes the slot (its own first, if it was
  // away), else a stand-in process here when the pool has local workers (the dataset
  // can be built here), with the same id, seed and random stream.
  const std::string lost_at = s.remote->target().text();
  std::vector<HostPort> hosts;
  auto consider = [&](const HostPort& h) {
    if (h.text() == lost_at) return;
    for (const auto& k : hosts)
      if (k.text() == h.text()) return;
    hosts.push_back(h);
  };
  consider(s.remote->home());
  for (const auto& h : remote_hosts_) consider(h);
  std::string tried;
  for (const HostPort& h : hosts) {
    try {
      s.remote->retarget(h);
      use(worker, s.remote);
      s.remote->start(gen);
      return *s.remote;
    } catch (const std::exception& e) {
      tried += std::string(tried.empty() ? "" : "; ") + e.what();
    }
  }
  s.remote->retarget(s.remote->home());
  if (local_count() > 0) {
    try {
      if (!s.standin) s.standin = hooks_.make_local(worker);
      use(worker, s.standin.get());
      s.standin->start(gen);
      return *s.standin;
    } catch (const std::exception& e) {
      tried += std::string(tried.empty() ? "" : "; ") + "a stand-in process here: " + e.what();
    }
  }
  throw RuntimeError("its host " + lost_at + " was lost (" + lost->detail + ") and no other worker could take its " +
                     "tasks: " +
                     (tried.empty() ? std::string("no other worker host is given (remote_workers) and this loader has "
                                                  "no local workers (num_workers = 0) to run a stand-in")
                                    : tried));
}

bool SlotPlacement::at_home(int worker) const {
  const Slot& s = slot(worker);
  return !s.remote || (s.current == s.remote && s.remote->target().text() == s.remote->home().text());
}

WorkerTransport& SlotPlacement::go_home(int worker, uint32_t gen) {
  Slot& s = slot(worker);
  if (!s.remote) throw RuntimeError("internal: slot " + std::to_string(worker) + " is not remote");
  WorkerTransport* away = s.current;
  const HostPort away_host = s.remote->target();
  away->stop();
  try {
    s.remote->retarget(s.remote->home());
    use(worker, s.remote);
    s.remote->start(gen);
  } catch (const std::exception& e) {
    const std::string where = away == s.remote ? "the worker host " + away_host.text() : "its stand-in process here";
    warn("DataLoader worker " + std::to_string(worker) + ": its host " + s.remote->home().text() +
         " still cannot take it (" + e.what() + "); it stays with " + where + " for this epoch");
    s.remote->retarget(away_host);
    use(worker, away);
    away->start(gen);  // throws what the caller reports
  }
  return *s.current;
}

void SlotPlacement::say_shutdown_all() {
  for (auto& s : slots_) {
    std::lock_guard<std::mutex> owner(s->owner);
    s->current->say_shutdown();
  }
}

void SlotPlacement::stop_all() {
  for (auto& s : slots_) {
    std::lock_guard<std::mutex> owner(s->owner);
    s->home->stop();
    if (s->standin) s->standin->stop();
  }
}

}  // namespace loader::runtime
