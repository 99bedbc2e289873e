#include "cli/experiment_cmd.hpp"

#include <algorithm>
#include <iostream>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/hint.hpp"
#include "core/hint_io.hpp"
#include "core/output_file.hpp"
#include "core/printable.hpp"
#include "report/estimate.hpp"
#include "sim/trace_import.hpp"

namespace rrfp {

namespace {

// The fixed-order baseline that pairs with a rule hint under --policy both.
std::string baseline_for(const PipelineConfig& c) {
  if (c.vpp == 1) return "1f1b";
  if (c.placement == Placement::Loop && interleaved_1f1b_takes(c.pp, c.microbatches))
    return "interleaved-1f1b";
  return "bfs";
}

}  // namespace

CLI::Option* add_experiment_flags(CLI::App* sub, ExperimentFlags& f) {
  f.shape.ordered = "auto";  // a replayed trace's step says (with_replay_step)
  add_shape_flags(sub, f.shape);
  add_workload_flags(sub, f.load);
  // Both defaults read as values that can be given: --policy both is refused without --hint,
  // and --comm async given makes the comparison's baseline run one way (three rows, not four).
  CLI::Option* comm = add_dispatch_flags(
      sub, f.dispatch,
      "fixed, ready or both (fixed above ready), with --hint (without one: the comparison of "
      "the fixed baseline, 1F1B or at --vpp 2 or more interleaved 1F1B or BFS, against ready BF "
      "and BFW)");
  comm->description(comm->get_description() +
                    "; not given, the comparison (no --hint) runs its fixed baseline both ways");
  sub->add_option("--json", f.json, "write the report as JSON to FILE ('-': stdout)");
  sub->add_option("--trace", f.trace,
                  "write a Chrome trace (Perfetto) to FILE, gzipped where it ends in .gz "
                  "(predict and --replay read NAME.json and NAME.json.gz)");
  sub->add_option("--svg", f.svg, "write an SVG timeline to FILE");
  sub->add_flag("--per-stage", f.per_stage, "also print busy/blocked/idle per stage");
  return comm;
}

void check_experiment_files(const ExperimentFlags& f, const std::string& calibration) {
  // The table it adds rows to is not printed where stdout carries the JSON: it was taken and
  // did nothing.
  if (f.per_stage && is_stdout(f.json))
    throw InputError(
        "--per-stage: adds rows to the table, which --json - leaves out (the JSON gives each "
        "stage's busy, blocked and idle time under \"stages\"); write the JSON to a file, or leave "
        "--per-stage out");
  check_outputs({{f.json, "--json"}, {f.trace, "--trace"}, {f.svg, "--svg"}},
                {{hint_file(f.dispatch.hint), "--hint"},
                 {f.load.workload_file, "--workload-file"},
                 {f.load.replay, "--replay"},
                 {calibration, "--calibration"}});
}

Scenario make_scenario(const ExperimentFlags& f) {
  // Before the work: a mistyped folder used to cost every run, and then the table too.
  check_experiment_files(f);
  return scenario_of(f);
}

Scenario scenario_of(const ExperimentFlags& f) {
  Scenario sc = make_scenario(f.shape, f.load, f.dispatch);
  // Only a timeline reads the tasks and spans: the tables come from each rank's totals.
  sc.record = draws_timeline(f);
  return sc;
}

Scenario make_scenario(const ShapeFlags& shape, const WorkloadFlags& load,
                       const DispatchFlags& dispatch) {
  Scenario sc;
  ShapeFlags own = shape;  // a hint file's shape for the flags not given
  shape_from_hint_file(own, dispatch.hint);
  sc.cfg = to_config(own);  // auto: off, unless the replay says otherwise
  sc.ordered_from_replay = shape.ordered == "auto";
  sc.split_mode = shape.split;
  sc.workload = load_workload(load);
  sc.workload_name =
      workload_label(load.workload, load.workload_given, load.workload_file, !load.replay.empty());
  sc.replay_path = load.replay;
  sc.trace = load.trace;
  sc.seed = load.seed;
  sc.tp = checked_tp(dispatch.tp);
  refuse_unused_tp_protocol(dispatch);
  refuse_replaced_workload(sc, load.workload_given ? load.workload : "", load.workload_file, true);
  refuse_unused_seed(sc, load.seed_given);
  // A CSV of durations holds the tasks alone: its replay takes the workload's collective, which
  // a `train --tp 2` step's CSV did without a word (its own fixed order replayed 52% short).
  if (sc.tp > 1 && !sc.replay_path.empty() && !is_trace_path(sc.replay_path) &&
      !sc.file_sets_collective)
    print_line("rrfp: warning: --replay: '" + printable(sc.replay_path, 200) +
               "' records no TP collective (a CSV holds the tasks' durations alone): replayed "
               "with the workload's tp_collective_us, " +
               fmt("%g", sc.workload.tp_collective_us) +
               " us (set it in a --workload-file, or replay the run's trace, which measures it)");
  sc.tp_protocol = parse_tp_protocol(dispatch.tp_protocol);
  sc.limit = dispatch.limit;
  sc.max_pending_w = dispatch.max_pending_w;
  sc.progress = true;  // redrawn on a terminal, a line now and then in a log
  return sc;
}

namespace {

std::vector<RunSpec> runs_of(const ExperimentFlags& flags, const PipelineConfig& cfg) {
  const DispatchFlags& f = flags.dispatch;
  const CommMode comm = parse_comm(f.comm);
  if (f.hint.empty()) {
    // The default comparison runs both policies itself: a --policy here used to be ignored,
    // whatever its value.
    if (f.policy_given)
      throw InputError(
          "--policy: chooses how the --hint runs; without --hint the default "
          "comparison runs the fixed baseline and ready BF and BFW (give --hint "
          "to choose a policy)");
    // The Megatron-like baseline first, speedups relative to it; its blocking and async runs
    // unless --comm chooses one mode for every run (both baseline rows were that mode, twice).
    const std::string base = baseline_for(cfg);
    std::vector<RunSpec> runs;
    if (f.comm_given) {
      runs = {{base, Policy::Fixed, comm, ""}, {"bf", Policy::Ready, comm, ""}};
    } else {
      runs = {{base, Policy::Fixed, CommMode::Blocking, ""},
              {base, Policy::Fixed, CommMode::Async, ""},
              {"bf", Policy::Ready, CommMode::Async, ""}};
    }
    // BFW runs the split backward: under --split-backward off it is left out (it was refused,
    // "--hint bfw: needs --split-backward on", a flag the user had not given; and a replay
    // without W tasks, whose error advises that flag, could not be compared at all).
    if (flags.shape.split != "off") runs.push_back({"bfw", Policy::Ready, runs.back().comm, ""});
    return runs;
  }
  const bool rule = is_rule_hint_name(f.hint);
  // The library's words list fixed and ready, the two a run takes; the command takes both too.
  if (f.policy != "both" && f.policy != "fixed" && f.policy != "ready")
    throw InputError("--policy: unknown policy '" + printable(f.policy, 40) +
                     "' (expected fixed, ready or both)");
  if (f.policy == "both")
    return {{rule ? baseline_for(cfg) : f.hint, Policy::Fixed, comm, ""},
            {f.hint, Policy::Ready, comm, ""}};
  const Policy p = parse_policy(f.policy);
  refuse_fixed_limit(f);
  return {{f.hint, p, comm, ""}};
}

}  // namespace

std::vector<RunSpec> plan_runs(const ExperimentFlags& flags, const PipelineConfig& cfg) {
  std::vector<RunSpec> runs = runs_of(flags, cfg);
  // A W cap is refused only where no run splits the backward: the default comparison's BFW
  // does under auto. A hint that needs the split is refused under off with its own message;
  // adaptive runs unsplit, which ignored the cap.
  bool split = false;
  for (const RunSpec& r : runs)
    split = split || resolve_split(flags.shape.split, r.hint) || hint_needs_split(r.hint);
  refuse_unsplit_w_cap(flags.dispatch, flags.shape, split);
  return runs;
}

bool some_run_blocks(const DispatchFlags& f) {
  return (f.hint.empty() && !f.comm_given) || parse_comm(f.comm) == CommMode::Blocking;
}

// Bytes a task of `r` holds at the peak beyond a rule hint's with async messages (kSimulateCost):
// a list hint's order and ranks. Measured: the marginal bytes a task between P=M=512 and 1024
// (docs/data/speed.md), rounded up. A blocking run's rendezvous holds only the sends in flight
// (under 0.3 bytes a task measured, where keeping every send took 40-80).
double extra_bytes(const RunSpec& r) {
  return is_rule_hint_name(r.hint) ? 0 : 8;  // 44-46 measured
}

RunsSize runs_size(const Scenario& sc, const std::vector<RunSpec>& runs) {
  RunsSize s;
  for (const RunSpec& r : runs) {
    const PipelineConfig c = config_for(sc, r);
    const double tasks = tasks_of(c, sc.tp);
    s.most = std::max(s.most, tasks);
    s.total += tasks;
    s.most_bytes = std::max(
        s.most_bytes,
        simulated_bytes(
            c, sc.tp, protocol_cost(kSimulateCost, sc.tp, sc.tp_protocol).bytes + extra_bytes(r)));
  }
  return s;
}

std::string task_count(double n) {
  // Under 100K tasks a run read "0.0M": counted as they are.
  return n < 1e5 ? fmt("%.0f", n) : fmt("%.1fM", n / 1e6);
}

std::string runs_of_tasks(std::size_t runs, double most) {
  return std::to_string(runs) + (runs == 1 ? " run of " : " runs of up to ") + task_count(most) +
         " tasks";
}

void check_runs_fit(const char* command, const ExperimentFlags& f, const Scenario& sc,
                    const std::vector<RunSpec>& runs) {
  for (const RunSpec& spec : runs)  // a file written for another shape: said before the sizes
    if (!hint_file(spec.hint).empty())
      check_hint_file_holds(spec.hint, config_for(sc, spec), "hint");
  const auto [most, total, most_bytes] = runs_size(sc, runs);
  // The runs take turns, each freeing its work when done, unless a timeline keeps every run's
  // records to draw them.
  const bool timeline = draws_timeline(f);
  const bool one_async = runs.size() == 1 && runs[0].comm == CommMode::Async;
  TaskCost cost = protocol_cost(!f.trace.empty() ? (one_async ? kTraceOneRunCost : kTraceCost)
                                : !f.svg.empty() ? kSvgCost
                                                 : kSimulateCost,
                                sc.tp, sc.tp_protocol);
  if (!timeline && most > 0) cost.bytes = most_bytes / most;  // what the heaviest run holds
  const double held = timeline ? total : most;
  check_fits(std::string(command) + ": " + runs_of_tasks(runs.size(), most), held, cost,
             std::string("--pp, --microbatches or --tp") +
                 (timeline ? ", or leave out --trace and --svg" : ""),
             total / held);
}

void write_reports(const ExperimentFlags& f, const ReportHeader& h,
                   const std::vector<ReportRun>& runs, const nlohmann::json& extra) {
  WrittenOutputs written;
  written.write("--trace", f.trace, [&] { write_chrome_trace(f.trace, runs); });
  written.write("--svg", f.svg, [&] { write_svg(f.svg, h, runs); });
  written.write("--json", f.json, [&] {
    nlohmann::json j = to_json(h, runs);
    if (extra.is_object()) j.update(extra);
    write_json_report(f.json, j);
  });
  // When stdout carries the JSON, every line for people goes to stderr.
  std::ostream& human = is_stdout(f.json) ? std::cerr : std::cout;
  if (!is_stdout(f.json)) human << format_table(h, runs, f.per_stage);
  if (!f.trace.empty())
    human << "trace: " << visible(f.trace) << " (open in https://ui.perfetto.dev)\n";
  if (!f.svg.empty()) human << "timeline: " << visible(f.svg) << "\n";
}

}  // namespace rrfp
