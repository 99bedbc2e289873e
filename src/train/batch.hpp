#pragma once
// One step's data as every stage sees it: per microbatch, the input tokens and the targets of
// every sequence position, of a length that varies from microbatch to microbatch. Image-text
// microbatches also carry images, whose tokens come ahead of the text (targets -100 there).
#include <torch/torch.h>

#include <vector>

namespace rrfp::train {

struct StepBatch {
  std::vector<torch::Tensor> tokens;   // int64 [L_m] text
  std::vector<torch::Tensor> targets;  // int64 [sequence length]: image positions then text
  std::vector<torch::Tensor> images;   // float [n_m, patches, patch_dim]; empty: text only
  int microbatches() const { return static_cast<int>(tokens.size()); }
  // Sequence length of a microbatch (image tokens and text): the rows of its activations.
  std::int64_t length(int mb) const { return targets[mb].size(0); }
  std::int64_t total_tokens() const {
    std::int64_t n = 0;
    for (const auto& t : tokens)
      n += t.size(0);
    return n;
  }
};

}  // namespace rrfp::train
