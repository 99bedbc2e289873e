// `rrfp plan`: the clairvoyant reference (docs/frontier.md). Knowing every duration of the
// step, search for the fastest order under rrfp's own constraints, prove it optimal on small
// shapes, and write it as a hint file that `rrfp simulate --policy fixed` reproduces.

#include <cstdio>
#include <iostream>
#include <optional>

#include "cli/experiment_cmd.hpp"
#include "cli/options.hpp"
#include "cli/stop_signal.hpp"
#include "core/error.hpp"
#include "core/hint_io.hpp"
#include "core/output_file.hpp"
#include "core/printable.hpp"
#include "core/progress_ticker.hpp"
#include "plan/exact.hpp"
#include "plan/search.hpp"
#include "report/estimate.hpp"
#include "report/experiment.hpp"
#include "sim/replay.hpp"

namespace rrfp {

namespace {

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

double ms(std::int64_t ns) {
  return static_cast<double>(ns) / 1e6;
}

template <typename... Args>
std::string line(const char* format, Args... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, format, args...);
  return buf;
}

// Whether the exact search runs, and why not where --exact auto would have run it on this
// shape: the report says so, where a workload the search cannot model left it off unseen.
struct ExactChoice {
  bool run = false;
  std::string skipped;  // empty: ran, or off, or the shape is past auto's
};

// The exact search runs by default where it finishes quickly enough to be worth waiting for.
ExactChoice want_exact(const PlanFlags& f, const PlanProblem& p) {
  if (f.exact != "auto" && f.exact != "on" && f.exact != "off")
    throw InputError("`exact`: expected auto, on or off, got '" + f.exact + "'");
  // Its budget and cap, given where it does not run, were taken and ignored.
  const auto not_run = [&](const std::string& why, bool on_runs = true) {
    if (!f.exact_tuned.empty())
      throw InputError(f.exact_tuned + ": tune(s) the exact search, which " + why +
                       "; leave it out" + (on_runs ? ", or give --exact on" : ""));
    return ExactChoice{};
  };
  if (f.exact == "off") return not_run("--exact off leaves out");
  std::string why = exact_unsupported(p);
  if (why.empty() && f.entry == "in-order")
    why = "enumerates every order, so it cannot keep `entry` in-order";
  if (f.exact == "on") {
    if (!why.empty()) throw InputError("`exact` on: " + why);
    return {true, {}};
  }
  // V too: a node's cost grows with the chunks (P=4 M=8 spends its 20M-node cap in 18 s, V=2 in
  // 27 s), and at V=64 `plan --budget 1` spent the exact search's whole 60 s, without a word
  // where stderr was no terminal.
  if (p.m().pp() > 4 || p.m().vpp() > 2 || p.m().microbatches() > 8)
    return not_run("--exact auto runs only up to P 4, V 2 and M 8", why.empty());
  if (!why.empty()) not_run("does not run here (" + why + ")", false);
  return {why.empty(), why};
}

// A budget in seconds, refused unless in (0, 86400] (NaN included).
void check_budget(double s, const char* name) {
  if (!(s > 0 && s <= 86400))
    throw InputError(std::string("`") + name + "`: must be in (0, 86400] seconds, got " +
                     fmt_given(s));
}

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

// `lower`: a bound no order beats (the exact search stops at an order that meets it).
Planned search_both(const PlanFlags& f, const PlanProblem& p, const ExactChoice& exact,
                    std::int64_t lower, ProgressTicker& ticker) {
  Planned out;
  SearchOptions so;
  so.budget_s = f.budget_s;
  so.max_evaluations = f.max_evaluations;
  so.seed = f.search_seed;
  so.entry_in_order = f.entry == "in-order";
  so.stop = &stop_flag();
  // Before the first order's end there is no best: it read as a schedule of 0 ms.
  so.progress = [&ticker](const SearchProgress& g) {
    ticker.status(
        "search: " + std::to_string(g.evaluations) + " orders done, " +
        (g.found ? "best " + fmt("%.3f", ms(g.best)) + " ms" : std::string("the first under way")));
  };
  ticker.status("search: its first order under way");
  out.search = search_schedule(p, so);
  out.ran_exact = exact.run;
  out.exact_skipped = exact.skipped;
  if (!exact.run) return out;
  ExactOptions eo;
  eo.budget_s = f.exact_budget_s;
  eo.max_nodes = f.exact_nodes;
  eo.upper = out.search.makespan;
  eo.lower = lower;
  eo.stop = &stop_flag();
  eo.progress = [&ticker](std::int64_t nodes, std::int64_t b) {
    ticker.status("exact: " + std::to_string(nodes) + " nodes, " +
                  (b > 0 ? "best " + fmt("%.3f", ms(b)) + " ms" : std::string("no order yet")));
  };
  ticker.status("exact: its first nodes under way");
  out.exact = exact_schedule(p, eo);
  return out;
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

// The best order as a run of the report, checked against what the search said it makes.
ReportRun plan_run(const PlanFlags& f, const Scenario& sc, const PlanProblem& p,
                   const Planned& best, const LowerBound& lb) {
  ReportRun run;
  run.label = "clairvoyant plan";
  run.hint = f.out.empty() ? "plan" : f.out;
  run.policy = "fixed";
  run.comm = f.dispatch.comm;
  run.cfg = sc.cfg;
  run.result = simulate_order(p, best.order(), run.hint);
  if (run.result.makespan != best.makespan())
    throw Error("plan: the best order simulates to " + std::to_string(run.result.makespan) +
                " ns, not the " + std::to_string(best.makespan()) + " ns the search found");
  run.metrics = compute_metrics(run.result, lb);
  return run;
}

constexpr const char* machine_dependent =
    ": the result depends on this machine's speed (a larger --budget lets the cap decide)";

// Which limit left start hints untried, by name ("the budget" named neither flag), and why the
// orders may pass --max-evaluations: the starts go on until one of them is feasible (1 ran 2).
std::string starts_skipped_line(const PlanFlags& f, const SearchResult& s) {
  const std::string limit =
      s.stopped_by == SearchStop::Evaluations
          ? "--max-evaluations " + std::to_string(f.max_evaluations) + " was spent"
      : s.stopped_by == SearchStop::Budget
          ? "its --budget of " + fmt("%g", f.budget_s) + " s was spent"
          : "a signal stopped it";
  std::string out = "search: " + limit + " before " + std::to_string(s.starts_skipped) +
                    " start hints could be tried";
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
  }
  return "";
}

void print_plan(std::ostream& human, const PlanFlags& f, const Scenario& sc, const PlanProblem& p,
                const Planned& best, std::int64_t bound) {
  const WorkModel& m = p.m();
  const SearchResult& s = best.search;
  const ReportHeader head = header_of(sc);
  human << "P=" << m.pp() << " V=" << m.vpp() << " M=" << m.microbatches()
        << " split=" << (m.split() ? "on" : "off")
        << (m.config().ordered_forwards ? " (ordered forwards)" : "") << " TP=" << sc.tp
        << "  workload=" << head.workload
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
  human << line("\nsearch: %.3f ms, found by %s; %lld orders in %.1f s\n", ms(s.makespan),
                s.found_by.c_str(), static_cast<long long>(s.evaluations), s.seconds);
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
    human << "wrote " << visible(f.out) << ": rrfp simulate --hint " << shell_word(f.out)
          << " --policy fixed with the same shape, workload, --comm, --tp and --tp-protocol "
             "flags reproduces it\n";
}

// Takes the run whole: copied into the report's list of runs, its records took 72 bytes a task
// more (0.6 GB at P=M=2048).
nlohmann::json plan_json(const PlanFlags& f, const Scenario& sc, const PlanProblem& p,
                         ReportRun&& run, const Planned& best, std::int64_t bound) {
  const SearchResult& s = best.search;
  std::vector<ReportRun> runs;
  runs.push_back(std::move(run));
  nlohmann::json j = to_json(header_of(sc), runs);
  j["plan"] = {{"makespan_ms", ms(best.makespan())},
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
               {"max_pending_w", p.max_pending_w}};
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

void run_plan(const PlanFlags& f) {
  // A signal ends the search early: the best order so far is reported and written, then the
  // process exits 128 + the signal.
  const std::atomic<int>& stop = stop_on_signals();
  stop_at_once_until_work("plan");
  // An order of a large run takes seconds to evaluate.
  acknowledge_stop_signals("plan", "stopping after the order it is evaluating");
  check_budget(f.budget_s, "budget");
  check_budget(f.exact_budget_s, "exact_budget");
  Scenario sc = make_scenario(f.shape, f.load, f.dispatch);
  // A plan has no hint to decide `split_backward` auto: a replay does (W tasks recorded, W
  // apart in the plan), else it stays off.
  if (sc.split_mode == "auto" && !sc.replay_path.empty())
    sc.cfg.split_backward = replay_records_split(sc.replay_path, sc.tp, sc.trace);
  // The replay's step found (and its durations read) once, and named in the header as
  // simulate names it: "replay:t.json" left which step the plan was of unsaid.
  sc.split_mode = sc.cfg.split_backward ? "on" : "off";
  RunSpec planned;
  planned.hint = "plan";
  sc = with_replay_step(std::move(sc), {planned});
  refuse_unsplit_w_cap(f.dispatch, f.shape, sc.cfg.split_backward,
                       "for a --replay that recorded W tasks");
  // Each stage and TP rank's own state counts beside the tasks (kPlanStageBytes): counted by its
  // tasks alone, P=50M M=1 was estimated at 19 GB and killed by the kernel at 24 GB. Checked
  // before the work model is built.
  const double tasks = tasks_of(sc.cfg, sc.tp),
               held = tasks + static_cast<double>(sc.cfg.pp) * sc.tp * kPlanStageBytes /
                                  kPlanCost.bytes;  // in tasks' worth of bytes
  check_fits("plan: orders of " + fmt("%.1fM", tasks / 1e6) + " tasks", held, kPlanCost,
             "--pp, --microbatches or --tp", tasks / held);  // the time is the tasks'
  // What reports no progress of its own (the work drawn, the lower bound, an evaluation of
  // minutes, the report's run of the best order) is said by a thread of its own: a plan at
  // P=M=4500 was silent for 51 s.
  std::optional<ProgressTicker> ticker(std::in_place, "plan: drawing the work and its bound");
  const WorkModel m(sc.cfg);
  const RealizedWork work = realized_work(sc, m);
  const PlanProblem p = make_problem(m, work, parse_comm(f.dispatch.comm), sc.tp_protocol, sc.limit,
                                     sc.max_pending_w);
  if (f.entry != "free" && f.entry != "in-order")
    throw InputError("`entry`: expected free or in-order, got '" + f.entry + "'");
  work_begins();  // from here a signal ends the search, and the best order found is written
  const LowerBound lb = lower_bound(m, work, p.d_bound());
  std::int64_t bound = std::max(lb.value, lb.memory);
  const Planned best = search_both(f, p, want_exact(f, p), bound, *ticker);
  ticker->status("plan: running the best order for the report");
  ReportRun run = plan_run(f, sc, p, best, lb);
  ticker.reset();  // its line erased before the report
  // The exact search's root bound holds for every order, as it enumerates them all (it does
  // not run under --entry in-order): where tighter, the gap is measured from it.
  if (best.ran_exact) bound = std::max(bound, best.exact.root_bound);
  WrittenOutputs written;
  written.write("--out", f.out, [&] {
    const bool json = hint_path_is_json(f.out);
    write_text_file(
        f.out, json ? write_hint_json(best.order(), m) : write_hint_text(best.order(), m), "--out");
  });
  print_plan(is_stdout(f.json) ? std::cerr : std::cout, f, sc, p, best, bound);
  written.write("--json", f.json, [&] {
    nlohmann::json j = plan_json(f, sc, p, std::move(run), best, bound);
    if (const int sig = stop.load()) j["plan"]["stopped_by"] = signal_name(sig);  // budget unspent
    write_json_report(f.json, j);
  });
  if (const int sig = stop.load()) {
    print_line("rrfp plan: stopped by " + signal_name(sig) +
               " before its budget was spent; what it wrote is the best order found until then");
    throw QuietExit{128 + sig};
  }
}

}  // namespace

void setup_plan(CLI::App& app) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* sub = app.add_subcommand(
      "plan", "search the fastest schedule knowing every duration (the clairvoyant reference)");
  // A replayed step of ordered forwards is planned as one: off, its plan reordered forwards the
  // model cannot, "optimal" below the true optimum.
  f->shape.ordered = "auto";
  add_shape_flags(sub, f->shape);
  add_workload_flags(sub, f->load);
  add_execution_flags(sub, f->dispatch);
  sub->add_option("--budget", f->budget_s, "seconds for the heuristic search")
      ->capture_default_str();
  sub->add_option("--max-evaluations", f->max_evaluations,
                  "stop the heuristic after N orders (0: budget only; N makes it reproducible)")
      ->check(whole_number(kMaxCount));
  sub->add_option("--search-seed", f->search_seed, "seed of the search's perturbations")
      ->check(seed_value())
      ->capture_default_str();
  sub->add_option("--entry", f->entry,
                  "first stage's forwards: free (any order) or in-order (microbatch order, as an "
                  "online runtime must)")
      ->capture_default_str();
  sub->add_option(
         "--exact", f->exact,
         "exact search: auto (P <= 4, V <= 2, M <= 8, TP 1, async, no link sharing or wake-up), on "
         "or off")
      ->capture_default_str();
  CLI::Option* budget =
      sub->add_option("--exact-budget", f->exact_budget_s, "seconds for the exact search")
          ->capture_default_str();
  CLI::Option* nodes =
      sub->add_option("--exact-nodes", f->exact_nodes,
                      "nodes the exact search visits at most (0: no cap; a cap stops at the same "
                      "node on every machine)")
          ->check(whole_number(kMaxCount))
          ->capture_default_str();
  sub->add_option("--out", f->out,
                  "write the best order as a hint file (JSON for a name ending .json, else text)");
  sub->add_option("--json", f->json, "write the report as JSON to FILE ('-': stdout)");
  sub->callback([f, budget, nodes] {
    for (const CLI::Option* o : {budget, nodes})
      if (o->count() > 0) f->exact_tuned += (f->exact_tuned.empty() ? "" : " and ") + o->get_name();
    refuse_hint_name_out(f->out);
    check_outputs({{f->out, "--out"}, {f->json, "--json"}},  // before the search
                  {{f->load.replay, "--replay"}, {f->load.workload_file, "--workload-file"}});
    run_plan(*f);
  });
}

}  // namespace rrfp
