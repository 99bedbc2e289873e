#include "train/tp_collectives.hpp"

#include "core/error.hpp"

namespace rrfp::train {

namespace {

thread_local TaskContext* current = nullptr;

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Sums a float32 tensor over the current task's TP group (a fresh contiguous copy).
torch::Tensor all_reduce(const torch::Tensor& x) {
  if (!current) throw Error("tensor-parallel collective outside a task");
  torch::Tensor y = x.detach().contiguous().clone();
  current->all_reduce(std::span<float>(y.data_ptr<float>(), static_cast<size_t>(y.numel())));
  return y;
}

struct Enter : torch::autograd::Function<Enter> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x) { return x.clone(); }
  static variable_list backward(AutogradContext*, variable_list g) { return {all_reduce(g[0])}; }
};

struct Exit : torch::autograd::Function<Exit> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x) { return all_reduce(x); }
  static variable_list backward(AutogradContext*, variable_list g) { return {g[0]}; }
};

}  // namespace

TpScope::TpScope(TaskContext& ctx) : prev_(current) {
  current = &ctx;
}

TpScope::~TpScope() {
  current = prev_;
}

torch::Tensor tp_enter(const torch::Tensor& x) {
  return Enter::apply(x);
}

torch::Tensor tp_exit(const torch::Tensor& x) {
  return Exit::apply(x);
}

}  // namespace rrfp::train
