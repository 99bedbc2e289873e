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
#include "dist/job.hpp"
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
  // Tensor-parallel ranks per stage (Megatron-style: heads and MLP split over T) and their
  // coordination protocol.
  int tp = 1;
  TpProtocol tp_protocol = TpProtocol::Leader;
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
  std::function<std::unique_ptr<StageProgram>(std::unique_ptr<StageProgram>, int stage,
                                              int tp_rank)>
      wrap;
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
  // Every parameter this process holds, in the model's global order (then TP rank), and its
  // name. In a multi-process job: those of the chunks it hosts.
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
  // Chunk c of TP rank r (null when another process holds it).
  Chunk* chunk(int r, int c) const { return chunks_[r][c].get(); }

 private:
  double lr_at(int step) const;
  void apply(double clip_coef, double lr);
  TrainStageProgram* program(int stage, int tp_rank) const {
    return programs_[stage * o_.tp + tp_rank];
  }
  void step_loss_and_norm(StepReport& r);
  void average_replicas();

  TrainOptions o_;
  WorkModel m_;
  Hint hint_;
  std::unique_ptr<DataSource> data_;
  std::vector<std::vector<std::unique_ptr<Chunk>>> chunks_;  // [tp rank][chunk]
  std::vector<TrainStageProgram*> programs_;  // by endpoint (owned by the runtime; null: elsewhere)
  std::shared_ptr<const StepBatch> batch_;
  std::unique_ptr<Runtime> runtime_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;  // AdamW state, global order
  int step_ = 0;
};

}  // namespace rrfp::train
