#pragma once
// A decoder-only transformer LM (pre-LayerNorm blocks of causal self-attention and MLP),
// partitioned by layers into P*V chunks: chunk 0 also holds the token and position
// embeddings, the last chunk the final norm, the LM head and the loss. A microbatch is one
// sequence of variable length L; activations between chunks are [L, d_model] float32.
//
// Parameters are initialized per layer from (seed, layer), so every partition of the same
// model starts from bitwise the same weights.
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "train/deferred_linear.hpp"

namespace rrfp::train {

struct GptConfig {
  int vocab = 256;  // bytes
  int d_model = 64;
  int heads = 4;
  int layers = 4;  // transformer blocks
  int max_seq = 128;
  std::uint64_t seed = 1;
  // Image-text variant: a ViT-style encoder on chunk 0 turns each image's patches into tokens
  // placed ahead of the text. 0 patches: text only.
  int image_patches = 0, patch_dim = 16;
};

void validate(const GptConfig& c);  // throws InputError naming the field

class Chunk {
 public:
  // Throws InputError when the model has fewer blocks than `chunks`.
  Chunk(const GptConfig& cfg, int chunk, int chunks);

  bool first() const { return first_; }
  bool last() const { return last_; }
  int d_model() const { return cfg_.d_model; }
  // In a fixed order: embedding, then each block's, then the head's.
  std::vector<torch::Tensor>& params() { return params_; }
  const std::vector<std::string>& names() const { return names_; }
  // Whether parameter i gets its gradient through a deferred linear (and not from autograd).
  bool is_linear(int i) const { return linear_[i]; }

  // First chunk: `input` holds int64 tokens [L] and `images` (if defined) [n, patches,
  // patch_dim]; else activations [S, d]. Last chunk: returns the mean cross-entropy against
  // `targets` [S] (-100: no target); else activations [S, d].
  torch::Tensor forward(const torch::Tensor& input, const torch::Tensor& targets, GradSink* sink,
                        const torch::Tensor& images = {}) const;

 private:
  struct Block {
    int ln1, qkv, proj, ln2, fc1, fc2;  // indices of weights (bias at +1)
  };
  int add(const std::string& name, torch::Tensor t, bool linear);
  int add_linear(const std::string& name, int out, int in);
  int add_norm(const std::string& name);
  torch::Tensor block(const Block& b, const torch::Tensor& x, GradSink* sink) const;

  GptConfig cfg_;
  bool first_, last_;
  torch::Tensor encode_images(const torch::Tensor& images, GradSink* sink) const;

  int wte_ = -1, wpe_ = -1, lnf_ = -1, head_ = -1;
  int patch_ = -1, patch_pos_ = -1, vln_ = -1, vfc1_ = -1, vfc2_ = -1;  // vision encoder
  std::vector<Block> blocks_;
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<bool> linear_;
};

}  // namespace rrfp::train
