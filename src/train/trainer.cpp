#include "train/trainer.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/fnv.hpp"
#include "core/printable.hpp"
#include "dist/replica_sum.hpp"

namespace rrfp::train {

// In a job, what this process's own machine decides (its devices, the hint file, the corpus)
// is agreed on (agree_on_input): a refusal on one process alone left the others waiting in
// their next collective until --timeout, and its line unsaid. The memory checks are
// collectives, agreed by themselves.
Trainer::Trainer(TrainOptions o) : o_(std::move(o)), m_(o_.pipe) {
  agree_on_input(o_.job, [&] {
    validate(o_);
    // Before the memory checks: more chunks than blocks was refused as memory the pipeline's
    // many stages' activations would take, naming every flag but --pp.
    check_blocks(o_.model, m_.chunks());
  });
  // Before the memory checks too, which scale by `dp`: a `dp` the job's processes cannot hold
  // was refused as the memory its replicas would take, naming --microbatches.
  if (o_.job) o_.job->set_layout(JobLayout{m_.pp(), o_.runtime.tp, o_.dp});
  agree_on_input(o_.job, [&] {
    dev_ = parse_device(o_.device, o_.dtype, o_.completion);
    hint_ = make_hint(o_.hint, m_);
  });
  check_activations(o_, m_, hint_);  // before the corpus is read
  make_deterministic(dev_, o_.deterministic);
  if (o_.sm_partitions) partitions_ = partition_source()(dev_.device, m_.pp());
  if (o_.task == "image-text") {
    o_.model.image_patches = ImageText::kPatches;
    o_.model.patch_dim = ImageText::kPatchDim;
    data_ = std::make_unique<ImageText>(o_.max_images);
  } else {
    agree_on_input(o_.job,
                   [&] { data_ = std::make_unique<Corpus>(o_.data_dir, o_.window.max_len); });
    refuse_other_corpus();
  }
  const int t = o_.runtime.tp;
  Hosting hosting;
  std::vector<char> hosted(static_cast<size_t>(m_.pp()) * t, 1);  // by endpoint
  if (o_.job) {
    hosting = o_.job->hosting();
    hosted.assign(hosted.size(), 0);
    hosted[o_.job->endpoint()] = 1;
  } else {
    hosting = in_process_hosting(m_.pp() * t);
  }
  chunks_.resize(t);
  for (int r = 0; r < t; ++r)
    for (int c = 0; c < m_.chunks(); ++c)
      chunks_[r].push_back(
          hosted[m_.stage_of(c) * t + r]
              ? std::make_unique<Chunk>(o_.model, c, m_.chunks(), r, t, dev_.device)
              : nullptr);
  links_.resize(hosted.size());
  ProgramFactory factory = [this, t](int stage, int r) -> std::unique_ptr<StageProgram> {
    std::vector<Chunk*> mine;
    for (int c : m_.chunks_of(stage))
      mine.push_back(chunk(r, c));
    auto& link = links_[stage * t + r];
    link = std::make_shared<StageLink>();
    auto p = std::make_unique<TrainStageProgram>(
        m_, stage, mine, link,
        StageDevice(dev_, partitions_.empty() ? std::nullopt
                                              : std::optional<c10::Stream>(partitions_[stage])));
    if (o_.wrap) return o_.wrap(std::move(p), stage, r);
    return p;
  };
  runtime_ = std::make_unique<Runtime>(m_, hint_, factory, o_.runtime, std::move(hosting));
  for (const auto& p : parameters()) {
    exp_avg_.push_back(torch::zeros_like(p));
    exp_avg_sq_.push_back(torch::zeros_like(p));
  }
}

Trainer::~Trainer() = default;

std::vector<torch::Tensor> Trainer::parameters() const {
  std::vector<torch::Tensor> out;
  for (int c = 0; c < m_.chunks(); ++c)
    for (int r = 0; r < o_.runtime.tp; ++r)
      if (Chunk* ch = chunk(r, c)) out.insert(out.end(), ch->params().begin(), ch->params().end());
  return out;
}

std::vector<std::string> Trainer::parameter_names() const {
  std::vector<std::string> out;
  for (int c = 0; c < m_.chunks(); ++c)
    for (int r = 0; r < o_.runtime.tp; ++r)
      if (Chunk* ch = chunk(r, c)) {
        for (const auto& n : ch->names())
          out.push_back(o_.runtime.tp > 1 ? n + "@tp" + std::to_string(r) : n);
      }
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

// Batch `index` of the training or held-out stream, cut for this replica: a batch holds M
// microbatches per replica, replica d taking the d-th M of them. `tokens`: every replica's.
StepBatch Trainer::replica_batch(int index, bool validation, std::int64_t* tokens) const {
  const int mbs = m_.microbatches();
  StepBatch global = data_->batch(o_.data_seed, index, mbs * o_.dp, o_.window, validation);
  if (tokens) *tokens = global.total_tokens();
  if (o_.dp == 1) return global;
  StepBatch mine;
  const int lo = o_.job->replica() * mbs;
  for (int i = lo; i < lo + mbs; ++i) {
    mine.tokens.push_back(global.tokens[i]);
    mine.targets.push_back(global.targets[i]);
    if (!global.images.empty()) mine.images.push_back(global.images[i]);
  }
  return mine;
}

// One step of the runtime over `batch`. Runtime steps are numbered in the order they run
// (a stage keeps a faster peer's message only for the step after its own), so evaluation
// passes take numbers of their own between the training steps.
StepResult Trainer::run_pass(StepBatch batch, bool eval, std::vector<std::int64_t>* waits) {
  auto shared = std::make_shared<const StepBatch>(std::move(batch));
  for (auto& link : links_)
    if (link) link->set_batch(shared, eval);
  StepResult res = runtime_->run_step(runs_++);
  for (auto& link : links_)
    if (link) {
      auto w = link->take_waits();
      if (waits) waits->insert(waits->end(), w.begin(), w.end());
    }
  return res;
}

StepReport Trainer::step() {
  StepReport r;
  r.step = step_;
  StepBatch batch = replica_batch(step_, false, &r.tokens);  // the job's throughput
  r.run = run_pass(std::move(batch), false, &r.device_waits);
  if (o_.dp > 1) average_replicas();
  step_loss_and_norm(r);
  const double coef =
      o_.opt.clip > 0 && r.grad_norm > o_.opt.clip ? o_.opt.clip / (r.grad_norm + 1e-6) : 1.0;
  r.lr = lr_at(step_);
  apply(coef, r.lr);
  // The update ran on this thread's stream; the stages' streams read the parameters next.
  complete_current_stream(dev_);
  ++step_;
  return r;
}

// The step's loss (the mean over microbatches, summed in microbatch order) and the global
// gradient norm: per-parameter sums of squares added in the model's global order, a sharded
// parameter's TP shards in rank order, a replicated one once (from TP rank 0). Every endpoint
// contributes its list; in a multi-process job the lists travel through the job, so the sum
// is the in-process one, bit for bit.
void Trainer::step_loss_and_norm(StepReport& r) {
  const int t = o_.runtime.tp, last_stage = m_.stage_of(m_.chunks() - 1);
  auto local_list = [&](int stage, int rank) {
    std::vector<double> v;
    StageLink* p = &link(stage, rank);
    if (stage == last_stage && rank == 0) {
      double loss = 0;
      for (float l : p->losses())
        loss += l;
      v.push_back(loss / p->losses().size());
    }
    // Per chunk: the parameter count, then (sum of squares, sharded) per parameter.
    for (int c : m_.chunks_of(stage)) {
      const auto& grads = p->grads(c);
      v.push_back(static_cast<double>(grads.size()));
      for (size_t i = 0; i < grads.size(); ++i) {
        v.push_back(grads[i].pow(2).sum().item<double>());
        v.push_back(chunk(rank, c)->sharded(static_cast<int>(i)) ? 1 : 0);
      }
    }
    return v;
  };
  // Replica 0's lists give the norm (after the data-parallel average every replica's
  // gradients are equal).
  const size_t per = static_cast<size_t>(m_.pp()) * t,
               loss_at = static_cast<size_t>(last_stage) * t;
  const std::vector<std::vector<double>> lists = endpoint_lists(local_list);
  // The mean over every replica's microbatches: the replicas' means, in replica order.
  r.loss = lists[loss_at][0];
  for (int d = 1; d < o_.dp; ++d)
    r.loss += lists[d * per + loss_at][0];
  if (o_.dp > 1) r.loss /= o_.dp;
  last_loss_ = r.loss;
  std::vector<size_t> pos(per, 0);
  pos[loss_at] = 1;
  double sq = 0;
  for (int c = 0; c < m_.chunks(); ++c) {
    const size_t e0 = static_cast<size_t>(m_.stage_of(c)) * t;
    const auto n = static_cast<size_t>(lists[e0].at(pos[e0]));
    for (int k = 0; k < t; ++k)
      ++pos[e0 + k];  // every rank's count is n
    for (size_t i = 0; i < n; ++i)
      for (int k = 0; k < t; ++k) {
        const size_t e = e0 + k;
        const double v = lists[e].at(pos[e]), is_sharded = lists[e].at(pos[e] + 1);
        pos[e] += 2;
        if (k == 0 || is_sharded != 0) sq += v;
      }
  }
  r.grad_norm = std::sqrt(sq);
}

// The data-parallel gradient: every replica's sum for each local chunk, added in replica
// order and divided by DP, so every replica holds the same bits.
void Trainer::average_replicas() {
  torch::NoGradGuard no_grad;
  const int e = o_.job->endpoint(), t = o_.runtime.tp;
  StageLink* p = &link(e / t, e % t);
  for (int c : m_.chunks_of(e / t)) {
    auto& grads = p->grads(c);
    std::vector<float> flat;
    for (const auto& g : grads) {
      const auto* d = g.contiguous().data_ptr<float>();
      flat.insert(flat.end(), d, d + g.numel());
    }
    dp_sum(*o_.job, flat);
    size_t off = 0;
    for (auto& g : grads) {
      auto s = torch::from_blob(flat.data() + off, g.sizes(), torch::kFloat32);
      g = s / static_cast<float>(o_.dp);
      off += static_cast<size_t>(g.numel());
    }
  }
}

// AdamW, elementwise, so partitioning cannot change a bit of it.
void Trainer::apply(double clip_coef, double lr) {
  torch::NoGradGuard no_grad;
  const OptimizerOptions& o = o_.opt;
  const double bc1 = 1 - std::pow(o.beta1, step_ + 1), bc2 = 1 - std::pow(o.beta2, step_ + 1);
  size_t k = 0;
  for (int c = 0; c < m_.chunks(); ++c)
    for (int r = 0; r < o_.runtime.tp; ++r) {
      Chunk* ch = chunk(r, c);
      if (!ch) continue;
      auto& grads = link(m_.stage_of(c), r).grads(c);
      auto& params = ch->params();
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

// By job rank, replica d's endpoint e at entry d * P * T + e: gathered over a job, or made for
// each endpoint here in turn.
std::vector<std::vector<double>> Trainer::endpoint_lists(
    const std::function<std::vector<double>(int stage, int tp_rank)>& local) const {
  const int t = o_.runtime.tp;
  if (o_.job) {
    const int e = o_.job->endpoint();
    return o_.job->all_gather(local(e / t, e % t));
  }
  std::vector<std::vector<double>> lists;
  for (int s = 0; s < m_.pp(); ++s)
    for (int k = 0; k < t; ++k)
      lists.push_back(local(s, k));
  return lists;
}

// Each held-out batch runs through the pipeline as an evaluation pass (StageLink), so TP
// ranks and the processes of a job take part as in training. The losses are added in batch,
// then microbatch order, as one thread running every chunk would add them: the mean is bitwise
// that loop's, on any layout with the same TP size and data-parallel degree.
std::optional<double> Trainer::validation_loss(int batches, const std::atomic<int>* stop,
                                               const std::function<void(int)>& after_batch) {
  const int t = o_.runtime.tp, mbs = m_.microbatches(), last_stage = m_.stage_of(m_.chunks() - 1);
  const size_t per = static_cast<size_t>(m_.pp()) * t,
               loss_at = static_cast<size_t>(last_stage) * t;
  double sum = 0;
  for (int b = 0; b < batches; ++b) {
    double stopping = stop ? stop->load() : 0;
    if (o_.job) stopping = max_over_job(*o_.job, stopping);  // every process stops, or none
    if (stopping != 0) return std::nullopt;
    run_pass(replica_batch(b, true), true, nullptr);
    const auto lists = endpoint_lists([&](int stage, int rank) {
      std::vector<double> mine;
      if (stage == last_stage && rank == 0) {
        const auto& losses = link(stage, rank).losses();
        mine.assign(losses.begin(), losses.end());
      }
      return mine;
    });
    for (int d = 0; d < o_.dp; ++d)
      for (double l : lists.at(d * per + loss_at))
        sum += l;
    if (after_batch) after_batch(b + 1);
  }
  return sum / (static_cast<double>(batches) * mbs * o_.dp);
}

// Each process reads `data` for itself, and one path may hold other files on each node: the
// first stage then trained on one text and the last scored it against another, with no word.
void Trainer::refuse_other_corpus() const {
  if (!o_.job) return;
  const std::string contents = data_->contents();
  const double mine = job_digest(fnv1a(kFnv1aOffset, contents));
  const Differing d = differing_over_job(*o_.job, std::span(&mine, 1)).at(0);
  if (!d.other.empty())
    throw InputError("`data`: every process must read the same corpus; '" +
                     printable(o_.data_dir, 100) + "' holds other files on rank(s) " +
                     rank_list(d.other) + " than on rank " + std::to_string(d.first) +
                     " (each process reads its own copy, from its node; here: " + contents + ")");
}

}  // namespace rrfp::train
