// The walk of a chunk's backward graph for leaves it does not own (rrfp/_graph.py's
// refuse_foreign_leaves), in C++: every backward task walks its graph, since a use that
// depends on the data (a branch some microbatches take) is in some graphs only. Python's walk
// cost about 0.4 us a node, 28 us for a transformer block's 63; this one 3.4 us (an eighth),
// most of it the conversion of its arguments. The same walk finds the leaves torch 1.13's
// autograd.grad writes to although it was asked for their gradients only (below).
#include <pybind11/stl.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/functions/tensor.h>
#include <torch/csrc/utils/pybind.h>

#include <unordered_set>
#include <utility>
#include <vector>

#include "python/bindings.hpp"

namespace rrfp::py {
namespace pyb = pybind11;

namespace {

// First: the leaves that want a gradient (autograd's AccumulateGrad nodes) in the backward
// graph of `roots`, other than `own`, in the order the walk meets them; a root that is such a
// leaf itself too. A leaf is known by its TensorImpl, which every Python object of it shares.
// Second: the leaves, own or not, that are an operand of an in-place change of a view (`t[:,
// :2] *= w`: an edge from a CopySlices node straight into the leaf's AccumulateGrad). torch
// 1.13's engine runs those AccumulateGrad nodes even under autograd.grad, adding to the
// leaf's .grad and running its hooks, where it should only hand the gradient back: the caller
// keeps their .grad and hooks out of the engine's reach while it runs (_autograd.py).
std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> walk_leaves(
    const std::vector<at::Tensor>& roots, const std::vector<at::Tensor>& own) {
  std::unordered_set<const c10::TensorImpl*> mine;
  for (const at::Tensor& t : own)
    mine.insert(t.unsafeGetTensorImpl());
  std::vector<at::Tensor> out, written;
  std::unordered_set<const c10::TensorImpl*> said;
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> todo;
  for (const at::Tensor& r : roots) {
    if (const auto& fn = r.grad_fn()) {
      todo.push_back(fn.get());
    } else if (r.requires_grad() && !mine.count(r.unsafeGetTensorImpl())) {
      out.push_back(r);
    }
  }
  while (!todo.empty()) {
    torch::autograd::Node* node = todo.back();
    todo.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(node)) {
      if (!mine.count(acc->variable.unsafeGetTensorImpl())) out.push_back(acc->variable);
      continue;
    }
    const bool copy_slices = dynamic_cast<torch::autograd::CopySlices*>(node) != nullptr;
    for (const torch::autograd::Edge& e : node->next_edges()) {
      if (copy_slices)
        if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(e.function.get()))
          if (said.insert(acc->variable.unsafeGetTensorImpl()).second)
            written.push_back(acc->variable);
      todo.push_back(e.function.get());
    }
  }
  return {std::move(out), std::move(written)};
}

}  // namespace

void bind_graph(pyb::module_& m) {
  m.def("_walk_leaves", &walk_leaves, pyb::arg("roots"), pyb::arg("own"),
        "(the leaves wanting a gradient in the backward graph of roots, other than own; the "
        "leaves an in-place change of a view takes as an operand)");
}

}  // namespace rrfp::py
