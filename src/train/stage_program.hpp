#pragma once
// The runtime's StageProgram for training: owns the model chunks of one stage, runs their
// forward with autograd, their backward with torch::autograd::grad (the input gradient for the
// previous chunk, parameter gradients for this microbatch), and with the split backward
// leaves the linear layers' weight GEMMs to the W task. Each microbatch's parameter gradients
// go through a reorder buffer and are summed in microbatch order, so the result does not
// depend on the order tasks ran (semantics.md §6).
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "core/work_model.hpp"
#include "runtime/program.hpp"
#include "train/batch.hpp"
#include "train/device.hpp"
#include "train/model.hpp"

namespace rrfp::train {

// The parameters' accumulated gradients of one chunk, summed in microbatch order.
class ReorderBuffer {
 public:
  explicit ReorderBuffer(int microbatches) : pending_(microbatches) {}
  // Takes microbatch mb's gradients; adds every gradient that is now next in order.
  void put(int mb, std::vector<torch::Tensor> grads);
  bool complete() const { return next_ == static_cast<int>(pending_.size()); }
  std::vector<torch::Tensor>& sum() { return sum_; }

 private:
  std::vector<std::optional<std::vector<torch::Tensor>>> pending_;
  std::vector<torch::Tensor> sum_;
  int next_ = 0;
};

// What one stage's program and the trainer share, and all they share: the step's batch, set
// before the step, and what the step leaves behind, each chunk's gradients summed in
// microbatch order and (last stage) each microbatch's loss. The runtime owns the program, maybe
// wrapped; the trainer keeps only this.
//
// An evaluation pass (`eval`) runs the same schedule over a held-out batch: forwards without a
// graph, the last chunk's losses kept, backward and W tasks that do nothing and send empty
// gradients, and the gradients of the training step before it left as they are.
class StageLink {
 public:
  void set_batch(std::shared_ptr<const StepBatch> b, bool eval = false) {
    std::lock_guard lk(mu_);
    batch_ = std::move(b);
    eval_ = eval;
  }
  std::shared_ptr<const StepBatch> batch() const {  // any thread (input_bytes runs on the
    std::lock_guard lk(mu_);                        // transport's)
    return batch_;
  }
  bool eval() const {
    std::lock_guard lk(mu_);
    return eval_;
  }
  // After a step: the chunk's summed gradients (by the chunk's parameter index).
  std::vector<torch::Tensor>& grads(int chunk) { return reorder_.at(chunk)->sum(); }
  // After a step, last stage only: each microbatch's loss.
  const std::vector<float>& losses() const { return losses_; }
  // The step's waits for the device (StageDevice::complete), taken after the step.
  std::vector<std::int64_t> take_waits() {
    std::lock_guard lk(mu_);
    return std::exchange(waits_, {});
  }

 private:
  friend class TrainStageProgram;
  void add_wait(std::int64_t ns) {
    std::lock_guard lk(mu_);
    waits_.push_back(ns);
  }
  mutable std::mutex mu_;
  std::shared_ptr<const StepBatch> batch_;
  bool eval_ = false;
  std::map<int, std::unique_ptr<ReorderBuffer>> reorder_;
  std::vector<float> losses_;
  std::vector<std::int64_t> waits_;  // on a GPU: one per task
};

class TrainStageProgram final : public StageProgram {
 public:
  // `chunks`: this stage's chunks (owned by the caller, in model order). Gradients are scaled
  // by 1/M (the step's loss is the mean over microbatches).
  // `device`: where the chunks' parameters are and the stage's stream; the batch is moved
  // there task by task.
  TrainStageProgram(const WorkModel& m, int stage, std::vector<Chunk*> chunks,
                    std::shared_ptr<StageLink> link, StageDevice device = StageDevice({}));

  void begin_step(int step) override;
  Payload forward(TaskContext& ctx, int chunk, int mb, Payload input) override;
  Payload backward(TaskContext& ctx, int chunk, int mb, Payload grad) override;
  void weight_grad(TaskContext& ctx, int chunk, int mb) override;
  std::optional<std::size_t> input_bytes(const TaskId& consumer) const override;
  std::optional<std::int64_t> microbatch_size(int mb) const override;
  bool evaluating() const override { return eval_; }

 private:
  struct Work {  // one (chunk, microbatch) between its F and its last backward task
    torch::Tensor input, output, images;
    std::vector<torch::Tensor> grads;
    GradSink sink;
    WeightGradQueue queue;
  };
  Chunk& chunk(int c) const;
  Work& work(int c, int mb);
  void finish(int c, int mb);
  void settle(TaskContext& ctx);
  // Whether a task's device inputs are copied onto its stream (from_payload's `copy`).
  bool own_inputs(const TaskContext& ctx) const { return dev_.spec().gpu() && ctx.window() > 1; }

  const WorkModel& m_;
  int stage_;
  StageDevice dev_;
  std::map<int, Chunk*> chunks_;
  std::shared_ptr<StageLink> link_;
  std::shared_ptr<const StepBatch> batch_;  // the link's, for this step
  bool eval_ = false;                       // the link's, for this step
  std::mutex mu_;                           // guards works_
  std::map<std::pair<int, int>, std::unique_ptr<Work>> works_;
};

// Activations and gradients travel as the raw float32 bytes of a contiguous tensor; the
// payload keeps the tensor alive, and the receiver wraps the bytes without a copy. On a GPU the
// bytes are device memory and stay there (stages of one process share the device); the
// producer's task has completed on the device before its payload is handed on. With `copy`
// the receiver takes a copy made on its current stream: under the runtime's window its kernels
// may outlive the task, and memory of its own stream is freed behind them, where the
// producer's, returned to the producer's stream, could be reused before they ran.
Payload to_payload(const torch::Tensor& t);
torch::Tensor from_payload(const Payload& p, std::int64_t rows, std::int64_t cols,
                           torch::Device device = torch::kCPU, bool copy = false);

}  // namespace rrfp::train
