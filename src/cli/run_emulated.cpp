// `rrfp run`'s runs: each experiment of the scenario on the threaded runtime with emulated
// compute (each task sleeps for its modelled duration), over --rounds, with warm-up and
// --repeat timed steps; with --compare also simulated and replayed from its measured durations
// (cli/compare.hpp); then the reports.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <iostream>
#include <optional>

#include "cli/compare.hpp"
#include "cli/mpi_launch.hpp"
#include "cli/outputs_ahead.hpp"
#include "cli/run_flags.hpp"
#include "cli/stop_signal.hpp"
#include "comm/buffer_pool.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/progress_ticker.hpp"
#include "dist/step_merge.hpp"
#include "emulate/emulated.hpp"
#include "report/estimate.hpp"
#include "runtime/runtime.hpp"
#include "sim/metrics.hpp"

namespace rrfp {

namespace {

// The most wall time the emulated steps may take, all runs, rounds and steps together.
constexpr double kMaxEmulatedSeconds = 600;
// The runtime's own time a task, on each stage's thread (its dispatch, record and hand-off):
// a step of 2M zero-length tasks a stage took 9.1 s on the 2-core VM, about 4.5 us a task.
// Counted beside the simulated step: such a workload was predicted at 0 s and ran for minutes.
constexpr double kRuntimeTaskSeconds = 5e-6;

// What decides the steps' durations, for the line that refuses too long a run.
std::string durations_source(const WorkloadFlags& w) {
  if (!w.replay.empty()) return "--replay '" + w.replay + "'";
  if (!w.workload_file.empty()) return "--workload-file '" + w.workload_file + "'";
  return "--workload " + w.workload;
}

// Whether --compare over MPI calibrates the transport (no file, or `baseline`).
bool calibrates(const RunFlags& f) {
  return f.calibration.empty() || f.calibration == "baseline";
}

class EmulatedRuns {
 public:
  EmulatedRuns(const RunFlags& f, Job* world)
      : f_(f),
        world_(world),
        timeout_ms_(timeout_ms_of(f.timeout_s)),
        sc_(emulable_scenario(f, world)),
        specs_(plan_runs(f.exp, sc_.cfg)),
        root_(!world || world->rank() == 0),
        // Over MPI, --compare simulates messages as the transport delivers them: a file, or a
        // calibration of this job's transport before each round (every process takes part).
        // A calibration of a few seconds reads 32 MiB copies further apart from one to the
        // next than the steps of the rounds after it vary (measured: docs/design-decisions.md,
        // "Processes (Open MPI)"): each round's sample is taken next to its steps, and the
        // model is their median. One process (P = 1) sends no message and has no peer to
        // calibrate with: its runs are simulated as in one process (it was refused, "calibrate:
        // needs 2 endpoints or more", naming no flag).
        calibrate_each_round_(world && world->size() > 1 && f.compare && calibrates(f)),
        steps_of_(specs_.size()) {
    for (const RunSpec& spec : specs_)
      check_spec(sc_, spec);  // bad input fails before anything runs
    check_wall_time();
    if (world && f.compare && !calibrates(f)) {
      const TransportModel tm = transport_model(f.calibration, to_string(f.transport),
                                                f.rendezvous == "offer", sc_, *world, f.timeout_s);
      mm_ = tm.model;
      model_source_ = tm.source;
    }
  }

  // Every emulated task sleeps its duration: a workload of 50 s forwards slept for about
  // 1000 s without a word. The wall time is predicted from each run's simulated makespan times
  // the steps it takes (its warm-up and timed steps, each round; a --warmup-extra step only
  // where one is needed, so not counted), refused above kMaxEmulatedSeconds, and told in a line
  // above 10 s. Costs a simulation of each run, which check_runs_fit has sized.
  void check_wall_time() const {
    Scenario sc = sc_;
    sc.record = false;
    sc.progress = false;
    // Without coordination the simulated step fails where the ranks' collectives diverge, and
    // that error, raised here, stood in for the runtime's own (CollectiveMismatchError, which
    // names both ranks): the run is sized as the step would take had its ranks agreed.
    if (sc.tp_protocol == TpProtocol::None) sc.tp_protocol = TpProtocol::Leader;
    // Over a job the transport moves the bytes (a workload's 50 ms latencies are not spent):
    // the step is sized by its compute alone.
    if (world_) {
      sc.workload.comm_latency_us = sc.workload.comm_bandwidth_gbps = 0;
      sc.workload.comm_slow_prob = 0;
    }
    double step_s = 0, own_s = 0, longest_s = 0;
    for (const ReportRun& r : run_scenarios(sc, specs_)) {
      step_s += static_cast<double>(r.metrics.makespan) / 1e9;
      longest_s = std::max(longest_s, static_cast<double>(r.metrics.makespan) / 1e9);
    }
    for (const RunSpec& spec : specs_) {
      const PipelineConfig c = config_for(sc, spec);
      own_s += tasks_of(c, 1) / c.pp * kRuntimeTaskSeconds;
    }
    const int steps = f_.rounds * (f_.warmup + f_.repeat);
    // A warm-up step that still mapped fresh buffers is followed by another, up to
    // --warmup-extra a round: said as a bound (over mpirun, 2 steps were announced as about 17 s
    // and 5 ran, with their transfers, in 110).
    const int extra = f_.warmup > 0 ? f_.rounds * f_.warmup_extra : 0;
    // Each round's calibration too: 100 rounds of short steps ran 6 min without a word, and
    // steps of 590 s were let past the limit with 360 s of calibration beside them.
    const double calibrating = calibrate_each_round_ ? f_.rounds * kRunCalibrationWallSeconds : 0;
    const double wall = (step_s + own_s) * steps + calibrating;
    const std::string what =
        fmt("about %.0f s of emulated steps", wall) +
        (calibrating > 0 ? " and calibrations (" : " (") + std::to_string(specs_.size()) + " run" +
        (specs_.size() == 1 ? fmt(" of %.3g s simulated", step_s)
                            : fmt("s, %.3g s simulated in all", step_s)) +
        (own_s >= 0.1 * step_s ? fmt(" and %.3g s of the runtime's own work a task", own_s)
                               : std::string()) +
        ", " + std::to_string(steps) + " steps each: --rounds x (--warmup + --repeat)" +
        (calibrating > 0 ? fmt(", and up to %.0f s calibrating the transport before each round",
                               kRunCalibrationWallSeconds)
                         : std::string()) +
        (extra > 0 ? fmt("; up to %.0f s with --warmup-extra's ",
                         (step_s + own_s) * (steps + extra) + calibrating) +
                         std::to_string(extra) + " more"
                   : std::string()) +
        (world_ ? "; the transfers between the processes come on top" : "") + ")";
    if (wall > kMaxEmulatedSeconds)
      throw InputError("run: " + what +
                       fmt("; at most %.0f s: shorten the durations of ", kMaxEmulatedSeconds) +
                       durations_source(f_.exp.load) +
                       // --vpp too: each chunk's messages take their latency (--vpp 30000
                       // simulated 487 s, and --vpp was not named).
                       ", lower --pp, --vpp or --microbatches, or lower --rounds, --repeat or "
                       "--warmup (rrfp simulate predicts the step without sleeping)");
    refuse_work_past_timeout(sc, specs_, timeout_ms_, f_.timeout_s, longest_s, !world_,
                             durations_source(f_.exp.load));
    if (wall > 10 && root_) print_line("rrfp run: " + what);
  }

  void go() {
    measure_rounds();
    if (f_.compare && root_) simulate_and_replay();
    if (root_) write_then_heed_signals([this] { report(); });
  }

 private:
  RuntimeOptions runtime_options(const WorkModel& m, const RealizedWork& w,
                                 const SimOptions& o) const {
    RuntimeOptions ro;
    ro.dispatch() = o.dispatch();
    ro.tp = w.tp;
    ro.timeout_ms = timeout_ms_;
    // In one process a payload moves by reference, so the modelled latency is emulated; a
    // real transport moves the bytes, and that is the message's cost (adding the model's
    // latency on top would count it twice).
    if (!world_) ro.latency = emulated_latency(m, w);
    ro.rendezvous_pull = f_.rendezvous == "pull";
    ro.idle_spin_us = f_.idle_spin_us;
    return ro;
  }

  // Untimed steps first, as any benchmark takes: they fill the output and receive pools, so
  // the measured steps map no fresh memory (a fresh buffer's page faults make it far slower
  // to fill than a reused one; measured: docs/data/twin-history.md, "What the 32 MiB lean is
  // not"). How many buffers a step holds at once depends on its timing, so the warm-up may not
  // reach the peak: a step after it that still mapped a buffer in any process is taken as one
  // more untimed step, up to --warmup-extra of them (every process takes the same decision).
  // Deciding on the last warm-up step instead let a timed step after one that mapped nothing
  // map one: an MPI step of 28 ms measured 215, its faults in one task. Then --repeat timed
  // steps, each merged over the job's processes.
  void warm_up_and_time(Runtime& rt) {
    std::vector<StepResult>& steps = steps_of_[current_];  // every round's so far
    std::atomic<int> k = 0;                                // read by the progress line's thread
    int extra = 0, timed = 0;
    std::optional<ProgressTicker> ticker;
    if (root_) show_steps(ticker, rt, k);
    while (timed < f_.repeat) {
      StepResult st = rt.run_step(k++);
      if (k <= f_.warmup) continue;
      if (f_.warmup > 0 && extra < f_.warmup_extra) {  // the same on every process
        std::int64_t fresh = st.fresh_buffers;
        if (world_)
          fresh = static_cast<std::int64_t>(max_over_job(*world_, static_cast<double>(fresh)));
        if (fresh > 0) {
          ++extra;
          continue;
        }
      }
      if (world_) merge_over_job(*world_, st);
      steps.push_back(std::move(st));
      ++timed;
    }
    warmups_.push_back(k - f_.repeat);
  }

  // Steps of a million tasks or more run for a minute, said by their tasks ended so far, as the
  // simulator says its runs of that size (report/experiment.cpp): such a run was silent from
  // its "running ..." line to its report, 72 s at P=M=1024.
  void show_steps(std::optional<ProgressTicker>& ticker, const Runtime& rt,
                  const std::atomic<int>& k) const {
    const RunSpec& spec = specs_[current_];
    const PipelineConfig c = config_for(sc_, spec);
    if (tasks_of(c, sc_.tp) < (1 << 20)) return;  // the whole run's, over every process
    ticker.emplace("");
    const std::string label = spec.label.empty() ? default_label(spec) : spec.label;
    // Over a job, rank 0 counts the tasks of its own ranks.
    const std::string of = world_ ? "rank 0's" : "";
    ticker->status([&rt, &k, label, of] {
      const Runtime::StepProgress p = rt.step_progress();
      return tasks_done(label + ": step " + std::to_string(k.load()), p.ended, p.total, of);
    });
  }

  // Over a transport a process writes its outputs and receives its inputs in buffers of a
  // message's size: messages larger than the memory there is failed a task with std::bad_alloc
  // mid-run. In one process outputs pass by reference, mapped and never written: address space
  // only, but a buffer the kernel will not map at all failed its task as well (exit 1).
  static void check_message_buffers(const RealizedWork& w, bool one_process) {
    std::int64_t largest = 0;
    for (const std::int64_t b : w.message_bytes)
      largest = std::max(largest, b);
    const std::string what = "(the largest message: " + gigabytes(static_cast<double>(largest)) +
                             ", a microbatch's tokens x the workload's bytes_per_token)";
    if (!one_process)
      return check_memory(2.0 * static_cast<double>(largest), "run",
                          " for a process's output and input buffers " + what,
                          "the workload's bytes_per_token");
    check_mapping(static_cast<double>(BufferPool::capacity_of(static_cast<size_t>(largest))), "run",
                  "a message's buffer", what, "the workload's bytes_per_token");
  }

  // The runtime as the scenario's executor: a fresh runtime for the current run, its steps,
  // and the step of median makespan over the rounds so far (the report keeps the last
  // round's).
  StepRecord execute(const WorkModel& m, const Hint& h, const RealizedWork& w,
                     const SimOptions& o) {
    check_message_buffers(w, !world_);
    const RuntimeOptions ro = runtime_options(m, w, o);
    EmulationOptions eo;
    eo.spin = f_.spin;
    if (!world_) {
      ahead_.plan(m, h, w, o.arbiter, eo);
      const std::uint64_t reserved = BufferPool::reserved_total();
      Runtime rt(m, h, emulated_programs(m, w, eo), ro);
      ahead_.mapped(BufferPool::reserved_total() - reserved);
      warm_up_and_time(rt);
    } else {
      world_->set_layout(JobLayout{m.pp(), w.tp, 1});
      eo.touch_outputs = true;
      Runtime rt(m, h, emulated_programs(m, w, eo), ro, world_->hosting());
      warm_up_and_time(rt);
      world_->all_gather({});  // nobody tears down its endpoint while a peer may still send
    }
    const std::vector<StepResult>& steps = steps_of_[current_];
    std::vector<std::int64_t> makespans;
    for (const StepResult& st : steps)
      makespans.push_back(st.run.makespan);
    std::sort(makespans.begin(), makespans.end());
    const std::int64_t median = makespans[(makespans.size() - 1) / 2];
    const auto it = std::find_if(steps.begin(), steps.end(),
                                 [&](const StepResult& st) { return st.run.makespan == median; });
    measured_gaps_ = it->dispatch_gaps;
    return it->run;
  }

  // --rounds R: the runs take turns, R times over (each time a fresh runtime, its warm-up and
  // --repeat timed steps), so a machine that drifts over minutes weighs on every run alike
  // instead of on whichever ran last.
  void measure_rounds() {
    const Executor runtime = [this](const WorkModel& m, const Hint& h, const RealizedWork& w,
                                    const SimOptions& o) { return execute(m, h, w, o); };
    for (int round = 0; round < f_.rounds; ++round) {
      last_round_ = round + 1 == f_.rounds;
      if (calibrate_each_round_) {
        const TransportModel tm =
            transport_model(f_.calibration, to_string(f_.transport), f_.rendezvous == "offer", sc_,
                            *world_, f_.timeout_s);
        round_models_.push_back(tm.model);
        model_source_ =
            tm.source + (f_.rounds > 1 ? ", before each of the " + std::to_string(f_.rounds) +
                                             " rounds, each field their median"
                                       : ", at startup");
      }
      for (current_ = 0; current_ < specs_.size(); ++current_) {
        const RunSpec& spec = specs_[current_];
        if (root_)
          print_line("running " + (spec.label.empty() ? default_label(spec) : spec.label) +
                     (world_ ? " over " + std::to_string(world_->size()) + " mpi ranks" : "") +
                     (f_.rounds > 1 ? " (round " + std::to_string(round + 1) + " of " +
                                          std::to_string(f_.rounds) + ")"
                                    : std::string()) +
                     " ...");
        ReportRun r = run_scenario(sc_, spec, runtime,
                                   world_ ? Measured::OverTransport : Measured::InProcess);
        r.dispatch_gaps = std::move(measured_gaps_);  // of the step the row reports
        if (last_round_) runs_.push_back(std::move(r));
      }
    }
  }

  // The simulator's side of --compare: the workload's message model in one process; the
  // transport's measured one over MPI (calibrated before the runs, or fitted to the first).
  Executor message_simulator() {
    if (!world_ || (world_->size() == 1 && calibrates(f_))) return simulate;
    if (calibrate_each_round_) mm_ = median_model(round_models_);
    print_line("simulating messages as the mpi transport delivers them (" + model_source_ +
               "): " + describe(mm_));
    Executor sim = [this](const WorkModel& m, const Hint& h, const RealizedWork& w,
                          const SimOptions& o) {
      RealizedWork t = w;
      set_message_model(m, t, mm_);
      return simulate(m, h, t, o);
    };
    if (f_.calibration == "baseline") fit_to_first(sim);
    return sim;
  }

  // --calibration baseline: the bandwidth at which the first run's step simulates to what it
  // measured. Where no bandwidth can (the calibration's latency alone makes the step longer,
  // as on a loaded machine), the bound is kept and said: "fitted" read as if it had been.
  void fit_to_first(const Executor& sim) {
    auto makespan_at = [&](double gbps) {
      mm_.bandwidth_gbps = gbps;
      return run_scenario(sc_, specs_[0], sim).metrics.makespan;
    };
    const std::int64_t measured = runs_[0].metrics.makespan;
    const double gbps = fit_bandwidth(makespan_at, measured);
    const double off = static_cast<double>(makespan_at(gbps)) / static_cast<double>(measured) - 1;
    if (std::abs(off) < 1e-3) {
      print_line("fitted to " + runs_[0].label + "'s measured step (its row is not a " +
                 "prediction; the others are): " + describe(mm_));
      return;
    }
    // At a bound the latency alone misses the step; inside them the step jumps past it (a ready
    // order that changes with the bandwidth), and no bandwidth lands on it.
    const bool bound = gbps <= kFitLowGbps || gbps >= kFitHighGbps;
    print_line("not fitted to " + runs_[0].label + "'s measured step: at " + fmt("%g", gbps) +
               " GB/s" +
               (bound ? ", the bound, its simulated step is still " + fmt("%+.1f%%", 100 * off) +
                            " off (the calibration's latency " + fmt("%.1f", mm_.latency_us) +
                            " us explains " + (off > 0 ? "more" : "less") + " than the step took)"
                      : ", the nearest, its simulated step is " + fmt("%+.1f%%", 100 * off) +
                            " off (the step jumps there with the bandwidth)") +
               "; every row is a prediction with: " + describe(mm_));
  }

  void simulate_and_replay() {
    const Executor sim = message_simulator();
    for (const RunSpec& spec : specs_)
      simulated_.push_back(run_scenario(sc_, spec, sim));
    // The replay: each run's median step's own task durations, the same messages. What the
    // emulation itself adds (sleeps overshooting on shared cores) is then not the twin's error.
    for (size_t i = 0; i < specs_.size(); ++i)
      replayed_.push_back(run_scenario(
          sc_, specs_[i],
          [&, i](const WorkModel& m, const Hint& h, const RealizedWork& w, const SimOptions& o) {
            RealizedWork t = w;
            use_measured_compute(m, t, runs_[i].result);
            return sim(m, h, t, o);
          }));
  }

  void report() const {
    ReportHeader h = header_of(sc_);
    h.source = world_ ? "measured (mpi)" : "measured";
    const std::vector<FidelityRow> fidelity =
        f_.compare ? fidelity_rows(runs_, simulated_, replayed_, steps_of_)
                   : std::vector<FidelityRow>{};
    write_reports(
        f_.exp, h, runs_,
        f_.compare
            ? nlohmann::json{{"compare", fidelity_json(fidelity, world_ ? describe(mm_) : "")}}
            : nlohmann::json{});
    std::ostream& human = is_stdout(f_.exp.json) ? std::cerr : std::cout;  // stdout: the JSON alone
    std::vector<std::int64_t> gaps;  // every run's, as each run's JSON gives them
    for (const ReportRun& r : runs_)
      gaps.insert(gaps.end(), r.dispatch_gaps.begin(), r.dispatch_gaps.end());
    human << "runtime overhead: dispatch gap (task end to the next already-ready task's start) "
          << "median " << fmt("%.1f", median(gaps) / 1e3) << " us, p99 "
          << fmt("%.1f", percentile(gaps, 0.99) / 1e3) << " us over " << gaps.size()
          << " dispatches\n";
    human << warm_up_line();
    if (f_.compare) human << fidelity_table(fidelity);
  }

  std::string warm_up_line() const {
    int timed = 0, mapped = 0;
    for (const std::vector<StepResult>& steps : steps_of_)
      for (const StepResult& st : steps) {
        ++timed;
        mapped += st.fresh_buffers > 0;
      }
    const auto [few, most] = std::minmax_element(warmups_.begin(), warmups_.end());
    if (few == warmups_.end()) return "";
    return "warm-up: " + std::to_string(*few) + (*most > *few ? "-" + std::to_string(*most) : "") +
           " untimed steps per run (--warmup " + std::to_string(f_.warmup) +
           (f_.warmup == 0 ? std::string()
                           : ", then up to --warmup-extra " + std::to_string(f_.warmup_extra) +
                                 " more: the steps that still mapped fresh payload buffers") +
           "); timed steps that mapped fresh "
           "buffers (their page faults in their times): " +
           std::to_string(mapped) + " of " + std::to_string(timed) + ahead_.note() + "\n";
  }

  const RunFlags& f_;
  Job* world_;
  const std::int64_t timeout_ms_;
  const Scenario sc_;
  const std::vector<RunSpec> specs_;
  const bool root_, calibrate_each_round_;
  MessageModel mm_;
  std::vector<MessageModel> round_models_;
  std::string model_source_;
  std::vector<std::int64_t> measured_gaps_;  // of the step execute() returned last
  std::vector<int> warmups_;                 // warm-up steps each run and round took
  OutputsAhead ahead_;                       // in one process
  // Per run: every timed step so far, over the rounds (each merged over the job's processes).
  std::vector<std::vector<StepResult>> steps_of_;
  size_t current_ = 0;  // the run execute() measures
  bool last_round_ = false;
  std::vector<ReportRun> runs_, simulated_, replayed_;
};

}  // namespace

void run_emulated(const RunFlags& f, Job* world) {
  if (!world) return EmulatedRuns(f, nullptr).go();
  // Every check of the inputs (their files as this process reads them, its memory limit) is
  // agreed over the job: a process that refused alone left without a word, and the others
  // waited in their first collective until --timeout.
  std::optional<EmulatedRuns> runs;
  agree_on_input(world, [&] { runs.emplace(f, world); });
  const WorkloadFlags& load = f.exp.load;
  refuse_other_input_files(*world, {{"--hint", hint_file(f.exp.dispatch.hint)},
                                    {"--workload-file", load.workload_file},
                                    {"--replay", load.replay}});
  runs->go();
}

}  // namespace rrfp
