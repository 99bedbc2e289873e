#pragma once
// What one step records, whoever ran it: the simulator (modelled times) or the runtime
// (measured times, ns since the step began). Every report, trace and invariant check reads
// this one record, so a simulated and a measured step compare field by field.
#include <cstdint>
#include <vector>

#include "core/arbiter.hpp"
#include "core/task.hpp"

namespace rrfp {

// Why a rank that is not computing cannot start its next task either.
enum class BlockReason : std::uint8_t {
  Send,          // rendezvous: held until the receiver has taken its output
  Collective,    // in a task's collective: its own time and the wait for the slowest rank
  Coordination,  // agree: waiting for the group's proposals
};

struct TaskRecord {
  TaskId task;
  int stage = 0, rank = 0;
  std::int64_t start = 0, compute_end = 0, end = 0;  // end: the group's collective finished
  // What the message carrying its output to another stage took (-1: none, or not known; 0 is
  // a message that took no time): traces keep it, so a trace replays to the very same step
  // (but for what a trace does not carry: wake-ups, comm_wake_us, a payload on its offer,
  // comm_offer_payload, and an acknowledgement held by a copy under way, comm_serial_receive
  // in blocking mode; docs/twin.md).
  // The simulator sets it; for the runtime, send_times_from_arrivals derives it from the
  // consumer's input_at.
  std::int64_t send_ns = -1;
  // Runtime: when the input it received from another stage arrived (-1: none, or the input
  // came from its own stage).
  std::int64_t input_at = -1;
  // Runtime, blocking: how long the offer of that input waited here before this rank accepted
  // it (busy with other tasks, or its posted receive another's): the rendezvous's wait, which
  // a replay's rendezvous adds by itself, so it is no part of the message's time.
  std::int64_t offer_wait = 0;
};

struct BlockedSpan {
  int stage = 0, rank = 0;
  std::int64_t start = 0, end = 0;
  BlockReason reason = BlockReason::Send;
};

struct RankStats {
  std::int64_t busy = 0, blocked = 0;
  // The part of `blocked` spent in collectives and in agree rounds: the reports' per-reason
  // times, kept here so that a step need not record its spans to report them.
  std::int64_t collective = 0, coordination = 0;
  void add_blocked(BlockReason why, std::int64_t ns) {
    blocked += ns;
    if (why == BlockReason::Collective) collective += ns;
    if (why == BlockReason::Coordination) coordination += ns;
  }
  RankStats& operator+=(const RankStats& o) {
    busy += o.busy;
    blocked += o.blocked;
    collective += o.collective;
    coordination += o.coordination;
    return *this;
  }
};

struct StepRecord {
  int pp = 0, tp = 1;
  std::int64_t makespan = 0;
  ArbiterOptions arbiter;        // as resolved
  std::vector<RankStats> ranks;  // [stage * tp + rank]
  std::vector<int> peak_d;       // per stage (the largest over its ranks)
  std::vector<int> peak_pending_w;
  std::int64_t coordination_rounds = 0, failed_rounds = 0;
  std::vector<TaskRecord> tasks;  // when recorded
  std::vector<BlockedSpan> blocked;
};

// Sets each producer's send_ns to its consumer's input_at minus the producer's end, less the
// time its offer waited for the receiver (blocking; at least 0): what the message really took, once
// a step's records from every stage are together. When the consumer's rank was idle at the arrival,
// it waited for this input, and the message ends at the consumer's start instead: the wake-up and
// dispatch after an arrival are then in the replay too (the arrival alone made the twin's replays
// short: docs/twin.md). A consumer's cross-stage input comes from the same kind one chunk away (F
// from chunk - 1, B from chunk + 1), on the same TP rank. The records must count on one clock
// (merged records of processes do: dist/step_merge.hpp); across hosts the clocks' offset is
// measured, and a message shorter than its error comes out as 0.
void send_times_from_arrivals(StepRecord& r);

// Cuts at the makespan every blocked span that reaches past it (a rendezvous whose
// acknowledgement lands after the step's last task), and its rank's blocked time with it: that
// wait is no part of the step, and counted, it was taken from the stage's idle time. For a
// record of every stage (merged ones: a process's own stages end sooner than the step).
void cut_waits_at_end(StepRecord& r);

}  // namespace rrfp
