// `rrfp run`: the same experiments as `rrfp simulate`, executed by the threaded runtime with
// emulated compute (each task sleeps for its modelled duration), reported from real
// timestamps. --compare also simulates every run, replays it with its own measured task
// durations (cli/compare.hpp), and prints how far apart they are.
#include "cli/mpi_launch.hpp"
#include "cli/run_flags.hpp"
#include "cli/stop_signal.hpp"
#include "core/error.hpp"

namespace rrfp {

namespace {

// The flags that refuse one another, checked before anything runs.
void check_run_flags(const RunFlags& f, bool warmup_extra_given, bool rendezvous_given) {
  // Every timed step's record is kept until the median is known.
  if (f.rounds * f.repeat > 1000)
    throw InputError("--rounds x --repeat: at most 1000 timed steps per run, got " +
                     std::to_string(f.rounds * f.repeat));
  const bool mpi = f.transport == TransportKind::Mpi;
  if (!f.calibration.empty() && !mpi)
    throw InputError(
        "--calibration: only with --transport mpi (in one process messages "
        "follow the workload's model)");
  // Ranks that pick alone diverge in the simulator, deterministically, where the runtime
  // may run every step: the steps ran, then the comparison failed with nothing reported. A
  // fixed list's ranks each follow it under any protocol (semantics.md §4): those runs alone
  // compare.
  const bool fixed_only = f.exp.dispatch.policy == "fixed" && !f.exp.dispatch.hint.empty();
  if (f.compare && f.exp.dispatch.tp_protocol == "none" && f.exp.dispatch.tp > 1 && !fixed_only)
    throw InputError(
        "--compare: simulates each run, and a simulation under --tp-protocol none fails "
        "where its ranks' collectives diverge; leave out --compare, or coordinate (leader, "
        "agree)");
  // Over MPI, rank 0 checks them, agreed over the job (run_emulated): it alone writes them.
  if (!mpi) check_experiment_files(f.exp, f.calibration == "baseline" ? "" : f.calibration);
  if (f.rendezvous != "offer" && f.rendezvous != "pull")
    throw InputError("--rendezvous: expected offer or pull, got '" + f.rendezvous + "'");
  // Pull, or the default offer given (taken and ignored), where nothing uses it.
  const bool named = f.rendezvous == "pull" || rendezvous_given;
  if (named && !mpi)
    throw InputError(
        "--rendezvous " + f.rendezvous +
        ": only with --transport mpi, where a blocking run's payload travels with its offer or "
        "waits to be pulled; in one process neither applies (the emulated latency runs from "
        "the acceptance): leave --rendezvous out");
  if (named && !some_run_blocks(f.exp.dispatch))
    throw InputError(
        "--rendezvous " + f.rendezvous +
        ": how blocking runs move their payloads; none of these runs blocks "
        "(--comm async, the default with --hint): give --comm blocking, or leave --hint and "
        "--comm out (the default comparison's baseline blocks)");
  if (!f.calibration.empty() && !f.compare)
    throw InputError(
        "--calibration: the message model --compare simulates with; give "
        "--compare too");
  if (f.warmup == 0 && warmup_extra_given && f.warmup_extra > 0)
    throw InputError(
        "--warmup-extra: more untimed steps after --warmup's, in place of those that "
        "still mapped fresh buffers; with --warmup 0 there is none to follow "
        "(give --warmup 1 or more)");
}

}  // namespace

void setup_run(CLI::App& app) {
  auto f = std::make_shared<RunFlags>();
  CLI::App* sub = app.add_subcommand(
      "run",
      "run one step on the threaded runtime with emulated compute (each task sleeps for its "
      "modelled duration); same flags and reports as simulate, from real timestamps");
  CLI::Option* comm = add_experiment_flags(sub, f->exp);
  add_timeout_flag(sub, f->timeout_s);
  sub->add_option("--warmup", f->warmup,
                  "untimed steps before the measured one (they fill buffer pools and map "
                  "memory, as a training run's first steps do)")
      ->check(whole_range(0, 100))
      ->capture_default_str();
  CLI::Option* warmup_extra =
      sub->add_option("--warmup-extra", f->warmup_extra,
                      "at most this many more untimed steps: a step after --warmup's that still "
                      "mapped fresh payload buffers in any process is not timed (how many a step "
                      "holds at once depends on its timing); 0: exactly --warmup; with --warmup "
                      "1 or more")
          ->check(whole_range(0, 100))
          ->capture_default_str();
  sub->add_option("--repeat", f->repeat,
                  "timed steps per run (and round); the one of median makespan is reported (and "
                  "compared; of an even count, the faster of the middle two)")
      ->check(whole_range(1, 1000))
      ->capture_default_str();
  sub->add_option("--rounds", f->rounds,
                  "run the runs in turn this many times, each time a warm-up and --repeat timed "
                  "steps; a run reports its median step over all rounds (a machine that drifts "
                  "then weighs on every run alike)")
      ->check(whole_range(1, 100))
      ->capture_default_str();
  sub->add_flag("--spin", f->spin, "busy-wait instead of sleeping (needs a core per rank)");
  add_idle_spin_flag(sub, f->idle_spin_us);
  sub->add_flag("--compare", f->compare, "also simulate each run and print the differences");
  add_transport_flag(sub, f->transport, {TransportKind::Inproc, TransportKind::Mpi},
                     "inproc (threads in this process) or mpi (one process per stage and TP "
                     "rank, under mpirun -np P*T)");
  sub->add_option("--calibration", f->calibration,
                  "mpi: the message model --compare simulates with: a file from rrfp calibrate "
                  "--out, or 'baseline' (the default's calibration with the bandwidth at which "
                  "the first run's measured step is reproduced; the other runs are predicted "
                  "from it); default: a 4-second calibration before each round, at the run's "
                  "message sizes, each field the median over the rounds");
  CLI::Option* rendezvous =
      sub->add_option("--rendezvous", f->rendezvous,
                      "mpi, blocking runs: the payload travels with the offer ('offer') or waits "
                      "for the receiver to accept and pull it ('pull', semantics.md's rendezvous; "
                      "docs/runtime.md)")
          ->capture_default_str();
  sub->callback([f, comm, warmup_extra, rendezvous] {
    f->exp.dispatch.comm_given = comm->count() > 0;
    check_run_flags(*f, warmup_extra->count() > 0, rendezvous->count() > 0);
    const bool mpi = f->transport == TransportKind::Mpi;
    if (!mpi) refuse_inproc_under_mpirun();
    exit_on_signals("run");
    if (mpi)
      run_as_mpi_process(timeout_ms_of(f->timeout_s), [&](Job& job) { run_emulated(*f, &job); });
    else
      run_emulated(*f, nullptr);
  });
}

}  // namespace rrfp
