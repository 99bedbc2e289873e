#include "plan/problem.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace rrfp {

PlanProblem make_problem(const WorkModel& m, const RealizedWork& w, CommMode comm,
                         TpProtocol tp_protocol, int limit, int max_pending_w) {
  // The defaults of a rule hint: the planner competes with rrfp's rules at their limit.
  Hint rule;
  rule.name = "bf";
  rule.body = Rule::BF;
  ArbiterOptions a;
  a.policy = Policy::Ready;
  a.limit = limit;
  a.max_pending_w = max_pending_w;
  a = resolve_options(a, rule, m);
  check_work(w, m);  // once: every evaluation's simulation is told it was (sim_options)
  PlanProblem p;
  p.model = &m;
  p.work = &w;
  p.comm = comm;
  p.tp_protocol = tp_protocol;
  p.limit = a.limit;
  p.max_pending_w = a.max_pending_w;
  return p;
}

std::string order_violation(const PlanProblem& p, const ListHint& order) {
  const WorkModel& m = p.m();
  if (static_cast<int>(order.stages.size()) != m.pp()) return "the order has no list per stage";
  for (int s = 0; s < m.pp(); ++s) {
    int d = 0, w = 0;
    for (const TaskId& t : order.stages[s]) {
      d += t.kind == Kind::F ? 1 : t.kind == Kind::B ? -1 : 0;
      w += t.kind == Kind::B && m.split() ? 1 : t.kind == Kind::W ? -1 : 0;
      if (d > p.d_bound())
        return "stage " + std::to_string(s) + ": D reaches " + std::to_string(d) + " at " +
               to_string(t) + " (bound " + std::to_string(p.d_bound()) + ")";
      if (w > p.max_pending_w)
        return "stage " + std::to_string(s) + ": pending W reaches " + std::to_string(w) + " at " +
               to_string(t) + " (cap " + std::to_string(p.max_pending_w) + ")";
    }
  }
  return {};
}

SimOptions sim_options(const PlanProblem& p, Policy policy, bool record) {
  SimOptions opt;
  opt.arbiter.policy = policy;
  opt.arbiter.limit = p.limit;  // the fixed policy follows its list; set to skip the default
  opt.arbiter.max_pending_w = p.max_pending_w;
  opt.comm = p.comm;
  opt.tp_protocol = p.tp_protocol;
  opt.record = record;
  opt.work_checked = true;  // by make_problem
  return opt;
}

std::optional<std::int64_t> evaluate(const PlanProblem& p, const ListHint& order) {
  Hint h;
  h.name = "plan";
  h.body = order;
  return simulated_makespan(p.m(), h, p.w(), sim_options(p, Policy::Fixed, false));
}

StepRecord simulate_order(const PlanProblem& p, const ListHint& order, const std::string& name) {
  Hint h;
  h.name = name;
  h.body = order;
  return simulate(p.m(), h, p.w(), sim_options(p, Policy::Fixed, true));
}

ListHint realized_order(const WorkModel& m, const StepRecord& r) {
  std::vector<std::vector<const TaskRecord*>> by_stage(m.pp());
  for (const TaskRecord& t : r.tasks)
    if (t.rank == 0) by_stage[t.stage].push_back(&t);
  ListHint out;
  out.stages.resize(m.pp());
  for (int s = 0; s < m.pp(); ++s) {
    auto& v = by_stage[s];
    std::stable_sort(v.begin(), v.end(),
                     [](const TaskRecord* a, const TaskRecord* b) { return a->start < b->start; });
    for (const TaskRecord* t : v)
      out.stages[s].push_back(t->task);
  }
  return out;
}

}  // namespace rrfp
