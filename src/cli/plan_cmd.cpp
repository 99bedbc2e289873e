// `rrfp plan`: the clairvoyant reference (docs/frontier.md). Knowing every duration of the
// step, search for the fastest order under rrfp's own constraints, prove it optimal on small
// shapes, and write it as a hint file that `rrfp simulate --policy fixed` reproduces.

#include <iostream>
#include <optional>

#include "cli/experiment_cmd.hpp"
#include "cli/options.hpp"
#include "cli/plan_parts.hpp"
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

using namespace plan_cmd;

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
  so.lower = lower;
  // Before the first order's end there is no best: it read as a schedule of 0 ms.
  // An order that cannot run (a start hint past the memory limit) is done but found nothing:
  // "1 orders done, the first under way" said both.
  so.progress = [&ticker](const SearchProgress& g) {
    ticker.status("search: " + std::to_string(g.evaluations) + " orders done, " +
                  (g.found              ? "best " + fmt("%.3f", ms(g.best)) + " ms"
                   : g.evaluations == 0 ? std::string("the first under way")
                                        : std::string("none of them feasible yet")));
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

// The plan's outputs and report; a signal taken (`stop`) ends the process after them.
void report_plan(const PlanFlags& f, const Scenario& sc, const PlanProblem& p, const Planned& best,
                 ReportRun&& run, std::int64_t bound, const std::atomic<int>& stop) {
  WrittenOutputs written;
  written.write("--out", f.out, [&] {
    const bool json = hint_path_is_json(f.out);
    write_text_file(
        f.out, json ? write_hint_json(best.order(), p.m()) : write_hint_text(best.order(), p.m()),
        "--out");
  });
  print_plan(is_stdout(f.json) ? std::cerr : std::cout, f, sc, p, best, bound);
  written.write("--json", f.json, [&] {
    nlohmann::json j = plan_json(f, sc, p, std::move(run), best, bound);
    if (const int sig = stop.load()) j["plan"]["stopped_by"] = signal_name(sig);
    write_json_report(f.json, j);
  });
  if (const int sig = stop.load()) {
    // A signal during the report's run of the best order came after both searches had ended:
    // "before its budget was spent" beside "its --budget ... was spent" said both.
    const bool cut = best.search.stopped_by == SearchStop::Signal ||
                     (best.ran_exact && best.exact.stopped_by == ExactStop::Signal);
    print_line("rrfp plan: stopped by " + signal_name(sig) +
               (cut ? " before its budget was spent; what it wrote is the best order found "
                      "until then"
                    : " after its search had ended; what it wrote is the search's best order"));
    throw QuietExit{128 + sig};
  }
}

void run_plan(const PlanFlags& f) {
  // A signal ends the search early: the best order so far is reported and written, then the
  // process exits 128 + the signal.
  const std::atomic<int>& stop = stop_on_signals();
  stop_at_once_until_work("plan");
  // An order of a large run takes seconds to evaluate, and the report's run of the best one
  // and its hint file as long again (P=M=2000: 12.8 s after the signal, told only the first).
  acknowledge_stop_signals("plan",
                           "stopping after the order it is evaluating, then running the best "
                           "order found for the report and writing it");
  check_budget(f.budget_s, "budget");
  check_budget(f.exact_budget_s, "exact_budget");
  // Its start hints and its annealing run the ready policy, whose TP ranks picking alone
  // diverge: under `none` every such run failed and the search, on local moves alone, reported
  // an order 45% longer than under leader without a word. Its order runs fixed, uncoordinated,
  // under either protocol.
  if (f.dispatch.tp_protocol == "none")
    throw InputError(
        "--tp-protocol: expected leader or agree, got 'none' (the plan's start hints and its "
        "search run the ready policy, whose tensor-parallel ranks diverge without "
        "coordination; the plan's own order runs fixed, uncoordinated, under either)");
  require_coordination(f.dispatch.tp_protocol);  // 'foo' was told of none, which is refused
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
  report_plan(f, sc, p, best, std::move(run), bound, stop);
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
  sub->get_option("--tp-protocol")
      ->description(
          "TP coordination of the ready runs of its start hints and search: leader or agree "
          "(its order runs fixed, each rank following it); with --tp 2 or more");
  sub->add_option("--budget", f->budget_s,
                  "seconds for the heuristic search (drawing the work before it, the exact search "
                  "after it where --exact runs it, up to --exact-budget, and the report's run "
                  "of the best order come on top)")
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
