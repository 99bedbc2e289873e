// `rrfp train`: the main job. Trains a small GPT on the threaded runtime; with no flags, P=4,
// rrfp with the BFW hint, on the licence texts every Debian machine has.
#include "cli/mpi_launch.hpp"
#include "cli/options.hpp"
#include "core/error.hpp"
#include "train/run.hpp"

namespace rrfp {

void setup_train(CLI::App& app) {
  auto o = std::make_shared<train::TrainRunOptions>();
  CLI::App* sub = app.add_subcommand(
      "train", "train a GPT on the runtime (default: P=4, ready BFW, the Debian licence texts)");
  auto* s = sub;
  s->add_option("--pp", o->pp, "pipeline stages P")->capture_default_str();
  s->add_option("--vpp", o->vpp, "model chunks per stage V")->capture_default_str();
  s->add_option("--placement", o->placement, "loop or vshape")->capture_default_str();
  s->add_option("--microbatches,-m", o->microbatches, "microbatches per step M")
      ->capture_default_str();
  s->add_option("--split-backward", o->split, "auto (on for zb-* and bfw), on or off")
      ->capture_default_str();
  s->add_option("--hint", o->hint, "a hint name or file")->capture_default_str();
  s->add_option("--policy", o->policy, "fixed or ready")->capture_default_str();
  s->add_option("--limit", o->limit, "back-pressure limit (0: the hint's default)");
  s->add_option("--max-pending-w", o->max_pending_w, "cap on deferred W tasks (0: P)");
  s->add_option("--comm", o->comm, "async or blocking (rendezvous)")->capture_default_str();
  s->add_option("--d-model", o->d_model, "model width")->capture_default_str();
  s->add_option("--heads", o->heads, "attention heads")->capture_default_str();
  s->add_option("--layers", o->layers, "transformer blocks (at least P*V)")->capture_default_str();
  s->add_option("--max-seq", o->max_seq, "longest sequence the model takes")->capture_default_str();
  s->add_option("--task", o->task, "text (the --data corpus) or image-text (synthetic)")
      ->capture_default_str();
  s->add_option("--max-images", o->max_images, "image-text: most images per sample")
      ->capture_default_str();
  s->add_option("--data", o->data, "directory of text files (one document each)")
      ->capture_default_str();
  s->add_option("--min-len", o->min_len, "shortest microbatch, in bytes")->capture_default_str();
  s->add_option("--max-len", o->max_len, "longest microbatch, in bytes")->capture_default_str();
  s->add_option("--steps", o->steps, "optimizer steps")->capture_default_str();
  s->add_option("--warmup", o->warmup, "warmup steps (then cosine decay)")->capture_default_str();
  s->add_option("--lr", o->lr, "peak learning rate")->capture_default_str();
  s->add_option("--weight-decay", o->weight_decay, "AdamW weight decay")->capture_default_str();
  s->add_option("--clip", o->clip, "global gradient-norm clip (0: none)")->capture_default_str();
  s->add_option("--seed", o->seed, "seed of the weights and the data order")->capture_default_str();
  s->add_option("--eval-every", o->eval_every, "validation every N steps")->capture_default_str();
  s->add_option("--eval-batches", o->eval_batches, "held-out batches per validation")
      ->capture_default_str();
  s->add_option("--out", o->out, "output directory")->capture_default_str();
  s->add_option("--save-every", o->save_every,
                "write OUT/checkpoint.bin every N steps and at the end (0: never)");
  s->add_option("--resume", o->resume, "continue from a checkpoint written by --save-every");
  s->add_option("--inject-jitter", o->inject_jitter,
                "add a jitter preset (jitter:J1..J3) to real compute");
  s->add_option("--timeout", o->timeout_s, "watchdog seconds without progress")
      ->capture_default_str();
  s->add_option("--tp", o->tp, "tensor-parallel ranks per stage (heads and MLP split)")
      ->capture_default_str();
  s->add_option("--tp-protocol", o->tp_protocol, "leader, agree or none (no coordination)")
      ->capture_default_str();
  s->add_option("--dp", o->dp, "data-parallel replicas (--transport mpi)")->capture_default_str();
  auto transport = std::make_shared<std::string>("inproc");
  s->add_option("--transport", *transport,
                "inproc (threads) or mpi (one process per rank: mpirun -np P*TP*DP)")
      ->capture_default_str();
  sub->callback([o, transport] {
#ifdef RRFP_HAVE_TORCH
    if (*transport == "mpi") {
      run_as_mpi_process([&](Job& job) {
        train::TrainRunOptions p = *o;
        p.job = &job;
        train::run_training(p);
        job.all_gather({});  // every process is done before any tears its endpoint down
      });
    } else if (*transport == "inproc") {
      train::run_training(*o);
    } else {
      throw InputError("--transport: unknown transport '" + *transport +
                       "' (expected inproc or mpi)");
    }
#else
    throw InputError("rrfp train: this build has no LibTorch (install libtorch-dev and rebuild)");
#endif
  });
}

}  // namespace rrfp
