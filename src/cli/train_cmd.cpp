// `rrfp train`: the main job. Trains a small GPT on the threaded runtime; with no flags, P=4,
// rrfp with the BFW hint, on the licence texts every Debian machine has. The pipeline flags are
// simulate's and run's (options.hpp); the rest bind straight to the training options, whose
// defaults are the command's.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <iostream>

#include "cli/mpi_launch.hpp"
#include "cli/options.hpp"
#include "core/error.hpp"
#include "runtime/jitter.hpp"
#include "train/run.hpp"

namespace rrfp {

namespace {

struct TrainFlags {
  ShapeFlags shape;
  DispatchFlags dispatch;
  train::TrainRun run;  // model, data, optimizer and output flags land here directly
  std::uint64_t seed = 1;
  double timeout_s = 0;  // set from the training options' default
  std::string inject_jitter, transport = "inproc";
};

#ifdef RRFP_HAVE_TORCH
// SIGINT/SIGTERM: the first asks the run to stop after its current step (the log row, a
// checkpoint with --save-every, the outputs); a second one ends the process at once.
std::atomic<int> g_stop{0};

void on_stop_signal(int sig) {
  if (g_stop.exchange(sig) != 0) ::_exit(128 + sig);  // async-signal-safe, both
}

void stop_on_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;  // a write interrupted by the signal goes on
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) {
    struct sigaction old {};
    ::sigaction(sig, nullptr, &old);
    if (old.sa_handler != SIG_IGN) ::sigaction(sig, &sa, nullptr);  // a background job's stays
  }
}

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
  t.model.seed = t.data_seed = f.seed;
  run.stop = &g_stop;
  run.warn = [](const std::string& m) {
    std::cerr << "rrfp train: warning: " << as_flags(m) << "\n";
  };
  if (!f.inject_jitter.empty()) {
    if (f.inject_jitter.rfind("jitter:", 0) != 0)
      throw InputError("--inject-jitter: expected jitter:J1, jitter:J2 or jitter:J3, got '" +
                       f.inject_jitter + "'");
    const JitterLevel j = workload_preset(f.inject_jitter).jitter;
    if (j.p <= 0)
      throw InputError("--inject-jitter: '" + f.inject_jitter +
                       "' injects no jitter (use jitter:J1..J3)");
    const std::uint64_t seed = f.seed;
    t.wrap = [j, seed](std::unique_ptr<StageProgram> p, int stage, int) {
      return with_jitter(std::move(p), j, stage, seed);
    };
    run.jitter = f.inject_jitter;
  }
  return run;  // run_training validates the rest before it writes or reads anything
}
#endif

}  // namespace

void setup_train(CLI::App& app) {
  auto f = std::make_shared<TrainFlags>();
  train::TrainRun& r = f->run;
  train::TrainOptions& t = r.train;
  f->shape.pp = t.pipe.pp;
  f->shape.microbatches = t.pipe.microbatches;
  f->dispatch.hint = t.hint;
  f->timeout_s = static_cast<double>(t.runtime.timeout_ms) / 1000;
  CLI::App* s = app.add_subcommand(
      "train", "train a GPT on the runtime (default: P=4, ready BFW, the Debian licence texts)");
  add_shape_flags(s, f->shape);
  add_dispatch_flags(s, f->dispatch, "fixed or ready");
  s->add_option("--d-model", t.model.d_model, "model width")->capture_default_str();
  s->add_option("--heads", t.model.heads, "attention heads")->capture_default_str();
  s->add_option("--layers", t.model.layers, "transformer blocks (at least P*V)")
      ->capture_default_str();
  s->add_option("--max-seq", t.model.max_seq, "longest sequence the model takes")
      ->capture_default_str();
  s->add_option("--task", t.task, "text (the --data corpus) or image-text (synthetic)")
      ->capture_default_str();
  s->add_option("--max-images", t.max_images, "image-text: most images per sample")
      ->capture_default_str();
  s->add_option("--data", t.data_dir, "directory of text files (one document each)")
      ->capture_default_str();
  s->add_option("--min-len", t.window.min_len, "shortest microbatch, in bytes")
      ->capture_default_str();
  s->add_option("--max-len", t.window.max_len, "longest microbatch, in bytes")
      ->capture_default_str();
  s->add_option("--steps", t.steps, "optimizer steps")->capture_default_str();
  s->add_option("--warmup", t.opt.warmup, "warmup steps (then cosine decay)")
      ->capture_default_str();
  s->add_option("--lr", t.opt.lr, "peak learning rate")->capture_default_str();
  s->add_option("--weight-decay", t.opt.weight_decay, "AdamW weight decay")->capture_default_str();
  s->add_option("--clip", t.opt.clip, "global gradient-norm clip (0: none)")->capture_default_str();
  s->add_option("--seed", f->seed, "seed of the weights and the data order")
      ->check(not_negative())
      ->capture_default_str();
  s->add_option("--eval-every", r.eval_every, "validation every N steps")->capture_default_str();
  s->add_option("--eval-batches", r.eval_batches, "held-out batches per validation")
      ->capture_default_str();
  s->add_option("--out", r.out, "output directory")->capture_default_str();
  s->add_option("--save-every", r.save_every,
                "write OUT/checkpoint.bin every N steps and at the end (0: never)");
  s->add_option("--resume", r.resume, "continue from a checkpoint written by --save-every");
  s->add_option("--inject-jitter", f->inject_jitter,
                "add a jitter preset (jitter:J1..J3) to real compute");
  add_timeout_flag(s, f->timeout_s);
  s->add_option("--dp", t.dp, "data-parallel replicas (--transport mpi)")->capture_default_str();
  s->add_option("--transport", f->transport,
                "inproc (threads) or mpi (one process per rank: mpirun -np P*TP*DP)")
      ->capture_default_str();
  s->callback([f] {
#ifdef RRFP_HAVE_TORCH
    stop_on_signals();
    if (f->transport == "mpi") {
      train::TrainSummary sum;
      run_as_mpi_process(timeout_ms_of(f->timeout_s), [&](Job& job) {
        train::TrainRun run = to_run(*f);
        run.train.job = &job;
        sum = train::run_training(run);
        job.all_gather({});  // every process is done before any tears its endpoint down
      });
      exit_if_stopped(sum);
    } else if (f->transport == "inproc") {
      exit_if_stopped(train::run_training(to_run(*f)));
    } else {
      throw InputError("--transport: unknown transport '" + f->transport +
                       "' (expected inproc or mpi)");
    }
#else
    throw InputError("rrfp train: this build has no LibTorch (install libtorch-dev and rebuild)");
#endif
  });
}

}  // namespace rrfp
