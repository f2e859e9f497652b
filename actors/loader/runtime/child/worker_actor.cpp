#include "loader/runtime/child/worker_actor.h"

#include <map>
#include <memory>
#include <utility>

#include "loader/error.h"
#include "loader/runtime/rng_state_page.h"
#include "loader/runtime/child/worker_core.h"

namespace loader::runtime {

namespace {

struct WorkerActorState {
  uplink_actor uplink;
  std::unique_ptr<WorkerCore> core;
  std::unique_ptr<RngStatePage> page;
  /// Slabs the host mapped (id -> address, bytes): kept across a re-initialisation.
  std::map<uint64_t, std::pair<void*, size_t>> slabs;
  static inline const char* name = "loader.worker";
};

using worker_pointer = worker_actor::stateful_pointer<WorkerActorState>;

void fail(worker_pointer self, const std::string& type, const std::string& message, const std::string& when,
          int32_t status) {
  self->send(self->state.uplink, fatal_atom::value, type, message, when, status);
  self->quit();
}

/// Runs `f`; what it throws is a protocol error: the worker tells the main process and stops.
template <class F>
void guarded(worker_pointer self, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    fail(self, "RuntimeError", std::string("worker protocol error: ") + e.what(), "", 2);
  }
}

WorkerCore& core_for(worker_pointer self, const char* what) {
  if (!self->state.core) throw RuntimeError(std::string(what) + " before Init");
  return *self->state.core;
}

worker_actor::behavior_type worker_behavior(worker_pointer self, uplink_actor uplink) {
  self->state.uplink = std::move(uplink);
  return {
      [self](task_msg& t) {
        guarded(self, [&] {
          WorkerCore& core = core_for(self, "Task");
          auto& page = self->state.page;
          if (page) page->write(t.task_idx, RngStatePage::Before, core.generator());
          // The first task of an iterable stream reports how the stream began (the main
          // process keeps it for a checkpoint: IterableDataset's state hooks).  Tagged
          // with the task, so the main process tells this epoch's stream from an older one.
          if (auto start = core.take_stream_start())
            self->send(self->state.uplink, stream_atom::value, t.task_idx, std::move(start->rng),
                       start->state.has_value(), start->state.value_or(std::string()));
          WorkerReply reply = core.run_task(t.task_idx, t.indices, t.slab);
          // Recorded before the result leaves: once the main process has the result,
          // the state after the task is on the page.
          if (page) page->write(t.task_idx, RngStatePage::After, core.generator());
          self->send(self->state.uplink, result_msg{t.task_idx, std::move(reply)});
        });
      },
      [self](use_slab_atom, uint64_t task, uint64_t slab) {
        guarded(self, [&] {
          WorkerReply reply = core_for(self, "UseSlab").use_slab(task, slab);
          self->send(self->state.uplink, result_msg{task, std::move(reply)});
        });
      },
      [self](init_atom, const std::string& config) {
        try {
          self->state.core = std::make_unique<WorkerCore>(WorkerConfig::from_value(decode_value(config)));
        } catch (const Error& e) {
          return fail(self, e.python_type(), e.what(), "", 1);
        } catch (const std::exception& e) {
          return fail(self, "RuntimeError", e.what(), "", 1);
        }
        // A worker re-initialised for a new epoch keeps its slabs mapped.
        for (auto& [id, slab] : self->state.slabs) self->state.core->add_slab(id, slab.first, slab.second);
        self->send(self->state.uplink, ready_atom::value);
      },
      [self](page_atom, uint64_t address, uint64_t bytes) {
        guarded(self, [&] {
          self->state.page = std::make_unique<RngStatePage>(reinterpret_cast<void*>(address), bytes);
        });
      },
      [self](slab_atom, uint64_t id, uint64_t address, uint64_t bytes) {
        guarded(self, [&] {
          if (bytes == 0) {
            if (self->state.core) self->state.core->drop_slab(id);
            self->state.slabs.erase(id);
            return;
          }
          void* base = reinterpret_cast<void*>(address);
          if (self->state.core) self->state.core->add_slab(id, base, bytes);
          self->state.slabs[id] = {base, static_cast<size_t>(bytes)};
        });
      },
      [self](set_rng_atom, uint64_t task, const std::string& state) {
        guarded(self, [&] {
          WorkerCore& core = core_for(self, "SetRng");
          bool set = false;
          try {
            set = core.set_generator_state(state);
          } catch (const Error& e) {  // an iterable dataset's iter(), made again from the state
            return fail(self, e.python_type(), e.what(), kStreamAgain, 1);
          }
          if (!set) throw RuntimeError("SetRng frame without a generator state (an engine index out of range)");
          // Recorded at once: if this incarnation dies before `task` starts, the next one
          // resumes from the same state.
          if (self->state.page) self->state.page->write(task, RngStatePage::Before, core.generator());
        });
      },
      [self](seeds_atom, uint64_t base_seed, uint64_t task_base) {
        guarded(self, [&] { core_for(self, "TaskSeeds").set_task_seeds(base_seed, task_base); });
      },
      [self](resume_atom, uint64_t skip, const std::string& rng, const std::string& state) {
        guarded(self, [&] {
          WorkerCore& core = core_for(self, "ResumeStream");
          try {
            core.resume_stream(StreamResume{rng, state, skip});
          } catch (const Error& e) {  // the dataset refused its state, or its stream is shorter
            fail(self, e.python_type(), e.what(), kStreamResumed, 1);
          }
        });
      },
      [self](epoch_atom) {
        guarded(self, [&] {
          if (!self->state.core) return;
          try {
            self->state.core->reset_epoch();
          } catch (const Error& e) {  // the dataset's iter(): its own error, as at Init
            fail(self, e.python_type(), e.what(), kStreamAgain, 1);
          }
        });
      },
  };
}

}  // namespace

worker_actor spawn_worker_actor(caf::actor_system& sys, uplink_actor uplink) {
  return sys.spawn<caf::lazy_init>(worker_behavior, std::move(uplink));
}

}  // namespace loader::runtime
