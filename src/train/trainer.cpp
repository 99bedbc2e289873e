#include "train/trainer.hpp"

#include <cmath>

#include "core/error.hpp"
#include "train/checkpoint.hpp"

namespace rrfp::train {

Trainer::Trainer(TrainOptions o) : o_(std::move(o)), m_(o_.pipe), hint_(make_hint(o_.hint, m_)) {
  if (o_.task == "image-text") {
    if (o_.max_images < 0) throw InputError("--max-images: must not be negative");
    o_.model.image_patches = ImageText::kPatches;
    o_.model.patch_dim = ImageText::kPatchDim;
    data_ = std::make_unique<ImageText>(o_.max_images);
  } else if (o_.task == "text") {
    data_ = std::make_unique<Corpus>(o_.data_dir, o_.window.max_len);
  } else {
    throw InputError("--task: expected text or image-text, got '" + o_.task + "'");
  }
  validate(o_.model);
  if (o_.window.min_len < 1 || o_.window.min_len > o_.window.max_len)
    throw InputError("--min-len: must be between 1 and --max-len (" +
                     std::to_string(o_.window.max_len) + "), got " +
                     std::to_string(o_.window.min_len));
  if (o_.window.max_len > o_.model.max_seq)
    throw InputError("--max-len: " + std::to_string(o_.window.max_len) +
                     " exceeds the model's --max-seq " + std::to_string(o_.model.max_seq));
  if (o_.steps < 0) throw InputError("--steps: must not be negative");
  for (int c = 0; c < m_.chunks(); ++c)
    chunks_.push_back(std::make_unique<Chunk>(o_.model, c, m_.chunks()));
  programs_.assign(m_.pp(), nullptr);
  ProgramFactory factory = [this](int stage, int) -> std::unique_ptr<StageProgram> {
    std::vector<Chunk*> mine;
    for (int c : m_.chunks_of(stage))
      mine.push_back(chunks_[c].get());
    auto p = std::make_unique<TrainStageProgram>(m_, stage, mine, &batch_);
    programs_[stage] = p.get();
    if (o_.wrap) return o_.wrap(std::move(p), stage);
    return p;
  };
  RuntimeOptions ro;
  ro.arbiter = o_.arbiter;
  ro.comm = o_.comm;
  ro.timeout_ms = o_.timeout_ms;
  runtime_ = std::make_unique<Runtime>(m_, hint_, factory, ro);
  for (const auto& p : parameters()) {
    exp_avg_.push_back(torch::zeros_like(p));
    exp_avg_sq_.push_back(torch::zeros_like(p));
  }
}

Trainer::~Trainer() = default;

std::vector<torch::Tensor> Trainer::parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& c : chunks_)
    out.insert(out.end(), c->params().begin(), c->params().end());
  return out;
}

std::vector<std::string> Trainer::parameter_names() const {
  std::vector<std::string> out;
  for (const auto& c : chunks_)
    out.insert(out.end(), c->names().begin(), c->names().end());
  return out;
}

double Trainer::lr_at(int step) const {
  const OptimizerOptions& o = o_.opt;
  if (step < o.warmup) return o.lr * (step + 1) / o.warmup;
  const double span = std::max(1, o_.steps - o.warmup);
  const double t = std::min(1.0, (step - o.warmup) / span);
  const double min_lr = o.lr * o.min_lr_ratio;
  return min_lr + 0.5 * (o.lr - min_lr) * (1 + std::cos(M_PI * t));
}

StepReport Trainer::step() {
  StepReport r;
  r.step = step_;
  batch_ = std::make_shared<const StepBatch>(
      data_->batch(o_.data_seed, step_, m_.microbatches(), o_.window, false));
  r.tokens = batch_->total_tokens();
  r.run = runtime_->run_step(step_);
  // The step's loss: the mean over microbatches, summed in microbatch order.
  const auto& losses = programs_[m_.stage_of(m_.chunks() - 1)]->losses();
  for (float l : losses)
    r.loss += l;
  r.loss /= losses.size();
  // Global gradient norm: per-parameter sums of squares, added in the model's global order.
  double sq = 0;
  for (int c = 0; c < m_.chunks(); ++c)
    for (const auto& g : programs_[m_.stage_of(c)]->grads(c))
      sq += g.pow(2).sum().item<double>();
  r.grad_norm = std::sqrt(sq);
  const double coef =
      o_.opt.clip > 0 && r.grad_norm > o_.opt.clip ? o_.opt.clip / (r.grad_norm + 1e-6) : 1.0;
  r.lr = lr_at(step_);
  apply(coef, r.lr);
  ++step_;
  return r;
}

// AdamW, elementwise, so partitioning cannot change a bit of it.
void Trainer::apply(double clip_coef, double lr) {
  torch::NoGradGuard no_grad;
  const OptimizerOptions& o = o_.opt;
  const double bc1 = 1 - std::pow(o.beta1, step_ + 1), bc2 = 1 - std::pow(o.beta2, step_ + 1);
  size_t k = 0;
  for (int c = 0; c < m_.chunks(); ++c) {
    auto& grads = programs_[m_.stage_of(c)]->grads(c);
    auto& params = chunks_[c]->params();
    for (size_t i = 0; i < params.size(); ++i, ++k) {
      torch::Tensor g = grads[i];
      if (clip_coef != 1.0) g = g * clip_coef;
      exp_avg_[k].mul_(o.beta1).add_(g, 1 - o.beta1);
      exp_avg_sq_[k].mul_(o.beta2).addcmul_(g, g, 1 - o.beta2);
      const auto denom = (exp_avg_sq_[k] / bc2).sqrt_().add_(o.eps);
      params[i].mul_(1 - lr * o.weight_decay);
      params[i].addcdiv_(exp_avg_[k], denom, -lr / bc1);
    }
  }
}

double Trainer::validation_loss(int batches) {
  torch::NoGradGuard no_grad;
  double sum = 0;
  int n = 0;
  for (int b = 0; b < batches; ++b) {
    const StepBatch vb = data_->batch(o_.data_seed, b, m_.microbatches(), o_.window, true);
    for (int mb = 0; mb < vb.microbatches(); ++mb) {
      torch::Tensor x = vb.tokens[mb];
      const torch::Tensor images = vb.images.empty() ? torch::Tensor() : vb.images[mb];
      for (const auto& c : chunks_)
        x = c->forward(x, vb.targets[mb], nullptr, c->first() ? images : torch::Tensor());
      sum += x.item<double>();
      ++n;
    }
  }
  return sum / n;
}

}  // namespace rrfp::train

namespace rrfp::train {

void Trainer::save(const std::string& path) const {
  CheckpointState s;
  s.model = o_.model;
  s.step = step_;
  s.names = parameter_names();
  s.params = parameters();
  s.exp_avg = exp_avg_;
  s.exp_avg_sq = exp_avg_sq_;
  save_checkpoint(path, s);
}

void Trainer::resume(const std::string& path) {
  CheckpointState s;
  s.model = o_.model;
  s.names = parameter_names();
  s.params = parameters();
  s.exp_avg = exp_avg_;
  s.exp_avg_sq = exp_avg_sq_;
  load_checkpoint(path, s);  // fills the tensors in place
  step_ = s.step;
}

}  // namespace rrfp::train
