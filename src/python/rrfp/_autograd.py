"""autograd as a stage calls it: the gradients of a task's roots (grad, the engine called
directly where torch's checks have nothing to do), and a leaf's hooks run and its gradient
added as a plain loop's backward does (AccumulateGrad)."""
import contextlib
import threading

import torch

from ._frozen import FrozenTarget


def leaf_hooks(p):
    """The hooks registered on leaf p (p.register_hook: a parameter, a chunk's received input,
    a leaf its forward made), where this torch's engine does not run them itself: a plain
    loop's backward runs them on each microbatch's gradient of p, all of its uses summed,
    before adding it to .grad; torch 1.13's autograd.grad, which computes a stage's gradients,
    leaves them out (newer torch runs them)."""
    if ENGINE_RUNS_LEAF_HOOKS or not p._backward_hooks:
        return []
    return list(p._backward_hooks.values())


def accumulate(total, g, hooks=None):
    """`total` with g added as a plain loop's backward adds a leaf's gradient (torch's
    AccumulateGrad): through the leaf's `hooks` first, then a copy of it where there is no total
    yet, else added in place. The total is added to in place, so it must own its storage: one
    autograd call returns the same tensor for two leaves whose gradients are equal (both terms
    of `base + delta`), and a hook may return one kept elsewhere (torch copies a gradient
    referenced elsewhere too)."""
    if hooks:
        g = run_hooks(hooks, g)
    if total is None:
        return g.clone()
    total += g
    return total


def run_hooks(hooks, g):
    """g through a leaf's hooks, each result checked as a plain loop's backward checks it:
    another size went on to set_grad, which refused it after other .grads were written (or was
    broadcast into the sum, silently). Raised in the task, it fails the step on every process
    before any .grad changes."""
    for hook in hooks:
        out = hook(g)
        if out is not None:
            _check_hook_result(hook, g, out)
            g = out
    return g


def _check_hook_result(hook, g, out):
    """Refuses, in its words, what autograd refuses of a hook's result (python_hook.cpp), and a
    tensor on another device of the same kind, which .grad could not hold either."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"expected Variable, but hook returned '{type(out).__name__}'")
    name = getattr(hook, "__name__", "<unknown>")
    if out.dtype != g.dtype or out.layout != g.layout or out.device.type != g.device.type:
        raise RuntimeError(f"hook '{name}' has changed the type of value (was {g.type()} got "
                           f"{out.type()})")
    if out.device != g.device:
        raise RuntimeError(f"hook '{name}' has changed the device of value (was {g.device} "
                           f"got {out.device})")
    if out.shape != g.shape:
        raise RuntimeError(f"hook '{name}' has changed the size of value")


# torch.autograd.grad checks and normalises its arguments in Python before it calls the engine:
# about a tenth of a small task's time. grad() calls the engine itself where those checks have
# nothing to do: plain tensors (no __torch_function__ to dispatch), a gradient given for every
# root but a scalar loss, and shapes the caller checked (the engine checks them again).
_ENGINE = getattr(torch.autograd.Variable, "_execution_engine", None)
_has_torch_function = getattr(torch._C, "_has_torch_function", None)


def grad(roots, targets, grads, retain, keep=()):
    """The gradients of `roots` (a list) with respect to `targets`, None where a target took
    none; `grads`: the roots' gradients, or None for a one-element loss. `keep`: leaves whose
    .grad (and, where this torch leaves a leaf's hooks to rrfp, hooks) the call must leave as
    they are although its engine reaches them (_kept)."""
    if not targets:
        return []
    if keep:
        with _kept(keep):
            return grad(roots, targets, grads, retain)
    if not all(t.requires_grad for t in targets):
        # A parameter frozen since the step began (a forward that freezes its own module's
        # weight): the caller fails the task naming it (RequiresGradChanged), where autograd's
        # refusal names no parameter. Another tensor that no longer requires grad (a leaf the
        # forward made, then detached in place) gets none, as a plain loop's backward gives it.
        frozen = next((t for t in targets
                       if not t.requires_grad and isinstance(t, torch.nn.Parameter)), None)
        if frozen is not None:
            raise FrozenTarget(frozen)
        live = [t for t in targets if t.requires_grad]
        got = iter(grad(roots, live, grads, retain))
        return [next(got) if t.requires_grad else None for t in targets]
    try:
        if _ENGINE is not None and _has_torch_function is not None:
            args = tuple(roots) + tuple(targets)
            if not _has_torch_function(args):
                if grads is None:
                    grads = [torch.ones_like(r, memory_format=torch.preserve_format)
                             for r in roots]
                return list(_ENGINE.run_backward(tuple(roots), tuple(grads), retain, False,
                                                 tuple(targets), True, False))
        return list(torch.autograd.grad(roots, targets, grad_outputs=grads, retain_graph=retain,
                                        allow_unused=True))
    except RuntimeError as e:
        if "Checkpointing is not compatible with .grad()" in str(e):
            # Reentrant checkpointing runs its own backward, which adds to .grad: a stage's
            # gradients could then not be summed in microbatch order.
            raise RuntimeError(
                "the chunk uses reentrant activation checkpointing (torch.utils.checkpoint "
                "with use_reentrant=True, the default where it is not given), which cannot "
                "give the per-microbatch gradients a pipeline adds in microbatch order; pass "
                "use_reentrant=False") from e
        raise


# Locks by leaf (its id's stripe): stages whose graphs reach the same leaf take turns; others,
# whatever their leaves, rarely share a stripe. One lock for the process made every such stage
# wait for the others (55 waits in 3 steps at pp=4, each chunk with a leaf of its own).
_KEEP_LOCKS = [threading.Lock() for _ in range(64)]


@contextlib.contextmanager
def _kept(leaves):
    """The leaves' .grad set aside, and their hooks where rrfp runs them itself, while the
    engine runs. torch 1.13's autograd.grad runs the AccumulateGrad node of a leaf that an
    in-place change of a view takes as an operand (`t[:, :2] *= w`: an edge from CopySlices
    straight into it), although it was asked for the gradient only: it added to .grad (a
    tensor outside the model got its gradient twice, silently; a parameter's step was refused
    as if a forward had called backward()) and ran the leaf's hooks once more. Setting .grad
    aside keeps its tensor, so the step's checks of what changed it see nothing; the tensor
    the engine puts there instead is dropped. Each leaf's stripe is locked, in stripe order
    (no two callers wait on each other crosswise): two stages whose graphs reach one leaf
    would put back each other's."""
    stripes = sorted({id(t) % len(_KEEP_LOCKS) for t in leaves})
    with contextlib.ExitStack() as locked:
        for i in stripes:
            locked.enter_context(_KEEP_LOCKS[i])
        kept = [(t, t.grad) for t in leaves]
        hooks = [] if ENGINE_RUNS_LEAF_HOOKS else \
            [(t._backward_hooks, list(t._backward_hooks.items())) for t in leaves
             if t._backward_hooks]
        try:
            for t, _ in kept:
                t.grad = None
            for table, _ in hooks:
                table.clear()  # the engine's hook reads this table as it runs
            yield
        finally:
            for table, items in hooks:
                table.clear()
                table.update(items)
            for t, g in kept:
                t.grad = g


def _engine_runs_leaf_hooks():
    """Whether grad() runs the hooks of the leaves it differentiates with respect to."""
    t = torch.zeros(1, requires_grad=True)
    ran = []
    t.register_hook(lambda g: ran.append(True))
    grad([(t * 2).sum()], [t], None, retain=False)
    return bool(ran)


ENGINE_RUNS_LEAF_HOOKS = _engine_runs_leaf_hooks()
