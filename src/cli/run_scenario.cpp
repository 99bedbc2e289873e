// `rrfp run`'s scenario from its flags, checked before anything runs (cli/run_flags.hpp).

#include <cmath>
#include <cstdlib>
#include <utility>

#include "cli/options.hpp"
#include "cli/run_flags.hpp"
#include "core/cores.hpp"
#include "core/error.hpp"
#include "core/format.hpp"
#include "core/input_file.hpp"
#include "core/json_input.hpp"
#include "core/memory.hpp"
#include "core/printable.hpp"
#include "core/task.hpp"

namespace rrfp {

namespace {

// In one process the runtime emulates each message's modelled time on its own, from its send
// (async) or its acceptance (blocking). What a real transport adds (links shared by all, copies
// one at a time, a payload on its offer, threads waking behind copies, a TP leader's choice
// crossing to its followers) it does not emulate:
// running a workload that sets it would put unlike steps side by side (--compare) or silently
// drop what the file asks.
void check_emulable(const WorkloadParams& w, int tp) {
  static const double kDefaultCoordUs = WorkloadParams{}.coord_latency_us;
  struct Field {
    const char* name;
    bool set;
    const char* fallback;
  };
  for (const Field& f :
       {Field{"comm_links", w.comm_links > 0, "0"},
        Field{"comm_two_slowdown", w.comm_two_slowdown > 1, "1"},
        Field{"comm_serial_receive", w.comm_serial_receive, "false"},
        Field{"comm_offer_payload", w.comm_offer_payload, "false"},
        Field{"comm_wake_us", w.comm_wake_us > 0, "0"},
        Field{"comm_wake_per_copy_us", w.comm_wake_per_copy_us > 0, "0"},
        // The ranks of a TP group hand their choices over in memory, at once
        // (one rank has none to hand over).
        Field{"coord_latency_us", tp > 1 && w.coord_latency_us != kDefaultCoordUs, "10"}})
    if (f.set)
      throw InputError("--workload-file: " + std::string(f.name) + " must be " + f.fallback +
                       " with --transport inproc: it is a real transport's behaviour, which the "
                       "threaded runtime does not emulate (rrfp simulate models it; --transport "
                       "mpi has it)");
}

// Over a job the transport moves the bytes in its own time: a workload file's message model,
// which one process emulates, is not used (--compare simulates the transport's, calibrated).
// Its coordination latency is not emulated either (the TP groups' choices cross the
// transport), but --compare simulates it as the file gives it: a model of what those crossings
// cost, which the calibration does not measure (on a VM, a process's wake-up). Said on rank 0,
// where it was taken without a word (coord_latency_us 20000 simulated steps twice as long as
// the run's, unsaid).
void say_message_model_unused(const RunFlags& f) {
  const std::string& file = f.exp.load.workload_file;
  if (file.empty()) return;
  const nlohmann::json j = parse_json(read_input_file(file, kWorkloadFile), file);
  std::string set;
  for (const auto& [key, value] : j.items())
    if (key.starts_with("comm_") && set.size() < 200)
      set += (set.empty() ? "" : ", ") + printable(key, 40);
  const std::string where =
      "rrfp run: warning: --workload-file: '" + printable(file, 200) + "' sets ";
  if (!set.empty())
    print_line(where + set +
               ", which --transport mpi does not emulate: the transport moves the bytes in its "
               "own time" +
               (f.compare ? " (--compare simulates its calibrated model)" : std::string()));
  if (j.contains("coord_latency_us") && f.exp.dispatch.tp > 1)
    print_line(where +
               "coord_latency_us, which --transport mpi does not emulate: the TP groups' choices "
               "cross the transport in its own time" +
               (f.compare ? " (--compare simulates the file's value, as a model of that time)"
                          : std::string()));
}

// --spin busy-waits each emulated task on a core of its own: with more ranks than cores they
// take turns, each task lasting longer than its duration, and every run's steps are off
// (+155% to +523% at P=4 and 8 on 2 cores, ready BF measured slower than 1F1B where the model
// says faster) without a word. --idle-spin-us likewise, an idle rank's spin taking the core of
// one with work. Said on rank 0; over a job, of the ranks mpirun put on its node.
void say_spin_oversubscribed(const RunFlags& f, const Scenario& sc, const Job* world) {
  if (!f.spin && f.idle_spin_us <= 0) return;
  // In one process its ranks on the cores it may use; over a job the processes mpirun put on
  // this node on its cores (each process may be bound to one), where Open MPI says how many.
  int ranks = sc.cfg.pp * sc.tp;
  int cores = usable_cores();
  if (world) {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (local == nullptr || std::atoi(local) <= 0) return;
    ranks = std::atoi(local);
    cores = machine_cores();
  }
  if (ranks <= cores) return;
  const std::string on = std::to_string(ranks) + " ranks busy-wait on " + std::to_string(cores) +
                         " core" + (cores == 1 ? "" : "s");
  const std::string fewer = std::to_string(cores) + (cores == 1 ? " rank" : " ranks") + " here)";
  if (f.spin)
    print_line("rrfp run: warning: --spin: " + on +
               ": they take turns, each task lasting longer than its duration, and the measured "
               "steps are not the workload's (leave out --spin, or run at most " +
               fewer);
  else
    print_line("rrfp run: warning: --idle-spin-us: " + on +
               " while idle: a spinning rank takes the core of one with work, and the measured "
               "steps are slower than the workload's (leave out --idle-spin-us, or run at most " +
               fewer);
}

// Over MPI each process hosts one stage and TP rank: checked before any run starts (the first
// run's line was printed, then the layout refused in the flags of `rrfp train`).
void check_job_size(const Scenario& sc, int ranks) {
  if (sc.cfg.pp * sc.tp != ranks)
    throw InputError("mpirun -np " + std::to_string(ranks) + ": the layout --pp " +
                     std::to_string(sc.cfg.pp) + " x --tp " + std::to_string(sc.tp) + " needs " +
                     std::to_string(sc.cfg.pp * sc.tp) +
                     " ranks (rrfp run: one process per stage and TP rank)");
}

// `run` holds more than a simulation of its runs: the runtime's state for the run it runs (about
// 220 bytes a task), and for every run its timed steps' records (110 a task a step, each round)
// and its report (80). Measured at P=2, M=100K (1 to 4 runs, 1 to 3 timed steps: within 20%);
// sized as a simulation, a run of 530 bytes a task passed a memory limit it was 3x over. Over a
// job of `processes`, rank 0 runs its share of the runtime's tasks but merges and keeps every
// timed step's whole record: it was not checked, and held 175 MB under a limit of 105.
void check_run_fits(const RunFlags& f, const Scenario& sc, const std::vector<RunSpec>& specs,
                    int processes) {
  const RunsSize s = runs_size(sc, specs);
  const double bytes = s.most * 220 / processes + s.total * (110.0 * f.rounds * f.repeat + 80);
  check_memory(bytes,
               "run: " + runs_of_tasks(specs.size(), s.most) + ", " +
                   std::to_string(f.rounds * f.repeat) + " timed step" +
                   (f.rounds * f.repeat == 1 ? "" : "s") + " each",
               "", "--pp, --microbatches, --tp, --repeat or --rounds");
}

}  // namespace

void refuse_work_past_timeout(const Scenario& sc, const std::vector<RunSpec>& specs,
                              std::int64_t timeout_ms, double given_s, double longest_s,
                              bool messages, const std::string& source) {
  const double timeout_s = static_cast<double>(timeout_ms) / 1e3;  // what the watchdog counts
  if (timeout_ms <= 0 || longest_s < timeout_s) return;
  // The longest of each draw, named: the first past the limit was, and raising --timeout to it
  // named the next (three tries at P=4 M=8).
  std::int64_t worst = 0;
  std::string what;
  bool drawn[2] = {false, false};  // the runs' shapes differ by their split backward alone
  for (const RunSpec& spec : specs) {
    const PipelineConfig cfg = config_for(sc, spec);
    if (std::exchange(drawn[cfg.split_backward ? 1 : 0], true)) continue;  // one draw a shape
    const WorkModel m(cfg);
    const RealizedWork w = realized_work(sc, m);
    const auto note = [&](const std::string& kind, std::int64_t ns, int idx) {
      if (ns > worst) {
        worst = ns;
        what = kind + " " + to_string(m.task(idx));
      }
    };
    for (int rank = 0; rank < w.tp; ++rank)
      for (int idx = 0; idx < w.num_tasks; ++idx) {
        // A task's TP collective follows its compute with no progress between: a hold past
        // the limit failed a run that would finish, as a stall.
        const std::int64_t hold = w.tp > 1 ? w.collective_after(m.task(idx).kind) : 0;
        note(hold > 0 ? "task (with its TP collective)" : "task", w.compute(rank, idx) + hold, idx);
        if (messages) note("the message of task", w.message(rank, idx), idx);
      }
  }
  if (static_cast<double>(worst) / 1e9 < timeout_s) return;
  const bool rounded = std::abs(given_s - timeout_s) > 1e-12;
  throw InputError(
      "run: " + what + " lasts " + fmt("%.3g s", static_cast<double>(worst) / 1e9) +
      " (the longest), not less than --timeout " + fmt_given(given_s) + " s" +
      (rounded ? " (" + std::to_string(timeout_ms) + " ms: the watchdog counts whole milliseconds)"
               : std::string()) +
      ", which would take its emulated wait for a stall: raise --timeout (0: never) "
      "or shorten the durations of " +
      source);
}

Scenario emulable_scenario(const RunFlags& f, Job* world) {
  const ExperimentFlags& e = f.exp;
  // Rank 0 writes every report: a folder for them that only its node has was refused by the
  // others.
  if (!world || world->rank() == 0)
    check_experiment_files(e, f.calibration == "baseline" ? "" : f.calibration);
  Scenario sc = scenario_of(e);
  if (world) {
    check_job_size(sc, world->size());
    if (world->rank() == 0) say_message_model_unused(f);
  } else {
    check_emulable(sc.workload, sc.tp);
  }
  if (!world || world->rank() == 0) {
    say_spin_oversubscribed(f, sc, world);
    warn_hint_name_shadows_file(e.dispatch.hint);
  }
  const std::vector<RunSpec> specs = plan_runs(e, sc.cfg);
  // Before a --replay without --step is read at the flags' shape to find its step.
  check_runs_fit("run", e, sc, specs);
  // Over a job the others hold their own stages' records alone.
  if (!world || world->rank() == 0) check_run_fits(f, sc, specs, world ? world->size() : 1);
  return with_replay_step(std::move(sc), specs);
}

}  // namespace rrfp
