// The walk of a chunk's backward graph for leaves it does not own (rrfp/_graph.py's
// refuse_foreign_leaves), in C++: every backward task walks its graph, since a use that
// depends on the data (a branch some microbatches take) is in some graphs only. Python's walk
// cost about 0.4 us a node, 28 us for a transformer block's 63; this one 3.4 us (an eighth),
// most of it the conversion of its arguments.
#include <pybind11/stl.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/utils/pybind.h>

#include <unordered_set>
#include <vector>

#include "python/bindings.hpp"

namespace rrfp::py {
namespace pyb = pybind11;

namespace {

// The leaves that want a gradient (autograd's AccumulateGrad nodes) in the backward graph of
// `roots`, other than `own`, in the order the walk meets them; a root that is such a leaf
// itself too. A leaf is known by its TensorImpl, which every Python object of it shares.
std::vector<at::Tensor> foreign_leaves(const std::vector<at::Tensor>& roots,
                                       const std::vector<at::Tensor>& own) {
  std::unordered_set<const c10::TensorImpl*> mine;
  for (const at::Tensor& t : own)
    mine.insert(t.unsafeGetTensorImpl());
  std::vector<at::Tensor> out;
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
    for (const torch::autograd::Edge& e : node->next_edges())
      todo.push_back(e.function.get());
  }
  return out;
}

}  // namespace

void bind_graph(pyb::module_& m) {
  m.def("_foreign_leaves", &foreign_leaves, pyb::arg("roots"), pyb::arg("own"),
        "the leaves wanting a gradient in the backward graph of roots, other than own");
}

}  // namespace rrfp::py
