"""One pass of a Pipeline's runtime over a batch, for step() and eval_step(): the batch split
into microbatches and checked, the runtime's step run, and the microbatch losses added (an
evaluation's per sample concatenated), the result riding on the step's closing exchange to
every process of the replica."""
import contextlib
import signal
import threading
import warnings

import torch

from . import _rrfp, _wire
from ._batch import check_before_step, take_batch
from ._caller import CallerState
from ._chunk_checks import refuse_wrapped_since
from ._grad_layout import set_grad
from ._frozen import RequiresGradChanged
from ._graph import ModelTensors
from ._grads import GradSums, parameter_name
from ._leaves import MadeGrads
from ._progress import Progress
from ._order import check_state_kept
from ._replicas import (buffer_signature, copy_if_apart, refuse_other_buffers, replicated,
                        trained_layout)
from ._seed import _caller_level, refuse_nested_seeding, watch_draws
from ._sharing import claim_parameters

StageError = _rrfp.StageError


def set_up_step(pipe):
    """(GradSums, trained_layout's mark or None) for a step of `pipe` (a Pipeline): the
    parameters each chunk trains now, and the ties' copies as the chunks hold them."""
    if not pipe._wrappers_checked:  # once: a walk over every object
        refuse_wrapped_since(pipe.chunks)
        pipe._wrappers_checked = True
    for r in pipe._runners:
        r.refresh_params()
    pipe._data.stateful = check_state_kept(pipe._ordered_arg, pipe.chunks, pipe._core,
                                           pipe._data.loss_fn)
    claim_parameters(pipe)  # refused while another pipeline's step trains one
    # The model's tensors before the forwards replace any attribute (foreign_leaves).
    pipe._data.known = ModelTensors(pipe._data)
    pipe._data.made = MadeGrads()  # nothing from a step that failed
    pipe._refresh_ties(values=True)
    ties = pipe._ties
    chunk_params = {c: ps for r in pipe._runners for c, ps in r.params.items()}
    sums = GradSums(chunk_params, from_grad=pipe._dp == 1,
                    fresh=ties.holders if ties else (),
                    split=any(r.split for r in pipe._runners),
                    frozen={c: ps for r in pipe._runners for c, ps in r.frozen.items()})
    layout = trained_layout(pipe.chunks, chunk_params, pipe._dp) if pipe._dp > 1 else None
    return sums, layout


def run_pass(pipe, inputs, targets, training, prepare):
    """One pass of the runtime over the batch for `pipe` (a Pipeline): the step's record, what
    replica_loss takes (the step's loss, step_loss, where this process has the losses, and what
    every process carried out of the step), and what prepare() returned.
    training: a step() (else an eval_step()). prepare() -> (sums, layout): the call's set-up,
    run once the batch is taken: sums, the step's GradSums (None for an evaluation); layout,
    with dp > 1, the mark of what this process trains (trained_layout), compared over the
    replicas first.
    A batch refused here, or a set-up that raised (memory running out in GradSums' copy of
    each .grad, say), is refused on every process of a job (check_before_step): raised on this
    one alone, the others waited for it in the step's collectives until their timeout, and a
    loop that went on past it paired every later collective with the wrong call."""
    m = pipe._core.microbatches
    found, refusal, prepared = None, None, (None, None)
    caller = CallerState()  # what the tasks run under, which the processes compare first
    try:
        if pipe._data.seeding is not None:
            refuse_nested_seeding("step()" if training else "eval_step()")
        found = take_batch(pipe, inputs, targets, m, training)
        prepared = prepare()
    except Exception as e:  # noqa: BLE001 (raised below, once the job knows of it)
        refusal = e
    sums, layout = prepared
    try:
        if pipe._core.world > 1:
            apart = check_before_step(pipe, found, layout, training, caller, refusal)
            copy_if_apart(pipe, apart, "step()" if training else "eval_step()")
        elif refusal is not None:
            raise refusal
        elif pipe._ties is not None:
            pipe._ties.check([pipe._ties.flags], 0, training)
    except BaseException:
        pipe._data.inputs, pipe._data.targets = [], []  # a refused step keeps no batch
        raise
    if sums is not None:
        sums.mark()
    pipe._data.losses = {}
    pipe._data.gradless = 0
    pipe._data.caller = caller if caller.applies() else None
    pipe._data.errors = []
    pipe._data.sums = sums
    # The forwards change the replicas' buffers each its own way, until the step's end makes
    # them replica 0's (settle_buffers); a step that fails or is refused first leaves them so.
    pipe._buffers_apart = pipe._dp > 1
    done = False
    # An unseeded pipeline's first training step looks for chunks that draw (rrfp._seed).
    watch = watch_draws(pipe._data, training, len(pipe._runners), pipe.chunks)
    try:
        # Each microbatch's size, for the adaptive rule's entry order (docs/frontier.md).
        sizes = [sum(t.numel() for t in ts) for ts in found[0]]
        for r in pipe._runners:
            r.device.follow()
        if watch is not None:
            pipe._data.seeding = watch
        with Progress(pipe, pipe._step):
            rec, carried = pipe._core.run_step(pipe._step, sizes, lambda: closing(pipe, m))
        done = True
    except StageError as e:
        cause = pipe._data.error_named_by(str(e))
        if isinstance(cause, (SystemExit, KeyboardInterrupt)):
            # A task's sys.exit() (or interrupt) leaves the program, as in a plain loop: as a
            # StageError, a RuntimeError, a loop catching those went on past it.
            cause.add_note(str(e))
            raise cause
        if cause is not None:
            raise StageError(str(e)) from cause
        raise
    finally:
        if watch is not None:
            pipe._data.seeding = None
        pipe._step += 1
        pipe._data.seed_step += 1
        pipe._data.inputs, pipe._data.targets = [], []
        if not done:
            forget_failed_step(pipe)
    if watch is not None:
        watch.done()
    if pipe._dp > 1:  # before the caller writes any .grad or copies any buffer
        refuse_other_buffers([_buffers_in(b) for b in carried], pipe.pp,
                             "step()" if training else "eval_step()")
    return rec, (pipe._data.total, carried), prepared


def forget_failed_step(pipe):
    """What a step that failed holds, let go now rather than at the next step: every stage's
    activations and graphs, the tasks' exceptions (whose frames hold more), the losses and
    outputs. A caller that catches the error (out of memory on a GPU) has the memory back
    before it retries or saves; it waited until the next step (144 MiB for a model of 64 MiB)."""
    for r in pipe._runners:
        r.work = {}
    d = pipe._data
    d.errors, d.losses, d.outputs, d.made = [], {}, {}, MadeGrads()  # sums: _run_step's


# The labels of what closing() packs.
_LOSS, _BUFFERS = "loss", "buffers"


def closing(pipe, m):
    """Once the step has completed on this process: what it carries into the step's closing
    exchange, a gather over the job that every process makes, packed as bytes: the step's
    loss from the microbatch losses it holds (step_loss; kept in pipe._data.total too; None
    without any), and with dp > 1 the names, dtypes and shapes of its chunks' buffers, which
    every process then compares over the replicas (refuse_other_buffers). Losses that cannot be
    joined (per-sample losses of other sizes past dimension 0) fail the step on every process."""
    pipe._data.total = None
    refuse_rewritten(pipe)
    entries = []
    if pipe._dp > 1:
        entries.append(((_BUFFERS, buffer_signature(replicated(pipe))), None))
    if not pipe._data.losses:
        return _wire.pack(entries)
    try:
        total = step_loss([pipe._data.losses[i] for i in range(m)], pipe._data.eval)
    except Exception as e:
        pipe._data.record(None, None, e)
        raise
    pipe._data.total = total
    return _wire.pack(entries + [(_LOSS, total)])


def step_loss(losses, evaluation):
    """The step's loss from its microbatches' in microbatch order: a step's (one element each)
    added, and an evaluation's 0-dim ones; an evaluation's of one dimension or more (a loss per
    sample) concatenated along dimension 0, as a plain loop's torch.cat of them. Added, their
    samples were summed across the microbatches (8 rows in 4 microbatches gave 2 values), or
    failed to broadcast. Told by the dimensions, not the elements: a loss per sample of
    microbatches of one row each, of one element, was added, so the same loss_fn's result
    changed its shape with the batch."""
    if not evaluation or all(loss.dim() == 0 for loss in losses):
        total = losses[0]
        for loss in losses[1:]:
            total = total + loss
        return total
    first = losses[0]
    if any(loss.dim() == 0 or loss.shape[1:] != first.shape[1:] for loss in losses):
        raise ValueError(
            "loss_fn: eval_step concatenates losses of one dimension or more (a loss per "
            "sample) along dimension 0 over the microbatches, which needs each to have it and "
            "the same sizes past it; got shapes "
            + ", ".join(str(tuple(loss.shape)) for loss in losses))
    return torch.cat(losses)


def refuse_rewritten(pipe):
    """Fails the step, on every process (closing's exchange carries the failure), where a
    parameter's requires_grad changed during the step (GradSums.toggled: one frozen after its
    chunk's last backward task, which found none), a .grad that the step's backward reaches
    did (GradSums.rewritten), or a parameter's hooks did (GradSums.rehooked): each left another
    gradient than a plain loop's, silently."""
    sums = pipe._data.sums
    if sums is None:
        return
    toggled = sums.toggled()
    if toggled:
        c, n = parameter_name(pipe.chunks, toggled[0])
        e = RequiresGradChanged("a parameter" if n is None else f"chunk {c}'s '{n}'",
                                toggled[0])
        pipe._data.record(None, None, e)
        raise e
    bad, why = sums.rewritten(), (
        "its .grad changed during the step (a backward() in a chunk's forward, or in another "
        "thread), and the step's backward reaches it too: the step adds its gradients to .grad "
        "as it ends, and cannot add them to what was written meanwhile in a plain loop's "
        "order; add that loss to the chunk's output instead, or detach what it computes from "
        "these parameters")
    if not bad:
        bad, why = sums.rehooked(), (
            "its hooks changed during the step (one registered in a forward, or removed as it "
            "ran): the step runs the hooks a parameter had as it began, on every microbatch, "
            "where a plain loop runs those there at each microbatch's backward, so its gradient "
            "would be another; register and remove parameter hooks between steps")
    if not bad:
        return
    c, n = parameter_name(pipe.chunks, bad[0])
    name = "a parameter" if n is None else f"chunk {c}'s '{n}'"
    e = RuntimeError(f"{name}: {why}")
    pipe._data.record(None, None, e)
    raise e


def _buffers_in(carried):
    """The buffer_signature a process carried out of the step (closing)."""
    return next((label[1] for label, _ in _wire.unpack(carried)
                 if isinstance(label, tuple) and label[0] == _BUFFERS), [])


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
    # A view of the carried bytes: its own storage.
    return next((t.clone() for label, t in found if label == _LOSS), None)


def eval_outputs(outputs, inputs, m):
    """eval_step's outputs from the last chunk's by microbatch: concatenated along dimension 0
    when the inputs came as one batch and they can be (_joinable), else a list."""
    outs = [outputs[i] for i in range(m)]
    return torch.cat(outs) if isinstance(inputs, torch.Tensor) and _joinable(outs) else outs


def _joinable(outs):
    """Whether eval_step's outputs concatenate along dimension 0 as they are: dense tensors
    that agree past it, in dtype and in device. Outputs trimmed to each microbatch's longest row
    differ in their second dimension, where torch.cat raised and the step's outputs were lost;
    and it would promote dtypes, or fail across devices. Nested (ragged), sparse and mkldnn
    outputs raised in the check or in torch.cat, and quantized ones were joined at the first
    microbatch's scale, the others' values lost: each comes back as a list."""
    first = outs[0]
    return all(isinstance(o, torch.Tensor) and not o.is_nested and o.layout == torch.strided
               and not o.is_quantized and o.dim() > 0 for o in outs) and all(
        o.shape[1:] == first.shape[1:] and o.dtype == first.dtype and o.device == first.device
        for o in outs)


def write_grads(data, pairs):
    """A completed step's gradients into .grad: `pairs` (parameter, its sum or None) and the
    sums of the leaves its forwards made (data.made). Their hooks run first, so that one that
    raises fails the step with no .grad written; called after the job's collectives, where a
    process that raised before them left the others waiting there. Every .grad or none: a
    Ctrl-C while they are written is raised once they all are."""
    made = data.made.hooked()
    with interrupt_held():
        for p, g in pairs:
            if g is not None:
                set_grad(p, g)
        MadeGrads.add_to_grads(made)


def warn_held_leaves(pipe):
    """Warns once, where this process runs only some of the stages or one replica of several,
    of a tensor held outside the model that the step differentiated (one that several
    microbatches used; rrfp._leaves.MadeGrads): its .grad holds this process's chunks' share,
    and another process's chunks that use it add to that process's copy. In threads the chunks
    share the one tensor, and its .grad is a plain loop's; with a process per stage each copy
    held a part, silently."""
    held = pipe._data.made.held
    if not held or pipe._held_said or (len(pipe.stages) == pipe.pp and pipe._dp == 1):
        return
    pipe._held_said = True
    shapes = ", ".join(str(tuple(t.shape)) for t in held[:3])
    warnings.warn(
        f"the chunks of this process used a tensor that is no part of the model (shape "
        f"{shapes}) and trains: its .grad holds the gradient of this process's chunks alone. "
        "Each process has its own copy, so where chunks of other processes (or other "
        "replicas) use it too, each copy holds a part: add them over the job "
        "(torch.distributed.all_reduce of .grad) before the optimizer steps, or make it a "
        "parameter of a chunk (docs/python.md, \"Shared parameters\")",
        RuntimeWarning, stacklevel=_caller_level())


@contextlib.contextmanager
def interrupt_held():
    """Holds Ctrl-C (SIGINT's Python handler) for the block, on the main thread, where it is
    delivered: the block runs whole, and the interrupt is raised after it. For a step's write
    of every .grad, which an interrupt cut in the middle (10,222 of 20,002 parameters written,
    the rest not). Another thread has no interrupt to hold, and a handler that is not Python's
    (set in C) is left alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):
        yield
        return
    came = []
    signal.signal(signal.SIGINT, lambda sig, frame: came.append(frame))
    try:
        yield
    except BaseException as e:
        # The block failed too: the held Ctrl-C still stops the caller (it was dropped, and
        # the program went on past the user's interrupt), the failure chained to it.
        signal.signal(signal.SIGINT, previous)
        if came and previous is signal.default_int_handler:
            raise KeyboardInterrupt("the step's gradients could not all be written (the error "
                                    "above)") from e
        if came:
            previous(signal.SIGINT, came[0])
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    if came:
        if previous is signal.default_int_handler:
            raise KeyboardInterrupt("the step had completed: every .grad holds its sum")
        previous(signal.SIGINT, came[0])
