// `rrfp simulate`: one scenario under the requested hint and policies, or, with no --hint,
// the comparison that motivates rrfp: fixed 1F1B against rrfp BF and BFW.
#include "cli/experiment_cmd.hpp"
#include "cli/options.hpp"
#include "cli/stop_signal.hpp"

namespace rrfp {

void setup_simulate(CLI::App& app) {
  auto f = std::make_shared<ExperimentFlags>();
  CLI::App* sub = app.add_subcommand(
      "simulate",
      "simulate one training step; with no --hint, compare a fixed baseline (1F1B; at --vpp 2 "
      "or more interleaved 1F1B, or BFS where that cannot take M and under vshape) against "
      "rrfp BF and BFW");
  CLI::Option* comm = add_experiment_flags(sub, *f);
  sub->callback([f, comm] {
    f->dispatch.comm_given = comm->count() > 0;
    exit_on_signals("simulate");
    warn_hint_name_shadows_file(f->dispatch.hint);
    Scenario sc = make_scenario(*f);
    const std::vector<RunSpec> specs = plan_runs(*f, sc.cfg);
    // Before check_spec builds the hints' orders, and before a --replay without --step is
    // read at the flags' shape to find its step (868 MB were taken before a refusal).
    check_runs_fit("simulate", *f, sc, specs);
    sc = with_replay_step(std::move(sc), specs);
    for (const RunSpec& spec : specs)
      check_spec(sc, spec);
    const std::vector<ReportRun> runs = run_scenarios(sc, specs);
    write_then_heed_signals([&] { write_reports(*f, header_of(sc), runs); });
  });
}

}  // namespace rrfp
