#pragma once
// A training run on the threaded runtime: the model's chunks spread over P stages (V each),
// one runtime step per optimizer step, then the global gradient norm over every stage, clipping,
// AdamW with warmup and cosine decay. Every quantity is computed in a fixed global order, so
// the parameters after K steps are bitwise the same for every hint, policy, limit, partition
// and dispatch order (semantics.md §6).
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/hint.hpp"
#include "dist/job.hpp"
#include "train/checkpoint.hpp"
#include "train/checkpoint_parts.hpp"
#include "train/corpus.hpp"
#include "train/device.hpp"
#include "train/image_text.hpp"
#include "train/model.hpp"
#include "train/options.hpp"
#include "train/stage_program.hpp"

namespace rrfp::train {

struct StepReport {
  int step = 0;
  double loss = 0, grad_norm = 0, lr = 0;
  std::int64_t tokens = 0;
  StepResult run;  // the runtime's measured step
  // On a GPU, each task's wait for its kernels after the host had enqueued them (ns).
  std::vector<std::int64_t> device_waits;
};

class Trainer {
 public:
  // The slowest write of a checkpoint a job's deadline allows for (save()).
  static constexpr double kSaveBytesPerSecond = 10e6;

  explicit Trainer(TrainOptions o);
  ~Trainer();

  StepReport step();
  // The mean loss over `batches` held-out batches of M microbatches per replica, each run
  // through the pipeline without gradients (every process of a job calls it); nullopt when
  // `stop` (a signal's number, set by a handler) became non-zero first on any process: it is
  // read between batches, so a stop request is honoured within one batch however many were
  // asked for. The gradients of the last step stay as they were. `after_batch` (if set) is
  // told how many batches are done after each (progress output on a long validation).
  std::optional<double> validation_loss(int batches, const std::atomic<int>* stop = nullptr,
                                        const std::function<void(int)>& after_batch = {});
  // Every parameter this process holds, in the model's global order (then TP rank), and its
  // name. In a multi-process job: those of the chunks it hosts.
  std::vector<torch::Tensor> parameters() const;
  std::vector<std::string> parameter_names() const;
  // Writes the step, parameters and optimizer state of the whole model (atomically; see
  // checkpoint.hpp). In a multi-process run every process calls it and rank 0 writes the file
  // (checkpoint_parts.hpp).
  void save(const std::string& path) const;
  // Continues from a checkpoint: the parameters, optimizer state and step it holds, so the
  // next steps are bitwise those of an uninterrupted run, on any pipeline layout of the same
  // TP size (in a multi-process run each process reads its own tensors from the file). Throws
  // InputError if it is refused. Returns how this run's options differ from the checkpoint's
  // (each names the option).
  std::vector<std::string> resume(const std::string& path);
  // Records `key` = `value` with the run's options in each checkpoint, compared by a resume as
  // they are: a caller's own option beside the trainer's (the validation's, which decide the
  // log's val_loss column).
  void record_option(const std::string& key, const nlohmann::json& value) {
    recorded_[key] = value;
  }
  const DataSource& data() const { return *data_; }
  const WorkModel& model() const { return m_; }
  // The running step's tasks ended by the ranks of this process, of those they have in all:
  // progress within a long step. Any thread, any time.
  Runtime::StepProgress step_progress() const { return runtime_->step_progress(); }
  int steps_done() const { return step_; }
  // The training loss of the last step done (trained, or the checkpoint's), if known.
  std::optional<double> last_loss() const { return last_loss_; }
  // After resume(): a whole-number option of the run that wrote the checkpoint (`steps`,
  // `eval_every`), if it says.
  std::optional<long long> checkpoint_option(const std::string& key) const {
    const auto it = checkpoint_run_.find(key);
    if (it == checkpoint_run_.end() || !it->is_number_integer()) return std::nullopt;
    return it->get<long long>();
  }
  // Chunk c of TP rank r (null when another process holds it).
  Chunk* chunk(int r, int c) const { return chunks_[r][c].get(); }

 private:
  double lr_at(int step) const;
  StepBatch replica_batch(int index, bool validation, std::int64_t* tokens = nullptr) const;
  StepResult run_pass(StepBatch batch, bool eval, std::vector<std::int64_t>* waits);
  CheckpointState checkpoint_state() const;
  double checkpoint_bytes() const;
  std::vector<std::string> job_parameter_names() const;
  void refuse_other_corpus() const;
  void refuse_other_checkpoint(const std::string& path, const CheckpointState& s) const;
  std::vector<ChunkTensors> local_chunks() const;
  void apply(double clip_coef, double lr);
  StageLink& link(int stage, int tp_rank) const { return *links_[stage * o_.runtime.tp + tp_rank]; }
  void step_loss_and_norm(StepReport& r);
  std::vector<std::vector<double>> endpoint_lists(
      const std::function<std::vector<double>(int stage, int tp_rank)>& local) const;
  void average_replicas();

  TrainOptions o_;
  nlohmann::json recorded_ = nlohmann::json::object();  // record_option's
  DeviceSpec dev_;
  std::vector<c10::Stream> partitions_;  // by stage, with `sm_partitions`
  WorkModel m_;
  Hint hint_;
  std::unique_ptr<DataSource> data_;
  std::vector<std::vector<std::unique_ptr<Chunk>>> chunks_;  // [tp rank][chunk]
  std::vector<std::shared_ptr<StageLink>> links_;            // by endpoint (null: hosted elsewhere)
  std::unique_ptr<Runtime> runtime_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;  // AdamW state, global order
  int step_ = 0;
  std::optional<double> last_loss_;
  nlohmann::json checkpoint_run_ = nlohmann::json::object();  // resume()'s: its run's options
  int runs_ = 0;  // runtime steps run, evaluation passes included
};

}  // namespace rrfp::train
