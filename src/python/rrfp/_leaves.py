"""The leaves of a chunk's backward other than its parameters: the tensor it receives, which
the pipeline hands it as a leaf that wants its gradient, and leaves its forward makes itself (a
PINN's coordinates, WGAN-GP's interpolates: x.detach().requires_grad_()). A plain loop's
backward runs their hooks and fills their .grad; torch 1.13's autograd.grad, which computes a
stage's gradients, does neither for the tensors it differentiates with respect to, so a
stage's backward does it here."""
import collections
import threading

import torch

from . import _autograd, _rrfp
from ._autograd import accumulate, leaf_hooks, run_hooks
from ._tree import pack_grads


def begins_in_place(module):
    """Whether a chunk's first module changes its input in place (nn.ReLU(inplace=True), say:
    rrfp.split cuts torchvision's VGG so that most chunks begin with one), through nested
    nn.Sequential."""
    while isinstance(module, torch.nn.Sequential) and len(module) > 0:
        module = module[0]
    return getattr(module, "inplace", False) is True


def input_leaf(t, dev):
    """A received floating-point tensor as a leaf that wants its gradient; None for the rest
    (integer ids, masks), which take none."""
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        return None
    if dev is not None:
        t = t.to(dev)
    return t.detach().requires_grad_(True)


def check_still_wanted(chunk, inp):
    """Raises RuntimeError where chunk `chunk`'s forward turned off requires_grad of a leaf it
    received (`x.requires_grad_(False)`): in a plain loop that tensor is the previous chunk's
    output, no leaf, and torch refuses the call; here it was taken, and the earlier chunks got
    no gradient from this one, silently."""
    for t in inp if isinstance(inp, list) else (inp,):
        if t is not None and not t.requires_grad:
            raise RuntimeError(
                f"chunk {chunk} set requires_grad=False on a tensor it receives "
                "(x.requires_grad_(False), or x.detach_()): the earlier chunks would get no "
                "gradient through it (in a plain loop that tensor is the previous chunk's "
                "output, whose requires_grad_(False) torch refuses); use y = x.detach() to "
                "compute without one")


def input_grads(tree_in, inp, got):
    """What B sends back: for a tensor input (`inp` its leaf) its gradient, or None where none
    reached it (the chunk's output does not depend on it): the chunks before then get none
    either, as in a plain loop, where zeros gave their parameters gradients of zeros, which an
    optimizer applies (weight decay, momentum); for a structure (`inp` a list of leaves), one
    entry per tensor it carried, None where no gradient goes. `got`: the gradients of the
    leaves that are not None, in order."""
    if not tree_in:
        return _input_grad(got[0] if got else None, inp)
    it = iter(got)
    return pack_grads([None if leaf is None else _input_grad(next(it), leaf) for leaf in inp])


def _input_grad(dx, leaf):
    """The gradient sent back for one received tensor. In a plain loop that tensor is the
    previous chunk's output itself: the hooks this chunk registers on it (a gradient reversal,
    a clip of what flows back) run on its gradient, in registration order, before the earlier
    chunks get it, and its retain_grad() fills its .grad. On the leaf they would do neither:
    the hooks run here, each result checked as autograd checks it, and .grad holds what is sent
    (retain_grad on a leaf does nothing, so it cannot be told; a plain loop's .grad is the
    gradient after the hooks registered before retain_grad, and torch 2 runs retain_grad last)."""
    if leaf is None or dx is None:
        return None
    if leaf._backward_hooks:  # the usual: none, one attribute read
        hooks = leaf_hooks(leaf)
        if hooks:
            # On a copy: dx can be the very tensor of a parameter's gradient (x + b passes it
            # through), which a hook changing its argument in place (torch asks hooks not to)
            # changed too, where a plain loop's parameter has taken its gradient before.
            dx = run_hooks(hooks, dx.clone())
    leaf.grad = dx
    return dx


class MadeGrads:
    """One step's gradients of the leaves its forwards made (no tensor of the model:
    rrfp._graph.foreign_leaves), kept by microbatch and added to their .grad once the step's
    tasks are done, in microbatch order, as a plain loop's backward adds them (one call per
    microbatch): the same bits whatever order the backward tasks ran in. Within a microbatch a
    plain loop's backward adds every use of one leaf into one buffer, those of the chunk nearest
    the loss first, and its hooks run once on that buffer, as on the gradient torch's
    AccumulateGrad receives. A chunk's backward starts the leaf's buffer from the later chunks'
    (seeds(): the leaf is one more root of its autograd call, as a tied parameter is, _TiedSum),
    so that its own uses are added after theirs, one by one: summing each chunk's uses on its own
    gave `g + (u2 + u1)` where the loop adds `(g + u2) + u1`. A microbatch's backward tasks run
    from the last chunk to the first (each needs the next chunk's gradient), so the later
    chunks' gradients are all there when a chunk's task asks for them."""

    def __init__(self):
        self._lock = threading.Lock()  # stage threads put
        self._by_mb = {}  # mb -> {id(leaf): (leaf, {chunk: (gradient, seeded)})}
        self.held = []  # hooked(): the leaves that several microbatches used

    def seeds(self, chunk, mb, leaves):
        """[(index, leaf, buffer)]: for those of `leaves` (the leaves the backward of (chunk, mb)
        differentiates) that later chunks of microbatch mb used, the buffer of their gradients.
        Left out for a leaf with hooks where this torch's autograd.grad runs them: they would
        run on the buffer twice."""
        with self._lock:
            uses = self._by_mb.get(mb)
            if not uses:
                return []
            out = []
            for i, leaf in enumerate(leaves):
                entry = uses.get(id(leaf))
                if entry is None or (_autograd.ENGINE_RUNS_LEAF_HOOKS and leaf._backward_hooks):
                    continue
                buf = _buffer({c: e for c, e in entry[1].items() if c > chunk})
                if buf is not None:
                    out.append((i, leaf, buf))
            return out

    def put(self, chunk, mb, leaves, grads, seeded=()):
        """`seeded`: the indices of the gradients computed from their seeds(), which hold the
        later chunks' buffer already."""
        with self._lock:
            uses = self._by_mb.setdefault(mb, {})
            for i, (leaf, g) in enumerate(zip(leaves, grads)):
                if g is not None:
                    uses.setdefault(id(leaf), (leaf, {}))[1][chunk] = (g, i in seeded)

    def hooked(self):
        """What the step's tasks put, through the leaves' hooks: [(leaf, gradient)] in
        microbatch order, for add_to_grads once the step's other gradients are written too.
        Called on the caller's thread before any .grad is written: a hook that raises fails
        the step (StageError) with no .grad changed, where it raised bare after every
        parameter's .grad had been written and part of the leaf's."""
        by_mb, self._by_mb = self._by_mb, {}
        out = []
        # Leaves of more than one microbatch: tensors held outside the model (a forward makes
        # its own leaves afresh each time), of which a process per stage has a copy each.
        seen = collections.Counter(i for uses in by_mb.values() for i in uses)
        self.held = [leaf for uses in by_mb.values() for i, (leaf, _) in uses.items()
                     if seen.pop(i, 0) > 1]
        for mb in sorted(by_mb):
            for leaf, by_chunk in by_mb[mb].values():
                g = _buffer(by_chunk)
                try:
                    hooked = run_hooks(leaf_hooks(leaf), g)
                    # A hook may return a tensor it keeps and writes again at its next call:
                    # held here until every hook has run, it needs a copy of its own.
                    out.append((leaf, hooked if hooked is g else hooked.clone()))
                except Exception as e:
                    raise _rrfp.StageError(
                        f"a hook of a tensor that microbatch {mb}'s forward used, which is no "
                        f"tensor of the model (shape {tuple(leaf.shape)}), raised: "
                        f"{type(e).__name__}: {e}") from e
        return out

    @staticmethod
    def add_to_grads(hooked):
        """Adds hooked()'s gradients into the leaves' .grad, as the parameters' sums are added
        (accumulate)."""
        for leaf, g in hooked:
            leaf.grad = accumulate(leaf.grad, g)


def _buffer(by_chunk):
    """A leaf's buffer of one microbatch from its chunks' gradients ({chunk: (gradient,
    seeded)}), the last chunk first: a seeded gradient is the buffer so far with its chunk's
    uses added, another one is added to it."""
    buf = None
    for c in sorted(by_chunk, reverse=True):
        g, seeded = by_chunk[c]
        buf = g if seeded or buf is None else buf + g
    return buf
