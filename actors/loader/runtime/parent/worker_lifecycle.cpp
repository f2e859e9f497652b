#include "loader/runtime/parent/worker_lifecycle.h"

#include <cstring>
#include <sstream>

namespace loader::runtime {

const char* to_string(WorkerLifecycle::State s) {
  switch (s) {
    case WorkerLifecycle::State::Idle: return "idle";
    case WorkerLifecycle::State::Starting: return "starting";
    case WorkerLifecycle::State::Running: return "running";
    case WorkerLifecycle::State::Restarting: return "restarting";
    case WorkerLifecycle::State::Dead: return "dead";
    case WorkerLifecycle::State::Parked: return "parked";
  }
  return "?";
}

uint32_t WorkerLifecycle::start() {
  if (state_ == State::Dead) return gen_;
  ++gen_;
  pid_ = -1;
  state_ = State::Starting;
  return gen_;
}

void WorkerLifecycle::set_pid(uint32_t gen, int pid) {
  if (current(gen)) pid_ = pid;
}

bool WorkerLifecycle::park(uint32_t gen) {
  if (state_ == State::Idle) {
    state_ = State::Parked;
    return true;
  }
  if (!current(gen) || (state_ != State::Starting && state_ != State::Running) || !held_.empty()) return false;
  state_ = State::Parked;
  pid_ = -1;
  return true;
}

bool WorkerLifecycle::ready(uint32_t gen) {
  if (!current(gen) || state_ != State::Starting) return false;
  state_ = State::Running;
  return true;
}

WorkerLifecycle::Decision WorkerLifecycle::down(uint32_t gen, const WorkerExit& how, bool between_epochs) {
  Decision d;
  if (!current(gen) || state_ == State::Restarting || state_ == State::Parked)
    return d;  // stale, already handled, or retired on purpose (its exit is expected)
  const std::string sentence = how.pytorch_sentence(pid_);
  std::string held = describe_held();
  if (between_epochs) {
    state_ = State::Restarting;
    d.kind = Decision::Kind::Restart;
    for (const auto& [task, t] : held_) d.reissue.push_back(task);
    d.message = sentence + " DataLoader worker " + std::to_string(id_) +
                " died between epochs, before it started any task of this one: a fresh worker replaces it, "
                "as a new epoch starts fresh workers (nothing is lost; not counted as a restart).";
    return d;
  }
  if (how.kind == WorkerExit::Kind::HostLost && restartable_) {
    // A worker on another host: the host is gone, not the worker program.  Its tasks go
    // on elsewhere with the same id and random stream (the pool picks where).
    state_ = State::Restarting;
    d.kind = Decision::Kind::Restart;
    for (const auto& [task, t] : held_) d.reissue.push_back(task);
    d.message = sentence + " Its " + std::to_string(d.reissue.size()) +
                " unfinished task(s) go to another worker host, or to a stand-in process here, as DataLoader worker " +
                std::to_string(id_) + " (the same id and random stream: the same batches; not counted as a restart)" +
                (held.empty() ? "" : ": " + held) + ".";
    return d;
  }
  if (restartable_ && restarts_ < max_restarts_) {
    ++restarts_;
    state_ = State::Restarting;
    d.kind = Decision::Kind::Restart;
    for (const auto& [task, t] : held_) d.reissue.push_back(task);
    d.message = sentence + " Restarting DataLoader worker " + std::to_string(id_) + " (restart " +
                std::to_string(restarts_) + " of " + std::to_string(max_restarts_) + ") and re-issuing its " +
                std::to_string(d.reissue.size()) + " unfinished task(s)" + (held.empty() ? "" : ": " + held) + ".";
    return d;
  }
  std::string msg = sentence + " It was DataLoader worker " + std::to_string(id_) + " (" + how.describe() + ")";
  if (held_.empty()) msg += " and held no unfinished task.";
  else msg += " and held " + std::to_string(held_.size()) + " unfinished task(s): " + held + ".";
  if (!restartable_ && max_restarts_ > 0)
    msg += " Workers of iterable datasets are not restarted (their stream position is lost).";
  else if (max_restarts_ == 0)
    msg += " Set DataLoaderOptions::max_worker_restarts to restart dead workers.";
  else
    msg += " It was restarted " + std::to_string(restarts_) + " time(s) already (max_worker_restarts).";
  state_ = State::Dead;
  fatal_type_ = "RuntimeError";
  fatal_message_ = msg;
  d.kind = Decision::Kind::Fail;
  d.message = msg;
  return d;
}

bool WorkerLifecycle::fail(uint32_t gen, const std::string& type, const std::string& message) {
  if (state_ == State::Dead || state_ == State::Parked || gen != gen_) return false;
  state_ = State::Dead;
  fatal_type_ = type.empty() ? "RuntimeError" : type;
  fatal_message_ = message;
  return true;
}

std::optional<HeldTask> WorkerLifecycle::release(uint64_t task) {
  auto it = held_.find(task);
  if (it == held_.end()) return std::nullopt;
  HeldTask t = std::move(it->second);
  held_.erase(it);
  return t;
}

HeldTask* WorkerLifecycle::find(uint64_t task) {
  auto it = held_.find(task);
  return it == held_.end() ? nullptr : &it->second;
}

std::vector<uint64_t> WorkerLifecycle::drop_other_epochs(uint64_t epoch) {
  std::vector<uint64_t> slabs;
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->second.epoch != epoch) {
      if (it->second.slab) slabs.push_back(it->second.slab);
      it = held_.erase(it);
    } else {
      ++it;
    }
  }
  return slabs;
}

std::map<uint64_t, HeldTask> WorkerLifecycle::take_all() {
  std::map<uint64_t, HeldTask> out;
  out.swap(held_);
  return out;
}

std::string WorkerLifecycle::describe_held() const {
  std::ostringstream os;
  bool first = true;
  for (const auto& [task, t] : held_) {
    os << (first ? "" : "; ") << "task " << task << ": [";
    first = false;
    for (size_t i = 0; i < t.indices.size() && i < 16; ++i) os << (i ? ", " : "") << t.indices[i];
    if (t.indices.size() > 16) os << ", ... (" << t.indices.size() << " indices)";
    os << "]";
  }
  return os.str();
}

}  // namespace loader::runtime
