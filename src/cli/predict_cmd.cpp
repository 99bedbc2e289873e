// `rrfp predict TRACE`: what readiness-first dispatch would make of a recorded step
// (report/predict.hpp, docs/twin.md).
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/options.hpp"
#include "cli/stop_signal.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/printable.hpp"
#include "core/progress_ticker.hpp"
#include "report/estimate.hpp"
#include "report/predict.hpp"

namespace rrfp {

namespace {

struct PredictFlags {
  std::string path;
  int pp = 0, vpp = 0, microbatches = 0, tp = 1, limit = 32;  // shape 0: the trace's
  bool tp_given = false;                                      // else an rrfp trace's own TP size
  std::string placement, split = "auto", hints = "bf,bfw,adaptive", json, svg;
  std::string comm = "auto";
  std::string ordered = "auto";  // the trace's step's, off where it does not say
  std::string tp_protocol;       // the rules': the trace's where empty
  double coord_us = -1;          // the rules' coordination latency: the trace's, else 10 us
  TraceOptions trace;
};

// `s`'s comma-separated items; an empty one is refused in the words of the list flags'
// (refuse_empty_list_items: --hints here is one text, which CLI11 does not split).
std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t at = 0;; ++at) {
    const std::size_t comma = std::min(s.find(',', at), s.size());
    out.push_back(s.substr(at, comma - at));
    if (out.back().empty())
      throw InputError("--hints: '" + printable(s, 60) +
                       "' holds an empty item; give the values comma-separated, each once");
    if (comma == s.size()) return out;
    at = comma;
  }
}

// Before the trace is read at the shape: `--pp 4096 -m 6000` on a trace of a few tasks took
// 2.7 GB to find the tasks it lacked, with no estimate at all.
// Refuses what does not fit; the estimate, to say once the trace is read.
std::string check_predict_fits(const PipelineConfig& c, int tp) {
  const double tasks = tasks_of(c, tp);
  return checked_estimate(
      "predict: " + fmt("%.1fM", tasks / 1e6) + " tasks at P=" + std::to_string(c.pp) +
          " V=" + std::to_string(c.vpp) + " M=" + std::to_string(c.microbatches) +
          " TP=" + std::to_string(tp),
      tasks, kPredictCost, "--pp, --vpp, --microbatches or --tp (the trace's by default)");
}

// TRACE names a trace: a file or folder that exists, not a CSV of durations.
void check_trace_path(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))  // or cannot be looked at: a link to itself
    throw InputError("`TRACE`: '" + path + (ec ? "': " + ec.message() : "' does not exist"));
  // A CSV holds durations, not the order a step ran in: it was parsed as JSON ("invalid JSON").
  // The CSV's own reason only for a CSV (an SVG was told it was a CSV of durations).
  if (!is_trace_path(path)) {
    const bool csv = path.ends_with(".csv") || path.ends_with(".CSV");
    throw InputError("`TRACE`: '" + path +
                     "' is not a trace (.json, .json.gz or a directory of them)" +
                     (csv ? ": predict replays a step's recorded order, which a CSV of durations "
                            "does not hold (simulate --replay reads one)"
                          : std::string()));
  }
}

// The shape the trace records, with whatever the flags pin down; rrfp's own trace says its TP
// size too (it needed --tp, "tp rank 1 >= --tp 1"), which sets f.tp unless --tp was given.
PipelineConfig predict_config(PredictFlags& f) {
  int tp_seen = 0;
  PipelineConfig c = infer_trace_config(f.path, f.tp, f.trace, &tp_seen);
  if (!f.tp_given && tp_seen > 1) f.tp = tp_seen;
  // The trace's placement goes with its shape: another P or V given takes the default (the
  // trace's own P or V, given, kept it: a V-shaped trace was refused under `--pp 2`).
  if ((f.pp > 0 && f.pp != c.pp) || (f.vpp > 0 && f.vpp != c.vpp)) c.placement = Placement::Loop;
  if (f.pp > 0) c.pp = f.pp;
  if (f.vpp > 0) c.vpp = f.vpp;
  if (f.microbatches > 0) c.microbatches = f.microbatches;
  if (f.split != "auto") c.split_backward = resolve_split(f.split, "");
  if (!f.placement.empty()) c.placement = parse_placement(f.placement);
  validate(c);
  return c;
}

PredictOptions predict_options(const PredictFlags& f) {
  PredictOptions o;
  o.hints = split_list(f.hints);
  for (size_t i = 0; i < o.hints.size(); ++i) {
    const std::string& h = o.hints[i];
    if (!is_rule_hint_name(h))
      throw InputError("--hints: '" + printable(h, 30) +
                       "' is not a rule hint (bf, fb, b-priority, f-priority, bfw, adaptive)");
    // Each row once (bf,bf printed every bf row twice).
    if (std::find(o.hints.begin(), o.hints.begin() + i, h) != o.hints.begin() + i)
      throw InputError("--hints: '" + h + "' is given twice");
  }
  o.large_limit = f.limit;
  if (f.comm != "auto") o.recorded_comm = parse_comm(f.comm);
  if (f.ordered != "auto") o.ordered_forwards = f.ordered == "on";
  o.rules_split_as_they_run = f.split == "auto";
  if (!f.tp_protocol.empty()) {
    require_coordination(f.tp_protocol);
    o.tp_protocol = parse_tp_protocol(f.tp_protocol);
  }
  o.coord_us = f.coord_us;
  return o;
}

// Taken and ignored, a coordination for groups there are not read as if it had been applied.
void refuse_coordination_at_tp1(const PredictFlags& f) {
  if (f.tp < 2 && (!f.tp_protocol.empty() || f.coord_us >= 0))
    throw InputError(std::string(f.tp_protocol.empty() ? "--coord-us" : "--tp-protocol") +
                     ": the trace's stages have one rank each (TP 1: no group to coordinate); "
                     "with --tp 2 or more");
}

void report_prediction(const Prediction& p, const PredictFlags& f) {
  write_then_heed_signals([&] {
    WrittenOutputs written;
    written.write("--svg", f.svg, [&] {
      ReportHeader h;
      h.workload = "trace:" + f.path;
      h.tp = f.tp;
      h.source = "measured vs predicted";
      // Where no rule beats the recorded order at its memory, the best is the twin itself: it
      // was drawn twice, under one label.
      std::vector<ReportRun> drawn{p.measured, p.replayed};
      if (&p.best() != &p.replayed) drawn.push_back(p.best());
      write_svg(f.svg, h, drawn);
    });
    written.write("--json", f.json, [&] { write_json_report(f.json, prediction_json(p, f.path)); });
  });
  // With the JSON on stdout the report goes to stderr, as simulate's and run's do (it was
  // left out).
  std::ostream& human = is_stdout(f.json) ? std::cerr : std::cout;
  human << format_prediction(p, f.path);
  if (!f.svg.empty())
    human << (&p.best() != &p.replayed
                  ? "timeline (measured, twin, best): "
                  : "timeline (measured, twin; no rule beats the recorded order at its memory): ")
          << visible(f.svg) << "\n";
}

void run_predict(PredictFlags f) {
  exit_on_signals("predict");  // a signal while a file was written left it half written
  f.trace.option = "TRACE";
  if (f.comm != "auto" && f.comm != "async" && f.comm != "blocking")
    throw InputError("--comm: expected auto, async or blocking, got '" + printable(f.comm, 30) +
                     "'");
  checked_tp(f.tp);  // the flags before the file
  const PredictOptions o = predict_options(f);
  if (f.tp_given) refuse_coordination_at_tp1(f);
  check_trace_path(f.path);
  // A trace of hundreds of MB takes a quarter of a minute to read, its predictions seconds
  // more: both went without a word before the estimate and the report.
  std::optional<ProgressTicker> ticker(std::in_place, "predict: reading " + visible(f.path));
  PipelineConfig c = predict_config(f);
  if (!f.tp_given) refuse_coordination_at_tp1(f);  // the TP size the trace says
  const std::string estimate = check_predict_fits(c, f.tp);
  std::optional<ImportedRun> whole_step;  // the step read with a whole backward, if it stays so
  if (f.split == "auto" && c.split_backward) {
    // W tasks somewhere in the file: the step replayed decides (the first complete, or
    // --step's), not the file (its steps without W were refused for lacking them).
    PipelineConfig whole = c;
    whole.split_backward = false;
    whole_step = import_trace(f.path, WorkModel(whole), f.tp, f.trace);
    c.split_backward = whole_step->has_w;
    if (c.split_backward) whole_step.reset();  // read again below, its W tasks apart
  }
  // A step read already is not read twice. The estimate once it is read: a trace refused at
  // once (a shape it cannot fill) printed it above the refusal.
  ImportedRun step =
      whole_step ? std::move(*whole_step) : import_trace(f.path, WorkModel(c), f.tp, f.trace);
  ticker.reset();  // its line erased before the estimate's
  say_estimate(estimate);
  ticker.emplace("predict: replaying the step and predicting");
  Prediction p = predict(std::move(step), c, f.tp, o);
  ticker.reset();
  for (std::string& s : p.skipped)  // the library's reasons name options: here, flags
    s = as_flags(s);
  report_prediction(p, f);
}

}  // namespace

void setup_predict(CLI::App& app) {
  auto f = std::make_shared<PredictFlags>();
  CLI::App* sub = app.add_subcommand(
      "predict",
      "what readiness-first dispatch would make of a recorded step: replay a trace in its own "
      "order, then predict rrfp's rules at the same memory and at --limit");
  sub->add_option("TRACE", f->path,
                  "a Chrome trace (.json, .json.gz, or a directory of one per rank) from rrfp's "
                  "--trace, the PyTorch profiler or Megatron-LM's timers (docs/twin.md)")
      ->required();
  sub->add_option("--pp", f->pp, "pipeline stages P (default: from the trace)")
      ->check(whole_range(1, 4096));
  sub->add_option("--vpp", f->vpp, "model chunks per stage V (default: from the trace)")
      ->check(whole_range(1, 64));
  sub->add_option("--microbatches,-m", f->microbatches, "microbatches M (default: from the trace)")
      ->check(whole_range(1, 1 << 20));
  sub->add_option("--placement", f->placement,
                  "chunk placement: loop or vshape (default: where an rrfp or PyTorch trace's "
                  "chunks ran, else loop)");
  sub->add_option("--split-backward", f->split,
                  "auto (where the step replayed has W tasks, each rule as it runs: BFW and "
                  "adaptive split the backward, BF runs it whole with each W joined to its B), "
                  "on (every rule splits it) or off")
      ->capture_default_str();
  CLI::Option* tp = sub->add_option(
      "--tp", f->tp, "tensor-parallel ranks per stage T (default: an rrfp trace's, else 1)");
  sub->add_option("--comm", f->comm,
                  "how the recorded step communicated: async, blocking (a rendezvous per "
                  "message) or auto (blocking where an rrfp trace's run is a blocking one, fixed "
                  "or ready, unless a ready one's order deadlocks so; else async); the twin "
                  "replays it so, the predictions run async")
      ->capture_default_str();
  add_ordered_forwards_flag(sub, f->ordered,
                            "as the trace's run had them (rrfp's trace records it), else off; "
                            "the twin and every prediction run so");
  add_trace_flags(sub, f->trace);
  sub->add_option("--tp-protocol", f->tp_protocol,
                  "with --tp 2 or more: how the predictions' TP groups coordinate, leader or "
                  "agree (default: agree where the trace records its rounds, else leader)");
  sub->add_option("--coord-us", f->coord_us,
                  "with --tp 2 or more: the predictions' TP coordination latency, us (default: "
                  "as the trace shows it, else 10; a fixed order's trace shows none)")
      ->check(finite_range(0.0, kMaxTaskUs));
  sub->add_option("--hints", f->hints, "rrfp rules to predict, comma-separated")
      ->capture_default_str();
  sub->add_option("--limit", f->limit,
                  "the larger back-pressure limit to predict at, besides the recorded memory "
                  "(0: none; one not above the recorded memory's is left out, with a note)")
      ->check(whole_range(0, 1 << 20))
      ->capture_default_str();
  sub->add_option("--json", f->json, "write the prediction as JSON to FILE ('-': stdout)");
  sub->add_option("--svg", f->svg, "write measured, twin and best predicted timelines to FILE");
  sub->callback([f, tp] {
    f->tp_given = tp->count() > 0;
    check_outputs({{f->json, "--json"}, {f->svg, "--svg"}}, {{f->path, "TRACE"}});
    run_predict(*f);
  });
}

}  // namespace rrfp
