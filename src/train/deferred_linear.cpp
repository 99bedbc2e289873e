#include "train/deferred_linear.hpp"

namespace rrfp::train {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct DeferredLinear : torch::autograd::Function<DeferredLinear> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const torch::Tensor& b, int64_t sink, int64_t w_index) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["sink"] = sink;
    ctx->saved_data["w_index"] = w_index;
    return torch::addmm(b, x, w.t());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor x = saved[0], w = saved[1];
    const torch::Tensor gy = grad_out[0].contiguous();
    auto* sink = reinterpret_cast<GradSink*>(ctx->saved_data["sink"].toInt());
    const int idx = static_cast<int>(ctx->saved_data["w_index"].toInt());
    auto weight_grads = [sink, idx, gy, x] {
      (*sink->grads)[idx] = gy.t().mm(x);
      (*sink->grads)[idx + 1] = gy.sum(0);
    };
    if (sink->queue)
      sink->queue->push(weight_grads);
    else
      weight_grads();
    return {gy.mm(w), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor deferred_linear(const torch::Tensor& x, const torch::Tensor& w,
                              const torch::Tensor& b, GradSink* sink, int w_index) {
  return DeferredLinear::apply(x, w, b, reinterpret_cast<int64_t>(sink), w_index);
}

}  // namespace rrfp::train
