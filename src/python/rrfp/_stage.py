"""What one stage computes: the autograd of its chunks, called by the C++ runtime.

The runtime calls forward, backward and weight from the stage's compute thread, one task at a
time, in the order its arbiter picks. Everything here is per stage; the only state shared
with other stages is the step's data (rrfp._step_data.StepData), read-only during a step, and the first
error, under a lock.
"""
import contextlib

import torch

from . import _hook_watch
from ._device import StageDevice, to_device
from ._order import StateWatch as _StateWatch
from ._frozen import FrozenTarget as _FrozenTarget, RequiresGradChanged as _RequiresGradChanged
from ._autograd import grad as _grad
from ._grads import parameter_name as _parameter_name
from ._graph import walk_leaves as _walk_leaves, \
    module_backward_hooks as _module_backward_hooks, whole_backward as _whole_backward, \
    backward_failure as _backward_failure
from ._leaves import begins_in_place as _begins_in_place, \
    check_still_wanted as _check_still_wanted, input_grads as _sent_back, \
    input_leaf as _input_leaf
from ._returned import checked_loss as _checked_loss, gradless as _gradless, wait as _wait
from ._tree import pack as _pack, pack_grads as _pack_grads, \
    refuse_subclass as _refuse_subclass, unpack as _unpack, unpack_grads as _unpack_grads, \
    wants_grad as _wants_grad


_NO_CONTEXT = contextlib.nullcontext()


class _Work:
    """One (chunk, microbatch) between its F and its last backward task."""

    __slots__ = ("inp", "root", "grad", "weights", "seeded", "early", "tree_in", "tree_out")

    def __init__(self, inp, root, tree_in=False, tree_out=False):
        # The chunk's input: a leaf that wants its gradient, or None; for a structure, a list of
        # them, one per tensor the message carried.
        self.inp = inp
        # The chunk's output, or the loss on the last chunk; for a structure, a list of its
        # tensors in flattening order.
        self.root = root
        self.grad = None  # the gradient of root (split backward keeps it for W)
        # The weight gradients, where B computed them too (StageRunner.whole): W hands them over.
        self.weights = None
        self.seeded = ()  # the indices of the weights computed from their seeds (GradSums)
        self.early = ()  # the indices of tied parameters whose gradient B put (GradSums.early)
        self.tree_in = tree_in
        self.tree_out = tree_out


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
        self.refresh_params()  # sets self.params and self.copy_input
        self.work = {}
        # Tasks this stage has run, for the progress line: only the stage's thread writes it,
        # so no lock is taken per task.
        self.tasks_done = 0
        self.state = _StateWatch(modules)  # running statistics a backward updates: said

    def refresh_params(self):
        """The parameters each chunk trains, as the step starts: a parameter frozen, unfrozen
        or replaced since the last step (fine-tuning schedules do all three) counts as it is
        now, as it would in a plain loop."""
        # And those frozen: one a forward unfreezes fails the step (GradSums.toggled).
        self.params, self.frozen = {}, {}
        for c, m in self.modules.items():
            ps = list(m.parameters())
            self.params[c] = [p for p in ps if p.requires_grad]
            self.frozen[c] = [p for p in ps if not p.requires_grad]
        # Split backward: chunks whose backward runs Python of the user's (hooks, custom
        # Functions), which a split would run twice: B computes their whole backward. Found
        # again each step.
        self.whole = {c: self.split and _module_backward_hooks(m)
                      for c, m in self.modules.items()}
        # Chunks whose first operation changes their input in place get a copy of it
        # (_forward); found again each step too (an in-place module put first between steps
        # failed as one changing its input otherwise).
        self.copy_input = {c: _begins_in_place(m) for c, m in self.modules.items()}

    # -- called by the runtime --------------------------------------------------------------

    def begin_step(self, step):
        self.work = {}
        self.state.begin_step(self.data.stateful, self.data.eval)

    def end_step(self, step):
        self.work = {}  # frees what a failed step left
        self.state.end_step()

    def forward(self, chunk, mb, x):
        if not self.split or self.whole[chunk] or self.data.eval:
            return self._run("F", chunk, mb, self._forward, x)
        caller = self.data.caller
        if caller is not None and caller.saved_hooks:  # the caller's, which W would unpack again
            self.whole[chunk] = True
            return self._run("F", chunk, mb, self._forward, x)
        # A hook the forward puts on a tensor of its own would run in B and again in W.
        outer = _hook_watch.watch()
        try:
            return self._run("F", chunk, mb, self._forward, x)
        finally:
            if _hook_watch.seen(outer):
                self.whole[chunk] = True  # for the rest of the step, as a module hook makes it

    def backward(self, chunk, mb, g):
        # An evaluation's backward tasks do nothing: not watched.
        return self.state.around(chunk, not self.data.eval,
                                 lambda: self._run("B", chunk, mb, self._backward, g))

    def weight(self, chunk, mb):
        return self.state.around(chunk, True, lambda: self._run("W", chunk, mb, self._weight))

    # -- the work -------------------------------------------------------------------------

    def _run(self, kind, chunk, mb, fn, *args):
        try:
            if self.data.delay_fn is not None:
                _wait(self.data.delay_fn, self.stage, kind, chunk, mb)
            seeding, caller = self.data.seeding, self.data.caller
            if seeding is None and caller is None:  # the common path: no context to enter
                out = self._on_device(fn, chunk, mb, args)
            elif caller is None:
                out = self._under(None, seeding, kind, fn, chunk, mb, args)
            else:  # in the caller's contextvars context, which runs it
                out = caller.run(self.stage, self._under, caller, seeding, kind, fn, chunk, mb,
                                 args)
            self.tasks_done += 1
            return out
        except BaseException as e:
            why = _backward_failure(kind, chunk, e)
            self.data.record(self.stage, f"{kind} c{chunk} m{mb}", why or e)
            if why is not None:
                raise why from e
            raise

    def _under(self, caller, seeding, kind, fn, chunk, mb, args):
        with caller.around(kind) if caller is not None else _NO_CONTEXT:
            if seeding is None:
                return self._on_device(fn, chunk, mb, args)
            with seeding.task(kind, self.data.seed_step, chunk, mb, self._device(chunk)):
                return self._on_device(fn, chunk, mb, args)

    def _on_device(self, fn, chunk, mb, args):
        if args:
            self.device.adopt(args[0])
        if self.device.stream is None:  # no stream to enter and none to wait for
            return self.device.hand_off(fn(chunk, mb, *args))
        with self.device.scope():
            out = self.device.hand_off(fn(chunk, mb, *args))
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
            inp = [_input_leaf(t, dev) if want else None
                   for t, want in zip(x[1], _wants_grad(x[0]))]
            arg = _unpack(x[0], [t if leaf is None else leaf for t, leaf in
                                 zip((t if dev is None else t.to(dev) for t in x[1]), inp)])
        else:
            dev = self._device(chunk)
            arg = x if dev is None else x.to(dev)
            inp = _input_leaf(arg, None)
            if inp is not None:
                # A leaf that wants its gradient cannot change in place; its copy can, at the
                # cost of one copy of the input.
                arg = inp.clone() if self.copy_input[chunk] else inp
        try:
            out = module(arg)
        except RuntimeError as e:
            if chunk == 0 or "leaf Variable that requires grad is being used in an in-place" \
                    not in str(e):
                raise
            raise RuntimeError(
                f"chunk {chunk} changes the input it receives in place, which the pipeline "
                "hands it as a leaf that wants its gradient, and autograd lets no such leaf "
                "change in place; a chunk that is an nn.Sequential whose first module is in "
                "place (nn.ReLU(inplace=True), say) gets a copy, but this one changes it "
                "otherwise (in its own forward, or after another operation): make that "
                "operation out of place (inplace=False), or make the chunk an nn.Sequential "
                "that begins with it") from e
        _check_still_wanted(chunk, inp)
        if chunk == self.last_chunk:
            targets = self.data.targets  # None: the step was given none
            loss = _checked_loss(self.data.loss_fn(out, None if targets is None else
                                                   to_device(targets[mb], self.place)), True)
            # A loss that wants no gradient (a constant for an all-padding microbatch) has no
            # backward; one in no microbatch is a step that trains nothing, silently.
            self.data.gradless += not loss.requires_grad
            if self.data.gradless == len(self.data.inputs):
                raise _gradless(chunk, out, loss, module)
            self.data.losses[mb] = loss.detach()
            scaler = self.data.scaler
            if scaler is not None:
                loss = scaler._scaled(loss)
            self._count_uses(chunk, mb, [loss])
            self.work[(chunk, mb)] = _Work(inp, loss, tree_in)
            return None
        # One tensor travels on the one-tensor path and arrives wanting a gradient if it is a
        # float; one that wants none (a frozen chunk's output) goes as a structure, which says so.
        if isinstance(out, torch.Tensor) and (out.requires_grad or not out.is_floating_point()):
            _refuse_subclass(out, f"chunk {chunk}")
            self._count_uses(chunk, mb, [out])
            self.work[(chunk, mb)] = _Work(inp, out, tree_in)
            return out
        structure, tensors = _pack(out, f"chunk {chunk}")
        self._count_uses(chunk, mb, tensors)
        self.work[(chunk, mb)] = _Work(inp, tensors, tree_in, tree_out=True)
        return structure, tensors

    def _count_uses(self, chunk, mb, roots):
        # Before any chunk's backward of this microbatch: each user's B then knows whether the
        # tied parameter's gradient must be computed in B (GradSums.early).
        if self.data.sums.counts(chunk):
            self.data.sums.count(chunk, mb, roots)

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
                    self.data.losses[mb] = _checked_loss(loss, False).detach()
                return None
        if isinstance(out, torch.Tensor):
            _refuse_subclass(out, f"chunk {chunk}")
            return out
        return _pack(out, f"chunk {chunk}")

    def _backward(self, chunk, mb, g):
        if self.data.eval:
            return None  # an evaluation step: nothing flows back
        w = self.work[(chunk, mb)]
        last = chunk == self.last_chunk
        roots, grads = (([w.root] if w.root.requires_grad else []), [None]) if last else \
            self._output_grads(chunk, w, g)
        if not roots:
            # No output took a gradient (integer ids, say), or the loss wants none (a constant
            # for all padding): nothing flows back from here, and the parameters before it get
            # none, as in a plain loop.
            if not self.split:
                del self.work[(chunk, mb)]
                self._put(chunk, mb, [None] * len(self.params[chunk]))
            else:
                w.early = self.data.sums.early(chunk, mb)
                self._put_tied(chunk, mb, dict.fromkeys(w.early), ())
            w.root = None  # W has nothing to add either
            return _pack_grads([None] * len(w.inp)) if w.tree_in else None
        inputs = w.inp if w.tree_in else ([w.inp] if w.inp is not None else [])
        wanted = [t for t in inputs if t is not None]
        params = self.params[chunk]
        # Every microbatch's graph: a use that depends on the data (a branch taken for some
        # microbatches) missed its gradient silently when only each chunk's first backward of
        # a step was walked. The walk is C++ (3.4 us for a transformer block's 63 nodes, where
        # Python's took 28 us). Leaves the forward made itself are differentiated with the
        # input, and their gradients go to their .grad (_sent).
        made, written = _walk_leaves(chunk, last, roots, wanted + params, self.data)
        if made:
            wanted = wanted + made
        grads = None if last else grads
        every = range(len(params))
        # The leaves' buffers of the later chunks of the microbatch, whose backward has run.
        leaf_seeds = self.data.made.seeds(chunk, mb, made) if made else ()
        if not self.split:
            del self.work[(chunk, mb)]
            dx, got, seeded = self._grads(chunk, mb, roots, grads, wanted, every, retain=False,
                                          leaf_seeds=leaf_seeds, keep=written)
            self._put(chunk, mb, got, seeded)
            return self._sent(chunk, mb, w, dx, made, leaf_seeds)
        w.early = self.data.sums.early(chunk, mb)
        if self.whole[chunk] or any(r._backward_hooks for r in roots) or \
                _whole_backward(roots):
            # Backward hooks and custom Functions on the way to both the input and the
            # parameters would run in B and again in W: B computes everything at once, and W
            # hands the weight gradients over, so they run once a microbatch as in a plain loop.
            # A hook on the chunk's output is one too (one that doubled its gradient in place
            # doubled the weights' twice); so is a view changed in place (_whole_backward).
            self.whole[chunk] = True  # for the rest of the step: no more graphs to walk
            dx, got, seeded = self._grads(chunk, mb, roots, grads, wanted, every, retain=False,
                                          leaf_seeds=leaf_seeds, keep=written)
            self._put_tied(chunk, mb, {i: got[i] for i in w.early}, seeded)
            w.root, w.weights, w.seeded = None, got, seeded
            return self._sent(chunk, mb, w, dx, made, leaf_seeds)
        # Split: B is the input gradient only (and the early tied parameters'); the graph
        # stays for W.
        w.root, w.grad = roots, grads
        if not wanted and not w.early:
            return _sent_back(w.tree_in, w.inp, [])
        if grads is not None and any(t._backward_hooks for t in wanted):
            # A hook on the input may change the gradient it gets in place, and that can be the
            # output's gradient itself (y = x + b passes it through): W, which reads it later,
            # saw the change, where a plain loop's parameters take theirs before the hook runs.
            # (torch 2's engine runs the input's hooks inside B; torch 1.13's, rrfp after it, on
            # a copy: _leaves.py.)
            grads = [g if g is None else g.clone() for g in grads]
        dx, got, seeded = self._grads(chunk, mb, roots, grads, wanted, w.early, retain=True,
                                      leaf_seeds=leaf_seeds, keep=written)
        self._put_tied(chunk, mb, dict(zip(w.early, got)), seeded)
        return self._sent(chunk, mb, w, dx, made, leaf_seeds)

    def _sent(self, chunk, mb, w, dx, made, leaf_seeds=()):
        """What B sends back (input_grads); the gradients of the leaves the forward made, the
        last of `dx`, wait for the step's end (MadeGrads), where they go to their .grad as a
        plain loop's backward adds them (`leaf_seeds`: those computed from a seed)."""
        if made:
            n = len(dx) - len(made)
            self.data.made.put(chunk, mb, made, dx[n:], {i for i, _, _ in leaf_seeds})
            dx = dx[:n]
        return _sent_back(w.tree_in, w.inp, dx)

    def _weight(self, chunk, mb):
        if self.data.eval:
            return
        w = self.work.pop((chunk, mb))
        n = len(self.params[chunk])
        if w.weights is not None:  # B computed them (self.whole)
            self._put(chunk, mb, w.weights, w.seeded, w.early)
            return
        if w.root is None:  # no gradient came (see _backward): nothing to add
            self._put(chunk, mb, [None] * n, (), w.early)
            return
        if not w.early:
            _, got, seeded = self._grads(chunk, mb, w.root, w.grad, [], range(n), retain=False)
            self._put(chunk, mb, got, seeded)
            return
        rest = [i for i in range(n) if i not in w.early]
        _, got, seeded = self._grads(chunk, mb, w.root, w.grad, [], rest, retain=False)
        full = [None] * n
        for i, g in zip(rest, got):
            full[i] = g
        self._put(chunk, mb, full, seeded, w.early)

    def _grads(self, chunk, mb, roots, grads, wanted, which, retain, leaf_seeds=(), keep=()):
        """The gradients of the inputs `wanted` and of the chunk's parameters at the indices
        `which`, and the indices of those computed from a seed: each tied parameter whose later
        user chunks' gradient of the microbatch is known is given it as the gradient of one
        more root, the parameter itself. The engine adds the roots' gradients to their nodes'
        buffers before it runs any node, so the chunk's uses are added after the later chunks'
        as in a plain loop's backward (_TiedSum). `leaf_seeds`: MadeGrads.seeds() of the leaves
        the forward made, among `wanted`, given alike. `keep`: leaves whose .grad and hooks the
        engine must not reach (_autograd.grad)."""
        params = self.params[chunk]
        seeds = self.data.sums.seeds(chunk, mb, which)
        if seeds or leaf_seeds:
            if grads is None:  # the loss: the engine would start it from ones
                grads = [torch.ones_like(r, memory_format=torch.preserve_format) for r in roots]
            roots = [params[i] for i, _ in seeds] + [leaf for _, leaf, _ in leaf_seeds] + \
                list(roots)
            grads = [s for _, s in seeds] + [s for _, _, s in leaf_seeds] + list(grads)
        targets = params if len(which) == len(params) else [params[i] for i in which]
        try:
            got = _grad(roots, wanted + targets, grads, retain, keep)
        except _FrozenTarget as e:
            c, n = _parameter_name(self.modules, e.param, [chunk])
            raise _RequiresGradChanged(f"chunk {c}'s '{n}'", e.param) from None
        return got[:len(wanted)], got[len(wanted):], {i for i, _ in seeds}

    def _put(self, chunk, mb, grads, seeded=(), skip=()):
        # A tied parameter's sum adds gradients of several stages: each stage's kernels must
        # have completed before another stage's stream reads what they wrote.
        self.device.settle()
        self.data.sums.put(chunk, mb, grads, seeded, skip)

    def _put_tied(self, chunk, mb, got, seeded):
        if got:
            self.device.settle()
            self.data.sums.put_tied(chunk, mb, got, seeded)

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

