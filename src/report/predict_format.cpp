// The one-screen answer of `rrfp predict`, as text and as JSON.
#include <algorithm>
#include <cmath>

#include "core/format.hpp"
#include "core/printable.hpp"
#include "report/columns.hpp"
#include "report/predict.hpp"

namespace rrfp {

using columns::lpad;
using columns::ms;

namespace {

// `base` over `ns`; NaN when either took no time (durations all zero: "-nanx" was printed).
double ratio(std::int64_t base, std::int64_t ns) {
  return base > 0 && ns > 0 ? static_cast<double>(base) / static_cast<double>(ns) : std::nan("");
}

// A number as the report shows it, "-" for NaN (as `simulate`'s table does).
std::string shown(const char* format, double v) {
  return std::isnan(v) ? "-" : fmt(format, v);
}

// NaN as JSON's null.
nlohmann::json number_or_null(double v) {
  return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v);
}

// Where the ordering of forwards came from: what the header says beside it.
std::string ordered_source(const Prediction& p) {
  if (p.ordered_from == "option") return "as given";
  if (p.ordered_from == "trace") return "as the trace's run had them";
  return "the trace does not say";
}

std::string shape_of(const Prediction& p) {
  return "P=" + std::to_string(p.cfg.pp) + " V=" + std::to_string(p.cfg.vpp) +
         (p.cfg.vpp > 1 ? " (" + to_string(p.cfg.placement) + ")" : std::string()) +
         " M=" + std::to_string(p.cfg.microbatches) + " TP=" + std::to_string(p.tp) + ", " +
         (p.cfg.split_backward ? "split" : "whole") + " backward, " +
         (p.cfg.ordered_forwards ? "ordered" : "unordered") + " forwards (" + ordered_source(p) +
         ")";
}

// How the rules' TP groups coordinate, and whence the latency: a fixed run's trace shows none.
std::string coordination_line(const Prediction& p) {
  const ImportedRun& in = p.imported;
  const std::string latency = fmt("%g us", static_cast<double>(in.work.coord_ns) / 1e3);
  return "tp coordination      " + to_string(in.tp_protocol) + ", " + latency +
         (p.coordination_from == "trace" ? " (as the trace shows it), in the predictions\n"
          : p.coordination_from == "option"
              ? " (as given), in the predictions\n"
              // A ready run under --tp-protocol none shows none either: it was told as fixed.
              : " (the simulator's default: the trace shows none, as a fixed order's ranks each "
                "follow it, or a ready run's under --tp-protocol none each pick alone), in the "
                "predictions; --coord-us and --tp-protocol set it\n");
}

}  // namespace

std::string format_prediction(const Prediction& p, const std::string& source) {
  const ImportedRun& in = p.imported;
  std::string out = "rrfp predict: " + visible(source) + " (" + in.format + ", " + in.run +
                    "): " + shape_of(p) + "\n\n";
  out += "measured step        " +
         lpad(ms_text(p.measured.metrics.makespan, p.measured.metrics.makespan), 9) +
         " ms  (the first start recorded, a task's or a wait's, to the last task's end or its "
         "collective's; " +
         std::to_string(in.messages_measured) + " of " + std::to_string(in.messages) +
         " messages timed by the trace, " + std::to_string(in.messages_inferred) +
         " seen from their consumers' starts)\n";
  // The run's own report counts its start-up, before the first task: beside the measured step,
  // the two read up to 21% apart on a busy machine without a word of why.
  if (const std::int64_t lead = in.run_step_ns - in.measured_ns;
      in.run_step_ns >= 0 && lead >= 1000)
    out += "the run's own step   " + lpad(ms_text(in.run_step_ns, in.run_step_ns), 9) +
           " ms  (from its start, as the run reported it: " + ms_text(lead, in.run_step_ns) +
           " ms of start-up before the first start recorded, which the twin does not replay)\n";
  // Named in the header only, another step than the first looked meant.
  if (in.passed_over > 0)
    out += "  note: the first complete step of the trace; the " +
           (in.passed_over == 1 ? std::string("one") : std::to_string(in.passed_over)) +
           " before it lack" + (in.passed_over == 1 ? "s" : "") + " tasks (the first: " +
           printable(in.passed_over_why.substr(0, in.passed_over_why.find("; if it was")), 200) +
           "); --step picks one\n";
  // Said beside the step it throws off: a trace shifted by a millisecond read +45% as the
  // twin's error and 1.26x for ready BF, without a word.
  if (in.early_inputs > 0)
    out += "  note: " + std::to_string(in.early_inputs) + " of " + std::to_string(in.messages) +
           " cross-stage inputs start before the trace says their producer ended (by up to " +
           ms_text(in.early_worst_ns, in.early_worst_ns) +
           " ms): its ranks' clocks disagree, so the measured step, and the twin's error against "
           "it, are not to be trusted\n";
  if (p.tp > 1) out += coordination_line(p);
  out += "twin, recorded order " +
         lpad(ms_text(p.replayed.metrics.makespan, p.replayed.metrics.makespan), 9) + " ms  (" +
         shown("%+.1f%%", 100 * p.reproduction_error()) +
         " = twin / measured - 1: how well the twin reproduces the step" +
         (p.recorded_comm == CommMode::Blocking
              ? std::string("; a rendezvous per message") +
                    (p.comm_from_trace ? ", as the trace's run says" : "")
          : p.blocking_deadlocked
              ? std::string("; the run had a rendezvous per message, but its order deadlocks "
                            "so replayed as a fixed one: replayed with messages that overlap, "
                            "without the rendezvous' waits")
              : std::string()) +
         ")\n\n";
  size_t lw = 24;
  for (const ReportRun& r : p.runs)
    lw = std::max(lw, r.label.size());
  auto row = [&](const ReportRun& r, const std::string& limit) {
    std::string label = r.label;
    label.resize(lw, ' ');
    return label + "  " + lpad(limit, 5) + "  " +
           lpad(ms_text(r.metrics.makespan, r.metrics.makespan), 11) + "  " +
           lpad(shown("%.3fx", ratio(p.replayed.metrics.makespan, r.metrics.makespan)), 7) + "  " +
           lpad(fmt("%.1f%%", 100 * r.metrics.bubble_ratio), 6) + "  " +
           peak_d_column(r.result.peak_d) + "\n";
  };
  std::string head = "run";
  head.resize(lw, ' ');
  out += head + "  limit  makespan_ms  speedup  bubble  peak_D/stage\n";
  out += row(p.replayed, "-");
  for (const ReportRun& r : p.runs)
    out += row(r, std::to_string(r.metrics.limit));
  for (std::string s : p.skipped) {
    std::erase(s, '`');
    out += "(skipped: " + s + ")\n";
  }
  const ReportRun& b = p.best();
  const double gain = 1 - static_cast<double>(b.metrics.makespan) /
                              static_cast<double>(p.replayed.metrics.makespan);
  out += "\nmemory-neutral limit " + std::to_string(p.neutral_limit) +
         " (the recorded order's largest D). ";
  if (&b == &p.replayed)
    out += "At that memory no readiness-first rule beats the recorded order on this step.\n";
  else
    out += "Best at that memory: " + b.label + ", " +
           shown("%.3fx", ratio(p.replayed.metrics.makespan, b.metrics.makespan)) +
           " the recorded order: " + fmt("%.1f%%", 100 * gain) + " of the step saved.\n";
  if (const ReportRun* f = p.faster_holding_more())
    out += f->label + " is faster (" +
           shown("%.3fx", ratio(p.replayed.metrics.makespan, f->metrics.makespan)) +
           ") but holds more: D " + std::to_string(Prediction::largest_d(*f)) +
           " on its busiest stage, where a microbatch draining through its " +
           std::to_string(p.cfg.vpp) + " chunks a stage may pass the limit.\n";
  return out;
}

nlohmann::json prediction_json(const Prediction& p, const std::string& source) {
  nlohmann::json j;
  j["source"] = source;
  j["format"] = p.imported.format;
  j["step"] = p.imported.run;
  j["pp"] = p.cfg.pp;
  j["vpp"] = p.cfg.vpp;
  j["microbatches"] = p.cfg.microbatches;
  j["split_backward"] = p.cfg.split_backward;
  j["ordered_forwards"] = p.cfg.ordered_forwards;
  j["ordered_forwards_from"] = p.ordered_from;  // option, trace or default (off)
  j["tp"] = p.tp;
  j["measured_ms"] = ms(p.measured.metrics.makespan);
  // The run's own step from its start (rrfp's trace), else null.
  j["run_step_ms"] = p.imported.run_step_ns >= 0 ? nlohmann::json(ms(p.imported.run_step_ns))
                                                 : nlohmann::json(nullptr);
  j["replayed_ms"] = ms(p.replayed.metrics.makespan);
  j["reproduction_error"] = number_or_null(p.reproduction_error());
  j["recorded_comm"] = to_string(p.recorded_comm);
  if (p.blocking_deadlocked) j["recorded_comm_note"] = "blocking run deadlocks as a fixed order";
  j["messages_timed"] = p.imported.messages_measured;
  j["messages_inferred"] = p.imported.messages_inferred;
  j["inputs_before_made"] = p.imported.early_inputs;
  j["steps_passed_over"] = p.imported.passed_over;  // lacking tasks, before the one replayed
  j["memory_neutral_limit"] = p.neutral_limit;
  // Per stage, as the table's last column: a script can check each rule's memory against the
  // recorded order's (the JSON had the limit alone).
  j["replayed_peak_d"] = p.replayed.result.peak_d;
  if (p.tp > 1)
    j["tp_coordination"] = {{"protocol", to_string(p.imported.tp_protocol)},
                            {"latency_us", static_cast<double>(p.imported.work.coord_ns) / 1e3},
                            {"from", p.coordination_from}};
  j["predictions"] = nlohmann::json::array();
  for (const ReportRun& r : p.runs)
    j["predictions"].push_back(
        {{"label", r.label},
         {"hint", r.hint},
         {"limit", r.metrics.limit},
         {"makespan_ms", ms(r.metrics.makespan)},
         {"speedup_vs_recorded",
          number_or_null(ratio(p.replayed.metrics.makespan, r.metrics.makespan))},
         {"bubble_ratio", r.metrics.bubble_ratio},
         {"peak_d", r.result.peak_d}});
  j["skipped"] = p.skipped;
  j["best"] = p.best().label;
  return j;
}

}  // namespace rrfp
