#pragma once
// The exact search (docs/frontier.md): branch and bound over every feasible order of a small
// step, proving the optimum when it finishes. Schedules are built in start-time order, each
// task as early as its stage and inputs allow, so every order is visited at most once; a
// branch is cut when a lower bound (one-machine bounds per stage with heads and tails, and
// every task's head + duration + tail) reaches the best makespan known.
//
// Needs TP = 1, async messages, each message costing its own latency alone (no comm_links,
// comm_serial_receive, comm_two_slowdown or comm_wake_us) and positive durations (the
// enumeration's order breaks ties by time); throws InputError otherwise.
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "plan/problem.hpp"

namespace rrfp {

struct ExactOptions {
  // Nodes visited at most (0: no cap). Unlike the budget, the cap stops at the same node on
  // every machine, so a result it stops is reproducible.
  std::int64_t max_nodes = 20'000'000;
  double budget_s = 60;
  // A known feasible makespan (0: none): the search looks only for something strictly better.
  std::int64_t upper = 0;
  // A bound no order beats, known from elsewhere (the memory bound; 0: none): an order that
  // reaches it is optimal, and the search stops there, proven, where it went on to its cap.
  std::int64_t lower = 0;
  std::function<void(std::int64_t nodes, std::int64_t best)> progress;  // about every second
  // Non-zero (a signal's number): stop as when the budget is spent (null: no such flag).
  const std::atomic<int>* stop = nullptr;
};

// Why an exact search ended before it had visited every order (None: it finished).
enum class ExactStop { None, NodeCap, Budget, Signal };

struct ExactResult {
  bool proven = false;  // the search finished: `makespan` is the optimum
  // Proven by ExactOptions::lower, not by the enumeration: `upper` already met it (nothing was
  // searched), or an order found did.
  bool met_lower = false;
  ExactStop stopped_by = ExactStop::None;
  std::int64_t makespan = 0;  // the best found (or `upper` when nothing better exists)
  bool found = false;         // `order` holds a schedule (false: `upper` was already optimal)
  ListHint order;
  std::int64_t root_bound = 0;  // the bound at the root
  std::int64_t nodes = 0;
  double seconds = 0;
};

// The most tasks the exact search takes. It goes one level deeper a task, on the thread's stack,
// and each level holds its candidates, up to one a task: a step of 48,000 tasks overflowed an
// 8 MB stack, and one of 40,000 took 1.5 GB. Proving an optimum is hopeless long before this.
inline constexpr int kMaxExactTasks = 2048;

// Empty when the exact search can enumerate `p`, else why not ("needs --tp 1").
std::string exact_unsupported(const PlanProblem& p);
// Throws InputError with exact_unsupported's reason.
ExactResult exact_schedule(const PlanProblem& p, const ExactOptions& opt);

}  // namespace rrfp
