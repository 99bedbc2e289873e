"""One pass of a Pipeline's runtime over a batch, for step() and eval_step(): the batch split
into microbatches and checked, the runtime's step run, and the microbatch losses added, the sum
riding on the step's closing exchange to every process of the replica."""
import torch

from . import _rrfp, _wire
from ._batch import check_before_step, take_batch
from ._caller import CallerState
from ._progress import Progress

StageError = _rrfp.StageError


def run_pass(pipe, inputs, targets, sums, layout=None):
    """One pass of the runtime over the batch for `pipe` (a Pipeline): the step's record and
    what replica_loss takes (the sum of the microbatch losses where this process has them, and
    what every process carried out of the step). sums: the step's GradSums, None for an
    evaluation step. layout: with dp > 1, the mark of what this process trains
    (trained_layout), compared over the replicas first. A batch refused here is refused on every
    process of a job (check_before_step): raised on this one alone, the others waited for it in
    the step's collectives until their timeout, and a loop that went on past it paired every
    later collective with the wrong call."""
    m = pipe._core.microbatches
    found, refusal = None, None
    try:
        found = take_batch(pipe, inputs, targets, m, sums is not None)
    except Exception as e:  # noqa: BLE001 (raised below, once the job knows of it)
        refusal = e
    try:
        if pipe._core.world > 1:
            check_before_step(pipe, found, layout, sums is not None, refusal)
        elif refusal is not None:
            raise refusal
        elif pipe._ties is not None:
            pipe._ties.check([pipe._ties.flags], 0, sums is not None)
    except BaseException:
        pipe._data.inputs, pipe._data.targets = [], []  # a refused step keeps no batch
        raise
    pipe._data.losses = {}
    caller = CallerState()
    pipe._data.caller = caller if caller.applies() else None
    pipe._data.error = None
    pipe._data.sums = sums
    try:
        # Each microbatch's size, for the adaptive rule's entry order (docs/frontier.md).
        sizes = [sum(t.numel() for t in ts) for ts in found[0]]
        for r in pipe._runners:
            r.device.follow()
        with Progress(pipe, pipe._step):
            rec, carried = pipe._core.run_step(pipe._step, sizes, lambda: closing(pipe, m))
    except StageError as e:
        err = pipe._data.error
        if err is not None:
            raise StageError(str(e)) from err[2]
        raise
    finally:
        pipe._step += 1
        pipe._data.seed_step += 1
        pipe._data.inputs, pipe._data.targets = [], []
    return rec, (pipe._data.total, carried)


def closing(pipe, m):
    """Once the step has completed on this process: the sum of the microbatch losses it holds
    (None without any), kept in pipe._data.total, packed as the bytes that ride on the step's
    closing exchange. A sum that fails (losses of shapes that do not add) fails the step on
    every process."""
    pipe._data.total = None
    if not pipe._data.losses:
        return _wire.pack([])
    try:
        total = pipe._data.losses[0]
        for i in range(1, m):
            total = total + pipe._data.losses[i]
    except Exception as e:
        pipe._data.error = (None, None, e)
        raise
    pipe._data.total = total
    return _wire.pack([(0, total)])


def replica_loss(core, loss):
    """The step's loss on every process of the replica, from run_pass's second value: the
    process running the last chunk has it, and its bytes came to the others in the step's
    closing exchange, exactly, whatever its dtype and shape (an evaluation's may be a count of
    int64 or a loss per sample)."""
    total, carried = loss
    if total is not None or core.world == 1:
        return total
    # The process of the stage that runs the last chunk (stage 0 under "vshape").
    found = _wire.unpack(carried[core.replica * core.pp + core.stage_of(core.chunks - 1)])
    return found[0][1].clone() if found else None  # a view of the carried bytes: its own storage
