#pragma once
// The clairvoyant heuristic (docs/frontier.md): knowing every duration, find a fast feasible
// order. Starts from the orders rrfp's rules and the fixed schedules realize and from list
// scheduling by critical-path priority; then, until the budget is spent, anneals in priority
// space (each candidate list-scheduled by the ready policy) and polishes each round's best by
// moving tasks of its critical path on their stage.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "plan/problem.hpp"

namespace rrfp {

struct SearchProgress {
  std::int64_t evaluations = 0;  // done
  std::int64_t best = 0;         // makespan, ns, where `found`
  bool found = false;            // a feasible order is done
  double seconds = 0;
};

struct SearchOptions {
  double budget_s = 10;              // wall-clock budget of the improvement phase
  std::int64_t max_evaluations = 0;  // 0 = no cap; a cap makes the result machine-independent
  std::uint64_t seed = 1;            // the search's own randomness (perturbations)
  std::function<void(const SearchProgress&)> progress;  // about every 0.25 s
  // Non-zero (a signal's number): the budget counts as spent from then on (null: no such flag).
  const std::atomic<int>* stop = nullptr;
  // Keep the first stage's forwards in microbatch order: what an online runtime must do, as it
  // cannot know a microbatch's cost before running it. Separates the gain of knowing costs in
  // advance (reordering microbatches) from the gain of better arbitration.
  bool entry_in_order = false;
  // A makespan no order beats (the lower bound): an order that meets it ends the search, which
  // would spend the rest of its budget finding nothing better (a P=1 plan spent its 10 s so).
  std::int64_t lower = 0;
};

struct StartPoint {
  std::string name;           // "ready bf", "fixed 1f1b", "list critical-path", ...
  bool feasible = false;      // its order keeps the limits and runs to the end
  std::int64_t makespan = 0;  // of its realized order under the fixed policy (0 if infeasible)
};

// What ended the improvement phase, the first of the limits to be reached.
enum class SearchStop { Budget, Evaluations, Signal, Optimal };

struct SearchResult {
  ListHint order;
  // A feasible order was found. Not `makespan > 0`: a step of zero-duration tasks takes 0 ns
  // (a plan of it was "no feasible starting order").
  bool found = false;
  std::int64_t makespan = 0;
  std::string found_by;  // the start it came from, "+ local search" when the search improved it
  std::vector<StartPoint> starts;
  // The start points (a fixed and a ready order of each hint that fits the shape, a ready one of
  // a rule, and the critical-path list) the budget (or max_evaluations) left untried: the starts
  // stop once it is spent and one is feasible, so a budget smaller than the shape's first
  // evaluations is kept.
  int starts_skipped = 0;
  // Orders evaluated. Where max_evaluations stops the annealing, the best order it found is
  // evaluated once more to be kept: one past the cap (reproducibly so).
  std::int64_t evaluations = 0;
  // Budget where a cap was set but the budget ran out first: the result then depends on the
  // machine's speed. Optimal: an order met SearchOptions::lower (the starts all ran).
  SearchStop stopped_by = SearchStop::Budget;
  double seconds = 0;
};

// Throws InputError when no start is feasible (cannot happen for resolved limits >= 1).
SearchResult search_schedule(const PlanProblem& p, const SearchOptions& opt);

// List scheduling: the ready policy run with `priority` (higher first) as its list hint; the
// order it realizes keeps the limit and the W cap by construction.
ListHint list_schedule(const PlanProblem& p, const std::vector<double>& priority);
// The makespan of that run, without keeping its records (the annealing's evaluation); none
// where it does not finish: it deadlocks, or under tp_protocol none its TP ranks diverge.
std::optional<std::int64_t> list_makespan(const PlanProblem& p,
                                          const std::vector<double>& priority);

}  // namespace rrfp
