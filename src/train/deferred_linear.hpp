#pragma once
// A linear layer whose weight gradient can be deferred (the split backward of semantics.md §1):
// its backward returns the input gradient and, when a queue is given, leaves the weight and
// bias gradient GEMMs in the queue for the W task instead of computing them. Both modes
// compute the weight gradient with the same kernels in the same order, so deferring changes
// when it runs, never its bits.
#include <torch/torch.h>

#include <functional>
#include <vector>

namespace rrfp::train {

// The deferred weight-gradient work of one (chunk, microbatch).
class WeightGradQueue {
 public:
  void push(std::function<void()> job) { jobs_.push_back(std::move(job)); }
  // Runs the queued GEMMs in the order their backward ran.
  void run() {
    for (auto& j : jobs_)
      j();
    jobs_.clear();
  }
  bool empty() const { return jobs_.empty(); }

 private:
  std::vector<std::function<void()>> jobs_;
};

// Where a deferred or immediate weight gradient lands: slot `index` of a per-microbatch list.
struct GradSink {
  std::vector<torch::Tensor>* grads = nullptr;  // per parameter, by the chunk's parameter index
  WeightGradQueue* queue = nullptr;             // non-null: defer to the W task
};

// y = x W^T + b for x of shape [n, in]. Gradients of W and b go to sink->grads[w_index] and
// [w_index + 1], now or when the queue runs; autograd sees no gradient for them.
torch::Tensor deferred_linear(const torch::Tensor& x, const torch::Tensor& w,
                              const torch::Tensor& b, GradSink* sink, int w_index);

}  // namespace rrfp::train
