#pragma once
// How the T ranks of a tensor-parallel group choose the same next task (semantics.md §4), as one
// state machine per rank. No clock, thread or lock: how a choice or a proposal travels (shared
// memory, a control message, a simulated latency) is the executor's business; what it means
// is decided here, the same for the simulator and the runtime, for groups in one process and
// spread over processes alike.
#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "core/arbiter.hpp"

namespace rrfp {

// `leader`: rank 0 arbitrates alone (as a rank without a group does: choose_alone) and sends
// each choice to the others; a follower runs exactly that sequence, each task once it is
// ready there. No round trip, no retry.
inline std::optional<TaskId> choose_alone(StageArbiter& arb) {
  return arb.take();
}

class LeaderFollower {
 public:
  explicit LeaderFollower(int rank) : rank_(rank) {}
  // The leader's next choice. Throws ProtocolError unless it comes from rank 0 to a follower.
  void on_choice(int from, const TaskId& task);
  // The oldest choice not yet run, committed, once it is ready here; otherwise nullopt.
  std::optional<TaskId> next(StageArbiter& arb);
  // For the stuck report: "the leader's choice F c1 m2", or "the leader's next choice".
  std::string waiting() const;

 private:
  int rank_;
  std::deque<TaskId> chosen_;  // received, not yet run
};

// `agree` (the paper's appendix D): in round k every rank proposes its arbiter's choice and
// sends it to the others; once a rank holds all T proposals of round k it decides: if they are
// equal every rank commits that task, otherwise nobody runs anything. All ranks see the same
// proposals, so all decide alike. After a failed round a rank proposes again once its own
// ready set has changed, or once a peer has opened the next round (a peer's set changed, and
// a round needs everyone).
//
//   Idle --propose--> Proposed --decide, equal--> Idle (task committed)
//                              --decide, differ--> Failed --ready set changed or peer opened-->
//                              Idle
//
// A proposal from outside the group or from this rank, for a round that is over or more than
// one ahead, or a second one from the same rank for a round, is a protocol error.
class AgreeRound {
 public:
  enum class State : std::uint8_t { Idle, Proposed, Failed };

  AgreeRound(int rank, int size);

  // Whether this rank may open (or join) a round now; `version` is its Readiness::version().
  bool may_propose(std::uint64_t version) const;
  // Idle/Failed -> Proposed with this rank's choice (from StageArbiter::peek). Returns the
  // round number, which travels with the proposal. Throws Error unless may_propose(version).
  int propose(const TaskId& task, std::uint64_t version);
  void on_proposal(int from, int round, const TaskId& task);
  // Proposed, and every peer's proposal for the round is in.
  bool complete() const;
  // Proposed -> Idle with the agreed task, committed on `arb`; or -> Failed and nullopt.
  std::optional<TaskId> decide(StageArbiter& arb);

  State state() const { return state_; }
  int round() const { return round_; }
  std::int64_t rounds() const { return rounds_; }  // proposed in, this step
  std::int64_t failed_rounds() const { return failed_; }
  // For the stuck report: "agree round 3 (proposals from tp ranks 0, 2 of 3)"; after a failed
  // round, what each rank proposed in it (ranks whose arbiters rank their ready tasks alike
  // stop differing once the same tasks are ready on all: a group stuck so names a hint or
  // microbatch sizes that differ between its ranks); otherwise empty.
  std::string waiting() const;

 private:
  using Slot = std::vector<std::optional<TaskId>>;  // by rank
  Slot& slot(int round) { return slots_[round & 1]; }
  const Slot& slot(int round) const { return slots_[round & 1]; }
  bool peer_opened() const;

  int rank_, size_;
  State state_ = State::Idle;
  int round_ = 0;                     // the round this rank is in or will open next
  std::uint64_t failed_version_ = 0;  // Readiness::version() when the failed round was proposed
  std::uint64_t proposed_version_ = 0;
  std::array<Slot, 2> slots_;  // this round's and the next one's proposals
  Slot failed_slot_;           // the last failed round's proposals, for waiting()
  std::int64_t rounds_ = 0, failed_ = 0;
};

}  // namespace rrfp
