#pragma once
// What travels between pipeline ranks. A data message is tagged with the task that produced it
// (an F's activations, a B's input gradient) and the training step, so the receiver can route
// an out-of-order arrival to the microbatch that needs it, and reject one that fits nothing.
#include <cstdint>
#include <string>

#include "comm/payload.hpp"
#include "core/task.hpp"

namespace rrfp {

// Tensor-parallel coordination between ranks of one group that live in different processes
// (design §4): the leader's choice, or a rank's proposal in an `agree` round. `Abort`: the
// sender's step failed (its payload is the error's one line); the receiver fails that step too
// instead of waiting for messages that will not come. `Query`: the sender's watchdog found it
// stalled waiting on the receiver, which answers (`Answer`) with what it waits on in turn.
enum class Control : std::uint8_t {
  None = 0,
  Choice = 1,
  Proposal = 2,
  Abort = 3,
  Query = 4,
  Answer = 5
};

struct MessageTag {
  std::int32_t step = 0;
  TaskId producer;  // Choice / Proposal: the task chosen or proposed
  // A rendezvous acknowledgement (blocking mode): the receiver has taken the producer's output,
  // so the sender may compute again. Carries no payload.
  bool ack = false;
  // Rendezvous over a transport that moves the bytes (blocking mode with no emulated latency):
  // an `offer` announces the producer's output and leaves its payload with the sender; the
  // receiver, once it accepts, sends a `pull`, and the sender answers with the payload under the
  // plain data tag. Neither carries a payload.
  bool offer = false;
  bool pull = false;
  Control control = Control::None;
  std::int32_t round = 0;  // Proposal: the agree round, counted per step
  // Data: how long the producer took, measured where it ran (the adaptive rule ranks ready
  // forwards by it). Byte-stream transports carry it in microseconds.
  std::int64_t cost_ns = 0;
  friend bool operator==(const MessageTag&, const MessageTag&) = default;
};

// "step 3 F c1 m7" ("step 3 ack of F c1 m7", "step 3 offer of F c1 m7", "step 3 pull of F c1
// m7", "step 3 choice F c1 m7", "step 3 proposal 5 F c1 m7", "step 3 abort")
std::string to_string(const MessageTag& t);

struct Message {
  int src = 0;  // the sending endpoint's rank
  MessageTag tag;
  Payload payload;
};

}  // namespace rrfp
