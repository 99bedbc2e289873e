#pragma once
// Tensor-parallel coordination of one stage (design.md §4), chosen once per stage: `alone`
// (T = 1, or protocol none), `leader` or `agree`. The decisions are the core's state machines
// (core/tp_choice.hpp); a coordinator carries their messages: straight into a peer's state
// machine when the peer is a thread of this stage, as a control message over the transport
// when it lives in another process. So one class serves a group in one process and a group
// spread over processes alike.
#include <memory>
#include <optional>
#include <string>

#include "runtime/stage_core.hpp"

namespace rrfp {

class Coordinator {
 public:
  virtual ~Coordinator() = default;
  // Fresh state machines for the step (lock held).
  virtual void begin_step() = 0;
  // The task rank r runs next, already committed on its arbiter; nullopt: nothing yet, wait
  // for a change. Lock held; agree may wait for its group on the stage's condition variable.
  virtual std::optional<TaskId> choose(std::unique_lock<std::mutex>& lk, int r) = 0;
  // A control message from tp rank `from` of this group to rank r (lock held). Throws
  // ProtocolError when the protocol has no place for it.
  virtual void on_control(int r, int from, const MessageTag& tag) = 0;
  // For the stuck report: what rank r waits for (empty: a ready task).
  virtual std::string waiting(int r) const = 0;
  // Rank r's agree rounds this step, and how many failed.
  virtual std::int64_t rounds(int /*r*/) const { return 0; }
  virtual std::int64_t failed_rounds(int /*r*/) const { return 0; }
};

std::unique_ptr<Coordinator> make_coordinator(StageCore& core);

}  // namespace rrfp
