// The clairvoyant planner: the exact search against brute force, the bounds and every online
// rule; the heuristic against the exact optimum; plans as reproducible hint files.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "core/error.hpp"
#include "core/hint_io.hpp"
#include "expect_error.hpp"
#include "plan/exact.hpp"
#include "plan/search.hpp"
#include "sim/metrics.hpp"
#include "sim_helpers.hpp"

namespace rrfp::test {
namespace {

struct Instance {
  int p, m;
  bool split;
  std::string workload;
  int limit;  // 0 = default
  std::uint64_t seed;
};

std::string name_of(const Instance& c) {
  return "P" + std::to_string(c.p) + "M" + std::to_string(c.m) + (c.split ? "s" : "") + "_" +
         c.workload + "_L" + std::to_string(c.limit) + "_seed" + std::to_string(c.seed);
}

// 60 small instances: every shape the exact search proves within its node budget here.
std::vector<Instance> small_instances() {
  std::vector<Instance> out;
  const std::vector<std::string> loads = {"language", "multimodal", "jitter:J2", "straggler"};
  std::uint64_t seed = 1;
  for (auto [p, m] : {std::pair{2, 2}, {2, 4}, {2, 6}, {3, 3}, {3, 5}, {4, 4}})
    for (int limit : {0, 1})
      for (const auto& w : {loads[seed % 4], loads[(seed + 1) % 4]}) {
        out.push_back({p, m, false, w, limit, seed});
        out.push_back(
            {p, std::min(m, p == 4 ? 3 : 4), true, w, limit + (limit ? 1 : 0), seed + 100});
        ++seed;
      }
  // A few more of the tightest limit, where the memory bound is exact on uniform work.
  for (int p : {2, 3})
    for (const auto& w : loads)
      out.push_back({p, 3, false, w, 1, seed++});
  return out;
}

void PrintTo(const Instance& c, std::ostream* os) {
  *os << name_of(c);
}

struct Solved {
  PipelineConfig cfg;
  std::unique_ptr<WorkModel> m;
  RealizedWork work;
  PlanProblem problem;
};

Solved setup(const Instance& c) {
  Solved s;
  s.cfg = config(c.p, c.m, 1, c.split);
  s.m = std::make_unique<WorkModel>(s.cfg);
  s.work = realize(workload_preset(c.workload), *s.m, 1, c.seed);
  s.problem = make_problem(*s.m, s.work, CommMode::Async, TpProtocol::Leader, c.limit, 0);
  return s;
}

ExactResult solve_exactly(const PlanProblem& p, std::int64_t upper = 0) {
  ExactOptions eo;
  eo.max_nodes = 3'000'000;
  eo.budget_s = 600;  // the node cap decides, so the test does not depend on the machine
  eo.upper = upper;
  return exact_schedule(p, eo);
}

class SmallInstances : public ::testing::TestWithParam<Instance> {};

TEST_P(SmallInstances, ExactOptimumBoundsAndOnlineRules) {
  const Instance c = GetParam();
  Solved s = setup(c);
  // The heuristic first (reproducible under an evaluation cap); its makespan is the bound the
  // exact search must beat or prove optimal.
  SearchOptions so;
  so.max_evaluations = 3000;
  so.budget_s = 600;
  const SearchResult h = search_schedule(s.problem, so);
  EXPECT_EQ(evaluate(s.problem, h.order), h.makespan);
  const ExactResult ex = solve_exactly(s.problem, h.makespan);
  ASSERT_TRUE(ex.proven) << name_of(c) << ": " << ex.nodes << " nodes";
  const std::int64_t opt = ex.found ? ex.makespan : h.makespan;
  const ListHint& best = ex.found ? ex.order : h.order;
  EXPECT_LE(opt, h.makespan);
  // The optimum is a feasible order that simulates to exactly its makespan.
  EXPECT_EQ(order_violation(s.problem, best), "");
  EXPECT_EQ(evaluate(s.problem, best), opt);
  // Every bound is at most the optimum, the memory bound included (it holds at D <= L).
  const LowerBound lb = lower_bound(*s.m, s.work, s.problem.d_bound());
  EXPECT_LE(lb.value, opt);
  EXPECT_LE(lb.memory, opt);
  EXPECT_GT(lb.memory, 0);
  EXPECT_LE(ex.root_bound, opt);
  // No online rule at the same limit beats the optimum; their orders are feasible ones.
  for (const char* rule : {"bf", "fb", "b-priority", "f-priority", "1f1b"}) {
    SimOptions opt_s;
    opt_s.arbiter.limit = s.problem.limit;
    opt_s.arbiter.max_pending_w = s.problem.max_pending_w;
    const SimRun r = run(*s.m, rule, Policy::Ready, s.work, opt_s);
    EXPECT_GE(r.result.makespan, opt) << rule;
    EXPECT_EQ(order_violation(s.problem, realized_order(*s.m, r.result)), "") << rule;
  }
}

INSTANTIATE_TEST_SUITE_P(Plan, SmallInstances, ::testing::ValuesIn(small_instances()),
                         [](const auto& info) {
                           std::string n = name_of(info.param);
                           std::replace_if(
                               n.begin(), n.end(), [](char ch) { return !std::isalnum(ch); }, '_');
                           return n;
                         });

TEST(Plan, AtLeastFiftyInstances) {
  EXPECT_GE(small_instances().size(), 50u);
}

// Brute force over every pair of stage orders of a 2-stage, 2-microbatch step: the exact
// search finds the same minimum (and infeasible or deadlocking orders are refused).
TEST(Plan, ExactMatchesBruteForce) {
  for (std::uint64_t seed = 1; seed <= 6; ++seed)
    for (int limit : {1, 2}) {
      WorkModel m(config(2, 2));
      const RealizedWork w = realize(workload_preset("multimodal"), m, 1, seed);
      const PlanProblem p = make_problem(m, w, CommMode::Async, TpProtocol::Leader, limit, 0);
      auto a = m.stage_tasks(0), b = m.stage_tasks(1);
      std::sort(a.begin(), a.end(), [&](auto x, auto y) { return m.index(x) < m.index(y); });
      std::int64_t best = 0;
      int feasible = 0;
      do {
        auto bb = b;
        std::sort(bb.begin(), bb.end(), [&](auto x, auto y) { return m.index(x) < m.index(y); });
        do {
          ListHint o{{a, bb}};
          if (!order_violation(p, o).empty()) continue;
          if (auto ms = evaluate(p, o)) {
            ++feasible;
            if (best == 0 || *ms < best) best = *ms;
          }
        } while (std::next_permutation(bb.begin(), bb.end(),
                                       [&](auto x, auto y) { return m.index(x) < m.index(y); }));
      } while (std::next_permutation(a.begin(), a.end(),
                                     [&](auto x, auto y) { return m.index(x) < m.index(y); }));
      ASSERT_GT(feasible, 0);
      const ExactResult ex = solve_exactly(p);
      ASSERT_TRUE(ex.proven);
      EXPECT_EQ(ex.makespan, best) << "seed " << seed << " limit " << limit;
    }
}

TEST(Plan, HintFileReproducesTheMakespan) {
  WorkModel m(config(4, 8, 1, true));
  const RealizedWork w = realize(workload_preset("multimodal"), m, 1, 3);
  const PlanProblem p = make_problem(m, w, CommMode::Async, TpProtocol::Leader, 0, 0);
  SearchOptions so;
  so.max_evaluations = 2000;
  so.budget_s = 600;
  const SearchResult r = search_schedule(p, so);
  EXPECT_EQ(order_violation(p, r.order), "");
  const ListHint back = parse_hint(write_hint_json(r.order, m), m, "plan.json");
  Hint h;
  h.name = "plan.json";
  h.body = back;
  SimOptions opt;
  opt.arbiter.policy = Policy::Fixed;
  EXPECT_EQ(simulate(m, h, w, opt).makespan, r.makespan);
  // The search is reproducible under an evaluation cap.
  EXPECT_EQ(search_schedule(p, so).makespan, r.makespan);
  // And it is no slower than any of its starting points.
  for (const StartPoint& s : r.starts)
    if (s.makespan > 0) {
      EXPECT_LE(r.makespan, s.makespan) << s.name;
    }
}

TEST(Plan, TheLimitIsKept) {
  // At limit 1 nothing overlaps: the plan equals M * P * (F + B) on uniform work.
  WorkModel m(config(3, 4));
  const RealizedWork w = unit_work(m);
  const PlanProblem p = make_problem(m, w, CommMode::Async, TpProtocol::Leader, 1, 0);
  SearchOptions so;
  so.max_evaluations = 500;
  const SearchResult r = search_schedule(p, so);
  EXPECT_EQ(r.makespan, 4 * 3 * 2 * 1'000'000);
  ListHint gpipe = gen_gpipe(m);
  EXPECT_NE(order_violation(p, gpipe).find("D reaches 2"), std::string::npos);
}

// A limit that binds nothing, up to the largest int: D's bound stays the largest int. With V = 2
// the bound (limit + V) wrapped negative, and no order was feasible.
TEST(Plan, ALimitNearTheLargestIntBindsNothing) {
  WorkModel m(config(2, 4, 2));
  const RealizedWork w = unit_work(m);
  for (const int limit : {std::numeric_limits<int>::max(), std::numeric_limits<int>::max() - 1}) {
    const PlanProblem p = make_problem(m, w, CommMode::Async, TpProtocol::Leader, limit, 0);
    EXPECT_EQ(p.d_bound(), std::numeric_limits<int>::max());
    SearchOptions so;
    so.max_evaluations = 50;
    EXPECT_GT(search_schedule(p, so).makespan, 0);
  }
  EXPECT_EQ(ready_d_bound(5, m), 7);
}

// A step of zero-duration tasks takes 0 ns whatever the order: a plan of it is found, not "no
// feasible starting order" (a makespan of 0 stood for infeasible).
TEST(Plan, ZeroDurationsArePlanned) {
  WorkModel m(config(2, 4));
  RealizedWork w = unit_work(m);
  std::fill(w.compute_ns.begin(), w.compute_ns.end(), 0);
  std::fill(w.message_ns.begin(), w.message_ns.end(), 0);
  const PlanProblem p = make_problem(m, w, CommMode::Async, TpProtocol::Leader, 0, 0);
  SearchOptions so;
  so.max_evaluations = 50;
  const SearchResult r = search_schedule(p, so);
  EXPECT_TRUE(r.found);
  EXPECT_EQ(r.makespan, 0);
  EXPECT_EQ(order_violation(p, r.order), "");
  // Feasible starts are told apart from infeasible ones (fixed gpipe passes the limit) by
  // their flag, not their makespan of 0.
  EXPECT_TRUE(std::any_of(r.starts.begin(), r.starts.end(),
                          [](const StartPoint& s) { return s.feasible && s.makespan == 0; }));
  EXPECT_TRUE(std::any_of(r.starts.begin(), r.starts.end(),
                          [](const StartPoint& s) { return !s.feasible; }));
}

TEST(Plan, ExactRefusesWhatItCannotEnumerate) {
  WorkModel m(config(2, 2));
  const RealizedWork w2 = realize(workload_preset("language"), m, 2, 1);
  EXPECT_ERROR(exact_schedule(make_problem(m, w2, CommMode::Async, TpProtocol::Leader, 0, 0), {}),
               InputError, "`exact`: needs `tp` 1");
  const RealizedWork w = realize(workload_preset("language"), m, 1, 1);
  EXPECT_ERROR(exact_schedule(make_problem(m, w, CommMode::Blocking, TpProtocol::Leader, 0, 0), {}),
               InputError, "`exact`: needs `comm` async");
  EXPECT_ERROR(make_problem(m, w, CommMode::Async, TpProtocol::Leader, -1, 0), InputError,
               "`limit`: must be 0 (default) or at least 1, got -1");
  // Messages whose time depends on what else moves or idles then: the search times each alone.
  auto refused = [&](RealizedWork x, const char* field) {
    const PlanProblem p = make_problem(m, x, CommMode::Async, TpProtocol::Leader, 0, 0);
    EXPECT_NE(exact_unsupported(p).find(std::string("the workload's ") + field), std::string::npos)
        << field << ": " << exact_unsupported(p);
  };
  RealizedWork links = w, serial = w, slow = w, wake = w;
  links.links = 1;
  serial.serial_receive = true;
  slow.two_slowdown = 3;
  wake.wake_ns = 300'000;
  refused(links, "comm_links is 1");
  refused(serial, "comm_serial_receive");
  refused(slow, "comm_two_slowdown is 3");
  refused(wake, "comm_wake_us is 300");
  EXPECT_EQ(exact_unsupported(make_problem(m, w, CommMode::Async, TpProtocol::Leader, 0, 0)), "");
}

// An unfinished search says what stopped it: its node cap at exactly that node (the same
// result on any machine), or its time budget; a finished one, nothing.
TEST(Plan, ExactSaysWhatStoppedIt) {
  Solved s = setup({4, 8, false, "multimodal", 0, 1});  // far beyond a few hundred nodes
  ExactOptions eo;
  eo.max_nodes = 300;
  eo.budget_s = 600;
  const ExactResult capped = exact_schedule(s.problem, eo);
  EXPECT_FALSE(capped.proven);
  EXPECT_EQ(capped.stopped_by, ExactStop::NodeCap);
  EXPECT_EQ(capped.nodes, 300);
  eo.max_nodes = 0;  // no cap: the budget ends it
  eo.budget_s = 0.01;
  const ExactResult timed = exact_schedule(s.problem, eo);
  EXPECT_FALSE(timed.proven);
  EXPECT_EQ(timed.stopped_by, ExactStop::Budget);
  const ExactResult done = solve_exactly(setup({2, 2, false, "language", 0, 1}).problem);
  EXPECT_TRUE(done.proven);
  EXPECT_EQ(done.stopped_by, ExactStop::None);
}

// A bound known to hold for every order (ExactOptions::lower) stops the search at the first
// order that meets it, proven: it went on to its cap or budget. Given the optimum itself as
// the bound, the search finds that optimum in fewer nodes than the full enumeration needs; given
// a bound the start already meets, it searches nothing.
TEST(Plan, ExactStopsAtAnOrderThatMeetsAKnownBound) {
  const Solved s = setup({3, 3, false, "language", 0, 2});
  const ExactResult full = solve_exactly(s.problem);
  ASSERT_TRUE(full.proven);
  EXPECT_FALSE(full.met_lower);
  ExactOptions eo;
  eo.max_nodes = 3'000'000;
  eo.budget_s = 600;
  eo.lower = full.makespan;
  const ExactResult early = exact_schedule(s.problem, eo);
  EXPECT_TRUE(early.proven);
  EXPECT_TRUE(early.met_lower);
  EXPECT_EQ(early.makespan, full.makespan);
  EXPECT_TRUE(early.found);
  EXPECT_LT(early.nodes, full.nodes);
  eo.upper = full.makespan;  // a start that meets the bound: nothing to search
  const ExactResult none = exact_schedule(s.problem, eo);
  EXPECT_TRUE(none.proven && none.met_lower);
  EXPECT_FALSE(none.found);
  EXPECT_EQ(none.nodes, 0);
  eo.lower = full.makespan - 1;  // a bound below the optimum proves nothing early
  eo.upper = 0;
  const ExactResult below = exact_schedule(s.problem, eo);
  EXPECT_TRUE(below.proven);
  EXPECT_FALSE(below.met_lower);
  EXPECT_EQ(below.nodes, full.nodes);
}

// The heuristic likewise stops at an order that meets SearchOptions::lower: a one-stage step
// takes the sum of its work in any order, and a plan of one spent its whole budget. A bound
// one nanosecond lower stops nothing; the optimum as the bound stops the annealing where it finds
// it.
TEST(Plan, SearchStopsAtAnOrderThatMeetsAKnownBound) {
  WorkModel m(config(1, 4));
  const RealizedWork w = unit_work(m);  // the problem holds a reference
  const PlanProblem one = make_problem(m, w, CommMode::Async, TpProtocol::Leader, 0, 0);
  SearchOptions so;
  so.max_evaluations = 400;
  so.budget_s = 600;
  so.lower = 4 * 2 * 1'000'000;
  const SearchResult met = search_schedule(one, so);
  EXPECT_EQ(met.makespan, so.lower);
  EXPECT_EQ(met.stopped_by, SearchStop::Optimal);
  EXPECT_EQ(met.evaluations, static_cast<std::int64_t>(met.starts.size()));
  so.lower -= 1;
  const SearchResult capped = search_schedule(one, so);
  EXPECT_EQ(capped.stopped_by, SearchStop::Evaluations);
  EXPECT_GE(capped.evaluations, 400);

  const Solved s = setup({3, 5, false, "multimodal", 0, 17});  // no start is optimal
  const ExactResult full = solve_exactly(s.problem);
  ASSERT_TRUE(full.proven);
  so.max_evaluations = 20'000;
  so.lower = full.makespan;
  const SearchResult found = search_schedule(s.problem, so);
  EXPECT_EQ(found.makespan, full.makespan);
  EXPECT_EQ(found.stopped_by, SearchStop::Optimal);
  EXPECT_GT(found.evaluations, static_cast<std::int64_t>(found.starts.size()));
  EXPECT_LT(found.evaluations, so.max_evaluations);
}

// A V-shape under blocking comm at the default limit: every rule's order deadlocks, and the plan
// was refused ("no feasible starting order"); one microbatch at a time finishes, and the search
// goes on from it.
// A plan of the multimodal preset (seed 1) within 300 evaluations, checked to keep the model's
// order.
SearchResult planned_multimodal(const PipelineConfig& c, int tp, CommMode comm,
                                TpProtocol protocol) {
  const WorkModel m(c);
  const RealizedWork w = realize(workload_preset("multimodal"), m, tp, 1);
  const PlanProblem p = make_problem(m, w, comm, protocol, 0, 0);
  SearchOptions so;
  so.max_evaluations = 300;
  SearchResult r = search_schedule(p, so);
  EXPECT_TRUE(r.found);
  EXPECT_EQ(order_violation(p, r.order), "");
  return r;
}

TEST(Plan, StartsFromOneMicrobatchAtATimeWhereEveryRuleDeadlocks) {
  const SearchResult r = planned_multimodal(config(4, 8, 2, false, Placement::VShape), 1,
                                            CommMode::Blocking, TpProtocol::Leader);
  ASSERT_FALSE(r.starts.empty());
  EXPECT_EQ(r.starts.back().name, "serial");
  EXPECT_TRUE(r.starts.back().feasible);
  for (std::size_t i = 0; i + 1 < r.starts.size(); ++i)
    EXPECT_FALSE(r.starts[i].feasible) << r.starts[i].name;
  EXPECT_LE(r.makespan, r.starts.back().makespan);
}

// Without TP coordination a ready run's ranks may diverge: that start is infeasible, where the
// error ended the whole plan.
TEST(Plan, ARunWhoseTensorParallelRanksDivergeIsInfeasible) {
  const SearchResult r = planned_multimodal(config(4, 8), 2, CommMode::Async, TpProtocol::None);
  EXPECT_TRUE(std::any_of(r.starts.begin(), r.starts.end(),
                          [](const StartPoint& s) { return !s.feasible; }));
}

}  // namespace
}  // namespace rrfp::test
