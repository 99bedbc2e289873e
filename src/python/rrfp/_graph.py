"""Walks of a chunk's backward graph, and what a backward task's failure means in the
pipeline's terms: which graphs run Python of the user's (a split backward would run it
twice), which reach tensors that want a gradient outside the chunk (the model's are
refused: their gradient would be silently missing), and autograd's complaint about a saved
tensor changed in place.
"""
import threading

import torch

from . import _rrfp
from ._frozen import RequiresGradChanged

_WHOLE_NODES = (torch.autograd.function.BackwardCFunction, torch._C._functions.CopySlices)


def module_backward_hooks(module):
    """Whether a backward hook of a module (its own, or every module's) runs in `module`'s
    backward: a split backward would run it twice."""
    if getattr(torch.nn.modules.module, "_global_backward_hooks", None):
        return True
    return any(m._backward_hooks for m in module.modules())


def whole_backward(roots):
    """Whether the backward graph of `roots` must run whole, in B, rather than split into the
    input's gradient (B) and the parameters' (W): it holds a node whose backward is Python of
    the user's, a custom autograd.Function (module backward hooks are one, and so is reentrant
    checkpointing), which a split backward would run twice; or an in-place change of a view
    (CopySlices: `t += h` on the output of a Linear over a 3-D input, which is a view), over
    which torch 1.13's autograd computes the parameters' gradients alone only sometimes ("could
    not compute gradients for some functions" in W, every split schedule failing where a plain
    loop trains). Walked once per microbatch of a split chunk until one is found: about half a
    microsecond a node."""
    todo = [r.grad_fn for r in roots]
    seen = set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        if isinstance(node, _WHOLE_NODES):
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


def backward_failure(kind, chunk, e):
    """autograd's complaints in a backward task said in the pipeline's terms, None for any
    other error: a saved tensor "modified by an inplace operation" (a plain loop runs each
    microbatch's backward right after its forward, where the pipeline runs other microbatches'
    forwards between), and W's "could not compute gradients for some functions", for a graph
    whole_backward did not tell apart."""
    if kind == "F" or not isinstance(e, RuntimeError):
        return None
    whole = str(e)
    said = whole.splitlines()[0] if whole else ""
    if "modified by an inplace operation" in whole:
        return RuntimeError(
            f"chunk {chunk}'s backward needs a tensor its forward saved, which was changed in "
            "place since. Either the forward itself changed it after an operation saved it "
            "(ReLU(inplace=True) followed by another in-place operation: a plain loop fails "
            "alike; make one of them out of place), or it is state that a forward changes in "
            "place and then computes with (a running statistic it divides by, say), which has "
            "moved on by the backward: the pipeline runs other microbatches' forwards before "
            "this one's backward, and ordered_forwards orders the forwards only; compute with "
            "a copy (x / scale.clone()) or change the state out of place. The same holds for a "
            "first chunk that changes its input in place where step() was given one batch "
            "tensor: its microbatches are views of it, which count a change of one as a change "
            "of all; give a list of separate tensors, or change a copy (autograd: "
            f"{said})")
    if kind == "W" and "could not compute gradients for some functions" in whole:
        return RuntimeError(
            f"chunk {chunk}'s weight gradients could not be computed apart from its input's "
            "gradient (the split backward's W task): torch's autograd refuses that part of this "
            "chunk's graph; give split_backward='off' (autograd: " + said + ")")
    return None


def walk_leaves(chunk, last, roots, own, data):
    """(made, written) of the backward graph of `roots` (chunk `chunk`'s outputs; `last`: its
    loss). `made`: the leaves that want a gradient there other than `own`, its parameters and
    inputs, that belong to no module the pipeline knows: leaves the forward made itself
    (x.detach().requires_grad_(), a PINN's coordinates, WGAN-GP's interpolates), which the
    caller differentiates too and whose gradients it adds to their .grad, as a plain loop's
    backward does. `written`: the leaves, own or made, that an in-place change of a view takes
    as an operand (`t[:, :2] *= w`), whose .grad torch 1.13's autograd.grad adds to as it runs
    (_autograd.grad's `keep`).

    Raises ValueError naming those that do belong to one (data.known, the model's tensors as
    the step began): another chunk's parameter reached through a closure, a parameter of
    loss_fn, an L2 penalty over the whole model in loss_fn, a tensor set as a plain attribute
    of a module. Their gradient is the model's, summed over microbatches, chunks and replicas
    where the parameters' are: this chunk's backward alone would leave it silently missing or
    partial, so the step refuses them rather than differ from a plain loop. An nn.Parameter is
    refused wherever it comes from: no forward makes one, and with chunk_fn under torchrun it
    is this process's copy of another process's chunk (the whole model, built in every
    process), whose .grad nothing reads. A parameter of this process's chunks that was frozen as
    the step began raises RequiresGradChanged instead: a forward unfroze it. `data`: the step's
    StepData."""
    foreign, written = _rrfp._walk_leaves(roots, own)  # a walk of the graph in C++
    if not foreign:
        return foreign, written
    known = data.known if data.known is not None else ModelTensors(data)
    named, strays = [], []
    for t in foreign:
        entry = known.find(t)
        if entry is not None and data.sums is not None and data.sums.was_frozen(t):
            # A parameter of the chunks that a forward unfroze: that, not where it is, is why
            # the step has no sum for it.
            owner, _, prefix, name = entry
            raise RequiresGradChanged(f"{owner} '{_dotted(prefix, name)}'", t)
        if entry is not None:
            named.append(f"{_named(*entry)} of shape {tuple(t.shape)}")
        elif isinstance(t, torch.nn.Parameter):
            strays.append(t)
    if not named and not strays:
        return foreign, written
    said = named[:3] + ([f"{len(named) - 3} more"] if len(named) > 3 else [])
    if strays:
        said.append(_strays(data, strays))
    where = " (with loss_fn)" if last else ""
    one = len(named) + len(strays) == 1
    raise ValueError(
        f"chunk {chunk}{where} uses {'; '.join(said)}, which {'wants' if one else 'want'} "
        f"a gradient but {'is' if one else 'are'} not among the chunk's own parameters: the "
        "pipeline computes the gradients of each chunk's own parameters, so this use's "
        "would be silently missing. Make it a parameter of a module of the chunk (a module "
        "registered in two chunks is tied: both uses add up); a term of loss_fn over other "
        "chunks' parameters (an L2 penalty, say) belongs after step(), where its own "
        "backward() adds its gradient as in a plain loop")


def _dotted(prefix, name):
    return f"{prefix}{'.' if prefix else ''}{name}"


def _named(owner, kind, prefix, name):
    return f"{owner} {kind} '{_dotted(prefix, name)}'"


def _strays(data, strays):
    """Parameters of no module the pipeline knows, said at once (an L2 penalty reaches many)."""
    shapes = ", ".join(str(tuple(t.shape)) for t in strays[:3])
    if len(strays) > 3:
        shapes += ", ..."
    if len(strays) == 1:
        what, where = "a parameter", "another process's copy, or a module"
    else:
        what, where = f"{len(strays)} parameters", "other processes' copies, or modules"
    if data.model is None:  # chunk_fn: the other processes' chunks are not known here
        what += f" of no chunk of this process ({where} the pipeline was not given)"
    else:
        what += " of no module the pipeline was given"
    return f"{what} of shape{'s' if len(strays) > 1 else ''} {shapes}"


class ModelTensors:
    """Every parameter, buffer and tensor attribute of the modules the pipeline knows (the
    chunks, and loss_fn where it is one), as they were when the step was set up, before its
    forwards (data.known). Taken later, a forward had replaced a tensor attribute (a cache) by
    then, and a leaf it made could get the freed tensor's address and be refused as that
    attribute; and a leaf a forward keeps as an attribute (self.x = x) was refused as the
    model's. The set-up copies each module's attributes and buffers (dict copies, made in C:
    0.24 ms a step for 300 modules, where finding the tensors among them in Python took 0.53),
    which hold the tensors, so no id in them is reused during the step; the tensors are found
    in them, and names made, only when a backward meets a leaf outside its chunk."""

    def __init__(self, data):
        model = data.chunks if data.model is None else data.model
        owners = [(f"chunk {c}'s", m) for c, m in model.items()]
        if isinstance(data.loss_fn, torch.nn.Module):
            owners.append(("loss_fn's", data.loss_fn))
        # Parameters are the model's lasting objects (a forward replaces none): their table is
        # read as it is. Attributes and buffers are what a forward replaces (a cache).
        self._tables = [(owner, [(prefix, dict(vars(m)), dict(m._buffers) if m._buffers else {},
                                  m._parameters) for prefix, m in module.named_modules()])
                        for owner, module in owners]
        self._lock = threading.Lock()  # stage threads look up at once
        self._by_id = None

    def find(self, t):
        """(owner, kind, module prefix, name) of `t` if it is one of them, else None."""
        with self._lock:
            if self._by_id is None:
                self._by_id = self._index()
        entry = self._by_id.get(id(t))
        return entry[1:] if entry is not None and entry[0] is t else None

    def _index(self):
        found = {}
        for owner, modules in self._tables:
            for prefix, attrs, _, _ in modules:
                found.update((id(v), (v, owner, "tensor attribute", prefix, k))
                             for k, v in attrs.items() if isinstance(v, torch.Tensor))
            # A parameter's or buffer's name overrides an attribute's, and its first name (as
            # named_parameters gives it) a shared one's later names.
            for kind, table in (("buffer", 2), ("parameter", 3)):
                named = {}
                for module in modules:
                    prefix = module[0]
                    for k, v in module[table].items():
                        if v is not None and id(v) not in named:
                            named[id(v)] = (v, owner, kind, prefix, k)
                found.update(named)
        return found
