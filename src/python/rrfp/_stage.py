"""What one stage computes: the autograd of its chunks, called by the C++ runtime.

The runtime calls forward, backward and weight from the stage's compute thread, one task at a
time, in the order its arbiter picks. Everything here is per stage; the only state shared
with other stages is the step's data (StepData), read-only during a step, and the first
error, under a lock.
"""
import contextlib
import threading
import time

import torch

from ._device import StageDevice, to_device
from ._tree import pack as _pack, pack_grads as _pack_grads, unpack as _unpack, \
    unpack_grads as _unpack_grads


_NO_CONTEXT = contextlib.nullcontext()


class StepData:
    """The step's microbatches, targets and loss function, and what the stages report back."""

    def __init__(self, loss_fn, delay_fn):
        self.loss_fn = loss_fn
        self.delay_fn = delay_fn
        self.seeding = None  # rrfp._seed.Seeding (seed=), or None: tasks draw as they run
        self.seed_step = 0  # the step of the seeds: steps and evaluation steps run so far
        self.caller = None  # the caller's thread-local settings (rrfp._caller), or None
        self.inputs = []
        self.targets = []
        self.losses = {}
        self.sums = None  # GradSums of the step
        # An evaluation step (Pipeline.eval_step): forwards under no_grad, the last chunk's
        # outputs kept by microbatch, and backward tasks that do nothing.
        self.eval = False
        self.outputs = {}
        self._lock = threading.Lock()
        self.error = None  # (stage, task, exception): the first task that raised

    def record(self, stage, task, exc):
        with self._lock:
            if self.error is None:
                self.error = (stage, task, exc)


class _Work:
    """One (chunk, microbatch) between its F and its last backward task."""

    __slots__ = ("inp", "root", "grad", "tree_in", "tree_out")

    def __init__(self, inp, root, tree_in=False, tree_out=False):
        # The chunk's input: a leaf that wants its gradient, or None; for a structure, a list of
        # them, one per tensor the message carried.
        self.inp = inp
        # The chunk's output, or the loss on the last chunk; for a structure, a list of its
        # tensors in flattening order.
        self.root = root
        self.grad = None  # the gradient of root (split backward keeps it for W)
        self.tree_in = tree_in
        self.tree_out = tree_out


class _OrderedSum:
    """Gradients added in microbatch order whatever order the microbatches finish in,
    starting from the .grad each parameter had before the step: the arithmetic of a plain loop
    calling loss.backward() once per microbatch."""

    def __init__(self, params, from_grad):
        self.sums = [_start(p, from_grad) for p in params]
        self.hooks = [_leaf_hooks(p) for p in params]
        self.pending = {}
        self.next = 0

    def put(self, mb, grads):
        self.pending[mb] = grads
        while self.next in self.pending:
            for i, g in enumerate(self.pending.pop(self.next)):
                if g is None:
                    continue
                if self.hooks[i]:
                    g = _run_hooks(self.hooks[i], g)
                if self.sums[i] is None:
                    self.sums[i] = g
                else:
                    self.sums[i] += g
            self.next += 1


class _TiedSum:
    """A parameter that several chunks use (tied weights): in a plain loop autograd adds the
    uses' gradients of one microbatch into one buffer, the chunk nearest the loss first, then
    adds that buffer to .grad. So each microbatch's contributions wait for every user chunk,
    are added last chunk first, and then go into the running sum in microbatch order. The user
    chunks may run on different stage threads: a lock keeps the bookkeeping whole."""

    def __init__(self, param, users, from_grad):
        self.param = param
        self.users = sorted(users, reverse=True)
        self.sum = _start(param, from_grad)
        self.hooks = _leaf_hooks(param)
        self.pending = {}  # mb -> {chunk: gradient or None}
        self.next = 0
        self.lock = threading.Lock()

    def put(self, chunk, mb, g):
        with self.lock:
            self.pending.setdefault(mb, {})[chunk] = g
            while len(self.pending.get(self.next, ())) == len(self.users):
                got = self.pending.pop(self.next)
                buf = None
                for c in self.users:
                    if got[c] is not None:
                        buf = got[c] if buf is None else buf + got[c]
                if buf is not None:
                    if self.hooks:
                        buf = _run_hooks(self.hooks, buf)
                    self.sum = buf if self.sum is None else self.sum.add_(buf)
                self.next += 1


class GradSums:
    """One step's parameter gradients over this process's chunks: each chunk's own parameters
    in an _OrderedSum, each parameter used by several chunks in one _TiedSum."""

    def __init__(self, chunk_params, from_grad):
        users = {}  # id(param) -> chunks using it
        for c in sorted(chunk_params):
            for p in chunk_params[c]:
                users.setdefault(id(p), []).append(c)
        self._own = {}  # chunk -> (indices of its own parameters, their _OrderedSum)
        self._tied = {}  # chunk -> [(index in the chunk's list, _TiedSum)]
        tied = {}
        for c in sorted(chunk_params):
            ps = chunk_params[c]
            own = [i for i, p in enumerate(ps) if len(users[id(p)]) == 1]
            self._own[c] = (None if len(own) == len(ps) else own,
                            _OrderedSum([ps[i] for i in own], from_grad))
            self._tied[c] = []
            for i, p in enumerate(ps):
                if len(users[id(p)]) > 1:
                    if id(p) not in tied:
                        tied[id(p)] = _TiedSum(p, users[id(p)], from_grad)
                    self._tied[c].append((i, tied[id(p)]))
        self._chunk_params = chunk_params

    def put(self, chunk, mb, grads):
        own, ordered = self._own[chunk]
        ordered.put(mb, grads if own is None else [grads[i] for i in own])
        for i, t in self._tied[chunk]:
            t.put(chunk, mb, grads[i])

    def pairs(self):
        """(parameter, gradient or None), each parameter once: chunk order, then the chunk's."""
        out, seen = [], set()
        for c in sorted(self._chunk_params):
            own, ordered = self._own[c]
            sums = iter(ordered.sums)
            tied = dict(self._tied[c])
            for i, p in enumerate(self._chunk_params[c]):
                if i in tied:
                    if id(p) not in seen:
                        seen.add(id(p))
                        out.append((p, tied[i].sum))
                else:
                    out.append((p, next(sums)))
        return out


def _start(p, from_grad):
    return None if p.grad is None or not from_grad else p.grad.detach().clone()


def _leaf_hooks(p):
    """The hooks registered on parameter p (p.register_hook), where this torch's engine does not
    run them itself: a plain loop's backward runs them on each microbatch's gradient of p, all
    of its uses summed, before adding it to .grad; torch 1.13's autograd.grad, which computes a
    stage's gradients, leaves them out (newer torch runs them)."""
    if _ENGINE_RUNS_LEAF_HOOKS or not p._backward_hooks:
        return []
    return list(p._backward_hooks.values())


def _run_hooks(hooks, g):
    for hook in hooks:
        out = hook(g)
        if out is not None:
            g = out
    return g


class StageRunner:
    def __init__(self, stage, modules, last_chunk, split, data, place=None, device=None):
        """place: the device Pipeline was given (inputs and targets are moved there), or None;
        device: the stage's StageDevice (stream, completion)."""
        self.stage = stage
        self.place = place
        self.device = device or StageDevice(None)
        self.modules = modules  # {chunk index: nn.Module}, this stage's chunks
        self.last_chunk = last_chunk
        self.split = split
        self.data = data
        self.params = {}
        self.refresh_params()
        self.work = {}
        # Tasks this stage has run, for the progress line: only the stage's thread writes it,
        # so no lock is taken per task.
        self.tasks_done = 0

    def refresh_params(self):
        """The parameters each chunk trains, as the step starts: a parameter frozen, unfrozen
        or replaced since the last step (fine-tuning schedules do all three) counts as it is
        now, as it would in a plain loop."""
        self.params = {c: [p for p in m.parameters() if p.requires_grad]
                       for c, m in self.modules.items()}

    # -- called by the runtime --------------------------------------------------------------

    def begin_step(self, step):
        self.work = {}

    def end_step(self, step):
        self.work = {}  # frees what a failed step left

    def forward(self, chunk, mb, x):
        return self._run("F", chunk, mb, self._forward, x)

    def backward(self, chunk, mb, g):
        return self._run("B", chunk, mb, self._backward, g)

    def weight(self, chunk, mb):
        return self._run("W", chunk, mb, self._weight)

    # -- the work -------------------------------------------------------------------------

    def _run(self, kind, chunk, mb, fn, *args):
        try:
            if self.data.delay_fn is not None:
                d = self.data.delay_fn(self.stage, kind, chunk, mb)
                if d:
                    time.sleep(d)  # releases the GIL, as a slow kernel would
            seeding, caller = self.data.seeding, self.data.caller
            with caller.around(kind) if caller is not None else _NO_CONTEXT:
                if seeding is None:
                    out = self._on_device(fn, chunk, mb, args)
                else:
                    with seeding.task(kind, self.data.seed_step, chunk, mb, self._device(chunk)):
                        out = self._on_device(fn, chunk, mb, args)
            self.tasks_done += 1
            return out
        except BaseException as e:
            self.data.record(self.stage, f"{kind} c{chunk} m{mb}", e)
            raise

    def _on_device(self, fn, chunk, mb, args):
        if self.device.stream is None:  # no stream to enter and none to wait for
            return fn(chunk, mb, *args)
        with self.device.scope():
            out = fn(chunk, mb, *args)
        self.device.settle()  # done when the GPU is, not when the host enqueued it
        return out

    def _device(self, chunk):
        if self.place is not None:
            return self.place
        for p in self.modules[chunk].parameters():
            return p.device
        return None

    def _forward(self, chunk, mb, x):
        if self.data.eval:
            return self._eval_forward(chunk, mb, x)
        module = self.modules[chunk]
        tree_in = isinstance(x, tuple)  # (structure, tensors): a structure between chunks
        if chunk == 0:
            inp = None
            arg = to_device(self.data.inputs[mb], self.place)
        elif tree_in:
            dev = self._device(chunk)
            inp = [_input_leaf(t, dev) for t in x[1]]
            arg = _unpack(x[0], [t if leaf is None else leaf for t, leaf in
                                 zip((t if dev is None else t.to(dev) for t in x[1]), inp)])
        else:
            dev = self._device(chunk)
            arg = x if dev is None else x.to(dev)
            inp = _input_leaf(arg, None)
            if inp is not None:
                arg = inp
        out = module(arg)
        if chunk == self.last_chunk:
            targets = self.data.targets  # None: the step was given none
            loss = self.data.loss_fn(out, None if targets is None else
                                     to_device(targets[mb], self.place))
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise TypeError("loss_fn must return a tensor with one element, got "
                                + (f"shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor)
                                   else type(loss).__name__))
            self.data.losses[mb] = loss.detach()
            self.work[(chunk, mb)] = _Work(inp, loss, tree_in)
            return None
        if isinstance(out, torch.Tensor):
            self.work[(chunk, mb)] = _Work(inp, out, tree_in)
            return out
        structure, tensors = _pack(out, f"chunk {chunk}")
        self.work[(chunk, mb)] = _Work(inp, tensors, tree_in, tree_out=True)
        return structure, tensors

    def _eval_forward(self, chunk, mb, x):
        """The forward of an evaluation step: no graph, no leaves; the last chunk keeps its
        output (and, given targets, the loss)."""
        dev = self._device(chunk)
        if chunk == 0:
            arg = to_device(self.data.inputs[mb], self.place)
        elif isinstance(x, tuple):
            arg = _unpack(x[0], [t if dev is None else t.to(dev) for t in x[1]])
        else:
            arg = x if dev is None else x.to(dev)
        with torch.no_grad():
            out = self.modules[chunk](arg)
            if chunk == self.last_chunk:
                self.data.outputs[mb] = out
                if self.data.targets is not None:
                    loss = self.data.loss_fn(out, to_device(self.data.targets[mb], self.place))
                    self.data.losses[mb] = loss.detach()
                return None
        if isinstance(out, torch.Tensor):
            return out
        return _pack(out, f"chunk {chunk}")

    def _backward(self, chunk, mb, g):
        if self.data.eval:
            return None  # an evaluation step: nothing flows back
        w = self.work[(chunk, mb)]
        last = chunk == self.last_chunk
        roots, grads = ([w.root], [None]) if last else self._output_grads(chunk, w, g)
        if not roots:
            # No output took a gradient (integer ids, say): nothing flows back from here, and
            # the parameters before it get none, as in a plain loop.
            if not self.split:
                del self.work[(chunk, mb)]
                self._put(chunk, mb, [None] * len(self.params[chunk]))
            w.root = None  # W has nothing to add either
            return _pack_grads([None] * len(w.inp)) if w.tree_in else None
        inputs = w.inp if w.tree_in else ([w.inp] if w.inp is not None else [])
        wanted = [t for t in inputs if t is not None]
        params = self.params[chunk]
        if not self.split:
            del self.work[(chunk, mb)]
            got = _grad(roots, wanted + params, None if last else grads, retain=False)
            self._put(chunk, mb, got[len(wanted):])
            return _input_grads(w, got[:len(wanted)])
        # Split: B is the input gradient only; the graph stays for W.
        w.root, w.grad = roots, (None if last else grads)
        if not wanted:
            return _input_grads(w, [])
        return _input_grads(w, _grad(roots, wanted, w.grad, retain=True))

    def _weight(self, chunk, mb):
        if self.data.eval:
            return
        w = self.work.pop((chunk, mb))
        if w.root is None:  # no gradient came (see _backward): nothing to add
            self._put(chunk, mb, [None] * len(self.params[chunk]))
            return
        self._put(chunk, mb, _grad(w.root, self.params[chunk], w.grad, retain=False))

    def _put(self, chunk, mb, grads):
        # A tied parameter's sum adds gradients of several stages: each stage's kernels must
        # have completed before another stage's stream reads what they wrote.
        self.device.settle()
        self.data.sums.put(chunk, mb, grads)

    def _output_grads(self, chunk, w, g):
        """The outputs that take a gradient and their gradients, as lists: a tensor's from the
        next chunk's tensor message, a structure's from its structure message."""
        if g is None:
            return [], []
        if not w.tree_out:
            g = g.to(w.root.device)
            if g.shape != w.root.shape:
                raise ValueError(f"chunk {chunk} got an output gradient of shape {tuple(g.shape)} "
                                 f"for its output of shape {tuple(w.root.shape)}")
            return [w.root], [g]
        grads = _unpack_grads(g)
        if len(grads) != len(w.root):
            raise ValueError(f"chunk {chunk} got {len(grads)} output gradients for the "
                             f"{len(w.root)} tensors of its output")
        pairs = [(r, d.to(r.device)) for r, d in zip(w.root, grads)
                 if d is not None and r.requires_grad]
        return [r for r, _ in pairs], [d for _, d in pairs]


def _input_leaf(t, dev):
    """A received floating-point tensor as a leaf that wants its gradient; None for the rest
    (integer ids, masks), which take none."""
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        return None
    if dev is not None:
        t = t.to(dev)
    return t.detach().requires_grad_(True)


def _input_grads(w, got):
    """What B sends back: for a tensor input its gradient (zeros where none reached it, as
    before); for a structure, one entry per tensor it carried, None where no gradient goes."""
    if not w.tree_in:
        return _input_grad(got[0] if got else None, w.inp)
    it = iter(got)
    return _pack_grads([None if leaf is None else next(it) for leaf in w.inp])


# torch.autograd.grad checks and normalises its arguments in Python before it calls the engine:
# about a tenth of a small task's time. _grad calls the engine itself where those checks have
# nothing to do: plain tensors (no __torch_function__ to dispatch), a gradient given for every
# root but a scalar loss, and shapes the caller checked (the engine checks them again).
_ENGINE = getattr(torch.autograd.Variable, "_execution_engine", None)
_has_torch_function = getattr(torch._C, "_has_torch_function", None)


def _grad(roots, targets, grads, retain):
    """The gradients of `roots` (a list) with respect to `targets`, None where a target took
    none; `grads`: the roots' gradients, or None for a one-element loss."""
    if not targets:
        return []
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


def _engine_runs_leaf_hooks():
    """Whether _grad runs the hooks of the leaves it differentiates with respect to."""
    t = torch.zeros(1, requires_grad=True)
    ran = []
    t.register_hook(lambda g: ran.append(True))
    _grad([(t * 2).sum()], [t], None, retain=False)
    return bool(ran)


_ENGINE_RUNS_LEAF_HOOKS = _engine_runs_leaf_hooks()


def _input_grad(dx, inp):
    if inp is None:
        return None
    return torch.zeros_like(inp) if dx is None else dx
