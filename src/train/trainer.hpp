#pragma once
// A training run on the threaded runtime: the model's chunks spread over P stages (V each),
// one runtime step per optimizer step, then the global gradient norm over every stage, clipping,
// AdamW with warmup and cosine decay. Every quantity is computed in a fixed global order, so
// the parameters after K steps are bitwise the same for every hint, policy, limit, partition
// and dispatch order (design.md §6).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/hint.hpp"
#include "runtime/runtime.hpp"
#include "train/corpus.hpp"
#include "train/image_text.hpp"
#include "train/model.hpp"
#include "train/stage_program.hpp"

namespace rrfp::train {

struct OptimizerOptions {
  double lr = 3e-3, min_lr_ratio = 0.1;
  int warmup = 10;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  double clip = 1.0;  // global gradient-norm clip (0: none)
};

struct TrainOptions {
  GptConfig model;
  PipelineConfig pipe;  // split_backward as given (resolve it from the hint before)
  std::string hint = "bfw";
  ArbiterOptions arbiter;
  CommMode comm = CommMode::Async;
  int steps = 100;
  OptimizerOptions opt;
  WindowOptions window;
  std::string task = "text";  // text: the byte corpus in data_dir; image-text: synthetic
  int max_images = 4;
  std::string data_dir = "/usr/share/common-licenses";
  std::uint64_t data_seed = 1;
  std::int64_t timeout_ms = 120'000;
  // Wraps each stage's program (tests inject delays; --inject-jitter adds the design's jitter).
  std::function<std::unique_ptr<StageProgram>(std::unique_ptr<StageProgram>, int stage)> wrap;
};

struct StepReport {
  int step = 0;
  double loss = 0, grad_norm = 0, lr = 0;
  std::int64_t tokens = 0;
  StepResult run;  // the runtime's measured step
};

class Trainer {
 public:
  explicit Trainer(TrainOptions o);
  ~Trainer();

  StepReport step();
  // Mean loss over `batches` held-out batches of M microbatches (no gradients).
  double validation_loss(int batches);
  // Every parameter in the model's global order, and its name.
  std::vector<torch::Tensor> parameters() const;
  std::vector<std::string> parameter_names() const;
  // Writes the step, parameters and optimizer state (atomically; see checkpoint.hpp).
  void save(const std::string& path) const;
  // Continues from a checkpoint: the parameters, optimizer state and step it holds, so the
  // next steps are bitwise those of an uninterrupted run. Throws InputError if it is refused.
  void resume(const std::string& path);
  const DataSource& data() const { return *data_; }
  const WorkModel& model() const { return m_; }
  int steps_done() const { return step_; }

 private:
  double lr_at(int step) const;
  void apply(double clip_coef, double lr);

  TrainOptions o_;
  WorkModel m_;
  Hint hint_;
  std::unique_ptr<DataSource> data_;
  std::vector<std::unique_ptr<Chunk>> chunks_;  // by chunk index
  std::vector<TrainStageProgram*> programs_;    // by stage (owned by the runtime)
  std::shared_ptr<const StepBatch> batch_;
  std::unique_ptr<Runtime> runtime_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;  // AdamW state, global order
  int step_ = 0;
};

}  // namespace rrfp::train
