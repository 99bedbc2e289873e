"""Walks of a chunk's backward graph, and what a backward task's failure means in the
pipeline's terms: which graphs run Python of the user's (a split backward would run it
twice), which reach tensors that want a gradient outside the chunk (the model's are
refused: their gradient would be silently missing), and autograd's complaint about a saved
tensor changed in place.
"""
import torch

from . import _rrfp

_PYTHON_NODE = torch.autograd.function.BackwardCFunction


def module_backward_hooks(module):
    """Whether a backward hook of a module (its own, or every module's) runs in `module`'s
    backward: a split backward would run it twice."""
    if getattr(torch.nn.modules.module, "_global_backward_hooks", None):
        return True
    return any(m._backward_hooks for m in module.modules())


def python_backward(roots):
    """Whether the backward graph of `roots` holds a node whose backward is Python of the
    user's: a custom autograd.Function (module backward hooks are one, and so is reentrant
    checkpointing). Walked once per microbatch of a split chunk until one is found: about half
    a microsecond a node."""
    todo = [r.grad_fn for r in roots]
    seen = set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        if isinstance(node, _PYTHON_NODE):
            return True
        seen.add(node)
        todo.extend(n for n, _ in node.next_functions)
    return False


def leaf_uses(roots, ids):
    """How many edges of the backward graph of `roots` lead into the AccumulateGrad node of
    each leaf whose id is in `ids` (a leaf used twice, as `tanh(lin(tanh(lin(x))))` uses
    lin.weight, has two): {id: count}, the leaves not reached left out."""
    out, seen, todo = {}, set(), []
    for r in roots:
        if r.grad_fn is not None:
            todo.append(r.grad_fn)
        elif id(r) in ids:  # the leaf itself is a root: the chunk returns it
            out[id(r)] = out.get(id(r), 0) + 1
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for n, _ in node.next_functions:
            leaf = getattr(n, "variable", None)
            if leaf is None:
                todo.append(n)
            elif id(leaf) in ids:
                out[id(leaf)] = out.get(id(leaf), 0) + 1
    return out


def stale_saved_tensor(kind, chunk, e):
    """autograd's "modified by an inplace operation" in a backward task, said in the
    pipeline's terms (None for any other error): a plain loop runs each microbatch's backward
    right after its forward, where the pipeline runs other microbatches' forwards between."""
    if kind == "F" or not isinstance(e, RuntimeError) or \
            "modified by an inplace operation" not in str(e):
        return None
    return RuntimeError(
        f"chunk {chunk}'s backward needs a tensor its forward saved, which was changed in place "
        "since: the pipeline runs other microbatches' forwards before this one's backward, so "
        "state that a forward changes in place and then computes with (a running statistic it "
        "divides by, say) has moved on by then; ordered_forwards orders the forwards only. "
        "Compute with a copy (x / scale.clone()) or change the state out of place "
        f"(autograd: {str(e).splitlines()[0]})")


def foreign_leaves(chunk, last, roots, own, data):
    """The leaves that want a gradient in the backward graph of `roots` (chunk `chunk`'s
    outputs; `last`: its loss) other than `own`, its parameters and inputs, that belong to no
    module the pipeline knows: leaves the forward made itself (x.detach().requires_grad_(), a
    PINN's coordinates, WGAN-GP's interpolates), which the caller differentiates too and whose
    gradients it adds to their .grad, as a plain loop's backward does.

    Raises ValueError naming those that do belong to one (_known): another chunk's parameter
    reached through a closure, a parameter of loss_fn, an L2 penalty over the whole model in
    loss_fn, a tensor set as a plain attribute of a module. Their gradient is the model's,
    summed over microbatches, chunks and replicas where the parameters' are: this chunk's
    backward alone would leave it silently missing or partial, so the step refuses them rather
    than differ from a plain loop. `data`: the step's StepData."""
    foreign = _rrfp._foreign_leaves(roots, own)  # a walk of the graph in C++
    if not foreign:
        return foreign
    names = _known(data)
    known = [t for t in foreign if id(t) in names]
    if not known:
        return foreign
    said = [f"{names[id(t)]} of shape {tuple(t.shape)}" for t in known[:3]]
    if len(known) > 3:
        said.append(f"{len(known) - 3} more")
    where = " (with loss_fn)" if last else ""
    one = len(known) == 1
    raise ValueError(
        f"chunk {chunk}{where} uses {'; '.join(said)}, which {'wants' if one else 'want'} "
        f"a gradient but {'is' if one else 'are'} not among the chunk's own parameters: the "
        "pipeline computes the gradients of each chunk's own parameters, so this use's "
        "would be silently missing. Make it a parameter of a module of the chunk (a module "
        "registered in two chunks is tied: both uses add up); a term of loss_fn over other "
        "chunks' parameters (an L2 penalty, say) belongs after step(), where its own "
        "backward() adds its gradient as in a plain loop")


def _known(data):
    """{id: name} of every parameter, buffer and tensor attribute of the modules the pipeline
    knows (the chunks, and loss_fn where it is one), made once a step, by the first backward
    that meets a leaf outside its chunk (data.known)."""
    names = data.known
    if names is not None:
        return names
    names = {}
    model = data.chunks if data.model is None else data.model
    owners = [(f"chunk {c}'s", m) for c, m in model.items()]
    if isinstance(data.loss_fn, torch.nn.Module):
        owners.append(("loss_fn's", data.loss_fn))
    for owner, module in owners:
        for prefix, m in module.named_modules():
            names.update((id(v), f"{owner} tensor attribute '{prefix}{'.' if prefix else ''}{k}'")
                         for k, v in vars(m).items() if isinstance(v, torch.Tensor))
        names.update((id(b), f"{owner} buffer '{n}'") for n, b in module.named_buffers())
        names.update((id(p), f"{owner} parameter '{n}'") for n, p in module.named_parameters())
    data.known = names
    return names
