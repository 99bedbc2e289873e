#pragma once
// The header every message of the byte-stream transports starts with (the MPI transport's now):
// 40 bytes holding the tag, the payload size and, for a payload sent apart, its data tag.
#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>

#include "comm/message.hpp"

namespace rrfp {

inline constexpr int kFlagAck = 1, kFlagFollows = 2,  // the payload follows under its data tag
    kFlagOffer = 4, kFlagPull = 8,
                     kFlagClose = 16;  // the sender's endpoint is shut down: its last message here

struct Wire {
  std::int32_t step, kind, chunk, mb, flags, round;
  std::uint64_t size;
  std::int32_t data_tag, cost_us;
};
static_assert(sizeof(Wire) == 40);

inline Wire encode(const MessageTag& t, std::size_t size) {
  return Wire{t.step,
              static_cast<std::int32_t>(t.producer.kind),
              t.producer.chunk,
              t.producer.mb,
              (t.ack ? kFlagAck : 0) | (t.offer ? kFlagOffer : 0) | (t.pull ? kFlagPull : 0) |
                  (static_cast<int>(t.control) << 8),
              t.round,
              size,
              0,
              static_cast<std::int32_t>(std::clamp<std::int64_t>(t.cost_ns / 1000, 0, INT32_MAX))};
}

inline MessageTag decode(const Wire& w) {
  MessageTag t;
  t.step = w.step;
  t.producer = TaskId{static_cast<Kind>(w.kind), w.chunk, w.mb};
  t.ack = (w.flags & kFlagAck) != 0;
  t.offer = (w.flags & kFlagOffer) != 0;
  t.pull = (w.flags & kFlagPull) != 0;
  t.control = static_cast<Control>((w.flags >> 8) & 0xff);
  t.round = w.round;
  t.cost_ns = static_cast<std::int64_t>(std::max(w.cost_us, 0)) * 1000;
  return t;
}

}  // namespace rrfp
