// `rrfp run`: the same experiments as `rrfp simulate`, executed by the threaded runtime with
// emulated compute (each task sleeps for its modelled duration), reported from real
// timestamps. --compare also simulates every run, replays it with its own measured task
// durations (cli/compare.hpp), and prints how far apart they are.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <iostream>

#include "cli/compare.hpp"
#include "cli/experiment_cmd.hpp"
#include "cli/mpi_launch.hpp"
#include "core/error.hpp"
#include "dist/step_merge.hpp"
#include "runtime/emulated.hpp"
#include "runtime/runtime.hpp"
#include "sim/metrics.hpp"

namespace rrfp {

namespace {

struct RunFlags {
  ExperimentFlags exp;
  double timeout_s = 60;
  int warmup = 1, warmup_extra = 4, repeat = 1, rounds = 1;
  bool spin = false, compare = false;
  std::string transport = "inproc", calibration, rendezvous = "offer";
};

double percentile(std::vector<std::int64_t> v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return static_cast<double>(v[k]);
}

// In one process the runtime emulates each message's modelled time on its own, from its send
// (async) or its acceptance (blocking). What a real transport adds (links shared by all, copies
// one at a time, a payload on its offer, threads waking behind copies) it does not emulate:
// running a workload that sets it would put unlike steps side by side (--compare) or silently
// drop what the file asks.
void check_emulable(const WorkloadParams& w) {
  struct Field {
    const char* name;
    bool set;
    const char* fallback;
  };
  for (const Field& f : {Field{"comm_links", w.comm_links > 0, "0"},
                         Field{"comm_two_slowdown", w.comm_two_slowdown > 1, "1"},
                         Field{"comm_serial_receive", w.comm_serial_receive, "false"},
                         Field{"comm_offer_payload", w.comm_offer_payload, "false"},
                         Field{"comm_wake_us", w.comm_wake_us > 0, "0"},
                         Field{"comm_wake_per_copy_us", w.comm_wake_per_copy_us > 0, "0"}})
    if (f.set)
      throw InputError("--workload-file: " + std::string(f.name) + " must be " + f.fallback +
                       " with --transport inproc: it is a real transport's behaviour, which the "
                       "threaded runtime does not emulate (rrfp simulate models it; --transport "
                       "mpi has it)");
}

// `world`: the MPI job under --transport mpi (each process hosts one endpoint and rank 0
// merges every process's record and writes the reports), else null.
void run_emulated(const RunFlags& f, Job* world) {
  const std::int64_t timeout = timeout_ms_of(f.timeout_s);
  const Scenario sc = make_scenario(f.exp);
  if (!world) check_emulable(sc.workload);
  const std::vector<RunSpec> specs = plan_runs(f.exp, sc.cfg);
  for (const RunSpec& spec : specs)
    check_spec(sc, spec);  // bad input fails before anything runs
  const bool root = !world || world->rank() == 0;
  // Over MPI, --compare simulates messages as the transport delivers them: a file, or a
  // calibration of this job's transport before each round (every process takes part). A
  // calibration of a few seconds reads this VM's 32 MiB copies 7-25% apart from one to the next
  // while the steps of the rounds after it hold within 3% (docs/results-twin.md): each round's
  // sample is taken next to its steps, and the model is their median.
  const bool calibrate_each_round =
      world && f.compare && (f.calibration.empty() || f.calibration == "baseline");
  MessageModel mm;
  std::vector<MessageModel> round_models;
  std::string model_source;
  if (world && f.compare && !calibrate_each_round) {
    const TransportModel tm =
        transport_model(f.calibration, f.transport, f.rendezvous == "offer", sc, *world);
    mm = tm.model;
    model_source = tm.source;
  }
  std::vector<std::int64_t> gaps;
  std::vector<int> warmups;  // warm-up steps each run and round took
  // Per run: every timed step so far, over the rounds (each merged over the job's processes).
  std::vector<std::vector<StepResult>> steps_of(specs.size());
  size_t current = 0;  // the run the executor below measures
  bool last_round = false;
  Executor runtime = [&](const WorkModel& m, const Hint& h, const RealizedWork& w,
                         const SimOptions& o) {
    RuntimeOptions ro;
    ro.arbiter = o.arbiter;
    ro.tp_protocol = o.tp_protocol;
    ro.comm = o.comm;
    ro.tp = w.tp;
    ro.timeout_ms = timeout;
    // In one process a payload moves by reference, so the modelled latency is emulated; a
    // real transport moves the bytes, and that is the message's cost (adding the model's
    // latency on top would count it twice).
    if (!world) ro.latency = emulated_latency(m, w);
    ro.rendezvous_pull = f.rendezvous == "pull";
    // Untimed steps first, as any benchmark takes: they fill the output and receive pools, so
    // the measured steps map no fresh memory (a fresh 32 MiB buffer costs 17-23 ms of page
    // faults on the reference VM, a reused one 1.4-2.7 ms). How many buffers a step holds at
    // once depends on its timing, so one warm-up step may not reach the peak: up to
    // --warmup-extra more follow while the last one still mapped a buffer in any process (every
    // process takes the same decision). Then --repeat timed steps, each merged over the job's
    // processes.
    std::vector<StepResult>& steps = steps_of[current];
    auto measure = [&](Runtime& rt) {
      int k = 0;
      for (std::int64_t fresh = 0; k < f.warmup || (fresh > 0 && k < f.warmup + f.warmup_extra);
           ++k) {
        fresh = rt.run_step(k).fresh_buffers;
        if (world)
          fresh = static_cast<std::int64_t>(max_over_job(*world, static_cast<double>(fresh)));
      }
      warmups.push_back(k);
      for (int j = 0; j < f.repeat; ++j) {
        steps.push_back(rt.run_step(k + j));
        if (world) merge_over_job(*world, steps.back());
      }
    };
    if (!world) {
      Runtime rt(m, h, emulated_programs(m, w, {f.spin}), ro);
      measure(rt);
    } else {
      world->set_layout(JobLayout{m.pp(), w.tp, 1});
      EmulationOptions eo;
      eo.spin = f.spin;
      eo.touch_outputs = true;
      Runtime rt(m, h, emulated_programs(m, w, eo), ro, world->hosting());
      measure(rt);
      // Nobody tears down its endpoint while a peer may still send to it.
      world->all_gather({});
    }
    // The step of median makespan over the rounds so far is the run's result (the report
    // keeps the last round's).
    std::vector<std::int64_t> makespans;
    for (const StepResult& st : steps)
      makespans.push_back(st.run.makespan);
    std::sort(makespans.begin(), makespans.end());
    const std::int64_t median = makespans[(makespans.size() - 1) / 2];
    const auto it = std::find_if(steps.begin(), steps.end(),
                                 [&](const StepResult& st) { return st.run.makespan == median; });
    if (last_round) gaps.insert(gaps.end(), it->dispatch_gaps.begin(), it->dispatch_gaps.end());
    return it->run;
  };
  // --rounds R: the runs take turns, R times over (each time a fresh runtime, its warm-up and
  // --repeat timed steps), so a machine that drifts over minutes weighs on every run alike
  // instead of on whichever ran last.
  std::vector<ReportRun> runs;
  for (int round = 0; round < f.rounds; ++round) {
    last_round = round + 1 == f.rounds;
    if (calibrate_each_round) {
      const TransportModel tm =
          transport_model(f.calibration, f.transport, f.rendezvous == "offer", sc, *world);
      round_models.push_back(tm.model);
      model_source =
          tm.source + (f.rounds > 1 ? ", before each of the " + std::to_string(f.rounds) +
                                          " rounds, each field their median"
                                    : ", at startup");
    }
    for (current = 0; current < specs.size(); ++current) {
      const RunSpec& spec = specs[current];
      if (root)
        print_line("running " + (spec.label.empty() ? default_label(spec) : spec.label) +
                   (world ? " over " + std::to_string(world->size()) + " mpi ranks" : "") +
                   (f.rounds > 1 ? " (round " + std::to_string(round + 1) + " of " +
                                       std::to_string(f.rounds) + ")"
                                 : std::string()) +
                   " ...");
      ReportRun r = run_scenario(sc, spec, runtime);
      if (last_round) runs.push_back(std::move(r));
    }
  }
  // The simulator's side of --compare: the workload's message model in one process; the
  // transport's measured one over MPI (calibrated before the runs, or fitted to the first).
  std::vector<ReportRun> simulated, replayed;
  if (f.compare && root) {
    Executor sim = simulate;
    if (world) {
      if (calibrate_each_round) mm = median_model(round_models);
      print_line("simulating messages as the mpi transport delivers them (" + model_source +
                 "): " + describe(mm));
      sim = [&mm](const WorkModel& m, const Hint& h, const RealizedWork& w, const SimOptions& o) {
        RealizedWork t = w;
        set_message_model(m, t, mm);
        return simulate(m, h, t, o);
      };
    }
    if (world && f.calibration == "baseline") {
      mm.bandwidth_gbps = fit_bandwidth(
          [&](double gbps) {
            mm.bandwidth_gbps = gbps;
            return run_scenario(sc, specs[0], sim).metrics.makespan;
          },
          runs[0].metrics.makespan);
      print_line("fitted to " + runs[0].label + "'s measured step (its row is not a " +
                 "prediction; the others are): " + describe(mm));
    }
    for (const RunSpec& spec : specs)
      simulated.push_back(run_scenario(sc, spec, sim));
    // The replay: each run's median step's own task durations, the same messages. What the
    // emulation itself adds (sleeps overshooting on shared cores) is then not the twin's error.
    for (size_t i = 0; i < specs.size(); ++i)
      replayed.push_back(run_scenario(
          sc, specs[i],
          [&, i](const WorkModel& m, const Hint& h, const RealizedWork& w, const SimOptions& o) {
            RealizedWork t = w;
            use_measured_compute(m, t, runs[i].result);
            return sim(m, h, t, o);
          }));
  }
  if (!root) return;
  ReportHeader h = header_of(sc);
  h.source = world ? "measured (mpi)" : "measured";
  const std::vector<FidelityRow> fidelity =
      f.compare ? fidelity_rows(runs, simulated, replayed, steps_of) : std::vector<FidelityRow>{};
  int timed = 0, mapped = 0;
  for (const std::vector<StepResult>& steps : steps_of)
    for (const StepResult& st : steps) {
      ++timed;
      mapped += st.fresh_buffers > 0;
    }
  write_reports(
      f.exp, h, runs,
      f.compare ? nlohmann::json{{"compare", fidelity_json(fidelity, world ? describe(mm) : "")}}
                : nlohmann::json{});
  std::ostream& human = f.exp.json == "-" ? std::cerr : std::cout;  // stdout: the JSON alone
  human << "runtime overhead: dispatch gap (task end to the next already-ready task's start) "
        << "median " << fmt("%.1f", percentile(gaps, 0.5) / 1e3) << " us, p99 "
        << fmt("%.1f", percentile(gaps, 0.99) / 1e3) << " us over " << gaps.size()
        << " dispatches\n";
  const auto [few, most] = std::minmax_element(warmups.begin(), warmups.end());
  if (few != warmups.end())
    human << "warm-up: " << *few << (*most > *few ? "-" + std::to_string(*most) : "")
          << " untimed steps per run (--warmup " << f.warmup << ", then up to --warmup-extra "
          << f.warmup_extra << " more while one still mapped fresh payload buffers); timed steps "
          << "that mapped fresh buffers (their page faults in their times): " << mapped << " of "
          << timed << "\n";
  if (f.compare) human << fidelity_table(fidelity);
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
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  sub->add_option("--warmup-extra", f->warmup_extra,
                  "at most this many more untimed steps while the last one still mapped fresh "
                  "payload buffers (how many a step holds at once depends on its timing); 0: "
                  "exactly --warmup")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  sub->add_option("--repeat", f->repeat,
                  "timed steps per run (and round); the one of median makespan is reported (and "
                  "compared)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  sub->add_option("--rounds", f->rounds,
                  "run the runs in turn this many times, each time a warm-up and --repeat timed "
                  "steps; a run reports its median step over all rounds (a machine that drifts "
                  "then weighs on every run alike)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  sub->add_flag("--spin", f->spin, "busy-wait instead of sleeping (needs a core per rank)");
  sub->add_flag("--compare", f->compare, "also simulate each run and print the differences");
  sub->add_option("--transport", f->transport,
                  "inproc (threads in this process) or mpi (one process per stage and TP rank, "
                  "under mpirun -np P*T)")
      ->capture_default_str();
  sub->add_option("--calibration", f->calibration,
                  "mpi: the message model --compare simulates with: a file from rrfp calibrate "
                  "--out, or 'baseline' (the default's calibration with the bandwidth at which "
                  "the first run's measured step is reproduced; the other runs are predicted "
                  "from it); default: a 4-second calibration before each round, at the run's "
                  "message sizes, each field the median over the rounds");
  sub->add_option("--rendezvous", f->rendezvous,
                  "mpi, blocking runs: the payload travels with the offer ('offer') or waits "
                  "for the receiver to accept and pull it ('pull', design.md's rendezvous; "
                  "docs/runtime.md)")
      ->capture_default_str();
  sub->callback([f, comm] {
    f->exp.dispatch.comm_given = comm->count() > 0;
    // Every timed step's record is kept until the median is known.
    if (f->rounds * f->repeat > 1000)
      throw InputError("--rounds x --repeat: at most 1000 timed steps per run, got " +
                       std::to_string(f->rounds * f->repeat));
    if (!f->calibration.empty() && f->transport != "mpi")
      throw InputError(
          "--calibration: only with --transport mpi (in one process messages "
          "follow the workload's model)");
    if (f->rendezvous != "offer" && f->rendezvous != "pull")
      throw InputError("--rendezvous: expected offer or pull, got '" + f->rendezvous + "'");
    if (f->rendezvous == "pull" && f->transport != "mpi")
      throw InputError(
          "--rendezvous pull: only with --transport mpi (in one process the emulated latency "
          "runs from the acceptance)");
    if (f->transport == "mpi")
      run_as_mpi_process(timeout_ms_of(f->timeout_s), [&](Job& job) { run_emulated(*f, &job); });
    else if (f->transport == "inproc")
      run_emulated(*f, nullptr);
    else
      throw InputError("--transport: unknown transport '" + f->transport +
                       "' (expected inproc or mpi)");
  });
}

}  // namespace rrfp
