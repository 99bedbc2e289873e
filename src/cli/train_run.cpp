// `rrfp train` run: the part of the command that needs LibTorch, linked only into the
// `rrfp-train` program (cli/train_flags.hpp says why two programs). Signals, the flags turned
// into training options, and the run in threads or as one MPI process.
#include "cli/mpi_launch.hpp"
#include "cli/stop_signal.hpp"
#include "cli/train_flags.hpp"
#include "core/error.hpp"
#include "core/printable.hpp"
#include "emulate/jitter.hpp"
#include "train/device.hpp"
#include "train/run.hpp"
#ifdef RRFP_HAVE_GPU
#include "gpu/notify.hpp"
#endif
#ifdef RRFP_HAVE_PARTITIONS
#include "gpu/partition.hpp"
#endif

namespace rrfp {

namespace {

// The process's exit for a run that a signal stopped: 128 + the signal (130, 143).
void exit_if_stopped(const train::TrainSummary& s) {
  if (s.stopped_by) throw QuietExit{128 + s.stopped_by};
}

// The whole run from the parsed flags.
train::TrainRun to_run(const TrainFlags& f) {
  train::TrainRun run = f.run;
  train::TrainOptions& t = run.train;
  t.hint = f.dispatch.hint;
  t.pipe = to_config(f.shape, t.hint);
  t.runtime = to_runtime(f.dispatch, f.timeout_s);
  t.runtime.window = f.window;
  t.runtime.idle_spin_us = f.idle_spin_us;
  t.model.seed = t.data_seed = f.seed;
  run.stop = &stop_flag();  // the first signal stops after the step; a second, at once
  run.warn = [](const std::string& m) { print_line("rrfp train: warning: " + as_flags(m)); };
  run.work_begins = work_begins;
  if (!f.inject_jitter.empty()) {
    // One list of what is allowed, J0 left out (it injects nothing; the preset's own error
    // offered it).
    const InputError allowed("--inject-jitter: expected jitter:J1, jitter:J2 or jitter:J3, got '" +
                             printable(f.inject_jitter, 30) + "'");
    if (f.inject_jitter.rfind("jitter:", 0) != 0) throw allowed;
    JitterLevel j;
    try {
      j = workload_preset(f.inject_jitter, "--inject-jitter").jitter;
    } catch (const InputError&) {
      throw allowed;
    }
    if (j.p <= 0)
      throw InputError("--inject-jitter: '" + f.inject_jitter +
                       "' injects no jitter (use jitter:J1..J3)");
    const std::uint64_t seed = f.seed;
    const int pp = t.pipe.pp;
    t.wrap = [j, seed, pp](std::unique_ptr<StageProgram> p, int, int) {
      return with_jitter(std::move(p), j, pp, seed);
    };
    run.jitter = f.inject_jitter;
  }
  return run;  // run_training validates the rest before it writes or reads anything
}

void run(const TrainFlags& f) {
  train::use_one_intra_op_thread();
  train::keep_freed_host_memory();
  stop_on_signals(true);
  // A fresh run's folder may hold an earlier run's files: a stop before the first step leaves
  // them, and its line says they were there (a resumed run continues them, as it says).
  if (f.run.resume.empty()) {
    const std::string out = f.run.out + "/";
    note_earlier_outputs({out + "loss.csv", out + "checkpoint.bin"});
  }
  // Until the first step, a signal ends the run at once: reading a large corpus or a
  // checkpoint took seconds, after which it trained a step only to stop.
  stop_at_once_until_work("train");
  hold_stop_signals(false);  // one that came while rrfp-train started is taken now
  const char* const until = "stopping after the current step";
  if (f.transport == TransportKind::Mpi) {
    train::TrainSummary sum;
    run_as_mpi_process(timeout_ms_of(f.timeout_s), [&](Job& job) {
      acknowledge_stop_signals("train", until);  // another rank: what was sent to it alone
      // Each process orders its stage's tasks by its own copy of a hint file.
      refuse_other_input_files(job, {{"--hint", hint_file(f.dispatch.hint)}});
      train::TrainRun run = to_run(f);
      run.train.job = &job;
      sum = train::run_training(run);
      outputs_written();
      job.all_gather({});  // every process is done before any tears its endpoint down
    });
    exit_if_stopped(sum);
  } else {
    refuse_inproc_under_mpirun();
    acknowledge_stop_signals("train", until);
    const train::TrainSummary sum = train::run_training(to_run(f));
    outputs_written();
    exit_if_stopped(sum);
  }
}

}  // namespace

void install_trainer() {
  set_train_runner(run);
#ifdef RRFP_HAVE_GPU
  train::set_stream_notifier(gpu::notify_when_done);
#endif
#ifdef RRFP_HAVE_PARTITIONS
  train::set_partition_source(
      [](torch::Device d, int stages) { return gpu::partition_streams(d.index(), stages); });
#endif
}

}  // namespace rrfp
