#pragma once
// Human and machine reports of simulated (or measured) runs: a text table, JSON, a Chrome
// trace (chrome://tracing, Perfetto) and an SVG timeline.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/format.hpp"
#include "sim/metrics.hpp"

namespace rrfp {

// One run as reports see it: what ran, how, and what came out.
struct ReportRun {
  std::string label;  // e.g. "fixed 1f1b (blocking)"
  std::string hint, policy, comm;
  PipelineConfig cfg;
  StepRecord result;
  RunMetrics metrics;
  // A measured run's dispatch gaps (ns from a task's end to the next ready task's start), of
  // the step its row reports; empty for a simulated run.
  std::vector<std::int64_t> dispatch_gaps;
  // A simulated blocking run whose payloads rode on their offers (WorkloadParams::
  // comm_offer_payload): the latency of its acknowledgements (RealizedWork::link_latency_ns).
  // Its trace says so, and a replay of it does the same.
  std::optional<std::int64_t> offer_ack_ns;
};

struct ReportHeader {
  std::string workload;
  // The workload's draws; none for a step of a user's own model (rrfp.Pipeline), whose seed
  // the reports would otherwise show as 0.
  std::optional<std::uint64_t> seed;
  int tp = 1;
  std::string tp_protocol;
  std::string source = "simulated";  // or "measured"
};

// Speedups are relative to runs[0].
// A time of a step in ms as the text tables print it: to 0.01 ms, but in a step shorter than
// 1 ms to the nanosecond (steps of microseconds all read 0.00). Keyed by the step's makespan
// (`step_ns`), so that every value of a step of 1 ms or more prints as it did.
std::string ms_text(std::int64_t ns, std::int64_t step_ns);
std::string format_table(const ReportHeader& h, const std::vector<ReportRun>& runs, bool per_stage);
// A run's peak D per stage on one line: every stage's up to kPeaksListed stages; past that the
// largest and the smallest with their stages, since a thousand numbers make no column (the
// per-stage table and the JSON report keep every stage's).
inline constexpr std::size_t kPeaksListed = 16;
std::string peak_d_column(const std::vector<int>& peaks);
nlohmann::json to_json(const ReportHeader& h, const std::vector<ReportRun>& runs);
// Both throw InputError when the file cannot be written.
void write_chrome_trace(const std::string& path, const std::vector<ReportRun>& runs);
std::string chrome_trace(
    const std::vector<ReportRun>& runs);  // the document write_chrome_trace writes
void write_svg(const std::string& path, const ReportHeader& h, const std::vector<ReportRun>& runs);
std::string svg_timeline(const ReportHeader& h, const std::vector<ReportRun>& runs);

void write_text_file(const std::string& path, const std::string& text, const char* flag);
// A JSON report to --json's `path`, "-" for stdout, as json_text writes it (indented by 2): one
// place, so that every report takes a path that is not UTF-8 (core/json_input.hpp).
void write_json_report(const std::string& path, const nlohmann::json& j);

struct PlotSeries {
  std::string name, colour;
  std::vector<std::pair<double, double>> points;
};
// A line plot; `reference` > 0 draws a dashed horizontal line labelled `reference_label`.
std::string svg_line_plot(const std::string& title, const std::string& x_label,
                          const std::vector<PlotSeries>& series, double reference = 0,
                          const std::string& reference_label = "");

}  // namespace rrfp
