// InlineExecutor: runs actors on the thread that feeds their mailboxes.
//
// A worker host reads frames from the task ring and the socket on its own thread.
// Handing each task to a CAF scheduler thread would cost a wake-up and a context
// switch per task (TOOLCHAIN: a message per hop with a wake-up each caps W1 well below
// the ring runtime's speed).  Instead the host is a CAF execution unit: it puts each
// message into the actor's mailbox with itself as the context, so CAF schedules the
// actor *here* (exec_later), and run() resumes every actor so scheduled until none has
// a message left.  Messages those actors send each other while they run take the same
// path (a send uses the sender's execution unit), so the worker actor's result to the
// uplink actor is handled in the same activation.  Everything else about an actor is
// CAF's: its mailbox, its typed behaviour, its lifetime; a message another thread
// sends to an idle actor schedules it on the system's scheduler as usual, and CAF
// still runs one actor on one thread at a time.
//
//   InlineExecutor exec(sys);
//   exec.send(worker, task_msg{7, {3, 1, 4}, 1});   // typed: checked like anon_send
//   exec.run();                                       // the worker and its uplink ran
//
// Thread use: one thread owns an executor (send, run, the destructor); actors it runs
// may be scheduled by CAF elsewhere between two run() calls.
#pragma once

#include <caf/all.hpp>

#include <cstddef>
#include <deque>
#include <utility>

namespace loader::runtime {

class InlineExecutor final : public caf::execution_unit {
 public:
  explicit InlineExecutor(caf::actor_system& sys) : caf::execution_unit(&sys) {}
  /// Runs what is still scheduled here (an actor must never be left in this queue).
  ~InlineExecutor() override { run(); }
  InlineExecutor(const InlineExecutor&) = delete;
  InlineExecutor& operator=(const InlineExecutor&) = delete;

  /// Puts a message into `dest`'s mailbox (anonymously), as anon_send would, but with
  /// this unit as the context: an idle actor is scheduled here, not on CAF's threads.
  template <class Dest, class... Ts>
  void send(const Dest& dest, Ts&&... xs) {
    static_assert(sizeof...(Ts) > 0, "no message to send");
    using token = caf::detail::type_list<caf::detail::strip_and_convert_t<Ts>...>;
    static_assert(caf::response_type_unbox<caf::signatures_of_t<Dest>, token>::valid,
                  "receiver does not accept given message");
    if (dest) dest->eq_impl(caf::make_message_id(), nullptr, this, std::forward<Ts>(xs)...);
  }

  /// As send(), with high priority: `dest` handles it before the normal messages its
  /// mailbox holds.
  template <class Dest, class... Ts>
  void send_urgent(const Dest& dest, Ts&&... xs) {
    static_assert(sizeof...(Ts) > 0, "no message to send");
    using token = caf::detail::type_list<caf::detail::strip_and_convert_t<Ts>...>;
    static_assert(caf::response_type_unbox<caf::signatures_of_t<Dest>, token>::valid,
                  "receiver does not accept given message");
    if (dest) dest->eq_impl(caf::make_message_id(caf::message_priority::high), nullptr, this, std::forward<Ts>(xs)...);
  }

  /// Resumes the actors scheduled here until none is; returns how many activations ran.
  size_t run();

  /// CAF: an actor got a message while idle and is to run on this unit.
  void exec_later(caf::resumable* job) override { jobs_.push_back(job); }

 private:
  /// Messages an actor handles per activation before the next one gets its turn.
  static constexpr size_t kThroughput = 64;
  std::deque<caf::resumable*> jobs_;
};

}  // namespace loader::runtime
