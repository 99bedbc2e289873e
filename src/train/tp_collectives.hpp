#pragma once
// The two collectives of Megatron-style tensor parallelism, as autograd functions:
// tp_enter is the identity in forward and sums the gradient over the group in backward (before
// a column-parallel layer); tp_exit sums over the group in forward and is the identity in
// backward (after a row-parallel layer). They run through the TaskContext of the task that is
// executing on this thread (set by TpScope), so each all-reduce is tagged with its task and a
// divergent order is reported, not summed.
#include <torch/torch.h>

#include "runtime/program.hpp"

namespace rrfp::train {

// Makes `ctx` the current task's context on this thread for its lifetime.
class TpScope {
 public:
  explicit TpScope(TaskContext& ctx);
  ~TpScope();
  TpScope(const TpScope&) = delete;
  TpScope& operator=(const TpScope&) = delete;

 private:
  TaskContext* prev_;
};

torch::Tensor tp_enter(const torch::Tensor& x);
torch::Tensor tp_exit(const torch::Tensor& x);

}  // namespace rrfp::train
