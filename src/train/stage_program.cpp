#include "train/stage_program.hpp"

#include <ATen/Parallel.h>

#include "core/error.hpp"
#include "train/tp_collectives.hpp"

namespace rrfp::train {

void ReorderBuffer::put(int mb, std::vector<torch::Tensor> grads) {
  pending_.at(mb) = std::move(grads);
  torch::NoGradGuard no_grad;
  while (next_ < static_cast<int>(pending_.size()) && pending_[next_]) {
    auto& g = *pending_[next_];
    if (sum_.empty()) {
      sum_ = std::move(g);  // the first term as is: 0 + x would turn -0.0 into +0.0
      // The sums are added to in place, so each must own its storage: autograd may hand two
      // parameters one tensor (both terms of a + b) or an expanded one (a parameter used
      // through sum()). A copy keeps the bits.
      for (size_t i = 0; i < sum_.size(); ++i) {
        if (!sum_[i].defined()) continue;
        bool shared = !sum_[i].is_non_overlapping_and_dense();
        for (size_t j = 0; j < i && !shared; ++j)
          shared = sum_[j].defined() && sum_[j].storage().is_alias_of(sum_[i].storage());
        if (shared) sum_[i] = sum_[i].clone(at::MemoryFormat::Contiguous);
      }
    } else {
      for (size_t i = 0; i < g.size(); ++i)
        sum_[i].add_(g[i]);
    }
    pending_[next_].reset();
    ++next_;
  }
}

Payload to_payload(const torch::Tensor& t) {
  auto owned = std::make_shared<torch::Tensor>(t.detach().contiguous());
  const auto* data = static_cast<const std::byte*>(owned->data_ptr());
  const std::size_t bytes = owned->numel() * owned->element_size();
  return Payload(std::shared_ptr<const void>(owned, data), data, bytes);
}

torch::Tensor from_payload(const Payload& p, std::int64_t rows, std::int64_t cols,
                           torch::Device device, bool copy) {
  auto owner = p.owner();
  torch::Tensor t = torch::from_blob(
      const_cast<std::byte*>(p.data()), {rows, cols}, [owner](void*) mutable { owner.reset(); },
      torch::TensorOptions().dtype(torch::kFloat32).device(device));
  return copy ? t.clone() : t;
}

TrainStageProgram::TrainStageProgram(const WorkModel& m, int stage, std::vector<Chunk*> chunks,
                                     std::shared_ptr<StageLink> link, StageDevice device)
    : m_(m), stage_(stage), dev_(std::move(device)), link_(std::move(link)) {
  const auto& ids = m.chunks_of(stage);
  if (chunks.size() != ids.size()) throw Error("train: wrong number of chunks for a stage");
  for (size_t i = 0; i < ids.size(); ++i)
    chunks_[ids[i]] = chunks[i];
}

Chunk& TrainStageProgram::chunk(int c) const {
  return *chunks_.at(c);
}

TrainStageProgram::Work& TrainStageProgram::work(int c, int mb) {
  std::lock_guard lk(mu_);
  auto& w = works_[{c, mb}];
  if (!w) w = std::make_unique<Work>();
  return *w;
}

void TrainStageProgram::begin_step(int) {
  // The stage's thread takes torch's thread count (torch.get_num_threads() on the caller's
  // thread) rather than OpenMP's machine default: reductions that split by thread count
  // then round as on the thread that made the reference.
  at::init_num_threads();
  batch_ = link_->batch();
  eval_ = link_->eval();
  if (!batch_ || batch_->microbatches() != m_.microbatches())
    throw Error("train: the step's batch has the wrong number of microbatches");
  std::lock_guard lk(mu_);
  works_.clear();
  link_->losses_.assign(m_.microbatches(), 0.0f);
  if (eval_) return;  // the training step's gradients stay for the trainer
  link_->reorder_.clear();
  for (const auto& [c, ch] : chunks_)
    link_->reorder_[c] = std::make_unique<ReorderBuffer>(m_.microbatches());
}

std::optional<std::size_t> TrainStageProgram::input_bytes(const TaskId& consumer) const {
  const auto batch = link_->batch();
  if (!batch || consumer.kind == Kind::W) return std::nullopt;
  if (consumer.kind == Kind::B && link_->eval()) return 0;  // nothing flows back
  const int d = chunk(consumer.chunk).d_model();
  return static_cast<std::size_t>(batch->length(consumer.mb) * d) * sizeof(float);
}

// The sequence length (image tokens and text), known once the trainer has set the batch.
std::optional<std::int64_t> TrainStageProgram::microbatch_size(int mb) const {
  const auto batch = link_->batch();
  if (!batch || mb >= batch->microbatches()) return std::nullopt;
  return batch->length(mb);
}

// Training's forward keeps the graph (and the linear layers' inputs for W); an evaluation
// pass's runs the same computation without it, so its loss is bitwise what a plain forward of
// the chunks in one thread gives.
Payload TrainStageProgram::forward(TaskContext& ctx, int c, int mb, Payload input) {
  TpScope scope(ctx);  // TP's all-reduces run in the forward
  StageDevice::Scope on_device(dev_);
  const torch::Device dev = dev_.device();
  Chunk& ch = chunk(c);
  torch::Tensor x =
      ch.first() ? batch_->tokens[mb].to(dev)
                 : from_payload(input, batch_->length(mb), ch.d_model(), dev, own_inputs(ctx));
  const torch::Tensor images =
      ch.first() && !batch_->images.empty() ? batch_->images[mb].to(dev) : torch::Tensor();
  const torch::Tensor targets = ch.last() ? batch_->targets[mb].to(dev) : batch_->targets[mb];
  torch::Tensor y;
  if (eval_) {
    torch::NoGradGuard no_grad;
    y = ch.forward(x, targets, nullptr, images);
  } else {
    Work& w = work(c, mb);
    w.grads.assign(ch.params().size(), torch::Tensor());
    w.sink.grads = &w.grads;
    w.sink.queue = m_.split() ? &w.queue : nullptr;
    w.input = ch.first() ? x : x.set_requires_grad(true);
    // The images are a leaf the backward asks for: else no tensor it asks for lies below the
    // patch embedding, whose node autograd then skips, and with it that layer's gradients.
    if (images.defined()) w.images = images.detach().requires_grad_(true);
    torch::AutoGradMode grad_on(true);
    y = w.output = ch.forward(w.input, targets, &w.sink, w.images);
  }
  Payload out;
  if (ch.last())
    link_->losses_[mb] = y.item<float>();
  else
    out = to_payload(y);
  settle(ctx);
  return out;
}

Payload TrainStageProgram::backward(TaskContext& ctx, int c, int mb, Payload grad) {
  if (eval_) return {};  // an evaluation pass: nothing to differentiate
  TpScope scope(ctx);    // CPU autograd runs the backward graph on this thread
  // CUDA autograd runs it on torch's device thread, on the streams the forward ran on.
  StageDevice::Scope on_device(dev_);
  const torch::Device dev = dev_.device();
  Chunk& ch = chunk(c);
  Work& w = work(c, mb);
  // The step's loss is the mean over microbatches: the last chunk starts from 1/M.
  const torch::Tensor g =
      ch.last() ? torch::full({}, 1.0f / static_cast<float>(m_.microbatches()),
                              torch::TensorOptions().device(dev))
                : from_payload(grad, batch_->length(mb), ch.d_model(), dev, own_inputs(ctx));
  std::vector<torch::Tensor> inputs;
  std::vector<int> which;  // parameter index of each input after the first (or -1: the input)
  if (!ch.first()) {
    inputs.push_back(w.input);
    which.push_back(-1);
  }
  if (w.images.defined()) {
    inputs.push_back(w.images);
    which.push_back(-2);  // asked for to run the patch embedding's node; its gradient unused
  }
  for (int i = 0; i < static_cast<int>(ch.params().size()); ++i)
    if (!ch.is_linear(i)) {
      inputs.push_back(ch.params()[i]);
      which.push_back(i);
    }
  auto out = torch::autograd::grad({w.output}, inputs, {g}, /*retain_graph=*/false,
                                   /*create_graph=*/false, /*allow_unused=*/true);
  Payload result;
  for (size_t k = 0; k < out.size(); ++k) {
    if (which[k] == -1)
      result = to_payload(out[k]);
    else if (which[k] >= 0)
      w.grads[which[k]] = out[k];
  }
  w.input = torch::Tensor();
  w.images = torch::Tensor();
  w.output = torch::Tensor();
  if (!m_.split()) finish(c, mb);
  settle(ctx);
  return result;
}

void TrainStageProgram::weight_grad(TaskContext& ctx, int c, int mb) {
  if (eval_) return;
  StageDevice::Scope on_device(dev_);
  Work& w = work(c, mb);
  torch::NoGradGuard no_grad;
  w.queue.run();
  finish(c, mb);
  settle(ctx);
}

// The task's kernels are queued. On the CPU it is done; on a GPU it is done once they have
// run: with the runtime's window, the runtime completes it then (and starts the stage's next
// task meanwhile); else the stage waits here.
void TrainStageProgram::settle(TaskContext& ctx) {
  if (!dev_.spec().gpu()) return;
  if (ctx.window() > 1)
    ctx.defer(dev_.pending());
  else
    link_->add_wait(dev_.complete(&ctx));
}

// Hands the microbatch's gradients to the reorder buffer and frees what it held.
void TrainStageProgram::finish(int c, int mb) {
  std::unique_ptr<Work> done;
  {
    std::lock_guard lk(mu_);
    auto it = works_.find({c, mb});
    done = std::move(it->second);
    works_.erase(it);
  }
  for (size_t i = 0; i < done->grads.size(); ++i)
    if (!done->grads[i].defined())
      done->grads[i] = torch::zeros_like(chunk(c).params()[i]);  // unused this microbatch
  link_->reorder_.at(c)->put(mb, std::move(done->grads));
}

}  // namespace rrfp::train
