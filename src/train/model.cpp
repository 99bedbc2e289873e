#include "train/model.hpp"

#include <cmath>
#include <mutex>

#include "core/error.hpp"
#include "train/tp_collectives.hpp"

namespace rrfp::train {

void check_blocks(const GptConfig& c, int chunks) {
  if (c.layers < chunks)
    throw InputError("`layers`: the model has " + std::to_string(c.layers) +
                     " blocks, fewer than the " + std::to_string(chunks) +
                     " pipeline chunks (P*V); give it at least one block per chunk");
}

void validate(const GptConfig& c) {
  // Ranges that keep every size computed from them (parameter counts, window lengths) in range.
  auto within = [](const char* name, int v, int hi) {
    if (v < 1 || v > hi)
      throw InputError(std::string(name) + ": must be between 1 and " + std::to_string(hi) +
                       ", got " + std::to_string(v));
  };
  // The data's tokens are bytes: a smaller vocabulary failed the first forward in LibTorch's
  // words ("index out of range in self").
  if (c.vocab < 256 || c.vocab > (1 << 20))
    throw InputError("`vocab`: must be between 256 (the data's tokens are bytes) and " +
                     std::to_string(1 << 20) + ", got " + std::to_string(c.vocab));
  within("`d_model`", c.d_model, 1 << 16);
  within("`heads`", c.heads, 1 << 12);
  within("`layers`", c.layers, 1 << 12);
  within("`max_seq`", c.max_seq, kMaxSeq);
  if (c.d_model % c.heads != 0)
    throw InputError("`d_model`: " + std::to_string(c.d_model) + " is not a multiple of `heads` " +
                     std::to_string(c.heads));
}

Chunk::Chunk(const GptConfig& cfg, int chunk, int chunks, int tp_rank, int tp_size,
             torch::Device device)
    : cfg_(cfg),
      device_(device),
      first_(chunk == 0),
      last_(chunk == chunks - 1),
      tp_rank_(tp_rank),
      tp_size_(tp_size) {
  validate(cfg);
  if (tp_size < 1 || cfg.heads % tp_size != 0)
    throw InputError("`tp`: " + std::to_string(tp_size) + " does not divide `heads` " +
                     std::to_string(cfg.heads) + " (each rank takes whole attention heads)");
  check_blocks(cfg, chunks);
  // An even split of the blocks; the first chunks take the remainder.
  const int base = cfg.layers / chunks, extra = cfg.layers % chunks;
  const int lo = chunk * base + std::min(chunk, extra);
  const int hi = lo + base + (chunk < extra ? 1 : 0);
  const int d = cfg.d_model;
  torch::NoGradGuard no_grad;
  // The initialization draws from LibTorch's process-wide generator, seeded per layer: chunks
  // built by several threads at once (ranks of an in-process job) take turns.
  static std::mutex init_mu;
  std::lock_guard init_lock(init_mu);
  if (first_) {
    torch::manual_seed(cfg.seed * 1000003ULL);
    wte_ = add("embed.tokens", torch::randn({cfg.vocab, d}) * 0.02, false);
    wpe_ = add("embed.positions", torch::randn({cfg.max_seq, d}) * 0.02, false);
    if (cfg.image_patches > 0) {
      patch_ = add_linear("vision.patch", d, cfg.patch_dim);
      patch_pos_ = add("vision.positions", torch::randn({cfg.image_patches, d}) * 0.02, false);
      vln_ = add_norm("vision.ln");
      vfc1_ = add_linear("vision.fc1", 4 * d, d);
      vfc2_ = add_linear("vision.fc2", d, 4 * d);
    }
  }
  for (int l = lo; l < hi; ++l) {
    torch::manual_seed(cfg.seed * 1000003ULL + 1 + l);
    const std::string p = "block" + std::to_string(l) + ".";
    Block b{};
    b.ln1 = add_norm(p + "ln1");
    b.qkv = add_linear(p + "qkv", 3 * d, d, {TpShard::Rows, 3});
    b.proj = add_linear(p + "proj", d, d, {TpShard::Columns});
    b.ln2 = add_norm(p + "ln2");
    b.fc1 = add_linear(p + "fc1", 4 * d, d, {TpShard::Rows});
    b.fc2 = add_linear(p + "fc2", d, 4 * d, {TpShard::Columns});
    blocks_.push_back(b);
  }
  if (last_) {
    torch::manual_seed(cfg.seed * 1000003ULL + 1 + cfg.layers);
    lnf_ = add_norm("head.ln");
    head_ = add_linear("head.out", cfg.vocab, d);
  }
}

int Chunk::add(const std::string& name, const torch::Tensor& t, bool linear, TpShard shard) {
  const int i = static_cast<int>(params_.size());
  shard_.push_back(shard);
  params_.push_back(cut(i, t).contiguous().clone().to(device_).set_requires_grad(true));
  names_.push_back(name);
  linear_.push_back(linear);
  return i;
}

torch::Tensor Chunk::cut(int i, const torch::Tensor& full) const {
  const TpShard s = shard_[i];
  const int t = tp_size_, r = tp_rank_;
  if (t == 1 || s.kind == TpShard::Replicated) return full;
  if (s.kind == TpShard::Columns) return full.narrow(1, r * (full.size(1) / t), full.size(1) / t);
  const int64_t out = full.size(0);
  auto g = full.reshape({s.groups, out / s.groups, -1});
  const int64_t part = g.size(1) / t;
  auto rows = g.narrow(1, r * part, part).reshape({out / t, -1});
  return full.dim() == 1 ? rows.reshape({out / t}) : rows;
}

int Chunk::add_linear(const std::string& name, int out, int in, TpShard shard) {
  // Drawn whole, as with T = 1, then cut: every T starts from the same model.
  const int wi =
      add(name + ".weight", torch::randn({out, in}) * (1.0 / std::sqrt(in)), true, shard);
  add(name + ".bias", torch::zeros({out}), true, shard.kind == TpShard::Rows ? shard : TpShard{});
  return wi;
}

int Chunk::add_norm(const std::string& name) {
  const int w = add(name + ".weight", torch::ones({cfg_.d_model}), false);
  add(name + ".bias", torch::zeros({cfg_.d_model}), false);
  return w;
}

// One pre-LN block. With T ranks (Megatron) it runs this rank's heads and MLP units, and the
// partial outputs of the row-parallel layers are summed over the group; a row-parallel bias
// enters on rank 0 only, so the sum holds it once (its gradient, that of the summed output, is
// the same on every rank). With T = 1 the collectives are not there at all.
torch::Tensor Chunk::block(const Block& b, const torch::Tensor& x, GradSink* sink) const {
  const auto& P = params_;
  const int64_t n = x.size(0), d = cfg_.d_model, hd = d / cfg_.heads;
  const int64_t h = cfg_.heads / tp_size_, dl = h * hd;
  const bool tp = tp_size_ > 1;
  auto enter = [&](const torch::Tensor& t) { return tp ? tp_enter(t) : t; };
  auto exit = [&](const torch::Tensor& t) { return tp ? tp_exit(t) : t; };
  auto once = [&](const torch::Tensor& bias) {
    return tp_rank_ == 0 ? bias : torch::zeros_like(bias);
  };
  auto h1 = enter(torch::layer_norm(x, {d}, P[b.ln1], P[b.ln1 + 1]));
  auto qkv = deferred_linear(h1, P[b.qkv], P[b.qkv + 1], sink, b.qkv);
  auto parts = qkv.chunk(3, 1);
  auto heads = [&](const torch::Tensor& t) { return t.reshape({n, h, hd}).transpose(0, 1); };
  auto q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
  auto scores = q.matmul(k.transpose(1, 2)) / std::sqrt(static_cast<double>(hd));
  auto mask = torch::ones({n, n}, x.options().dtype(torch::kBool)).triu(1);
  auto att = scores.masked_fill(mask, -std::numeric_limits<float>::infinity()).softmax(-1);
  auto y = att.matmul(v).transpose(0, 1).reshape({n, dl});
  auto x1 = x + exit(deferred_linear(y, P[b.proj], once(P[b.proj + 1]), sink, b.proj));
  auto h2 = enter(torch::layer_norm(x1, {d}, P[b.ln2], P[b.ln2 + 1]));
  auto m = torch::gelu(deferred_linear(h2, P[b.fc1], P[b.fc1 + 1], sink, b.fc1));
  return x1 + exit(deferred_linear(m, P[b.fc2], once(P[b.fc2 + 1]), sink, b.fc2));
}

// Patch embedding, learned patch positions, one pre-LN MLP block: [n, patches, patch_dim] ->
// [n * patches, d], image after image.
torch::Tensor Chunk::encode_images(const torch::Tensor& images, GradSink* sink) const {
  const auto& P = params_;
  const int64_t n = images.size(0), p = images.size(1), d = cfg_.d_model;
  auto v = deferred_linear(images.reshape({n * p, images.size(2)}), P[patch_], P[patch_ + 1], sink,
                           patch_);
  v = v + P[patch_pos_].repeat({n, 1});
  auto h = torch::layer_norm(v, {d}, P[vln_], P[vln_ + 1]);
  auto m = torch::gelu(deferred_linear(h, P[vfc1_], P[vfc1_ + 1], sink, vfc1_));
  return v + deferred_linear(m, P[vfc2_], P[vfc2_ + 1], sink, vfc2_);
}

torch::Tensor Chunk::forward(const torch::Tensor& input, const torch::Tensor& targets,
                             GradSink* sink, const torch::Tensor& images) const {
  torch::Tensor x = input;
  if (first_) {
    x = torch::embedding(params_[wte_], input);
    if (images.defined() && images.size(0) > 0) {
      if (patch_ < 0) throw Error("image input to a text-only model");
      x = torch::cat({encode_images(images, sink), x}, 0);
    }
    const int64_t n = x.size(0);
    if (n > cfg_.max_seq)
      throw InputError("sequence of " + std::to_string(n) + " tokens exceeds `max_seq` " +
                       std::to_string(cfg_.max_seq));
    x = x + params_[wpe_].narrow(0, 0, n);
  }
  for (const Block& b : blocks_)
    x = block(b, x, sink);
  if (!last_) return x;
  auto h = torch::layer_norm(x, {cfg_.d_model}, params_[lnf_], params_[lnf_ + 1]);
  auto logits = deferred_linear(h, params_[head_], params_[head_ + 1], sink, head_);
  return torch::nn::functional::cross_entropy(logits, targets);
}

}  // namespace rrfp::train
