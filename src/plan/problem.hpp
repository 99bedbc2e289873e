#pragma once
// What the clairvoyant planner optimizes (docs/frontier.md): a step's realized durations, and
// the constraints rrfp itself runs under. A candidate schedule is a per-stage order of every
// task (a list hint); it is feasible when it keeps rrfp's memory invariants at every prefix of
// every stage, and its makespan is what the simulator gives it under the fixed policy, so
// `rrfp simulate --hint FILE --policy fixed` reproduces every number the planner reports.
#include <cstdint>
#include <optional>
#include <string>

#include "core/hint.hpp"
#include "sim/simulator.hpp"

namespace rrfp {

struct PlanProblem {
  const WorkModel* model = nullptr;
  const RealizedWork* work = nullptr;  // checked by make_problem; must not change after it
  CommMode comm = CommMode::Async;
  TpProtocol tp_protocol = TpProtocol::Leader;
  int limit = 0;          // back-pressure limit L, resolved (>= 1)
  int max_pending_w = 0;  // W cap, resolved (>= 1)

  const WorkModel& m() const { return *model; }
  const RealizedWork& w() const { return *work; }
  // The largest D = F done - B done a stage may reach: what rrfp's ready policy may reach
  // (the bound the invariant checker holds ready runs to).
  int d_bound() const { return ready_d_bound(limit, *model); }
};

// Resolves `limit` and `max_pending_w` (0 = the defaults rrfp's rule hints get: the
// memory-neutral limit of semantics.md §2 and W cap P). Throws InputError on bad values.
PlanProblem make_problem(const WorkModel& m, const RealizedWork& w, CommMode comm,
                         TpProtocol tp_protocol, int limit, int max_pending_w);

// The simulator's options for a run of `p` under `policy` (limit, W cap, comm, TP protocol).
SimOptions sim_options(const PlanProblem& p, Policy policy, bool record);

// Empty when `order` keeps D <= d_bound() and B done - W done <= max_pending_w at every prefix
// of every stage; otherwise what breaks first ("stage 2: D reaches 5 at F c2 m4 (bound 4)").
std::string order_violation(const PlanProblem& p, const ListHint& order);

// The order's makespan under the fixed policy, or nullopt when it deadlocks (a cross-stage
// cycle or a local dependency out of order).
std::optional<std::int64_t> evaluate(const PlanProblem& p, const ListHint& order);

// The full simulation of `order` under the fixed policy (records kept): for reports.
StepRecord simulate_order(const PlanProblem& p, const ListHint& order, const std::string& name);

// The order in which each stage ran its tasks (TP rank 0's record, by start time).
ListHint realized_order(const WorkModel& m, const StepRecord& r);

}  // namespace rrfp
