#pragma once
// Readiness of one rank's tasks (semantics.md §1): a join counter per task (Taskflow's idea) that
// turns arrivals and completions into StageArbiter::mark_ready, and the state of each task's
// cross-stage input. The simulator calls it from its event queue, the runtime from its
// threads; it has no clock, thread or lock of its own.
//
// A cross-stage input moves Missing -> Delivered when it arrives (async), or
// Missing -> Offered -> Accepted -> Delivered through a rendezvous (blocking, see
// core/rendezvous.hpp). Any other move is a protocol error: the second arrival of an input,
// an acceptance without an offer.
#include <cstdint>
#include <string>
#include <vector>

#include "core/arbiter.hpp"
#include "core/work_model.hpp"

namespace rrfp {

// Local: the task takes no message (its inputs come from its own stage, or it is chunk 0's F).
enum class InputState : std::uint8_t { Local, Missing, Offered, Accepted, Delivered };
const char* to_string(InputState s);

class Readiness {
 public:
  // Marks ready every task of `stage` that waits for nothing. The arbiter must outlive this.
  Readiness(const WorkModel& m, int stage, StageArbiter& arbiter);

  // One input of `task` is present; the last one makes the task ready. True when it did.
  bool satisfy(const TaskId& task) { return satisfy_at(m_.local_index(task), task); }

  // `task`'s cross-stage input has arrived (async): Missing -> Delivered. Returns what
  // satisfy() returns; throws ProtocolError if the input was already there.
  bool arrive(const TaskId& task) {  // inline: one per message the simulator delivers
    const int i = m_.local_index(task);
    if (input_[i] != InputState::Missing) [[unlikely]]
      move(task, InputState::Missing, InputState::Delivered, "arrived");  // throws
    input_[i] = InputState::Delivered;
    return satisfy_at(i, task);
  }
  // Rendezvous steps of the same input. Each throws ProtocolError from any other state.
  void offer(const TaskId& task);    // Missing -> Offered: the sender has the value
  void accept(const TaskId& task);   // Offered -> Accepted: the transfer starts
  bool deliver(const TaskId& task);  // Accepted -> Delivered: the value is here; as satisfy()

  InputState input(const TaskId& task) const { return input_[m_.local_index(task)]; }
  bool delivered(const TaskId& task) const { return input(task) == InputState::Delivered; }
  // Bumped whenever a task becomes ready: `agree` retries a failed round only after a change.
  std::uint64_t version() const { return version_; }
  int stage() const { return stage_; }
  const WorkModel& model() const { return m_; }

  // The producers whose messages this rank still waits for (input Missing), most needed first
  // (the fixed order's next task, then by microbatch): the first `max`, and how many in all.
  std::vector<TaskId> expected(int max, int& total) const;
  // Whether a forward or backward of this stage still waits for its input from another stage
  // (a message, or a pulled payload), not from one of its own chunks.
  bool waits_on_other_stages() const;

 private:
  bool satisfy_at(int i, const TaskId& task) {
    if (--missing_[i] != 0) return false;
    arb_.mark_ready(task);
    ++version_;
    return true;
  }
  // The input of `task` goes from `from` to `to`; any other state is refused (`what` happened).
  int move(const TaskId& task, InputState from, InputState to, const char* what);

  const WorkModel& m_;
  int stage_;
  StageArbiter& arb_;
  std::vector<std::int8_t> missing_;  // by local index: inputs not yet present
  std::vector<InputState> input_;     // by local index: the cross-stage input, if any
  std::uint64_t version_ = 0;
};

}  // namespace rrfp
