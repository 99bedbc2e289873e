#pragma once
// How a stage's data messages become task inputs (semantics.md §3), chosen once per stage:
// `async` delivers an arrival at once; `rendezvous` (blocking, the baseline) lets the sender
// offer it, the receiver accept it when idle, moves it, and acknowledges the transfer. Each rank's
// RankDriver decides (core/rank_driver.hpp); what a delivery adds is the lock, the threads and
// the bytes.
#include <memory>
#include <vector>

#include "runtime/stage_core.hpp"

namespace rrfp {

// A task output bound for another stage, sent once the stage lock is released.
struct Outgoing {
  int dst;
  MessageTag tag;
  Payload payload;
  std::int64_t due = 0;  // absolute ns the emulated latency lets it leave (0: now)
};

class Delivery {
 public:
  virtual ~Delivery() = default;
  // After the stage's ranks have their step's Readiness.
  virtual void begin_step(Locked& lk) = 0;
  // A data message (or an offer) for `consumer`'s input on rank r, already matched; what it
  // makes the rank send goes to `replies`. Throws ProtocolError when the state machines refuse
  // it.
  virtual void on_data(Locked& lk, int r, const TaskId& consumer, Message&& msg,
                       std::vector<Outgoing>& replies) = 0;
  virtual void on_ack(Locked& lk, int r, const Message& msg) = 0;
  // A receiver accepted rank r's offer of msg.tag.producer's output: its payload goes to
  // `replies`.
  virtual void on_pull(Locked& lk, int r, const Message& msg, std::vector<Outgoing>& replies) = 0;
  // Rank r's thread, not computing: takes what an idle rank may take. True when it took
  // anything (it may have released the lock meanwhile).
  virtual bool idle(Locked& lk, int r) = 0;
  // Rank r's task `producer` ended at `end` with `out`, an input of `consumer` on another
  // stage: adds the message to `sends`.
  // `cost_ns`: how long the producer took (travels in the tag for the adaptive rule).
  virtual void output(Locked& lk, int r, const TaskId& producer, const TaskId& consumer,
                      const Payload& out, std::int64_t end, std::int64_t cost_ns,
                      std::vector<Outgoing>& sends) = 0;
};

std::unique_ptr<Delivery> make_delivery(StageCore& core);

}  // namespace rrfp
