#pragma once
// What travels between pipeline ranks. A data message is tagged with the task that produced it
// (an F's activations, a B's input gradient) and the training step, so the receiver can route
// an out-of-order arrival to the microbatch that needs it, and reject one that fits nothing.
#include <cstdint>
#include <string>

#include "comm/payload.hpp"
#include "core/task.hpp"

namespace rrfp {

struct MessageTag {
  std::int32_t step = 0;
  TaskId producer;
  // A rendezvous acknowledgement (blocking mode): the receiver has taken the producer's output,
  // so the sender may compute again. Carries no payload.
  bool ack = false;
  friend bool operator==(const MessageTag&, const MessageTag&) = default;
};

// "step 3 F c1 m7" (acknowledgements: "step 3 ack of F c1 m7")
std::string to_string(const MessageTag& t);

struct Message {
  int src = 0;  // the sending endpoint's rank
  MessageTag tag;
  Payload payload;
};

}  // namespace rrfp
