#pragma once
// One step's data as every stage sees it: per microbatch, the input tokens and their targets
// (the next bytes), of a length that varies from microbatch to microbatch.
#include <torch/torch.h>

#include <vector>

namespace rrfp::train {

struct StepBatch {
  std::vector<torch::Tensor> tokens;   // int64 [L_m]
  std::vector<torch::Tensor> targets;  // int64 [L_m]
  int microbatches() const { return static_cast<int>(tokens.size()); }
  std::int64_t length(int mb) const { return tokens[mb].size(0); }
  std::int64_t total_tokens() const {
    std::int64_t n = 0;
    for (const auto& t : tokens)
      n += t.size(0);
    return n;
  }
};

}  // namespace rrfp::train
