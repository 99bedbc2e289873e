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
    auto y = torch::addmm(b, x, w.t());
    // Under autocast the product ran in its lower precision; the backward (which autocast does
    // not reach) computes in the same one and hands each gradient back in its tensor's dtype.
    ctx->saved_data["dtype"] = static_cast<int64_t>(y.scalar_type());
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor x = saved[0], w = saved[1];
    // In float32 (the CPU, or no autocast) every .to() below returns its tensor as it is.
    const auto dt = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const torch::Tensor gy = grad_out[0].to(dt).contiguous();
    auto* sink = reinterpret_cast<GradSink*>(ctx->saved_data["sink"].toInt());
    const int idx = static_cast<int>(ctx->saved_data["w_index"].toInt());
    const auto wt = w.scalar_type();
    auto weight_grads = [sink, idx, gy, x, dt, wt] {
      (*sink->grads)[idx] = gy.t().mm(x.to(dt)).to(wt);
      (*sink->grads)[idx + 1] = gy.to(wt).sum(0);
    };
    if (sink->queue)
      sink->queue->push(weight_grads);
    else
      weight_grads();
    return {gy.mm(w.to(dt)).to(x.scalar_type()), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor deferred_linear(const torch::Tensor& x, const torch::Tensor& w,
                              const torch::Tensor& b, GradSink* sink, int w_index) {
  return DeferredLinear::apply(x, w, b, reinterpret_cast<int64_t>(sink), w_index);
}

}  // namespace rrfp::train
