#pragma once
// What `rrfp plan` (cli/plan_cmd.cpp) and its report (cli/plan_report.cpp) share: its flags,
// what its searches found, and the report's lines. Internal to the command line.
#include <cstdint>
#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/options.hpp"
#include "plan/exact.hpp"
#include "plan/search.hpp"
#include "report/columns.hpp"
#include "report/report.hpp"

namespace rrfp {

struct Scenario;

namespace plan_cmd {

struct PlanFlags {
  ShapeFlags shape;
  WorkloadFlags load;
  DispatchFlags dispatch;  // its --hint and --policy are not bound: a plan is its own order
  std::string exact = "auto", out, json;
  double budget_s = 10, exact_budget_s = 60;
  std::int64_t max_evaluations = 0;
  std::int64_t exact_nodes = 20'000'000;
  std::uint64_t search_seed = 1;
  std::string entry = "free";
  std::string exact_tuned;  // set after parsing: --exact-budget and --exact-nodes as given
};

using columns::ms;  // nanoseconds as milliseconds, as the report's tables give them

// What the searches found: the heuristic search's best, the exact search's if it ran, and the
// better of the two.
struct Planned {
  SearchResult search;
  ExactResult exact;
  bool ran_exact = false;
  std::string exact_skipped;  // why --exact auto left it off (ExactChoice)
  bool exact_better() const { return ran_exact && exact.found && exact.makespan < search.makespan; }
  const ListHint& order() const { return exact_better() ? exact.order : search.order; }
  std::int64_t makespan() const { return exact_better() ? exact.makespan : search.makespan; }
};

// The report for people: the start points, the searches and the best order's gap to `bound`.
void print_plan(std::ostream& human, const PlanFlags& f, const Scenario& sc, const PlanProblem& p,
                const Planned& best, std::int64_t bound);
// The JSON report, its plan's section beside the run of the best order (taken whole).
nlohmann::json plan_json(const PlanFlags& f, const Scenario& sc, const PlanProblem& p,
                         ReportRun&& run, const Planned& best, std::int64_t bound);

}  // namespace plan_cmd
}  // namespace rrfp
