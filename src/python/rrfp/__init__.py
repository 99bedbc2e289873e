"""rrfp: readiness-first pipeline parallelism for PyTorch modules.

    pipe = rrfp.Pipeline(chunks, loss_fn, pp=2, microbatches=8, hint="bf")
    loss = pipe.step(inputs, targets)   # gradients land in .grad
    print(pipe.last_step.table())

See docs/python.md.
"""
import atexit
import sys

import torch  # noqa: F401  (loads LibTorch's Python bindings before the extension)

from . import _rrfp
from .pipeline import Pipeline, StageError
from .record import StepRecord


def simulate(**kwargs):
    """Simulates one step as `rrfp simulate` does (same arguments, as keywords) and returns its
    StepRecord: pp, vpp, microbatches, placement, split_backward, workload, workload_file,
    replay, hint, policy, limit, max_pending_w, comm, seed, tp, tp_protocol."""
    return StepRecord(_rrfp.simulate(**kwargs))


# Multi-process runs end their runtimes and MPI before the interpreter goes.
atexit.register(_rrfp._shutdown)


def _excepthook(kind, value, tb, _previous=sys.excepthook):
    # An uncaught exception in one process of an mpirun job ends the whole job at once, rather
    # than leaving the other processes waiting for this one until their timeout.
    _previous(kind, value, tb)
    sys.stderr.flush()
    _rrfp._abort(1)


sys.excepthook = _excepthook

schedule = _rrfp.schedule
hint_names = _rrfp.hint_names

__all__ = ["Pipeline", "StageError", "StepRecord", "simulate", "schedule", "hint_names"]
