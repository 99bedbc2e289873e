#pragma once
// What a stage computes: a user-supplied object per (stage, tensor-parallel rank). The
// runtime calls it from that rank's compute thread, one task at a time, in the order the
// arbiter picks; payloads are opaque to the runtime. A task may leave work running when it
// returns (kernels queued on a GPU stream), if the runtime's window allows it: the task then
// counts as done, and its output is handed on, only once that work has completed.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "comm/payload.hpp"
#include "core/task.hpp"

namespace rrfp {

class TpCollective;
class CollectiveIdle;
class FailureState;
class TaskContext;

// Work a task left running when it returned (TaskContext::defer): the runtime asks ready()
// under the stage's lock, so it must be cheap and must not block; wait() blocks until ready,
// and throws Aborted within milliseconds once ctx.aborted() (the watchdog). The runtime keeps
// the task's input payload, and its output, until the work is ready.
class PendingWork {
 public:
  virtual ~PendingWork() = default;
  virtual bool ready() = 0;
  virtual void wait(const TaskContext& ctx) = 0;
};

// Passed to every task: where it runs, the tensor-parallel collective tagged with it, and
// whether the step is being torn down.
class TaskContext {
 public:
  TaskContext(int stage, int tp_rank, int step, const TaskId& task, TpCollective* group,
              const FailureState* failure = nullptr)
      : stage_(stage),
        tp_rank_(tp_rank),
        step_(step),
        task_(task),
        group_(group),
        failure_(failure) {}

  int stage() const { return stage_; }
  int tp_rank() const { return tp_rank_; }
  int tp_size() const;
  int step() const { return step_; }
  const TaskId& task() const { return task_; }
  // Sums `data` over the stage's tensor-parallel ranks (a no-op when T = 1). Every rank of
  // the group must call it the same number of times per task. `emulated_ns` holds the
  // collective that much longer once the group has met (an emulated network all-reduce).
  void all_reduce(std::span<float> data, std::int64_t emulated_ns = 0);
  // What the rank does while it waits for its peers inside a collective (the runtime's
  // choice: blocking transfers' acceptances), or null.
  void set_idle(CollectiveIdle* idle) { idle_ = idle; }
  // Time this task spent waiting for the rest of its group inside collectives.
  std::int64_t collective_wait_ns() const { return wait_ns_; }
  // Where all_reduce notes when it entered the collective it waits in (-1: none), for the
  // stall report (Stage::describe); null: nowhere.
  void set_collective_clock(std::atomic<std::int64_t>* since) { in_collective_ = since; }
  // The step failed elsewhere (an error, the watchdog): a long task should stop.
  bool aborted() const;
  // Sleeps (or, with `spin`, busy-waits) until now_ns() reaches `deadline`, but throws Aborted
  // within 50 ms once the step fails: emulated work never outlives the watchdog.
  void wait_until(std::int64_t deadline, bool spin = false) const;
  // How many of this rank's tasks may have work pending at once (RuntimeOptions::window). With
  // more than one, the task may return before its work has completed, handing that work here;
  // the runtime then starts the rank's next task meanwhile, and completes this one, in the
  // order they started, once its work is ready. With one, defer() throws std::logic_error.
  int window() const { return window_; }
  void set_window(int w) { window_ = w; }
  void defer(std::unique_ptr<PendingWork> work);
  std::unique_ptr<PendingWork> take_pending() { return std::move(pending_); }

 private:
  int stage_, tp_rank_, step_;
  TaskId task_;
  TpCollective* group_;
  const FailureState* failure_;
  CollectiveIdle* idle_ = nullptr;
  std::atomic<std::int64_t>* in_collective_ = nullptr;
  std::int64_t wait_ns_ = 0;
  int window_ = 1;
  std::unique_ptr<PendingWork> pending_;
};

class StageProgram {
 public:
  virtual ~StageProgram() = default;
  virtual void begin_step(int /*step*/) {}
  virtual void end_step(int /*step*/) {}
  // `input`: the previous chunk's activations (empty for chunk 0, whose data is local).
  virtual Payload forward(TaskContext& ctx, int chunk, int mb, Payload input) = 0;
  // `grad`: the next chunk's input gradient (empty for the last chunk, which made the loss).
  // Returns this chunk's input gradient (ignored for chunk 0).
  virtual Payload backward(TaskContext& ctx, int chunk, int mb, Payload grad) = 0;
  // The deferred weight gradient (split backward only).
  virtual void weight_grad(TaskContext& /*ctx*/, int /*chunk*/, int /*mb*/) {}
  // The size a task's incoming message must have, when the program knows it; a message of
  // another size is a protocol error. Called from the transport's context while tasks run:
  // it must not touch state that forward/backward change.
  virtual std::optional<std::size_t> input_bytes(const TaskId& /*consumer*/) const {
    return std::nullopt;
  }
  // How large microbatch `mb` of the coming step is (tokens, bytes: only the order matters),
  // when the program knows it before the step: the adaptive rule's entry order (entry_ranks).
  // Asked on the stage that runs chunk 0, before begin_step, from the thread starting the step.
  // Every microbatch's or none: some without the others fail the step.
  virtual std::optional<std::int64_t> microbatch_size(int /*mb*/) const { return std::nullopt; }
  // What the running task waits for, where it waits its turn for something outside the
  // runtime ("" where it does not say): the stuck report shows it beside the task, which it
  // called running. Called from the watchdog's thread, under the stage's lock: must not block.
  virtual std::string waiting_for() const { return {}; }
  // Whether the step under way trains nothing (an evaluation pass: backward tasks that do
  // nothing), for wrappers that disturb training's tasks only. Asked from the stage's thread
  // while a task of the step runs.
  virtual bool evaluating() const { return false; }
};

using ProgramFactory = std::function<std::unique_ptr<StageProgram>(int stage, int tp_rank)>;

}  // namespace rrfp
