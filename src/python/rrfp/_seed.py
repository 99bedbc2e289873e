"""Random numbers a chunk draws (dropout), made independent of the order tasks run in:
Pipeline(seed=S) seeds torch's generators before each forward from (S, step, chunk,
microbatch), docs/python.md "Dropout and other random numbers"."""
import contextlib
import threading

import torch

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


def _task_seed(seed, step, chunk, mb):
    """task_seed without its checks: a seeded forward's, whose arguments are the pipeline's."""
    h = _mix(seed & _MASK)
    for v in (step, chunk, mb):
        h = _mix(h ^ (v & _MASK))
    return h >> 1


# torch's generators belong to the process: every seeded task of every pipeline in it takes
# this one lock, so that two pipelines stepping at once in threads do not draw from each
# other's seeds (a lock per pipeline let them: gradients off by up to 2.0).
_GENERATORS = threading.Lock()
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


class Seeding:
    """Runs tasks under seeded generators. A forward gets torch.manual_seed(task_seed(...));
    every task runs inside torch.random.fork_rng, so what it draws, or restores (activation
    checkpointing's recomputation), never reaches another task. torch's generators belong to
    the process, so seeded tasks in it take turns (_GENERATORS), whichever pipeline runs them;
    a thread of the caller's that draws meanwhile draws from them too (see docs/python.md)."""

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
        devices = []
        if device is not None and device.type == "cuda":
            devices = [device.index if device.index is not None else torch.cuda.current_device()]
        if not _GENERATORS.acquire(timeout=self._wait_s):
            raise TimeoutError(
                f"seed: torch's generators were held by another seeded task for over "
                f"{self._wait_s:g} s (the pipeline's timeout): a pipeline with a seed called, "
                "through a thread or another pipeline, from inside a task of one with a seed "
                "waits for a task that waits for it; give one of the two no seed")
        _IN_SEEDED_TASK.active = True  # the lock is not reentrant: reset, not restored, below
        try:
            with torch.random.fork_rng(devices=devices):
                if kind == "F":
                    s = _task_seed(self.seed, step, chunk, self._first_mb + mb)
                    torch.manual_seed(s)
                yield
        finally:
            _IN_SEEDED_TASK.active = False
            _GENERATORS.release()
