// `rrfp plan`'s report: its lines for people and its JSON (cli/plan_parts.hpp).
#include <cstdio>
#include <iostream>

#include "cli/plan_parts.hpp"
#include "core/printable.hpp"
#include "report/experiment.hpp"

namespace rrfp::plan_cmd {

namespace {

template <typename... Args>
std::string line(const char* format, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

// What the exact search proved, or what stopped it first: its node cap and its budget are
// both limits the user set (or took by default), and the line names the one that ended it.
std::string exact_outcome(const PlanFlags& f, const ExactResult& e) {
  switch (e.stopped_by) {
    case ExactStop::None:
      return e.met_lower ? "optimal (it meets the lower bound)" : "optimal (proven)";
    case ExactStop::NodeCap:
      return "not proven: stopped at its cap of " + std::to_string(f.exact_nodes) +
             " nodes (--exact-nodes)";
    case ExactStop::Budget:
      return "not proven: stopped when its " + fmt("%g", f.exact_budget_s) +
             " s were spent (--exact-budget)";
    case ExactStop::Signal:
      return "not proven: stopped by a signal";
  }
  return {};
}

// The simulate command that runs the plan's order on the plan's step. The file holds the shape
// (P, V, M, placement, split; not --ordered-forwards, which a feasible order of that mode keeps
// already, each chunk's forwards in microbatch order), not where the durations came from: the line
// once said "the same workload, --comm, --tp and --tp-protocol" and left out --seed and --replay
// with its reading; followed as said, a jitter plan drawn with --seed 5 simulated 201.75 ms for
// its 162.30. --limit and --max-pending-w are the order's own (a fixed run refuses them).
std::string reproducing_command(const PlanFlags& f) {
  std::string c = "rrfp simulate --hint " + shell_word(f.out) + " --policy fixed";
  auto add = [&c](const char* flag, const std::string& value) {
    c += std::string(" ") + flag + " " + shell_word(value);
  };
  const WorkloadFlags& w = f.load;
  if (!w.replay.empty()) {
    add("--replay", w.replay);
    if (w.trace.format != "auto") add("--trace-format", w.trace.format);
    if (w.trace.step >= 0) add("--step", std::to_string(w.trace.step));
    if (w.trace.message_us >= 0) add("--message-us", fmt_given(w.trace.message_us));
  }
  // A replay's durations are its own unless a jitter preset was given on top.
  if (w.replay.empty() || w.workload_given) add("--workload", w.workload);
  if (!w.workload_file.empty()) add("--workload-file", w.workload_file);
  if (w.seed_given) add("--seed", std::to_string(w.seed));
  const DispatchFlags& d = f.dispatch;
  if (d.comm != "async") add("--comm", d.comm);
  if (d.tp > 1) {
    add("--tp", std::to_string(d.tp));
    add("--tp-protocol", d.tp_protocol);
  }
  return c;
}

nlohmann::json exact_stop_name(ExactStop s) {
  switch (s) {
    case ExactStop::None:
      return nullptr;
    case ExactStop::NodeCap:
      return "node cap";
    case ExactStop::Budget:
      return "budget";
    case ExactStop::Signal:
      return "signal";
  }
  return nullptr;
}

constexpr const char* machine_dependent =
    ": the result depends on this machine's speed (a larger --budget lets the cap decide)";

// Which limit left start points untried, by name ("the budget" named neither flag), and why the
// orders may pass --max-evaluations: the starts go on until one of them is feasible (1 ran 2).
std::string starts_skipped_line(const PlanFlags& f, const SearchResult& s) {
  const std::string limit =
      s.stopped_by == SearchStop::Evaluations
          ? "--max-evaluations " + std::to_string(f.max_evaluations) + " was spent"
      : s.stopped_by == SearchStop::Budget
          ? "its --budget of " + fmt("%g", f.budget_s) + " s was spent"
          : "a signal stopped it";
  std::string out = "search: " + limit + " before " + std::to_string(s.starts_skipped) +
                    " of the start points could be tried";
  if (f.max_evaluations > 0 && s.evaluations > f.max_evaluations)
    out += "; it evaluated " + std::to_string(s.evaluations) +
           " orders, past the cap: a plan needs a feasible order, and the starts go on until one "
           "is";
  // The budget's one line: evaluation_cap_lines says the rest of it only where none was skipped.
  if (f.max_evaluations > 0 && s.stopped_by == SearchStop::Budget)
    out += ", after " + std::to_string(s.evaluations) + " orders, before --max-evaluations " +
           std::to_string(f.max_evaluations) + machine_dependent;
  return out + "\n";
}

// What --max-evaluations did, where the search line's count alone misleads: a budget spent
// first made the result depend on the machine (the cap is what makes it the same anywhere),
// and a cap that stopped the annealing is passed by the one evaluation that keeps its best.
std::string evaluation_cap_lines(const PlanFlags& f, const SearchResult& s) {
  if (f.max_evaluations <= 0) return {};
  const std::string cap = "--max-evaluations " + std::to_string(f.max_evaluations);
  if (s.stopped_by == SearchStop::Budget && s.starts_skipped == 0)
    return "search: its --budget of " + fmt("%g", f.budget_s) + " s was spent after " +
           std::to_string(s.evaluations) + " orders, before " + cap + machine_dependent + "\n";
  if (s.stopped_by == SearchStop::Evaluations && s.starts_skipped == 0 &&
      s.evaluations > f.max_evaluations)
    return "search: " + cap + " stopped its annealing, and the best order found there was " +
           "evaluated once more to be kept (" + std::to_string(s.evaluations) + " orders)\n";
  return {};
}

const char* search_stop_name(SearchStop s) {
  switch (s) {
    case SearchStop::Budget:
      return "budget";
    case SearchStop::Evaluations:
      return "max_evaluations";
    case SearchStop::Signal:
      return "signal";
    case SearchStop::Optimal:
      return "lower_bound";
  }
  return "";
}

}  // namespace

void print_plan(std::ostream& human, const PlanFlags& f, const Scenario& sc, const PlanProblem& p,
                const Planned& best, std::int64_t bound) {
  const WorkModel& m = p.m();
  const SearchResult& s = best.search;
  const ReportHeader head = header_of(sc);
  human << "P=" << m.pp() << " V=" << m.vpp() << " M=" << m.microbatches()
        << " split=" << (m.split() ? "on" : "off")
        << (m.config().ordered_forwards ? " (ordered forwards)" : "") << " TP="
        << sc.tp
        // The protocol, as simulate's and run's headers give it: plan --out tells to replay the
        // order with the same --tp-protocol.
        << (sc.tp > 1 ? " (" + head.tp_protocol + ")" : std::string())
        << "  workload=" << visible(head.workload)
        << (head.seed ? "  seed=" + std::to_string(*head.seed) : std::string())  // none: a replay
        << "  limit=" << p.limit << " (D <= " << p.d_bound()
        << ")"
        // Without a split backward there is no W to cap.
        << (m.split() ? "  W cap=" + std::to_string(p.max_pending_w) : std::string())
        << "  comm=" << f.dispatch.comm
        << "\n\nstart points (each order under the fixed policy"
        // A ready run's order replayed posts its receives in list order, where the ready run
        // accepted offers as they came: a "ready" row need not read what simulate makes of it.
        << (f.dispatch.comm == "blocking"
                ? "; blocking, it posts its receives in that order, so a ready row may be slower "
                  "than the ready run itself"
                : "")
        << "):\n";
  for (const StartPoint& sp : s.starts)
    human << line("  %-28s ", sp.name.c_str())
          << (sp.feasible ? line("%10.3f ms", ms(sp.makespan)) : std::string("  infeasible"))
          << "\n";
  human << line(
      "\nsearch: %.3f ms, found by %s; %lld orders in %.1f s%s\n", ms(s.makespan),
      s.found_by.c_str(), static_cast<long long>(s.evaluations), s.seconds,
      s.stopped_by == SearchStop::Optimal ? ", stopped there: it meets the lower bound" : "");
  if (s.starts_skipped > 0) human << starts_skipped_line(f, s);
  human << evaluation_cap_lines(f, s);
  if (best.ran_exact)
    human << line("exact:  %.3f ms, %s; %lld nodes in %.1f s (root bound %.3f ms)\n",
                  ms(best.exact.makespan), exact_outcome(f, best.exact).c_str(),
                  static_cast<long long>(best.exact.nodes), best.exact.seconds,
                  ms(best.exact.root_bound));
  if (!best.exact_skipped.empty())
    human << "exact:  not run: " << as_flags(best.exact_skipped)
          << " (--exact auto leaves such a step to the search)\n";
  const std::int64_t makespan = best.makespan();
  // Where the exact search proved its order optimal, the gap to the bound is the bound's slack,
  // not room left for a better order: the line says which.
  // So is an order that meets the bound: "not proven" beside a gap of 0.0% read as a doubt.
  const bool proven = best.ran_exact && best.exact.proven && !best.exact.met_lower;
  human << line("best:   %.3f ms%s; lower bound %.3f ms (gap %.1f%%)\n", ms(makespan),
                proven              ? ", optimal (proven by the exact search)"
                : makespan <= bound ? ", optimal (it meets the lower bound)"
                                    : "",
                ms(bound),
                // A step of zero-duration tasks takes 0 ns, as its bound does: no gap, not NaN.
                makespan > 0
                    ? 100.0 * static_cast<double>(makespan - bound) / static_cast<double>(makespan)
                    : 0.0);
  if (!f.out.empty())
    human << "wrote " << visible(f.out) << "; reproduced by: " << reproducing_command(f) << "\n";
}

// Takes the run whole: copied into the report's list of runs, its records took 72 bytes a task
// more (0.6 GB at P=M=2048).
nlohmann::json plan_json(const PlanFlags& f, const Scenario& sc, const PlanProblem& p,
                         ReportRun&& run, const Planned& best, std::int64_t bound) {
  const SearchResult& s = best.search;
  std::vector<ReportRun> runs;
  runs.push_back(std::move(run));
  nlohmann::json j = to_json(header_of(sc), runs);
  j["plan"] = {
      {"makespan_ms", ms(best.makespan())},
      {"lower_bound_ms", ms(bound)},
      {"optimal", best.makespan() <= bound || (best.ran_exact && best.exact.proven)},
      {"search_ms", ms(s.makespan)},
      {"search_found_by", s.found_by},
      {"starts_skipped", s.starts_skipped},
      {"evaluations", s.evaluations},
      {"search_stopped_by", search_stop_name(s.stopped_by)},
      {"search_seconds", s.seconds},
      {"limit", p.limit},
      {"d_bound", p.d_bound()},
      // null without W tasks, as the printed report leaves the cap out there
      {"max_pending_w", p.m().split() ? nlohmann::json(p.max_pending_w) : nlohmann::json()}};
  j["plan"]["starts"] = nlohmann::json::array();
  // An infeasible start has no makespan (0 in the search's record): null, said outright, where
  // 0.0 read as the fastest order of all.
  for (const StartPoint& sp : s.starts)
    j["plan"]["starts"].push_back(
        {{"name", sp.name},
         {"feasible", sp.feasible},
         {"makespan_ms", sp.feasible ? nlohmann::json(ms(sp.makespan)) : nlohmann::json()}});
  if (best.ran_exact)
    j["plan"]["exact"] = {{"makespan_ms", ms(best.exact.makespan)},
                          {"proven", best.exact.proven},
                          {"stopped_by", exact_stop_name(best.exact.stopped_by)},  // null: proven
                          {"max_nodes", f.exact_nodes},
                          {"nodes", best.exact.nodes},
                          {"seconds", best.exact.seconds}};
  if (!best.exact_skipped.empty()) j["plan"]["exact_skipped"] = as_flags(best.exact_skipped);
  return j;
}

}  // namespace rrfp::plan_cmd
