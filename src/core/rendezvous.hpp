#pragma once
// The rendezvous of blocking communication (semantics.md §3), the Megatron-style baseline, for
// one rank: both its sending side and its receiving side. No clock, thread or lock: the
// simulator and the runtime drive it and move the bytes.
//
// Sender: a finished task's cross-stage outputs are offered to their receivers, and the rank
// computes nothing until each one is acknowledged:
//   Free --offered()--> Held(n) --acknowledged() x n--> Free
// An acknowledgement while Free is a protocol error.
//
// Receiver: each offer moves its task's input Missing -> Offered (core/readiness.hpp). When
// the rank is not computing, take_acceptable() accepts offers (Offered -> Accepted): under
// `ready` every one; under `fixed` only the one for its next posted receive, receives being
// posted one at a time in the stage's list order (Megatron's batched send/recv: a rank held
// on its own send still receives). The executor then moves the bytes and calls
// Readiness::deliver (Accepted -> Delivered), which may post the next receive.
#include <vector>

#include "core/readiness.hpp"

namespace rrfp {

class Rendezvous {
 public:
  // An offer of `consumer`'s input; `handle` is the executor's name for the transfer.
  struct Offer {
    TaskId consumer;
    int handle = 0;
  };

  // `order`: the stage's list order under `fixed` (receives are posted in it); nullptr under
  // `ready` (any offer is accepted). Both must outlive this.
  Rendezvous(const WorkModel& m, const std::vector<TaskId>* order, Readiness& inputs);

  // Sender side.
  void offered() { ++held_; }
  // Throws ProtocolError when no send is held. True when the rank is free again.
  bool acknowledged();
  int held() const { return held_; }

  // Receiver side. on_offer throws ProtocolError for a second offer of the same input.
  void on_offer(const TaskId& consumer, int handle);
  // The offers to start now, each moved to Accepted; the rest stay pending.
  std::vector<Offer> take_acceptable();
  bool has_offers() const { return !offers_.empty(); }
  int pending_offers() const { return static_cast<int>(offers_.size()); }
  const std::vector<Offer>& offers() const { return offers_; }
  // Fixed: the consumer whose receive is posted now, read without advancing (a stuck report);
  // nullptr under `ready` or when every one is delivered.
  const TaskId* posted() const;

 private:
  // The consumer whose receive is posted (fixed), or nullptr when every one is delivered.
  const TaskId* posted_receive();
  // Fixed: the list position of the first input from `from` on not yet here (the list's size
  // when none is left).
  int first_posted(int from) const;

  const WorkModel& m_;
  const std::vector<TaskId>* order_;
  Readiness& inputs_;
  int held_ = 0;
  int recv_pos_ = 0;  // fixed: list position of the next posted receive
  std::vector<Offer> offers_;
};

}  // namespace rrfp
