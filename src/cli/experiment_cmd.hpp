#pragma once
// What `simulate` and `run` share: their flags, the runs they plan from them, and the
// reports they print. They differ only in what executes a run.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/options.hpp"

namespace rrfp {

struct ExperimentFlags {
  ShapeFlags shape;
  WorkloadFlags load;
  DispatchFlags dispatch{"", "both"};  // no hint: the default comparison
  std::string json, trace, svg;
  bool per_stage = false;
};

// Binds the shared flags; returns --comm so the caller can tell whether it was given.
CLI::Option* add_experiment_flags(CLI::App* sub, ExperimentFlags& f);
// Whether a timeline (--trace or --svg) is asked for: only it reads the per-task records.
inline bool draws_timeline(const ExperimentFlags& f) {
  return !f.trace.empty() || !f.svg.empty();
}
// Refuses (InputError) outputs that cannot be written, two given one file, and one that is an
// input (the hint file, the workload file, the replay, run's --calibration `calibration`).
void check_experiment_files(const ExperimentFlags& f, const std::string& calibration = "");
// The scenario of the flags, after check_experiment_files.
Scenario make_scenario(const ExperimentFlags& f);
// The same without checking the files (a caller that checks them its own way: `run` over MPI,
// whose rank 0 alone writes the outputs).
Scenario scenario_of(const ExperimentFlags& f);
// The scenario of a shape, a workload and the execution flags (`plan` has no other flags).
Scenario make_scenario(const ShapeFlags& shape, const WorkloadFlags& load,
                       const DispatchFlags& dispatch);
// With no --hint, the comparison that motivates rrfp; otherwise the hint under --policy.
std::vector<RunSpec> plan_runs(const ExperimentFlags& f, const PipelineConfig& cfg);
// Whether a run of plan_runs blocks: the default comparison's baseline does unless --comm is
// given; otherwise every run takes --comm.
bool some_run_blocks(const DispatchFlags& f);
// The tasks of `runs` on `sc`, over its TP ranks: the largest run's, all of them, and the bytes
// the heaviest run holds at its peak when no records are kept (report/estimate.hpp).
struct RunsSize {
  double most = 0, total = 0, most_bytes = 0;
};
RunsSize runs_size(const Scenario& sc, const std::vector<RunSpec>& runs);
// "4 runs of up to 2.1M tasks" for `runs` runs, the largest of `most` tasks, as the estimates
// name them (their mean, "4 runs of 37.7M tasks" where three held 33.5M and one 50.3M, read as
// each run's); "1 run of 2.1M tasks". task_count: "2.1M", or the count itself under 100K
// ("0.0M" said nothing).
std::string runs_of_tasks(std::size_t runs, double most);
std::string task_count(double n);
// Refuses (InputError) runs whose estimated memory exceeds what this machine has available;
// announces a large one on stderr (report/estimate.hpp). `command`: "simulate", "run".
void check_runs_fit(const char* command, const ExperimentFlags& f, const Scenario& sc,
                    const std::vector<RunSpec>& runs);
// Table on stdout (unless --json -), and the JSON, trace and SVG files asked for; an `extra`
// object's keys are added to the JSON's top level (`rrfp run --compare`'s "compare").
void write_reports(const ExperimentFlags& f, const ReportHeader& h,
                   const std::vector<ReportRun>& runs, const nlohmann::json& extra = {});

}  // namespace rrfp
