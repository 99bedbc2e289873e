#pragma once
// `rrfp run --compare`, the simulator's side: the message model a run over a real transport is
// simulated with (a calibration file, a calibration of the job's own transport, or a bandwidth
// fitted to the first run), and the table that sets each measured step beside its simulation
// and its replay.
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dist/job.hpp"
#include "report/experiment.hpp"
#include "report/report.hpp"
#include "sim/workload.hpp"

namespace rrfp {

// The message model a run over a real transport is simulated with, and where it came from.
struct TransportModel {
  MessageModel model;
  std::string source;
};

// `calibration`: a file from rrfp calibrate --out, else (empty or "baseline") a short
// calibration of `world`'s transport at the run's message sizes (every process takes part; rank
// 0's counts). How a blocking run's bytes move is the run's rendezvous (`offer_payload`), not
// a measurement, whatever a file says. `transport` names the transport in the printed table;
// `timeout_s` bounds each wait of the calibration for a peer (the run's --timeout).
TransportModel transport_model(const std::string& calibration, const std::string& transport,
                               bool offer_payload, const Scenario& sc, Job& world,
                               double timeout_s);
// That calibration's budget, and what it takes at most with its streams' rounds (about a
// second more; 3.6 s measured): what a run reckons for each round's before it starts.
inline constexpr double kRunCalibrationSeconds = 4, kRunCalibrationWallSeconds = 5;

// --calibration baseline: the bandwidth at which `makespan_at` reproduces `measured`; outside
// kFitLowGbps..kFitHighGbps, the bound.
inline constexpr double kFitLowGbps = 0.01, kFitHighGbps = 1000;
double fit_bandwidth(const std::function<std::int64_t(double)>& makespan_at, std::int64_t measured);

// Each field's median over the rounds' calibrations (of two, their mean).
MessageModel median_model(const std::vector<MessageModel>& models);

// The model in one line, as the run prints what it simulates with.
std::string describe(const MessageModel& mm);

// One run of --compare: its measured step, its simulation (the workload's task durations) and
// its replay (the same simulation with the run's own measured task durations), as makespans in
// ns; `steps`, every timed step's makespan (the measured one is their median), and `fresh`, the
// buffers each mapped afresh.
struct FidelityRow {
  std::string label;
  std::int64_t measured = 0, simulated = 0, replayed = 0;
  // The measured step's start to its first start, a task's or a wait's: the compute threads'
  // start, in `measured` and in neither model (-1: nothing recorded).
  std::int64_t start_up = -1;
  std::vector<std::int64_t> steps, fresh;
};

// `timed`: per run, every timed step (none: no ranges).
std::vector<FidelityRow> fidelity_rows(const std::vector<ReportRun>& measured,
                                       const std::vector<ReportRun>& simulated,
                                       const std::vector<ReportRun>& replayed,
                                       const std::vector<std::vector<StepResult>>& timed);
// For people: errors and speedups against the first run; with more than one step per run, their
// range, so a reader can tell noise from error.
std::string fidelity_table(const std::vector<FidelityRow>& rows);
// For --json: the same numbers (errors as fractions, measured / simulated - 1) and every step,
// with the message model simulated (`model`, empty: the workload's own).
nlohmann::json fidelity_json(const std::vector<FidelityRow>& rows, const std::string& model);

}  // namespace rrfp
