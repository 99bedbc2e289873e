"""Which forwards must keep microbatch order: modules whose forward updates their own buffers
(docs/python.md, "Batch norm and other state a forward updates")."""
import re
import warnings
import weakref

import torch

from ._calls import BUILDING
from ._launch import agreed_any


def torch_class(module, name):
    """torch's class `name` in `module` (a dotted path), or None where this torch lacks it."""
    try:
        return getattr(__import__(module, fromlist=[name]), name)
    except (ImportError, AttributeError):
        return None


# PyTorch's modules whose forward updates buffers of their own in training: spectral norm's
# power iteration (the parametrization; the older hook is looked for below), quantization
# observers and fake quantization. Batch and instance norm count when they track running
# statistics, embeddings when they renormalize to a max_norm.
_STATEFUL = tuple(c for c in (
    torch_class("torch.nn.utils.parametrizations", "_SpectralNorm"),
    torch_class("torch.ao.quantization", "ObserverBase"),
    torch_class("torch.ao.quantization", "FakeQuantizeBase")) if c is not None)
_SPECTRAL_HOOK = torch_class("torch.nn.utils.spectral_norm", "SpectralNorm")


# What a compiled forward's graph shows when it changes state: an attribute set, a norm that
# updates running statistics inside the op, or an operation in place (aten::add_, copy_...).
_STATE_CHANGE = re.compile(r"prim::SetAttr|aten::(batch|instance)_norm|aten::\w+_\(")


def _stateful(m):
    """Whether a forward of module `m` itself (not its children) updates its buffers (or, an
    embedding with max_norm, renormalizes the rows of its weight that it looks up, in place)."""
    if isinstance(m, torch.jit.ScriptModule):
        found = _SCRIPT_STATEFUL.get(m)
        if found is None:  # its compiled graph is read once: each step asks again
            found = _SCRIPT_STATEFUL[m] = _script_stateful(m)
        return found
    if isinstance(m, torch.nn.modules.batchnorm._NormBase):
        return m.track_running_stats
    if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)):
        return _renormalizes(m)
    return isinstance(m, _STATEFUL) or (_SPECTRAL_HOOK is not None and any(
        isinstance(h, _SPECTRAL_HOOK) for h in m._forward_pre_hooks.values()))


_SCRIPT_STATEFUL = weakref.WeakKeyDictionary()  # scripted module -> _script_stateful's answer


def _script_stateful(m):
    """A scripted or traced module is no instance of the class it was made from (a scripted
    BatchNorm1d is a RecursiveScriptModule), and its forward is compiled code: one with buffers
    of its own counts when its graph may change them. An in place operation on something else
    counts too, which only costs the order where it was not needed (ordered_forwards=False
    takes it back)."""
    if next(m.buffers(recurse=False), None) is None:
        return False
    try:
        graph = m.graph.copy()
        torch._C._jit_pass_inline(graph)  # the methods and functions it calls, in place
    except (AttributeError, RuntimeError):  # no forward of its own to read: assume the worst
        return True
    return _STATE_CHANGE.search(str(graph)) is not None


def _renormalizes(m):
    """Whether module `m` is an embedding that renormalizes its rows to a max_norm."""
    return isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and m.max_norm is not None


def _renorm_breaks_backward():
    """Whether an embedding's backward needs its weight as it was at the forward (torch 1.13's
    does): a max_norm's renormalization by a later forward then fails the earlier backward."""
    e = torch.nn.Embedding(2, 1, max_norm=0.5)
    with torch.no_grad():
        e.weight.fill_(1.0)
    first = e(torch.tensor([0]))
    e(torch.tensor([1]))  # renormalizes row 1 in place: a new version of the weight
    try:
        first.sum().backward()
    except RuntimeError:
        return True
    return False


_RENORM_BREAKS_BACKWARD = _renorm_breaks_backward()


def refuse_renormalizing_embeddings(c, chunk):
    """A pipeline runs later microbatches' forwards before earlier ones' backward, which an
    embedding with max_norm cannot take where its backward needs the weight it renormalizes
    in place (it failed in autograd's words, naming no module)."""
    if not _RENORM_BREAKS_BACKWARD:
        return
    for name, m in chunk.named_modules():
        if _renormalizes(m):
            raise ValueError(
                f"chunks: chunk {c} holds an embedding with max_norm ('{name}'), whose forward "
                "renormalizes rows of its weight in place; a pipeline runs later microbatches' "
                f"forwards before earlier ones' backward, which in torch {torch.__version__} "
                "needs the weight unchanged: use max_norm=None (renormalize after the "
                "optimizer's step instead)")


def stateful_modules(chunks):
    """{id(module): (module, [chunk, ...])} of the stateful modules of {chunk: module}."""
    found = {}
    for c, chunk in chunks.items():
        for m in chunk.modules():
            if _stateful(m):
                entry = found.setdefault(id(m), (m, []))
                if c not in entry[1]:
                    entry[1].append(c)
    return found


def _found_state(ordered_forwards, chunks, loss_fn):
    """stateful_modules of the chunks and of a loss_fn that is a module (the loss runs in the
    last chunk's forward task, microbatch by microbatch: a batch norm in it updated its
    statistics in the schedule's order, looking at the chunks alone missed it); refuses one
    that several share unless ordered_forwards is False."""
    owners = dict(chunks)
    if isinstance(loss_fn, torch.nn.Module):
        owners["loss_fn"] = loss_fn
    found = stateful_modules(owners)
    if ordered_forwards is not False:
        for m, users in found.values():
            if len(users) > 1:
                a, b = (_owner_name(u) for u in users[:2])
                raise ValueError(
                    f"{a} and {b} share a {type(m).__name__}, whose forward updates its "
                    "state: a plain loop updates it chunk by chunk within each microbatch, "
                    "which stages running at once cannot; give each chunk its own, or pass "
                    "ordered_forwards=False to accept another order")
    return found


def _owner_name(owner):
    return owner if owner == "loss_fn" else f"chunk {owner}"


def decide_order(ordered_forwards, chunks, core, loss_fn=None):
    """Orders the core's forwards when asked, or for ordered_forwards=None when the chunks of
    some process of the job, or a loss_fn that is a module, hold a stateful module (agreed over
    the job: a hint is checked against the flag on every process alike); refuses a stateful
    module that several chunks share, whose state two stages would update at once. Every
    process of a job enters the one gather, its refusal included: a process that refused before
    it left the others waiting in it until their timeout, naming nobody."""
    found = agreed_any(core, lambda: bool(_found_state(ordered_forwards, chunks, loss_fn)),
                       "Pipeline: process(es) {bad} refused their chunks' stateful modules; "
                       "their own errors say why", BUILDING)
    if ordered_forwards is None:
        ordered_forwards = found
    if ordered_forwards:
        core.order_forwards()


def check_state_kept(ordered_forwards, chunks, core, loss_fn):
    """Each step, as it is set up: a stateful module added since the pipeline was built, which
    then found none and ordered no forwards, is refused (its statistics came out in the
    schedule's order, silently), and so is one that several chunks share now (two stages
    updated it at once). Returns the stateful modules found (_found_state), None where
    ordered_forwards=False leaves them unlooked for."""
    if ordered_forwards is False:
        return None
    found = _found_state(ordered_forwards, chunks, loss_fn)
    if found and not core.ordered_forwards:
        m, users = next(iter(found.values()))
        raise ValueError(
            f"{_owner_name(users[0])} holds a {type(m).__name__}, whose forward updates its "
            "state, added after the pipeline was built, which found none and so keeps no "
            "order of forwards: its statistics would come out in the schedule's order, not a "
            "plain loop's; build the pipeline after adding it, or pass ordered_forwards=True")
    return found


class StateWatch:
    """A stage's chunks' state buffers (running statistics), watched during each chunk's
    backward tasks until a step in which it ran one ends: a forward recomputed in a backward
    (activation checkpointing) updates them again, in the order the schedule runs backwards,
    which no order of forwards makes a plain loop's. Said once a chunk (a RuntimeWarning),
    rather than left unsaid. What was watched is the chunk's stateful modules as they were, in
    the mode they were in, with their buffers: a step with a batch norm in eval() updates
    nothing, and one replaced since was never watched, so a change of either is watched again
    (watched once for good, a first step in eval() let the steps after train() go unwarned)."""

    _KEPT = 8  # states remembered a chunk: a model switched between a few is watched once each

    def __init__(self, modules):
        self.modules = modules
        self.watched = {}  # chunk: the states (begin_step's) watched through a step's backward
        self.said = set()  # chunks warned about: watched no more
        self.watch, self.states = {}, {}  # this step's: chunk -> buffers, chunk -> its state
        self.backed = set()  # chunks that ran a watched backward task this step

    def begin_step(self, found, evaluating):
        """`found`: the step's stateful modules (check_state_kept's, walked once for the whole
        pipeline), or None to find this stage's; `evaluating`: an eval_step, which watches
        nothing (it runs no backward)."""
        self.backed, self.watch, self.states = set(), {}, {}
        if evaluating or not self.modules.keys() - self.said:
            return
        if found is None:
            found = stateful_modules(self.modules)
        for c in self.modules:
            if c in self.said:
                continue
            mods = [s for s, users in found.values() if c in users]
            bufs = [b for s in mods for b in s.buffers(recurse=False)]
            state = tuple((id(s), s.training) for s in mods) + tuple(id(b) for b in bufs)
            if bufs and state not in self.watched.get(c, ()):
                self.watch[c], self.states[c] = bufs, state

    def end_step(self):
        for c in self.backed:  # watched through a step's backward tasks: enough
            if c in self.states:
                kept = self.watched.setdefault(c, [])
                kept.append(self.states[c])
                del kept[:-self._KEPT]
        self.watch = {}

    def around(self, chunk, counts, task):
        """task() (a backward task of `chunk`), watched where `counts` and still watched."""
        bufs = self.watch.get(chunk) if counts else None
        if bufs is None:
            return task()
        self.backed.add(chunk)
        before = [b._version for b in bufs]
        out = task()
        if [b._version for b in bufs] != before:
            del self.watch[chunk]
            self.said.add(chunk)
            warnings.warn(
                f"chunk {chunk}'s backward updates its running statistics (BatchNorm's, say): "
                "a forward recomputed there (activation checkpointing) runs again in the order "
                "the schedule runs backwards, where a plain loop recomputes right after each "
                "forward, so these buffers may differ from a plain loop's (the gradients do "
                "not); keep such modules out of checkpointed regions for its bits",
                RuntimeWarning)
        return out
