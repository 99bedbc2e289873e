// `rrfp train`: the main job. Trains a small GPT on the threaded runtime; with no flags, P=4,
// rrfp with the BFW hint, on the licence texts every Debian machine has. The pipeline flags are
// simulate's and run's (options.hpp); the rest bind straight to the training options, whose
// defaults are the command's.
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "cli/stop_signal.hpp"
#include "cli/train_flags.hpp"
#include "core/error.hpp"
#include "core/hint.hpp"
#include "core/omp_env.hpp"
#include "core/printable.hpp"
#include "sim/hint_check.hpp"

namespace rrfp {

namespace {

TrainRunner g_runner;
std::vector<char*> g_argv;

// Replaces this process with `rrfp-train` from this program's directory, same arguments. Only
// returns by throwing: no such program (a build without LibTorch, or `rrfp` copied away from
// the `rrfp-train` its build made), or the exec failed.
[[noreturn]] void exec_trainer() {
  char self[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) throw Error("rrfp train: cannot find this program's directory (/proc/self/exe)");
  std::string path(self, static_cast<std::size_t>(n));
  const std::string dir = path.substr(0, path.rfind('/') + 1);
  path = dir + "rrfp-train";
  if (::access(path.c_str(), X_OK) != 0) {
    // There, but not to be run (it was said to be missing).
    if (errno != ENOENT)
      throw InputError("rrfp train: cannot run " + path + ": " + std::strerror(errno) +
                       " (it must be executable: chmod +x)");
#ifdef RRFP_HAVE_TORCH
    // The build has LibTorch: it made rrfp-train beside rrfp, and this rrfp was run elsewhere
    // (it said the build had no LibTorch, pointing at a reinstall that changed nothing).
    throw InputError("rrfp train: rrfp-train must sit beside rrfp, and " + dir +
                     " has none (this build has LibTorch: run the rrfp in its build folder, or "
                     "copy rrfp-train next to this one)");
#else
    throw InputError("rrfp train: this build has no LibTorch (no " + path +
                     "): configure with LibTorch (RRFP_WITH_TORCH AUTO or ON, no sanitizer; "
                     "scripts/install-deps.sh installs libtorch-dev) and rebuild");
#endif
  }
  std::vector<char*> argv = g_argv;
  argv.at(0) = path.data();
  hold_stop_signals(true);  // until rrfp-train's handlers take them (stop_signal.hpp)
  ::execv(path.c_str(), argv.data());
  hold_stop_signals(false);
  throw Error("rrfp train: cannot run " + path + ": " + std::strerror(errno));
}

// `rrfp train --device cuda` without model flags trains a model sized for a GPU: 12 blocks of
// width 1024 over sequences of 512 to 1024 bytes, 16 microbatches. A flag given wins.
void gpu_defaults(const CLI::App& s, TrainFlags& f) {
  train::TrainOptions& t = f.run.train;
  auto unset = [&s](const char* flag) { return s.count(flag) == 0; };
  if (unset("--d-model")) t.model.d_model = 1024;
  if (unset("--heads")) t.model.heads = 16;
  if (unset("--layers")) t.model.layers = 12;
  if (unset("--max-seq")) t.model.max_seq = 1024;
  if (unset("--max-len")) t.window.max_len = 1024;
  if (unset("--min-len")) t.window.min_len = 512;
  if (unset("--microbatches")) f.shape.microbatches = 16;
  if (unset("--max-images") && t.task == "image-text") t.max_images = 16;
}

// The window's lengths not given follow those given, within the model's: `--max-seq 64` alone
// was refused as "--max-len: 128 exceeds the model's --max-seq 64", and `--device cuda --max-len
// 256` as "--min-len: ... got 512", values never given. A bad given value is left to its check.
void fit_unset_lengths(const CLI::App& s, train::TrainOptions& t) {
  train::WindowOptions& w = t.window;
  if (s.count("--max-len") == 0 && t.model.max_seq >= 1)
    w.max_len = std::min(w.max_len, t.model.max_seq);
  if (s.count("--min-len") == 0 && w.max_len >= 1) w.min_len = std::min(w.min_len, w.max_len);
}

// A hint file whose order deadlocks the blocking rendezvous under --policy fixed, refused as
// simulate and run refuse it: training stalled on it until the watchdog. Checked only then, so
// every other command line meets its checks in the order rrfp-train makes them.
void refuse_deadlocking_hint(const TrainFlags& f) {
  if (f.dispatch.policy != "fixed" || f.dispatch.comm != "blocking") return;
  const WorkModel m(to_config(f.shape, f.dispatch.hint));
  const RuntimeOptions o = to_runtime(f.dispatch, f.timeout_s);
  refuse_blocking_deadlock(m, make_hint(f.dispatch.hint, m), o.arbiter.policy, o.comm, o.tp,
                           o.tp_protocol);
}

// The model's and the data's flags.
void add_model_data_flags(CLI::App* s, train::TrainOptions& t) {
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
  s->add_option("--data", t.data_dir,
                "directory of text files, one document each (each file once; subfolders are not "
                "read; a file under about 10 x (--max-len + 1) bytes is skipped, as the banner "
                "says)")
      ->capture_default_str();
  s->add_option("--min-len", t.window.min_len,
                "shortest microbatch, in bytes (not given: at most --max-len)")
      ->capture_default_str();
  s->add_option("--max-len", t.window.max_len,
                "longest microbatch, in bytes (not given: at most --max-seq)")
      ->capture_default_str();
}

// The optimizer's, the run's length, validation and output, and injected jitter.
void add_run_flags(CLI::App* s, TrainFlags& f) {
  train::TrainRun& r = f.run;
  train::TrainOptions& t = r.train;
  s->add_option("--steps", t.steps, "optimizer steps")->capture_default_str();
  s->add_option("--warmup", t.opt.warmup,
                "warmup steps, then a cosine decay towards 10% of --lr (none from --steps - 1 on)")
      ->capture_default_str();
  s->add_option("--lr", t.opt.lr, "peak learning rate")->capture_default_str();
  s->add_option("--weight-decay", t.opt.weight_decay, "AdamW weight decay, on every parameter")
      ->capture_default_str();
  s->add_option("--clip", t.opt.clip, "global gradient-norm clip (0: none)")->capture_default_str();
  s->add_option("--seed", f.seed, "seed of the weights and the data order")
      ->check(seed_value())
      ->capture_default_str();
  s->add_option("--eval-every", r.eval_every,
                "validation every N steps and at the last (0: at the last step only)")
      ->capture_default_str();
  s->add_option("--eval-batches", r.eval_batches, "held-out batches per validation")
      ->capture_default_str();
  s->add_option("--out", r.out, "output directory")->capture_default_str();
  s->add_option("--save-every", r.save_every,
                "write OUT/checkpoint.bin every N steps and at the end (0: never)");
  s->add_option("--resume", r.resume, "continue from a checkpoint written by --save-every");
  s->add_option("--inject-jitter", f.inject_jitter,
                "add a jitter preset (jitter:J1..J3) to real compute");
  add_timeout_flag(s, f.timeout_s);
}

// The device's flags (most of them the GPU's).
void add_device_flags(CLI::App* s, TrainFlags& f) {
  train::TrainOptions& t = f.run.train;
  s->add_option("--device", t.device,
                "cpu, or cuda (each stage on a stream of its own; a GPU-sized model by default)")
      ->capture_default_str();
  s->add_option("--dtype", t.dtype, "f32, or bf16 (autocast; --device cuda)")
      ->capture_default_str();
  s->add_option_function<std::string>(
       "--deterministic", [&t](const std::string& v) { t.deterministic = v == "on"; },
       "cuda: torch's deterministic algorithms, for bitwise results (default on)")
      ->check(CLI::IsMember({"on", "off"}));
  s->add_option("--completion", t.completion,
                "cuda: how a stage learns its task's kernels ended: poll (the event; default), "
                "spin or callback")
      ->capture_default_str();
  s->add_option("--window", f.window,
                "cuda: tasks a stage may have queued on its stream at once, the next launched "
                "while earlier ones run (1: each completes before the next starts)")
      ->capture_default_str();
  add_idle_spin_flag(s, f.idle_spin_us);
  s->add_option_function<std::string>(
       "--sm-partitions", [&t](const std::string& v) { t.sm_partitions = v == "on"; },
       "cuda: each stage on its own share of the SMs (default off)")
      ->check(CLI::IsMember({"on", "off"}));
}

// The flags' checks across flags, then the run, in this process or in rrfp-train.
void check_and_run(TrainFlags& f, CLI::App& s) {
  // The task's own name first: `--task image --max-images 2` was told of --max-images.
  const std::string& task = f.run.train.task;
  if (task != "text" && task != "image-text")
    throw InputError("--task: expected text or image-text, got '" + printable(task, 30) + "'");
  if (s.count("--max-images") && f.run.train.task != "image-text")
    throw InputError("--max-images: images are the image-text task's; --task is " +
                     f.run.train.task);
  // The image-text task makes its samples: a corpus and its windows would be taken and
  // ignored (--data /nonexistent ran without a word).
  for (const char* flag : {"--data", "--min-len", "--max-len"})
    if (s.count(flag) && f.run.train.task == "image-text")
      throw InputError(std::string(flag) +
                       ": the text task's corpus and its windows; --task is image-text, whose "
                       "samples are synthetic (--max-images bounds them)");
  // A folder of several files, never stdout: '-' made a folder named "-", where every
  // other output flag refuses it.
  if (f.run.out == "-")
    throw InputError(
        "--out: '-' (stdout) is not taken: train writes its files (loss.csv, trace.json, ...) "
        "into this folder; give a folder");
  // Its files are named OUT/NAME: `--out runs/` wrote and printed runs//loss.csv.
  std::string& out = f.run.out;
  while (out.size() > 1 && out.back() == '/')
    out.pop_back();
  if (f.run.train.device != "cpu") gpu_defaults(s, f);
  fit_unset_lengths(s, f.run.train);
  shape_from_hint_file(f.shape, f.dispatch.hint);  // for the shape flags not given
  // The one of them a checkpoint records: a resume's warning says where it came from (it blamed
  // --microbatches, not given).
  f.run.microbatches_from_hint = f.shape.from_file[2];
  // A hint that needs the split (the default bfw) is refused under off with its own message;
  // adaptive runs unsplit, which ignored the cap.
  const std::string& hint = f.dispatch.hint;
  if (f.dispatch.max_pending_w > 0)
    refuse_unsplit_w_cap(f.dispatch, f.shape,
                         resolve_split(f.shape.split, hint) || hint_needs_split(hint));
  refuse_deadlocking_hint(f);
  omp_num_threads_set();          // before rrfp-train's OpenMP prints its own lines about it
  if (!g_runner) exec_trainer();  // values checked and run by rrfp-train
  g_runner(f);
}

}  // namespace

void set_train_runner(TrainRunner run) {
  g_runner = std::move(run);
}

void set_command_line(int argc, char** argv) {
  g_argv.assign(argv, argv + argc);
  g_argv.push_back(nullptr);
}

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
  add_model_data_flags(s, t);
  add_run_flags(s, *f);
  add_device_flags(s, *f);
  s->add_option("--dp", t.dp, "data-parallel replicas (--transport mpi)")->capture_default_str();
  add_transport_flag(s, f->transport, {TransportKind::Inproc, TransportKind::Mpi},
                     "inproc (threads) or mpi (one process per rank: mpirun -np P*TP*DP)");
  s->callback([f, s] { check_and_run(*f, *s); });
}

}  // namespace rrfp
