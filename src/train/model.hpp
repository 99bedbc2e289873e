#pragma once
// A decoder-only transformer LM (pre-LayerNorm blocks of causal self-attention and MLP),
// partitioned by layers into P*V chunks: chunk 0 also holds the token and position
// embeddings, the last chunk the final norm, the LM head and the loss. A microbatch is one
// sequence of variable length L; activations between chunks are [L, d_model] float32.
//
// Parameters are initialized per layer from (seed, layer), so every partition of the same
// model starts from bitwise the same weights.
//
// Tensor parallelism (Megatron-style, T ranks): each block's attention heads and MLP hidden
// units are split over the ranks. qkv and fc1 are column-parallel (a rank holds its heads' /
// units' rows), proj and fc2 row-parallel (the matching columns); the partial outputs are
// summed by an all-reduce in forward, and the column-parallel layers' input gradient by one in
// backward (tp_collectives.hpp). Each shard is cut from the full T=1 initialization, so a TP
// run starts from the same model. Norms, embeddings, the vision encoder, the head and the
// row-parallel biases are replicated.
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "train/deferred_linear.hpp"
#include "train/options.hpp"

namespace rrfp::train {

void validate(const GptConfig& c);  // throws InputError naming the field
// Throws InputError unless the model has a block for each of `chunks` pipeline chunks (P*V).
void check_blocks(const GptConfig& c, int chunks);

// How a parameter is split over the TP ranks; `groups` splits the rows into that many blocks
// cut alike (qkv: q, k and v).
struct TpShard {
  enum Kind { Replicated, Rows, Columns } kind = Replicated;  // Rows: a column-parallel layer
  int groups = 1;
};

class Chunk {
 public:
  // Throws InputError when the model has fewer blocks than `chunks`, or when heads or MLP
  // units do not split over `tp_size`.
  // The parameters are drawn on the CPU, then moved to `device`: every device starts from the
  // same model.
  Chunk(const GptConfig& cfg, int chunk, int chunks, int tp_rank = 0, int tp_size = 1,
        torch::Device device = torch::kCPU);

  bool first() const { return first_; }
  bool last() const { return last_; }
  int d_model() const { return cfg_.d_model; }
  // In a fixed order: embedding, then each block's, then the head's.
  std::vector<torch::Tensor>& params() { return params_; }
  const std::vector<std::string>& names() const { return names_; }
  // Whether parameter i gets its gradient through a deferred linear (and not from autograd).
  bool is_linear(int i) const { return linear_[i]; }
  // Whether parameter i is one TP rank's shard (else every rank holds the same tensor).
  bool sharded(int i) const { return tp_size_ > 1 && shard_[i].kind != TpShard::Replicated; }
  // This rank's shard of parameter i cut from the whole (T = 1) tensor `full`: how a TP run's
  // parameters are compared with a T = 1 run's.
  torch::Tensor cut(int i, const torch::Tensor& full) const;

  // First chunk: `input` holds int64 tokens [L] and `images` (if defined) [n, patches,
  // patch_dim]; else activations [S, d]. Last chunk: returns the mean cross-entropy against
  // `targets` [S] (-100: no target); else activations [S, d].
  torch::Tensor forward(const torch::Tensor& input, const torch::Tensor& targets, GradSink* sink,
                        const torch::Tensor& images = {}) const;

 private:
  struct Block {
    int ln1, qkv, proj, ln2, fc1, fc2;  // indices of weights (bias at +1)
  };
  // Adds this rank's cut of the whole tensor `t`.
  int add(const std::string& name, const torch::Tensor& t, bool linear, TpShard shard = {});
  // A row-parallel layer (Columns) keeps its bias whole.
  int add_linear(const std::string& name, int out, int in, TpShard shard = {});
  int add_norm(const std::string& name);
  torch::Tensor block(const Block& b, const torch::Tensor& x, GradSink* sink) const;

  GptConfig cfg_;
  torch::Device device_;
  bool first_, last_;
  int tp_rank_ = 0, tp_size_ = 1;
  torch::Tensor encode_images(const torch::Tensor& images, GradSink* sink) const;

  int wte_ = -1, wpe_ = -1, lnf_ = -1, head_ = -1;
  int patch_ = -1, patch_pos_ = -1, vln_ = -1, vfc1_ = -1, vfc2_ = -1;  // vision encoder
  std::vector<Block> blocks_;
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<bool> linear_;
  std::vector<TpShard> shard_;
};

}  // namespace rrfp::train
