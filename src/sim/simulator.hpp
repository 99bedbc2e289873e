#pragma once
// Discrete-event simulation of one training step (design.md §3-5), dispatching through the
// shared StageArbiter. Each stage is a group of T tensor-parallel ranks; a task's collective
// ends when the slowest rank of the group gets there.
#include <cstdint>
#include <string>
#include <vector>

#include "core/arbiter.hpp"
#include "core/hint.hpp"
#include "sim/workload.hpp"

namespace rrfp {

enum class CommMode { Async, Blocking };
std::string to_string(CommMode c);
CommMode parse_comm(const std::string& s);

// How the T ranks of a stage agree on the next collective-bearing task (design.md §4).
// `none` lets each rank choose alone: it exists to show that a mismatch is caught.
enum class TpProtocol { Leader, Agree, None };
std::string to_string(TpProtocol p);
TpProtocol parse_tp_protocol(const std::string& s);

struct SimOptions {
  ArbiterOptions arbiter;  // resolved by simulate()
  CommMode comm = CommMode::Async;
  TpProtocol tp_protocol = TpProtocol::Leader;
  bool record = true;  // keep per-task records and blocked spans (traces, checks)
};

enum class BlockReason : std::uint8_t { Send, Collective, Coordination };

struct TaskRecord {
  TaskId task;
  int stage = 0, rank = 0;
  std::int64_t start = 0, compute_end = 0, end = 0;  // end: the group's collective finished
};

struct BlockedSpan {
  int stage = 0, rank = 0;
  std::int64_t start = 0, end = 0;
  BlockReason reason = BlockReason::Send;
};

struct RankStats {
  std::int64_t busy = 0, blocked = 0;
};

struct SimResult {
  int pp = 0, tp = 1;
  std::int64_t makespan = 0;
  ArbiterOptions arbiter;        // as resolved
  std::vector<RankStats> ranks;  // [stage * tp + rank]
  std::vector<int> peak_d;       // per stage (rank 0)
  std::vector<int> peak_pending_w;
  std::int64_t coordination_rounds = 0, failed_rounds = 0;
  std::vector<TaskRecord> tasks;  // when record
  std::vector<BlockedSpan> blocked;
};

// Throws DeadlockError (with every stage's state) if the run cannot finish and
// CollectiveMismatchError if ranks of a group enter different collectives.
SimResult simulate(const WorkModel& m, const Hint& hint, const RealizedWork& work,
                   const SimOptions& opt);

}  // namespace rrfp
