#include "loader/runtime/parent/batch_delivery.h"

#include <algorithm>

#include "loader/error.h"
#include "loader/runtime/parent/slab_store.h"
#include "loader/runtime/parent/slot_placement.h"
#include "loader/runtime/parent/worker_slots.h"
#include "loader/runtime/worker_rings.h"

namespace loader::runtime {

BatchDelivery::BatchDelivery(StageActors& stages, WorkerSlots& workers, WorkerRings& rings,
                             const SlotPlacement& placement, SlabStore& slabs, const PoolEpoch& pool, Pool& actions)
    : stages_(stages), workers_(workers), rings_(rings), placement_(placement), slabs_(slabs), pool_(pool),
      actions_(actions) {}

void BatchDelivery::begin_epoch_locked(std::chrono::steady_clock::time_point now) {
  waits_ = 0;
  wait_ns_ = 0;
  occupancy_.start(now);
}

void BatchDelivery::first_tasks_out_locked(uint64_t in_flight) {
  occupancy_.see(std::chrono::steady_clock::now(), in_flight, 0);
}

void BatchDelivery::release_undelivered_locked() {
  // The reorder and pin stages drop what they hold, each result's slab going back.
  stages_.send(stages_.reorder(), drop_atom::value);
  stages_.send(stages_.pin(), drop_atom::value);
  actions_.run_stages_locked();
}

uint64_t BatchDelivery::next_for_application_locked() const {
  const Handoff& handoff = stages_.handoff();
  return handoff.empty() ? stages_.reordering().next_expected() : handoff.front_task();
}

void BatchDelivery::release_slab(int worker, uint64_t slab) {
  slabs_.release(worker, slab);
  {
    const auto lock = stages_.enter();
    if (!workers_.slab_released(worker)) return;
  }
  actions_.flush(worker);
}

bool BatchDelivery::releasable_locked() const {
  const auto& total = stages_.sampling().total();
  return pool_.epoch == 0 || pool_.fatal.has_value() || !stages_.handoff().empty() ||
         (total && stages_.reordering().done(pool_.first_task, *total));
}

size_t BatchDelivery::drain_rings_locked(bool& flush_needed, int only) {
  size_t taken = 0;
  const int n = placement_.size();
  for (int w = 0; w < n; ++w) {
    if (only >= 0 && w != only) continue;
    try {
      taken += placement_.current(w).take_results([&](WorkerReply&& r) {
        const uint64_t task = r.task;
        stages_.deliver(w, result_msg{task, std::move(r), w});
      });
    } catch (const Error& e) {
      actions_.worker_failed_locked(w, "RuntimeError", e.what());
    }
  }
  if (taken > 0) {
    actions_.run_stages_locked();  // link -> reorder -> pin
    for (int w = 0; w < n && !flush_needed; ++w)
      if (placement_.current(w).dirty()) flush_needed = true;
  }
  return taken;
}

void BatchDelivery::flush_dirty(std::unique_lock<std::mutex>& lock) {
  int dirty[8];
  int n_dirty = 0;
  bool more = false;
  const int n = placement_.size();
  for (int w = 0; w < n; ++w) {
    if (!placement_.current(w).dirty()) continue;
    if (n_dirty < 8) dirty[n_dirty++] = w;
    else more = true;
  }
  lock.unlock();
  if (more)
    for (int w = 0; w < n; ++w) actions_.flush(w);
  else
    for (int i = 0; i < n_dirty; ++i) actions_.flush(dirty[i]);
}

Delivery BatchDelivery::hand_over(HandedOver& handed, uint64_t ready_before) {
  result_msg& r = handed.result;
  Delivery d;
  d.task = r.task_idx;
  d.worker = r.worker;
  if (r.batch.kind == WorkerReply::Kind::Error) {
    d.kind = Delivery::Kind::Error;
    d.error_type = std::move(r.batch.error_type);
    d.error_message = std::move(r.batch.error_message);
  } else {
    d.kind = Delivery::Kind::Batch;
    d.slab = r.batch.slab;
    d.payload = std::move(r.batch.payload);
    d.value = std::move(r.batch.value);
    d.pinned = handed.pinned;
    if (d.worker >= 0 && d.worker < workers_.size()) workers_.delivered(d.worker);
  }
  // Its credit went back to the sampler with the take (the pin stage sent it), and the
  // sampler's next task went out in that run; a sampler that failed there fails the epoch.
  actions_.run_stages_locked();
  if (stats_recording())
    occupancy_.see(std::chrono::steady_clock::now(), stages_.sampling().dispatcher().in_flight(), ready_before);
  return d;
}

Delivery BatchDelivery::next(uint64_t epoch, std::optional<std::chrono::steady_clock::time_point> deadline) {
  auto lock = stages_.enter();
  bool flush_needed = false;
  bool waited = false;  // this call counted in waits_
  std::chrono::steady_clock::time_point wait_began;  // ... since then (the autotuner's wait_ns_)
  while (true) {
    const uint32_t seen = rings_.doorbell().seq.load(std::memory_order_acquire);  // before the look
    // The rings are taken when the handoff has nothing left: then every result the
    // workers published meanwhile goes through the stages in one run, several messages
    // per activation of the link, reorder and pin stages instead of one each.
    if (!pool_.closed && stages_.handoff().empty()) drain_rings_locked(flush_needed);
    if (epoch != pool_.epoch) return Delivery{};  // ended, or replaced by a newer epoch
    if (pool_.fatal) return *pool_.fatal;
    if (!stages_.sampling().active()) return Delivery{};
    const uint64_t ready_before = stats_recording() ? stages_.reordering().buffered() + stages_.handoff().size() : 0;
    if (auto handed = stages_.handoff().empty() ? std::nullopt : stages_.take()) {
      if (waited)
        wait_ns_ += static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - wait_began).count());
      Delivery d = hand_over(*handed, ready_before);
      flush_dirty(lock);
      return d;
    }
    if (const auto& total = stages_.sampling().total(); total && stages_.reordering().done(pool_.first_task, *total))
      return Delivery{};  // End
    if (pool_.closed)
      return Delivery{Delivery::Kind::Fatal, 0, -1, 0, "", "RuntimeError", "DataLoader: the worker pool was shut down"};
    if (flush_needed) {  // results of ended epochs freed slabs: waiting tasks go out
      flush_needed = false;
      flush_dirty(lock);
      lock.lock();
      continue;
    }
    if (!waited) {
      waited = true;
      ++waits_;
      wait_began = std::chrono::steady_clock::now();
    }
    if (workers_.send_starved_inline(stages_.reordering().in_order(), stages_.reordering().next_expected())) {
      flush_dirty(lock);
      lock.lock();
      continue;
    }
    // Nothing ready: poll the doorbell a little first (a result is usually close; a
    // futex sleep and wake-up cost a context switch on each side).
    if (const auto budget = spin_budget(); budget.count() > 0) {
      lock.unlock();
      const bool moved = spin_on(rings_.doorbell(), seen, budget);
      lock.lock();
      if (moved) continue;
    }
    // Say we sleep, then look at the rings once more: a worker that publishes after
    // that look sees the sleeper and rings (seq_cst on both sides).
    const uint32_t seq = rings_.prepare_sleep();
    if (drain_rings_locked(flush_needed) > 0 || releasable_locked()) {
      rings_.awake();
      continue;
    }
    lock.unlock();
    rings_.sleep(seq, deadline);
    lock.lock();
    rings_.awake();
    if (deadline && std::chrono::steady_clock::now() >= *deadline) {
      if (!pool_.closed) drain_rings_locked(flush_needed);
      if (!releasable_locked() && epoch == pool_.epoch && !pool_.fatal) {
        Delivery t;
        t.kind = Delivery::Kind::Timeout;
        return t;
      }
    }
  }
}

void EpochOccupancy::start(std::chrono::steady_clock::time_point now) {
  *this = EpochOccupancy{};
  began = last = now;
}

void EpochOccupancy::see(std::chrono::steady_clock::time_point now, uint64_t in_flight_now, uint64_t ready_now) {
  const double dt = std::chrono::duration<double>(now - last).count();
  in_flight_area += static_cast<double>(in_flight) * dt;
  ready_area += static_cast<double>(ready) * dt;
  last = now;
  in_flight = in_flight_now;
  ready = ready_now;
  in_flight_max = std::max(in_flight_max, in_flight_now);
  ready_max = std::max(ready_max, ready_now);
}

std::pair<double, double> EpochOccupancy::means(std::chrono::steady_clock::time_point now) const {
  const double span = std::chrono::duration<double>(now - began).count();
  if (span <= 0) return {0.0, 0.0};
  const double tail = std::chrono::duration<double>(now - last).count();
  return {(in_flight_area + static_cast<double>(in_flight) * tail) / span,
          (ready_area + static_cast<double>(ready) * tail) / span};
}

}  // namespace loader::runtime
