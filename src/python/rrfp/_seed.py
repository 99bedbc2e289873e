"""Random numbers a chunk draws (dropout), made independent of the order tasks run in:
Pipeline(seed=S) seeds torch's generators before each task from (S, step, chunk, microbatch)
and the task's kind, docs/python.md "Dropout and other random numbers". Without a seed, the
first training step looks for chunks that draw (DrawWatch), where stages share the generator,
and so does each step with a module training that no watched step had training."""
import contextlib
import os
import sys
import threading
import warnings
import weakref

import torch

from . import _rrfp
from ._args import check_whole

_MASK = (1 << 64) - 1
# What a seed and task_seed's arguments take: the 64 bits the mixing keeps (a value past them
# was masked down, so seed=2**64 drew exactly what seed=0 draws).
_TAKES = "a whole number in 0..2**64-1"


def _mix(x):
    """splitmix64's finalizer: a bijection of 64-bit integers that scatters nearby inputs."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
    return x ^ (x >> 31)


def task_seed(seed, step, chunk, mb):
    """The seed of microbatch `mb`'s forward through chunk `chunk` in step `step` (counted
    from 0 over this pipeline's steps and evaluation steps, failed ones included, refused ones
    not) of Pipeline(seed=seed): a plain loop that calls torch.manual_seed(task_seed(...))
    before each chunk's forward draws what the pipeline draws. With dp > 1, replica r's
    microbatch mb is r * M + mb. Below 2**63. Each argument is a whole number in 0..2**64-1
    (else TypeError or ValueError, as Pipeline's seed)."""
    seed, step, chunk, mb = (
        check_whole(f"task_seed: {name}", value, _TAKES, low=0, high=_MASK)
        for name, value in (("seed", seed), ("step", step), ("chunk", chunk), ("mb", mb)))
    return _task_seed(seed, step, chunk, mb)


# What a backward task's seed mixes in after the forward's arguments: the forward mixes in
# nothing more, so every backward task draws apart from every forward, and B apart from W.
_KIND = {"B": 0x42, "W": 0x57}


def _task_seed(seed, step, chunk, mb, kind="F"):
    """task_seed without its checks: a seeded task's, whose arguments are the pipeline's. A
    forward's is task_seed's; a backward task's ("B", "W") is its own, mixed from the same
    arguments and its kind."""
    h = _mix(seed & _MASK)
    for v in (step, chunk, mb):
        h = _mix(h ^ (v & _MASK))
    if kind != "F":
        h = _mix(h ^ _KIND[kind])
    return h >> 1


# torch's generators belong to the process: every seeded task of every pipeline in it takes
# this one lock, so that two pipelines stepping at once in threads do not draw from each
# other's seeds (a lock per pipeline let them: gradients off by up to 2.0).
_GENERATORS = threading.Lock()
_TAKEN = [0]  # times _GENERATORS was taken: a waiter's limit counts from its last change of hands
_HOLDER = [None]  # (Seeding, task) of the seeded task holding _GENERATORS, for a waiter's report
_IN_SEEDED_TASK = threading.local()  # .active: this thread runs a seeded task


def refuse_nested_seeding(what):
    """Refuses a seeded pipeline's step or eval_step called from inside a seeded task (a
    distillation's loss_fn asking a seeded teacher): its tasks wait for the generators the
    calling task holds until that task ends, which it never does; both pipelines hung, their
    timeouts and Ctrl-C unheard."""
    if getattr(_IN_SEEDED_TASK, "active", False):
        raise RuntimeError(
            f"{what}: called from inside a task of a pipeline with a seed, and this pipeline "
            "has one too: its tasks would wait for torch's generators, which the calling task "
            "holds until it ends; give one of the two pipelines no seed, or call this one "
            "outside the other's tasks")


def take_generators(wait_s, owner=None, blamed=None):
    """Takes _GENERATORS, or returns False where nobody took them for `wait_s` seconds (-1: no
    bound): one task held them that long. Other tasks taking their turns meanwhile is progress,
    not a hang: a limit on the whole wait failed a step of four stages whose tasks each took
    under a third of it. Nor is a holder of the same pipeline (`owner`, its Seeding): that task
    runs past the pipeline's timeout, which its watchdog reports, naming it; this wait's own
    report raced it, blaming an innocent task and a nesting that was not there. Every take is
    counted, a pipeline's without a bound too. `blamed` (a list), where given, gets the holder
    judged at the end of a wait that gave up (None: unknown), which a later read of _HOLDER may
    no longer be."""
    if wait_s < 0:
        _GENERATORS.acquire()
        _TAKEN[0] += 1
        return True
    seen = _TAKEN[0]
    while not _GENERATORS.acquire(timeout=wait_s):
        holder = _HOLDER[0]
        if _TAKEN[0] == seen and (owner is None or holder is None or holder[0] is not owner):
            if blamed is not None:
                blamed.append(holder)
            return False
        seen = _TAKEN[0]
    _TAKEN[0] += 1
    return True


class Seeding:
    """Runs tasks under seeded generators. A forward gets torch.manual_seed(task_seed(...)), a
    backward task a seed of its own (_task_seed with its kind): unseeded, each started from the
    caller's generator as it was, and every backward drew the same numbers (gradient noise in a
    custom Function's backward, 24 draws of 1 value). Every task runs inside
    torch.random.fork_rng, so what it draws, or restores (activation checkpointing's
    recomputation, which sets the forward's own state), never reaches another task. torch's
    generators belong to the process, so seeded tasks in it take turns (_GENERATORS), whichever
    pipeline runs them; a thread of the caller's that draws meanwhile draws from them too (see
    docs/python.md)."""

    def __init__(self, seed, timeout=0):
        self.seed = check_whole("seed", seed, f"{_TAKES} or None", low=0, high=_MASK)
        self._first_mb = 0
        # How long a task waits for the generators (the pipeline's timeout; 0: no bound). The
        # refusal above sees a nesting on the task's own thread only: one through a thread the
        # task starts, or through an unseeded pipeline between, waited for good.
        self._wait_s = float(timeout) if timeout else -1

    def place(self, first_mb):
        """`first_mb`: the index of this replica's first microbatch in the job's batch
        (replica * M), so that replicas draw as one pipeline of all their microbatches would."""
        self._first_mb = first_mb

    @contextlib.contextmanager
    def task(self, kind, step, chunk, mb, device):
        gpu = _gpu(device)
        devices = [] if gpu is None else [gpu]
        # The stuck report names a task waiting here as running, unless told.
        _rrfp._waiting_for("its turn at torch's generators, which seeded tasks take one at a "
                           "time")
        blamed, taken = [], False
        try:
            taken = take_generators(self._wait_s, self, blamed)
        finally:
            # A wait that ended without them keeps its note until the task ends (the runtime
            # clears it): the watchdog, at the same limit, may report while the task fails, and
            # showed it "running" with no word of the wait (1 suite run in about 100).
            if taken:
                _rrfp._waiting_for("")
        if not taken:
            who = "one other seeded task" if blamed[0] is None else \
                f"task {blamed[0][1]} of another seeded pipeline"
            raise TimeoutError(
                f"seed: torch's generators were held by {who} for over {self._wait_s:g} s (the "
                "pipeline's timeout): either that task is slower than the timeout, or a pipeline "
                "with a seed called, through a thread or another pipeline, from inside a task of "
                "one with a seed waits for a task that waits for it (give one of the two no "
                "seed)")
        _HOLDER[0] = (self, f"{kind} c{chunk} m{mb}")
        _IN_SEEDED_TASK.active = True  # the lock is not reentrant: reset, not restored, below
        try:
            with torch.random.fork_rng(devices=devices):
                _seed_task(_task_seed(self.seed, step, chunk, self._first_mb + mb, kind), gpu)
                yield
        finally:
            _IN_SEEDED_TASK.active = False
            _HOLDER[0] = None
            _GENERATORS.release()


def _seed_task(s, gpu):
    """Seeds the generators a task on `gpu` (None: the CPU) draws from, and no others:
    torch.manual_seed seeds every GPU's, of which fork_rng restores the task's alone, so a task
    left the caller's generators on the other GPUs seeded anew. A plain loop's
    torch.manual_seed gives those the task draws from the same seed."""
    torch.default_generator.manual_seed(s)
    if gpu is not None:
        with torch.cuda.device(gpu):
            torch.cuda.manual_seed(s)


def _gpu(device):
    """The index of the GPU a task runs on, or None for the CPU."""
    if device is None or device.type != "cuda":
        return None
    return device.index if device.index is not None else torch.cuda.current_device()


def _states(gpu):
    """The states of the generators a task on `gpu` draws from: the CPU's, and the GPU's."""
    cpu = torch.default_generator.get_state()
    return (cpu,) if gpu is None else (cpu, torch.cuda.get_rng_state(gpu))


# The step data (StepData) of each unseeded pipeline watched -> the modules' states (_drawing)
# its watched steps ran with: a later step with none new is not watched again.
_WATCHED = weakref.WeakKeyDictionary()


def watch_draws(data, training, stages, chunks):
    """A DrawWatch for this training step of an unseeded pipeline whose process runs `stages`
    > 1 stages (threads that share torch's generators) where a module of its `chunks` is in
    training mode that was not in any step watched before (_drawing); else None. Watched once
    for good, a first step with the chunks in eval() (a frozen backbone) or dropout's p at 0 (a
    warm-up) let the steps after train(), or after p was raised, draw unwarned."""
    if not training or data.seeding is not None or stages < 2:
        return None
    now = _drawing(chunks)
    if not now or now <= _WATCHED.get(data, frozenset()):
        return None
    return DrawWatch(data, now)


def _drawing(chunks):
    """The modules in training mode, as (id, whether it is a dropout whose p is 0): what
    could draw, a dropout module at p=0 told apart, since it draws nothing until p is raised.
    Walked by hand, each step: 0.6x the time of Module.modules()'s generators."""
    out, seen, todo = set(), set(), list(chunks.values())
    while todo:
        m = todo.pop()
        if m is None or id(m) in seen:
            continue
        seen.add(id(m))
        if m.training:
            out.add((id(m), isinstance(m, _DROPOUT) and m.p == 0))
        todo.extend(m._modules.values())
    return out


_DROPOUT = torch.nn.modules.dropout._DropoutNd


class DrawWatch:
    """Stands in for Seeding (StepData.seeding) during an unseeded pipeline's first training
    step: runs its tasks one at a time, as seeded tasks run, and notes each chunk whose forward
    changed torch's default generator (its GPU's too): the stages, threads of one process, draw
    from it in whatever order they run, and activation checkpointing's recompute, which sets it
    back to the state its forward began in, then draws another mask than that forward did,
    since other stages drew in between (up to 147 of 192 masks at pp=4): gradients of no loss
    that was computed. One at a time, a change is the task's own, not another stage's."""

    def __init__(self, data, states):
        self._data, self._states = data, states
        self._turn = threading.Lock()
        self.drew = set()

    @contextlib.contextmanager
    def task(self, kind, step, chunk, mb, device):
        _rrfp._waiting_for("its turn: a pipeline's first step runs its tasks one at a time, "
                           "to see which draw random numbers")
        try:
            self._turn.acquire()
        finally:
            _rrfp._waiting_for("")
        try:
            if kind != "F":
                yield
                return
            gpu = _gpu(device)
            before = _states(gpu)
            yield
            if not all(torch.equal(a, b) for a, b in zip(before, _states(gpu))):
                self.drew.add(chunk)
        finally:
            self._turn.release()

    def done(self):
        """Once the step has completed: no more watching of the states it ran with, and a
        warning, at the line that called step(), naming the chunks that drew."""
        seen = _WATCHED.get(self._data, set())
        # Modules made afresh each step leave ids no module holds any longer: kept within
        # a few times what a step has, and renewed from this one past that.
        seen = seen | self._states if len(seen) < 4 * len(self._states) + 1024 else self._states
        _WATCHED[self._data] = seen
        if not self.drew:
            return
        drew = sorted(self.drew)
        which = f"chunk {drew[0]}" if len(drew) == 1 else \
            "chunks " + ", ".join(map(str, drew))
        warnings.warn(
            f"{which} of a pipeline without a seed drew random numbers (dropout) in a forward "
            "from torch's generator (or another thread of this process drew from it meanwhile: "
            "a data loader's, another pipeline's), which the stages of this process share: what "
            "it draws depends on the order their tasks run in, and activation checkpointing's "
            "recompute may draw another mask than its forward did (gradients of no loss "
            "computed); pass seed= to Pipeline (docs/python.md, \"Dropout and other random "
            "numbers\")",
            RuntimeWarning, stacklevel=_caller_level())


def _caller_level():
    """warnings.warn's stacklevel for the function calling this one that names the first
    frame outside the package: the line that called step(), however deep inside it the
    warning is made."""
    here = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and \
            os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == here:
        frame, level = frame.f_back, level + 1
    return level
