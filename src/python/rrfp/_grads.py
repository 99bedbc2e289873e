"""A stage's gradients summed over the step for this process's chunks (GradSums), added in
microbatch order as a plain loop adds them, with a parameter's hooks run where a plain loop's
backward runs them (autograd itself is called in _autograd.py)."""
import threading
import warnings

import torch

from . import _autograd
from ._autograd import accumulate, leaf_hooks, run_hooks
from ._graph import leaf_uses


class _OrderedSum:
    """Gradients added in microbatch order whatever order the microbatches finish in,
    starting from the .grad each parameter had before the step: the arithmetic of a plain loop
    calling loss.backward() once per microbatch."""

    def __init__(self, params, start):
        self.sums = [start(p) for p in params]
        self.touched = [False] * len(params)  # whether the step's backward reached each
        hooks = [leaf_hooks(p) for p in params]
        self.hooks = hooks if any(hooks) else None  # None: no parameter has one (the usual)
        self.pending = {}
        self.next = 0

    def put(self, mb, grads):
        self.pending[mb] = grads
        while self.next in self.pending:
            for i, g in enumerate(self.pending.pop(self.next)):
                if g is None:
                    continue
                hooks = self.hooks[i] if self.hooks is not None else None
                self.sums[i] = accumulate(self.sums[i], g, hooks)
                self.touched[i] = True
            self.next += 1


class _TiedSum:
    """A parameter that several chunks use (tied weights). In a plain loop autograd adds every
    use's gradient of one microbatch into one buffer, in the order its backward reaches them
    (every use in the chunk nearest the loss before any use in the chunk before it), then adds
    that buffer to .grad. A chunk's own autograd call adds its uses in that same order, so a
    call that starts from the later user chunks' buffer of the microbatch (seed(): the chunk's
    gradient is then `seeded`) carries that buffer on bitwise. A gradient computed without it
    (the later chunks' not known yet) is the sum of the chunk's own uses, added to theirs: the
    same bits for one use (two terms commute), not for two or more, where the loop adds
    (B + u2) + u1 and this B + (u2 + u1); such a microbatch is noted in `inexact`. Each
    microbatch's buffer then goes into the running sum in microbatch order. The user chunks may
    run on different stage threads: a lock keeps the bookkeeping whole."""

    def __init__(self, param, users, start):
        self.param = param
        self.users = sorted(users, reverse=True)
        self.sum = start(param)
        self.touched = False  # whether the step's backward reached it
        self.hooks = leaf_hooks(param)
        # A torch whose autograd.grad runs the parameter's hooks would run them on the seed,
        # which they have run on already.
        self.seedable = not (_autograd.ENGINE_RUNS_LEAF_HOOKS and param._backward_hooks)
        self.pending = {}  # mb -> {chunk: (gradient or None, seeded)}
        self.uses = {}  # mb -> {chunk: how often its forward used the parameter}, where counted
        self.inexact = set()  # chunks whose uses were summed on their own
        self.next = 0
        self.lock = threading.Lock()

    def count(self, chunk, mb, n):
        with self.lock:
            self.uses.setdefault(mb, {})[chunk] = n

    def needs_seed(self, mb):
        """Whether a user chunk other than the one nearest the loss used the parameter more
        than once in microbatch mb (not counted: assumed so)."""
        with self.lock:
            uses = self.uses.get(mb, {})
            return self.seedable and any(uses.get(c, 2) > 1 for c in self.users[1:])

    def seed(self, chunk, mb):
        """The buffer of microbatch mb over the user chunks after `chunk`, once every one of
        them has put its gradient; None before that, or where none of them took one."""
        if not self.seedable:
            return None
        with self.lock:
            got = self.pending.get(mb, {})
            later = [c for c in self.users if c > chunk]
            if not all(c in got for c in later):
                return None
            return self._buffer(got, later, mb)[0]

    def put(self, chunk, mb, g, seeded):
        with self.lock:
            self.pending.setdefault(mb, {})[chunk] = (g, seeded)
            added = False
            while len(self.pending.get(self.next, ())) == len(self.users):
                added = True
                buf, owned = self._buffer(self.pending.pop(self.next), self.users, self.next,
                                          final=True)
                self.uses.pop(self.next, None)
                if buf is not None:
                    self.touched = True
                    if self.hooks:
                        buf, owned = run_hooks(self.hooks, buf), False
                    if self.sum is None:  # owns its storage, as _OrderedSum's sums do
                        self.sum = buf if owned else buf.clone()
                    else:
                        self.sum.add_(buf)
                self.next += 1
            if added and self.sum is not None and self.sum.is_cuda:
                # Queued on this stage's stream: done before another stage's stream adds.
                torch.cuda.current_stream(self.sum.device).synchronize()

    def _buffer(self, got, users, mb, final=False):
        """The plain loop's buffer of microbatch mb from the gradients `got` of `users` (last
        chunk first), and whether it is a tensor of its own: a seeded gradient is the buffer
        so far with its chunk's uses added, another one is added to it."""
        buf, owned = None, False
        for c in users:
            g, seeded = got[c]
            if g is None:
                continue
            if seeded or buf is None:
                buf, owned = g, False
            else:
                if final and self.uses.get(mb, {}).get(c, 1) > 1:
                    self.inexact.add(c)
                buf, owned = buf + g, True
        return buf, owned


class GradSums:
    """One step's parameter gradients over this process's chunks: each chunk's own parameters
    in an _OrderedSum, each parameter used by several chunks in one _TiedSum. from_grad: the
    sums start from each parameter's .grad, but for those in `fresh` (which start from nothing,
    as every sum does without from_grad). split: the stages split their backward (early).
    frozen: {chunk: its parameters that do not require grad as the step begins} (toggled)."""

    def __init__(self, chunk_params, from_grad, fresh=(), split=False, frozen=None):
        def start(p):
            if not from_grad or p.grad is None or id(p) in fresh:
                return None
            return p.grad.detach().clone()

        self._marks = []  # mark(): (parameter, its .grad's mark, its hooks' mark)

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
                            _OrderedSum([ps[i] for i in own], start))
            self._tied[c] = []
            for i, p in enumerate(ps):
                if len(users[id(p)]) > 1:
                    if id(p) not in tied:
                        tied[id(p)] = _TiedSum(p, users[id(p)], start)
                    self._tied[c].append((i, tied[id(p)]))
        self._chunk_params = chunk_params
        self._frozen = frozen or {}
        # Asked once per foreign leaf of a backward (was_frozen): a set, not a scan. The
        # parameters stay alive in _frozen, so their ids stay theirs.
        self._frozen_ids = {id(p) for ps in self._frozen.values() for p in ps}
        self._unique_tied = list(tied.values())
        self._split = split

    def put(self, chunk, mb, grads, seeded=(), skip=()):
        """`grads`: the gradients of the chunk's parameters, in its list's order; `seeded`: the
        indices of tied ones computed from their seeds(); `skip`: those of tied ones put
        already (put_tied)."""
        own, ordered = self._own[chunk]
        ordered.put(mb, grads if own is None else [grads[i] for i in own])
        for i, t in self._tied[chunk]:
            if i not in skip:
                t.put(chunk, mb, grads[i], i in seeded)

    def put_tied(self, chunk, mb, got, seeded=()):
        """`got`: {index in the chunk's list: gradient} for some of its tied parameters."""
        for i, t in self._tied[chunk]:
            if i in got:
                t.put(chunk, mb, got[i], i in seeded)

    def seeds(self, chunk, mb, which):
        """[(index, seed)]: for the chunk's tied parameters among the indices `which`, the
        later user chunks' buffer of microbatch mb where it is complete (_TiedSum.seed). The
        chunk's autograd call starts each parameter's buffer from it."""
        out = []
        for i, t in self._tied[chunk]:
            if i in which and t.param.requires_grad:  # frozen during the step: grad() fails
                s = t.seed(chunk, mb)
                if s is not None:
                    out.append((i, s))
        return out

    def counts(self, chunk):
        """Whether the chunk's forwards must count their uses of its tied parameters (count):
        with a split backward (early), or where one of them takes no seed."""
        return bool(self._tied[chunk]) and (self._split or any(
            not t.seedable for _, t in self._tied[chunk]))

    def count(self, chunk, mb, roots):
        """Counts how often the forward of (chunk, mb), whose outputs are `roots`, used each of
        the chunk's tied parameters."""
        tied = self._tied[chunk]
        uses = leaf_uses(roots, {id(t.param) for _, t in tied})
        for _, t in tied:
            t.count(chunk, mb, uses.get(id(t.param), 0))

    def early(self, chunk, mb):
        """Split backward: the indices of the chunk's tied parameters whose gradient its B
        computes and puts, where W would put it too late. A chunk that uses one more than once,
        other than the user nearest the loss, must start from every later user's gradient of
        the microbatch (seeds), and W runs in any order across chunks, where B runs from the
        last chunk to the first; so where any does, every user computes it in B."""
        return [i for i, t in self._tied[chunk] if t.needs_seed(mb)]

    def inexact(self):
        """(parameter, chunks) for each tied parameter whose uses in some chunk were summed on
        their own, not as a plain loop adds them (_TiedSum)."""
        return [(t.param, sorted(t.inexact)) for t in self._unique_tied if t.inexact]

    def _each(self):
        """(parameter, its sum or None, whether the step's backward reached it), each
        parameter once: chunk order, then the chunk's."""
        seen = set()
        for c in sorted(self._chunk_params):
            own, ordered = self._own[c]
            sums = iter(zip(ordered.sums, ordered.touched))
            tied = dict(self._tied[c])
            for i, p in enumerate(self._chunk_params[c]):
                if i not in tied:
                    yield (p, *next(sums))
                elif id(p) not in seen:
                    seen.add(id(p))
                    yield p, tied[i].sum, tied[i].touched

    def pairs(self):
        """(parameter, gradient or None), each parameter once: chunk order, then the chunk's.
        None where the step's backward did not reach the parameter: its .grad stays as it is,
        where writing back its value at the start undid a backward() that a chunk's forward
        ran on it."""
        return [(p, g if touched else None) for p, g, touched in self._each()]

    def mark(self):
        """Notes each .grad and each parameter's hooks as the step's tasks find them (after the
        set-up's own writes: a replaced tie copy takes its first copy's .grad), to tell those
        changed during the step (a backward() or a hook registered in a chunk's forward):
        rewritten(), rehooked()."""
        self._marks = [(p, _grad_mark(p), _hook_mark(p)) for ps in self._chunk_params.values()
                       for p in ps]

    def rewritten(self):
        """The parameters the step's backward reached whose .grad changed during the step (a
        backward() in a chunk's forward): their sums would overwrite what was written, and
        cannot be added to it in a plain loop's order."""
        changed = {id(p) for p, grad, _ in self._marks if _grad_mark(p) != grad}
        if not changed:  # the usual: one pass over the parameters, nothing else
            return []
        return [p for p, _, touched in self._each() if touched and id(p) in changed]

    def rehooked(self):
        """The parameters whose hooks changed during the step (one registered in a forward, or
        removing itself as it runs): the step runs the hooks each parameter had as it began,
        where a plain loop's backward runs those there at each microbatch's backward. (A torch
        whose autograd.grad runs them itself runs those there at each backward task.)"""
        if _autograd.ENGINE_RUNS_LEAF_HOOKS:
            return []
        return [p for p, _, hooks in self._marks if _hook_mark(p) != hooks]

    def toggled(self):
        """The parameters whose requires_grad differs from what it was as the step began (one
        frozen or unfrozen by a forward): RequiresGradChanged. Once a step, where it ends."""
        out = [p for ps in self._chunk_params.values() for p in ps if not p.requires_grad]
        return out + [p for ps in self._frozen.values() for p in ps if p.requires_grad]

    def was_frozen(self, t):
        """Whether `t` is a parameter of a chunk here that did not require grad as the step
        began."""
        return id(t) in self._frozen_ids


def _hook_mark(p):
    return tuple(p._backward_hooks) if p._backward_hooks else ()


def _grad_mark(p):
    """What tells a .grad written to: the tensor, and its version (in-place additions)."""
    g = p.grad
    return None if g is None else (id(g), g._version)


def parameter_name(chunks, p, among=None):
    """(chunk, name) of parameter p in `chunks` ({index: module}), looking in the chunks `among`
    (default: all of them), or (None, None) where none holds it: for messages."""
    for c in (sorted(chunks) if among is None else among):
        for n, q in chunks[c].named_parameters():
            if q is p:
                return c, n
    return None, None


def warn_inexact(sums, chunks, said):
    """Warns once a pipeline (`said`: the ids of the parameters warned of) of each tied
    parameter whose gradient this step was not a plain loop's bits (GradSums.inexact)."""
    for p, users in sums.inexact():
        if id(p) in said:
            continue
        said.add(id(p))
        _, n = parameter_name(chunks, p, users)
        name = "a tied parameter" if n is None else f"'{n}'"
        warnings.warn(
            f"rrfp: {name}, which several chunks share, is used more than once by chunk(s) "
            f"{', '.join(map(str, users))}, whose uses could not be added after the later "
            "chunks' as a plain loop's backward adds them (torch's autograd.grad runs the "
            "parameter's hooks, which a seeded buffer would run twice): its gradient may differ "
            "from a plain loop's in the last bits", stacklevel=3)
