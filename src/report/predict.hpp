#pragma once
// The what-if report of `rrfp predict` (docs/twin.md): replay a recorded step in its own order
// to show how well the twin reproduces it, then predict readiness-first dispatch on the same
// durations at the recorded run's memory and at a larger limit.
#include <optional>
#include <string>
#include <vector>

#include "report/report.hpp"
#include "sim/trace_import.hpp"

namespace rrfp {

struct PredictOptions {
  // Ready-policy hints to predict; those the shape cannot run (bfw without a split backward)
  // are skipped with the reason.
  std::vector<std::string> hints = {"bf", "bfw", "adaptive"};
  int large_limit = 32;  // besides the memory-neutral limit (0: that one only)
  // How the recorded step communicated: the twin replays its order so (a blocking step
  // replayed async came out short: -11% on a simulated one); the predictions run async,
  // as rrfp does. Unset: the trace's word (rrfp's run "fixed ... (blocking)"), else async.
  std::optional<CommMode> recorded_comm;
  // Each rule predicted as it runs by default (`split_backward` auto): on a step recorded with
  // the split backward, those that run the backward whole (bf, fb, ...) replay it with each W's
  // time added to its B's. False: every rule under the step's split (`split_backward` given).
  bool rules_split_as_they_run = true;
  // Whether each chunk's forwards run in microbatch order (PipelineConfig::ordered_forwards),
  // in the twin and every prediction. Unset: the step's own where its trace says (rrfp's), else
  // off. A step that had them ordered (batch norm), predicted without, showed gains its model
  // could not have.
  std::optional<bool> ordered_forwards;
  // The TP coordination the rules run with (T > 1): unset, the trace's (agree where it records
  // rounds, else leader; the latency it measured). A fixed run's trace measures none (its ranks
  // each follow the list, semantics.md §4), and its rules then ran without coordination: a
  // trace of fixed 1F1B at T=2 with 100 us choices predicted ready BF 1.146x where it runs
  // 1.111x. There they take `coord_us`, or the simulator's default (10 us).
  std::optional<TpProtocol> tp_protocol;
  double coord_us = -1;  // < 0: the trace's, else the default
};

struct Prediction {
  ImportedRun imported;
  PipelineConfig cfg;
  int tp = 1;
  ReportRun measured;           // the trace's own timeline (its tasks at their recorded times)
  ReportRun replayed;           // the twin's replay of the recorded order (fixed policy)
  std::vector<ReportRun> runs;  // ready dispatch, per hint and limit
  std::vector<std::string> skipped;
  int neutral_limit = 0;                     // the recorded order's largest D on any stage
  CommMode recorded_comm = CommMode::Async;  // how the twin replayed the recorded order
  bool comm_from_trace = false;              // the trace's run said so, not an option
  // The trace's ready run had a rendezvous per message, which deadlocked replayed as a fixed
  // order: replayed async instead (recorded_comm), its error holding the rendezvous' waits.
  bool blocking_deadlocked = false;
  // Where cfg.ordered_forwards came from: "option", "trace" (its run said), or "default" (off:
  // the trace does not say).
  std::string ordered_from = "default";
  // Where the rules' TP coordination latency (imported.work.coord_ns, T > 1) came from:
  // "trace" (measured), "option" (PredictOptions::coord_us) or "default" (the simulator's).
  std::string coordination_from = "trace";

  double reproduction_error() const;  // replayed / measured - 1; NaN where either took no time
  // The fastest prediction whose stages held at most the memory-neutral limit's D (else the
  // twin's replay).
  const ReportRun& best() const;
  // The fastest run at the memory-neutral limit that beats best() by holding more than it (at
  // V >= 2, up to V while a microbatch drains), or null.
  const ReportRun* faster_holding_more() const;
  static int largest_d(const ReportRun& r);
};

// `cfg`'s ordered_forwards is replaced by the step's (PredictOptions::ordered_forwards).
Prediction predict(const std::string& trace_path, const PipelineConfig& cfg, int tp,
                   const TraceOptions& trace, const PredictOptions& o = {});
// The same on a step already imported (tests, Python).
Prediction predict(ImportedRun imported, const PipelineConfig& cfg, int tp,
                   const PredictOptions& o = {});

// One screen: where the step came from, the reproduction, one row per prediction.
std::string format_prediction(const Prediction& p, const std::string& source);
nlohmann::json prediction_json(const Prediction& p, const std::string& source);

}  // namespace rrfp
