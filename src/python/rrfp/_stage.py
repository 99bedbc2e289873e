"""What one stage computes: the autograd of its chunks, called by the C++ runtime.

The runtime calls forward, backward and weight from the stage's compute thread, one task at a
time, in the order its arbiter picks. Everything here is per stage; the only state shared
with other stages is the step's data (StepData), read-only during a step, and the first
error, under a lock.
"""
import threading
import time

import torch


class StepData:
    """The step's microbatches, targets and loss function, and what the stages report back."""

    def __init__(self, loss_fn, delay_fn):
        self.loss_fn = loss_fn
        self.delay_fn = delay_fn
        self.inputs = []
        self.targets = []
        self.losses = {}
        self.sums = None  # GradSums of the step
        self._lock = threading.Lock()
        self.error = None  # (stage, task, exception): the first task that raised

    def record(self, stage, task, exc):
        with self._lock:
            if self.error is None:
                self.error = (stage, task, exc)


class _Work:
    """One (chunk, microbatch) between its F and its last backward task."""

    __slots__ = ("inp", "root", "grad")

    def __init__(self, inp, root):
        self.inp = inp  # the chunk's input: a leaf that wants its gradient, or None
        self.root = root  # the chunk's output, or the loss on the last chunk
        self.grad = None  # the gradient of root, kept for W (split backward)


class _OrderedSum:
    """Gradients added in microbatch order whatever order the microbatches finish in,
    starting from the .grad each parameter had before the step: the arithmetic of a plain loop
    calling loss.backward() once per microbatch."""

    def __init__(self, params, from_grad):
        self.sums = [_start(p, from_grad) for p in params]
        self.pending = {}
        self.next = 0

    def put(self, mb, grads):
        self.pending[mb] = grads
        while self.next in self.pending:
            for i, g in enumerate(self.pending.pop(self.next)):
                if g is None:
                    continue
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


class StageRunner:
    def __init__(self, stage, modules, last_chunk, split, data):
        self.stage = stage
        self.modules = modules  # {chunk index: nn.Module}, this stage's chunks
        self.last_chunk = last_chunk
        self.split = split
        self.data = data
        self.params = {c: [p for p in m.parameters() if p.requires_grad] for c, m in modules.items()}
        self.work = {}

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
            return fn(chunk, mb, *args)
        except BaseException as e:
            self.data.record(self.stage, f"{kind} c{chunk} m{mb}", e)
            raise

    def _device(self, chunk):
        for p in self.modules[chunk].parameters():
            return p.device
        return None

    def _forward(self, chunk, mb, x):
        module = self.modules[chunk]
        if chunk == 0:
            inp = None
            arg = self.data.inputs[mb]
        else:
            dev = self._device(chunk)
            arg = x if dev is None else x.to(dev)
            if arg.is_floating_point():
                arg = arg.detach().requires_grad_(True)
                inp = arg
            else:
                inp = None
        out = module(arg)
        if not isinstance(out, torch.Tensor):
            raise TypeError(
                f"chunk {chunk} returned {type(out).__name__}; a chunk must return one tensor")
        if chunk == self.last_chunk:
            loss = self.data.loss_fn(out, self.data.targets[mb])
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise TypeError("loss_fn must return a tensor with one element, got "
                                + (f"shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor)
                                   else type(loss).__name__))
            self.data.losses[mb] = loss.detach()
            self.work[(chunk, mb)] = _Work(inp, loss)
            return None
        self.work[(chunk, mb)] = _Work(inp, out)
        return out

    def _backward(self, chunk, mb, g):
        w = self.work[(chunk, mb)]
        if chunk != self.last_chunk and g is None:
            # The next chunk's input took no gradient (this chunk's output is not a
            # floating-point tensor, token ids say): nothing flows back from here, and the
            # parameters before it get none, as in a plain loop.
            if not self.split:
                del self.work[(chunk, mb)]
                self.data.sums.put(chunk, mb, [None] * len(self.params[chunk]))
            return None
        if chunk != self.last_chunk:
            g = g.to(w.root.device)
            if g.shape != w.root.shape:
                raise ValueError(f"chunk {chunk} got an output gradient of shape {tuple(g.shape)} "
                                 f"for its output of shape {tuple(w.root.shape)}")
        else:
            g = None  # the loss itself
        params = self.params[chunk]
        if not self.split:
            del self.work[(chunk, mb)]
            targets = ([w.inp] if w.inp is not None else []) + params
            grads = _grad(w.root, targets, g, retain=False)
            if w.inp is not None:
                dx, grads = grads[0], grads[1:]
            else:
                dx = None
            self.data.sums.put(chunk, mb, grads)
            return _input_grad(dx, w.inp)
        # Split: B is the input gradient only; the graph stays for W.
        w.grad = g
        if w.inp is None:
            return None
        (dx,) = _grad(w.root, [w.inp], g, retain=True)
        return _input_grad(dx, w.inp)

    def _weight(self, chunk, mb):
        w = self.work.pop((chunk, mb))
        if chunk != self.last_chunk and w.grad is None:  # no gradient came (see _backward)
            self.data.sums.put(chunk, mb, [None] * len(self.params[chunk]))
            return
        self.data.sums.put(chunk, mb, _grad(w.root, self.params[chunk], w.grad, retain=False))


def _grad(root, targets, grad, retain):
    if not targets:
        return []
    return list(torch.autograd.grad(root, targets, grad_outputs=grad, retain_graph=retain,
                                    allow_unused=True))


def _input_grad(dx, inp):
    if inp is None:
        return None
    return torch.zeros_like(inp) if dx is None else dx
