#pragma once
// One scenario (pipeline shape, workload, seed) run under several (hint, policy, comm)
// combinations with identical realized durations: the unit of `simulate` and `sweep`.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "report/report.hpp"
#include "sim/trace_import.hpp"
#include "sim/workload.hpp"

namespace rrfp {

struct RunSpec {
  std::string hint;
  Policy policy = Policy::Ready;
  CommMode comm = CommMode::Async;
  std::string label;  // empty: "<policy> <hint> (<comm>)"
};

struct Scenario {
  PipelineConfig cfg;               // split_backward is decided per run (split_mode)
  std::string split_mode = "auto";  // auto: on for zb-* and bfw; on; off
  int tp = 1;
  TpProtocol tp_protocol = TpProtocol::Leader;
  std::string workload_name = "multimodal";
  WorkloadParams workload;
  std::string replay_path;  // non-empty: durations come from this CSV or trace
  TraceOptions trace;       // how a trace is read
  // `ordered_forwards` auto: a replayed trace's step decides (with_replay_step), off where it
  // does not say (a CSV, another tool's trace, an older rrfp one). False: cfg's, as given.
  bool ordered_from_replay = false;
  // The replay as with_replay_step read it (a trace), for the shape `replay_read_for`:
  // realized_work takes it rather than reading the file again, which for a large trace was
  // most of a replay's time.
  std::shared_ptr<const RealizedWork> replay_read;
  PipelineConfig replay_read_for;
  bool replay_read_coordination = false;  // ImportedRun::coordination_measured
  int replay_passed_over = 0;             // ImportedRun::passed_over
  // A replay's workload file sets the TP collective's or coordination's latency, which
  // realized_work refuses where the trace measured it (refuse_replaced_workload sets them).
  bool file_sets_collective = false, file_sets_coordination = false;
  std::uint64_t seed = 1;
  int limit = 0, max_pending_w = 0;
  bool record = true;
  bool progress = false;  // show a huge run's progress on stderr (core/progress_line.hpp)
  // Called as a simulated run goes (SimOptions::progress); it may throw to stop the run (a
  // Python caller's Ctrl-C).
  std::function<void()> poll;
};

bool resolve_split(const std::string& mode, const std::string& hint);
// A validated shape, its split backward resolved for `hint` (`split_mode` auto, on or off).
PipelineConfig make_config(int pp, int vpp, int microbatches, const std::string& placement,
                           const std::string& split_mode, const std::string& hint);
std::string default_label(const RunSpec& r);
// A huge run's progress line: "ready bf (async): 46137344 of 67108864 tasks (69%)"; `of` names
// whose tasks where they are not the whole run's ("rank 0's").
std::string tasks_done(const std::string& label, std::int64_t done, std::int64_t total,
                       const std::string& of = "");
// The scenario's shape for one run: its split backward resolved for the run's hint, once here
// for every caller (checks, estimates, the run itself).
PipelineConfig config_for(const Scenario& sc, const RunSpec& spec);
// What executes one run: the simulator, or the emulated runtime (`rrfp run`).
using Executor = std::function<StepRecord(const WorkModel&, const Hint&, const RealizedWork&,
                                          const SimOptions&)>;
// The durations the scenario's runs see: its workload realized for `m`, or its replay (with
// the workload's jitter, collective and coordination costs on top).
RealizedWork realized_work(const Scenario& sc, const WorkModel& m);
// Who ran a step: the simulator, or the runtime for real, in one process (the model's message
// latencies emulated) or over a transport (which moves the bytes in its own time).
enum class Measured { No, InProcess, OverTransport };
// One run by `exec` (the emulated runtime; nothing else runs beside it), then its lower bound.
// A measured step's bound and efficiency take the compute its tasks measured, not the durations
// drawn for them (20 us tasks slept longer: a bound of 0.44 ms beside a stage that computed for
// 0.83 ms); over a transport its messages count as free: the model's latencies are not spent
// there (a 5 ms latency made a bound of 13.3 ms beside a step of 4.2, efficiency 3.18).
ReportRun run_scenario(const Scenario& sc, const RunSpec& spec, const Executor& exec,
                       Measured measured = Measured::No);
// One simulated run, its lower bound reckoned beside it on the cores the simulation leaves free.
ReportRun run_scenario(const Scenario& sc, const RunSpec& spec);
// Simulated runs of one scenario, in the order of `specs`: runs of one shape share one draw of
// the work and, where their limits agree, one lower bound.
std::vector<ReportRun> run_scenarios(const Scenario& sc, const std::vector<RunSpec>& specs);
// ReportRun::offer_ack_ns of a run of `work` simulated under `comm`.
std::optional<std::int64_t> offer_ack_ns(const RealizedWork& work, CommMode comm);
// The header's seed is the scenario's where it draws (draws_from_seed), none otherwise.
ReportHeader header_of(const Scenario& sc);
// `sc` with its replay's step chosen for every run of `specs`: a trace of several steps, its
// step not given, is replayed at one step for all, the first complete under the shape of the
// first run that splits the backward (the others fold each W into its B), else of the first
// run. Each run used to take the first step complete under its own shape: the rows of one
// table replayed different steps. A CSV of several steps: its last, named in the header.
// Under `ordered_from_replay`, cfg's ordered_forwards is that step's.
Scenario with_replay_step(Scenario sc, const std::vector<RunSpec>& specs);
// Throws the InputError a run would hit (hint, shape, policy, limits) without running it.
void check_spec(const Scenario& sc, const RunSpec& spec);
// With a replay only jitter applies on top of the measured durations, and at TP > 1 the
// collective's and coordination's latencies: refuses a preset other than jitter that the caller
// gave (`preset_given`; empty: none given), and a workload file that sets another field or none of
// these, each once taken and ignored. `flags`: names the options as the command's flags, else as
// keywords.
void refuse_replaced_workload(Scenario& sc, const std::string& preset_given,
                              const std::string& workload_file, bool flags);
// Whether the scenario's seed draws anything: a workload's durations, or the jitter a replay
// takes on top of its measured ones (a replay without jitter draws nothing).
bool draws_from_seed(const Scenario& sc);
// A seed given where nothing is drawn (draws_from_seed): InputError naming `seed`. It was
// taken, shown in the header, and changed nothing.
void refuse_unused_seed(const Scenario& sc, bool seed_given);

}  // namespace rrfp
