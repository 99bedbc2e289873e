#pragma once
// One pipeline stage in the runtime: the tensor-parallel ranks of it that this process hosts
// (all T in one process; one when ranks are processes), each with its own compute thread
// (run_rank). Its parts, each chosen once at construction:
//   StageCore   per-rank state (arbiter, readiness, program, inputs) under the stage's lock
//   Coordinator how the ranks of the group choose one order (alone, leader, agree)
//   Delivery    how a data message becomes an input (async, rendezvous)
// Arrivals come in through on_message from the transport's context: matched to the task that
// needs them and handed to the delivery. See docs/runtime.md for the thread model.
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "runtime/coordinator.hpp"
#include "runtime/delivery.hpp"
#include "runtime/stage_core.hpp"

namespace rrfp {

class Stage {
 public:
  // `endpoints[r]` is tensor-parallel rank r's transport; endpoint ids are stage * T + r. A
  // rank hosted by another process has neither program nor endpoint (nullptr).
  Stage(const StageEnv& env, int stage, std::vector<std::unique_ptr<StageProgram>> programs,
        std::vector<Transport*> endpoints, TpCollective* group);

  // Before the compute threads start; false where a rank could not begin (the step failed:
  // no compute thread may run on this stage's half-made state).
  bool begin_step(int step, std::int64_t t0);
  void run_rank(int r);                   // the compute thread of rank r
  void on_message(int r, Message&& msg);  // transport context
  void wake();                            // after a failure: every waiting rank exits
  std::string describe(std::int64_t now) const;
  // Whether rank r, in a step, still waits for a message from another stage: an input, or the
  // acknowledgement (or pull) of a send it is held on.
  bool waits_on_other_stages(int r) const;
  // The stages whose messages rank r still expects, each once, the most needed first; none
  // outside a step or in a task (what a stalled peer is asked: Runtime's stall chase).
  std::vector<int> awaited_stages(int r) const;
  const RankResult& result(int r) const { return core_.result(r); }  // after the step
  bool local(int r) const { return core_.local(r); }
  // The tasks of the running step its hosted ranks have ended, and those they have in all
  // (Runtime::step_progress). Any thread, any time.
  std::int64_t tasks_ended() const { return ended_.load(std::memory_order_relaxed); }
  std::int64_t tasks_hosted() const;

 private:
  // `replies`: what the message makes this rank send (rendezvous pulls and payloads, an
  // acknowledgement), posted once the stage lock is released.
  void route(Locked& lk, int r, Message&& msg, std::vector<Outgoing>& replies);
  // route(), failing the step with what it throws (the transport's thread must not see it).
  void route_or_fail(Locked& lk, int r, Message&& msg, std::vector<Outgoing>& replies);
  std::optional<TaskId> match(const Message& msg) const;
  // Rank r's part of begin_step: its driver and buffers for the step.
  void begin_rank(Locked& lk, int r);
  // The program's input_bytes(consumer); what it throws, as a TaskError naming it.
  std::optional<std::size_t> input_bytes(int r, const TaskId& consumer) const;
  // A task that returned with work still running (RuntimeOptions::window), or one that
  // returned after such a task and waits to complete behind it (work null); oldest first.
  struct InFlight {
    TaskId task;
    std::int64_t start;
    TaskContext ctx;
    Payload input;  // kept until the work is done: it may still read it
    Payload out;
    std::unique_ptr<PendingWork> work;
  };
  struct Flight {
    std::deque<InFlight> tasks;
    // When the rank's latest task ended: a device runs a rank's work in order, so the next
    // task's record starts no earlier (a task started while others were in flight).
    std::int64_t last_end = 0;
    // A completed task's sends, posted once the lock is released: one vector for the rank's
    // step, so that a completion allocates nothing on the way to the next dispatch.
    std::vector<Outgoing> sends;
    size_t size() const { return tasks.size(); }
    bool empty() const { return tasks.empty(); }
  };
  // Rank r's dispatch loop for the step, until it is done; false when the step failed.
  bool dispatch_loop(int r);
  // Runs task t; false when the step failed. A task that leaves work pending joins `flight`.
  bool execute(Locked& lk, int r, const TaskId& t, std::int64_t& prev_end, Flight& flight);
  // Completes the tasks of `flight` whose work is ready, in order; with `block`, waits for the
  // oldest first. False when the step failed.
  bool retire(Locked& lk, int r, Flight& flight, bool block, std::int64_t& prev_end);
  // The watchdog names the oldest task in flight, or none.
  void show_running(Locked& lk, int r, const Flight& flight);
  // Task t ended at `end` with `out`: finish, then its sends posted outside the lock.
  void complete(Locked& lk, int r, const TaskId& t, std::int64_t start, std::int64_t end,
                std::int64_t wait, const Payload& out, std::int64_t& prev_end,
                std::vector<Outgoing>& sends);
  // After task t ended at `end` with `out`: its record, and its output to its consumers.
  void finish(Locked& lk, int r, const TaskId& t, std::int64_t start, std::int64_t end,
              std::int64_t wait, const Payload& out, std::vector<Outgoing>& sends);
  // Runs fn; an exception from it fails the step, named by rank r and task t. False then.
  template <class Fn>
  bool guarded(int r, const TaskId& t, Fn&& fn);
  Payload call_program(int r, TaskContext& ctx, const TaskId& t, Payload in);
  void post_sends(int r, std::vector<Outgoing>& sends);

  // Blocking transfers with T > 1: rank r, waiting inside a task for its group's collective,
  // accepts what an idle rank would (CollectiveIdle).
  class Acceptor final : public CollectiveIdle {
   public:
    Acceptor(Stage& s, int r) : s_(s), r_(r) {}
    void serve() override;

   private:
    Stage& s_;
    int r_;
  };

  StageCore core_;
  std::unique_ptr<Delivery> delivery_;
  std::unique_ptr<Coordinator> coordinator_;
  std::deque<Acceptor> acceptors_;  // by rank; empty unless blocking with T > 1
  // Counted by the ranks that end tasks, read by a front end's progress: written under the
  // stage's lock, each stage its own, so no core's cache line is shared on the tasks' path.
  std::atomic<std::int64_t> ended_{0};
};

}  // namespace rrfp
