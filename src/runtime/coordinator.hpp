#pragma once
// Tensor-parallel coordination of one stage (semantics.md §4), chosen once per stage: `alone`
// (T = 1, or protocol none), `leader` or `agree`. The decisions are each rank's RankDriver's
// (core/rank_driver.hpp); a coordinator carries their messages: straight into a peer's driver
// when the peer is a thread of this stage, as a control message over the transport when it
// lives in another process. So one class serves a group in one process and a group spread over
// processes alike.
#include <memory>
#include <optional>

#include "runtime/delivery.hpp"
#include "runtime/stage_core.hpp"

namespace rrfp {

class Coordinator {
 public:
  virtual ~Coordinator() = default;
  // The task rank r runs next, already committed by its driver; nullopt: nothing yet, wait
  // for a change. Agree may wait for its group (taking, meanwhile, what the delivery lets an
  // idle rank take: the rank the group waits for may itself be held on a send to this stage).
  virtual std::optional<TaskId> choose(Locked& lk, int r) = 0;
  // A control message from tp rank `from` of this group to rank r. Throws ProtocolError when
  // the protocol has no place for it.
  virtual void on_control(Locked& lk, int r, int from, const MessageTag& tag) = 0;
};

// `delivery`: the stage's, for what a rank waiting for its group may take meanwhile.
std::unique_ptr<Coordinator> make_coordinator(StageCore& core, Delivery& delivery);

}  // namespace rrfp
