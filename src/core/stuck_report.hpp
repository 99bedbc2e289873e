#pragma once
// The report of a step that cannot go on (the simulator's deadlock, the runtime's watchdog):
// for each rank, what it has run, what is ready, what it waits for and which messages it still
// expects, read from the protocol state machines themselves rather than kept on the side.
#include <functional>
#include <string>

#include "core/arbiter.hpp"
#include "core/readiness.hpp"
#include "core/rendezvous.hpp"

namespace rrfp {

struct StuckRank {
  const StageArbiter* arbiter = nullptr;
  const Readiness* inputs = nullptr;
  const Rendezvous* rendezvous = nullptr;  // blocking mode only
  std::string waiting;                     // the coordination protocol's word (empty: a ready task)
  std::string running;  // the executor's, e.g. "running F c1 m2 for 30 ms" (empty: idle)
  int tp_rank = 0, tp = 1;
};

// "stage 1: ran 3/16, ... [tp rank 1]; held on 1 unacknowledged send(s); waits for a ready
// task; expects messages: F c0 m2 from stage 0, ..." `peer` names the stage a message comes
// from (e.g. with its process); empty: "stage N".
std::string describe(const StuckRank& r, const std::function<std::string(int stage)>& peer = {});

}  // namespace rrfp
