#pragma once
// `rrfp train` as a library call. This header is free of LibTorch so the CLI can include it;
// run_training lives in the training layer.
#include <cstdint>
#include <string>

namespace rrfp {
class Job;
}

namespace rrfp::train {

struct TrainRunOptions {
  // Pipeline (the same meaning as in `rrfp simulate`).
  int pp = 4, vpp = 1, microbatches = 8;
  std::string placement = "loop", split = "auto", hint = "bfw", policy = "ready", comm = "async";
  int limit = 0, max_pending_w = 0;
  // Model.
  int d_model = 64, heads = 4, layers = 4, max_seq = 128;
  // Data: a directory of text files; windows of min_len..max_len bytes per microbatch. Or the
  // synthetic image-text task (task "image-text", 0..max_images images per sample).
  std::string task = "text";
  int max_images = 4;
  std::string data = "/usr/share/common-licenses";
  int min_len = 32, max_len = 128;
  // Optimization.
  int steps = 600, warmup = 60;
  double lr = 3e-3, weight_decay = 0.1, clip = 1.0;
  std::uint64_t seed = 1;
  // Evaluation and outputs.
  int eval_every = 50, eval_batches = 8;
  std::string out = "rrfp-out";
  int save_every = 0;         // write OUT/checkpoint.bin every N steps and at the end (0: never)
  std::string resume;         // continue from this checkpoint
  std::string inject_jitter;  // a jitter preset (jitter:J1..J3) added to real compute
  double timeout_s = 120;
  bool quiet = false;  // no progress bar (tests)
  // Tensor and data parallelism; `job` non-null: this is one process of a multi-process run
  // (rank 0 prints and writes the outputs). Without a job, TP ranks are threads.
  int tp = 1, dp = 1;
  std::string tp_protocol = "leader";
  Job* job = nullptr;
};

struct TrainSummary {
  int steps = 0;
  double first_loss = 0, last_loss = 0;
  double val_loss = 0, unigram_entropy = 0;
  double tokens_per_s = 0, mean_step_ms = 0, mean_bubble = 0;
  double overhead_share = 0;          // dispatch gaps / (gaps + model compute), all ranks
  double outside_pipeline_share = 0;  // step time outside the runtime step (optimizer, data)
};

// Trains, printing progress, and writes into `out`: loss.csv, loss.svg, and the last step's
// trace.json and timeline.svg. Throws InputError for bad options, data or output directory.
TrainSummary run_training(const TrainRunOptions& o);

}  // namespace rrfp::train
