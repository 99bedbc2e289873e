#pragma once
// What a training run is given, one struct per concept, embedded by value. Free of LibTorch, so
// the CLI builds these from its flags and the training layer takes them whole. Each struct is
// validated in one place (validate(GptConfig) in model.cpp, the rest when a Trainer or a run
// starts); errors name the option (`lr`), never a flag.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/work_model.hpp"
#include "runtime/program.hpp"
#include "runtime/runtime.hpp"

namespace rrfp {
class Job;
struct Hint;
}  // namespace rrfp

namespace rrfp::train {

inline constexpr int kMaxSeq = 1 << 20;  // the longest `max_seq` taken

struct GptConfig {
  int vocab = 256;  // bytes
  int d_model = 64;
  int heads = 4;
  int layers = 4;  // transformer blocks
  int max_seq = 128;
  std::uint64_t seed = 1;
  // Image-text variant: a ViT-style encoder on chunk 0 turns each image's patches into tokens
  // placed ahead of the text. 0 patches: text only.
  int image_patches = 0, patch_dim = 16;
};

// Microbatch lengths in bytes: each microbatch is a window of min_len..max_len bytes.
struct WindowOptions {
  int min_len = 32, max_len = 128;
};

struct OptimizerOptions {
  // The cosine decays from lr towards min_lr_ratio * lr (the last step stops short of it).
  double lr = 3e-3, min_lr_ratio = 0.1;
  int warmup = 60;  // steps of linear warmup, then cosine decay
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  double clip = 1.0;  // global gradient-norm clip (0: none)
};

using ProgramWrap = std::function<std::unique_ptr<StageProgram>(std::unique_ptr<StageProgram>,
                                                                int stage, int tp_rank)>;

// The most steps a run may take: what a checkpoint's step and a log row's hold.
inline constexpr int kMaxSteps = 1'000'000'000;

// The defaults are `rrfp train`'s (the CLI binds its flags to these fields).
struct TrainOptions {
  GptConfig model;
  // split_backward as given (the CLI resolves `auto` from the hint); on, as bfw wants.
  PipelineConfig pipe{.split_backward = true};
  std::string hint = "bfw";
  // Arbitration, communication, TP ranks per stage (Megatron-style: heads and MLP split over
  // T) and their protocol, the watchdog (two minutes: training steps are long): the runtime's
  // own options, passed to it whole.
  RuntimeOptions runtime = [] {
    RuntimeOptions o;
    o.timeout_ms = 120'000;
    return o;
  }();
  int steps = 600;
  // Where the model trains: cpu, or cuda (cuda:N) with each stage on a stream of its own
  // (train/device.hpp); dtype f32, or bf16 (autocast, CUDA only). In-process runs only.
  std::string device = "cpu";
  std::string dtype = "f32";
  // CUDA: torch's deterministic algorithms (the bitwise guarantee; off trades it for speed),
  // and each stage on a partition of the SMs of its own (a CUDA build only).
  bool deterministic = true;
  bool sm_partitions = false;
  std::string completion = "poll";  // how a stage's thread learns of completion (device.hpp)
  OptimizerOptions opt;
  WindowOptions window;
  std::string task = "text";  // text: the byte corpus in data_dir; image-text: synthetic
  int max_images = 4;
  std::string data_dir = "/usr/share/common-licenses";
  std::uint64_t data_seed = 1;
  // Non-null: one process of a multi-process job (mpirun); this process trains the chunks of
  // the endpoint it hosts, and the norm and loss are shared over the job. Null: every stage
  // and TP rank is a thread of this process.
  Job* job = nullptr;
  // Data-parallel replicas (a job only): each step's batch has dp * M microbatches, replica d
  // trains microbatches [d*M, (d+1)*M), and the replicas' gradients are averaged (summed in
  // replica order) before the norm and the update.
  int dp = 1;
  // Wraps each (stage, TP rank)'s program (tests inject delays; --inject-jitter adds the
  // design's jitter).
  ProgramWrap wrap;
};

// Every field, before any data is read: throws InputError naming the option.
void validate(const TrainOptions& o);

// The model with the activations the stages of this process hold at once, from the longest
// sequence and the microbatches the arbiter lets a stage hold (`m` and `hint` are the run's):
// throws InputError naming the options when they exceed the memory this process may take
// (core/memory.hpp). A sequence of 16000 bytes over 16 heads asked LibTorch for 16 GB in one
// allocation and failed there. In a job (`job`) each process counts its own stage's part of
// the model, and the processes on one machine (one boot and control group) are counted
// together against the least any of them may take (RRFP_MEMORY_LIMIT then bounds them all),
// on every process alike (a collective over the job). Not checked on a GPU, whose memory this does
// not see. The step's batch and its tasks' records count too, and where they are most of it the
// refusal names `microbatches`: `-m 20000000` grew past 20 GB, or died of SIGSEGV in LibTorch's
// out-of-memory path under `ulimit -v`.
void check_activations(const TrainOptions& o, const WorkModel& m, const Hint& hint);

// The warning a run prints when its learning-rate schedule never decays (`warmup` at least
// `steps`: the rate only rises, to `lr` * steps / warmup); empty when it does.
std::string schedule_warning(const TrainOptions& o);

// The model's parameter count, near enough to size memory by (blocks, embeddings and head; the
// image encoder's few layers left out).
double approx_parameters(const GptConfig& c);

// `rrfp train` as a library call: a Trainer, plus evaluation, outputs and checkpoints.
struct TrainRun {
  TrainOptions train;
  int eval_every = 50, eval_batches = 8;  // validation every N steps (0: only at the end)
  std::string out = "rrfp-out";
  int save_every = 0;  // write OUT/checkpoint.bin every N steps and at the end (0: never)
  std::string resume;  // continue from this checkpoint
  std::string jitter;  // for the header line: the jitter preset `wrap` injects, if any
  // `microbatches` came from a hint file's header, not given: a resume's warning of them names
  // the file as their source (it blamed --microbatches, never given).
  bool microbatches_from_hint = false;
  bool quiet = false;  // no progress output (tests; ranks other than 0)
  // Non-zero (a signal number): stop after the current step, keeping its log row and, with
  // save_every, a checkpoint. Set from a signal handler by the CLI.
  const std::atomic<int>* stop = nullptr;
  // Where warnings go (an option that differs from the resumed checkpoint's run); each names
  // the option in backticks. Empty: nowhere.
  std::function<void(const std::string&)> warn;
  // Called once the set-up is done (data read, checkpoint loaded), as the first step begins:
  // until then the CLI ends the process at once on a signal, as nothing is worth keeping.
  std::function<void()> work_begins;
};

}  // namespace rrfp::train
