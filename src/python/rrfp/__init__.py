"""rrfp: readiness-first pipeline parallelism for PyTorch modules.

    pipe = rrfp.Pipeline(chunks, loss_fn, pp=2, microbatches=8, hint="bf")
    loss = pipe.step(inputs, targets)   # gradients land in .grad
    print(pipe.last_step.table())

See docs/python.md.
"""
import atexit
import sys

import torch  # noqa: F401  (loads LibTorch's Python bindings before the extension)

from . import _children, _ended, _live, _rrfp
from ._seed import task_seed
from .pipeline import Pipeline, StageError
from .record import StepRecord
from .scaler import GradScaler


def simulate(**kwargs):
    """Simulates one step as `rrfp simulate` does (same arguments, as keywords) and returns its
    StepRecord: pp, vpp, microbatches, placement, split_backward, workload, workload_file,
    replay, hint, policy, limit, max_pending_w, comm, seed, tp, tp_protocol, ordered_forwards,
    step, trace_format, message_us. A hint file's shape stands for any of pp, vpp,
    microbatches and placement not given, as the command takes it. `ordered_forwards`: None
    (the default: a replayed trace's step says, as `rrfp simulate --replay` takes it, else off),
    True or False. `step`: the
    replayed trace's step (None: a trace's first complete one, a CSV's last). `trace_format`:
    the replayed trace's mapping, "auto" (the default, or None), "rrfp", "torch" or "megatron".
    `message_us`: the latency of every message the replayed trace does not time, in 0..1e9 us
    (None, the default: a trace's seen from when the consumers started, a CSV's 0). With a
    replay only a jitter workload applies (a `workload` of another preset, or a `workload_file`,
    raises ValueError, as the command refuses them), and `seed` only with it. A keyword it does
    not take raises TypeError naming it. A count that is no whole number (an int or a NumPy
    integer) raises TypeError (True included: pybind took it as 1), one past what the core takes
    ValueError, each naming the argument; so do names and paths of another type (a path object
    is taken as its str), and a path of '' (an unset variable's) is refused. `limit` and
    `max_pending_w` (None or 0: the default) bound the ready policy: given with policy="fixed",
    or `max_pending_w` where the backward is not split, they raise ValueError, as the command
    refuses them and Pipeline does; so does `tp_protocol` at tp=1. One record holds one run:
    policy="both", the command's default, raises ValueError. None for `replay`, `workload_file`
    or `tp_protocol` is as if it were not given."""
    from ._args import INT_MAX, check_whole, refuse_fixed_bound

    _check_keywords("simulate", kwargs, _SIMULATE_KEYWORDS)
    for name in ("replay", "workload_file", "tp_protocol"):  # None: not given, as step's
        if name in kwargs and kwargs[name] is None:
            del kwargs[name]
    kwargs["workload_given"] = "workload" in kwargs
    kwargs["seed_given"] = "seed" in kwargs
    for name in ("limit", "max_pending_w"):
        if name in kwargs and kwargs[name] is None:  # Pipeline's default, and 0 the command's
            kwargs[name] = 0
    if kwargs.get("trace_format", "auto") is None:
        kwargs["trace_format"] = "auto"
    if _is_text(kwargs.get("policy"), "both"):
        raise ValueError("policy: one record holds one run; give \"fixed\" or \"ready\" (the "
                         "command's \"both\" runs each)")
    _refuse_empty(kwargs, ("replay", "workload_file"))  # it ran without the file
    _check_counts(kwargs, ("pp", "vpp", "microbatches", "limit", "max_pending_w", "tp"))
    if "seed" in kwargs:
        kwargs["seed"] = check_whole("seed", kwargs["seed"], "a whole number in 0..2**64-1",
                                     low=0, high=2**64 - 1)
    _check_names(kwargs, ("placement", "split_backward", "workload", "policy", "comm",
                          "tp_protocol"))
    if "tp_protocol" in kwargs and kwargs.get("tp", 1) == 1:  # taken and ignored, as refused
        raise ValueError("tp_protocol: how the tensor-parallel ranks of a stage coordinate; at "
                         "tp=1 a stage has one rank and nothing to coordinate (give tp=2 or "
                         "more, or leave tp_protocol out)")
    # Taken and ignored, where the command and Pipeline refuse them. A W cap where the backward
    # is whole _rrfp.simulate refuses: it resolves split_backward auto (a hint file's own too).
    for name in ("limit", "max_pending_w"):
        refuse_fixed_bound(name, kwargs.get(name), kwargs.get("policy", "ready"))
    _check_paths(kwargs, (("hint", None), ("replay", "a trace's or a CSV's path"),
                          ("workload_file", "a workload JSON file's path")))
    ordered = kwargs.get("ordered_forwards")
    if ordered is not None and not isinstance(ordered, bool):
        raise TypeError(f"ordered_forwards: True, False or None (a replayed trace's step says, "
                        f"else off), got {type(ordered).__name__} {ordered!r}")
    kwargs["ordered_forwards"] = "auto" if ordered is None else "on" if ordered else "off"
    # Taken and ignored without a replay, where the CLI refuses them; a value of the wrong type
    # is refused as one first (an array met "the truth value of an array is ambiguous").
    given = [name for name in ("step", "trace_format", "message_us")
             if kwargs.get(name) is not None and not _is_text(kwargs.get(name), "auto")]
    step = kwargs.get("step")
    kwargs["step"] = -1 if step is None else check_whole(
        "step", step, "None (the trace's first complete step) or a whole number in "
        f"0..{INT_MAX}", low=0, high=INT_MAX)
    _check_names(kwargs, ("trace_format",))
    kwargs["message_us"] = _check_message_us(kwargs.get("message_us"))
    if given and not kwargs.get("replay"):
        raise ValueError(f"{given[0]}: is about a replayed trace; give replay= too")
    return StepRecord(_rrfp.simulate(**kwargs))


def _is_text(value, text):
    """Whether `value` is the string `text`: `==` on a NumPy array compares it element by
    element (a FutureWarning, or "the truth value of an array is ambiguous")."""
    return isinstance(value, str) and value == text


_SIMULATE_KEYWORDS = (
    "pp", "vpp", "microbatches", "placement", "split_backward", "workload", "workload_file",
    "replay", "hint", "policy", "limit", "max_pending_w", "comm", "seed", "tp", "tp_protocol",
    "ordered_forwards", "step", "trace_format", "message_us")
_SCHEDULE_KEYWORDS = ("hint", "pp", "vpp", "microbatches", "placement", "split_backward",
                      "ordered_forwards", "out")


def _check_keywords(function, kwargs, known):
    # pybind's own refusal ("incompatible function arguments", then every signature) named no
    # argument.
    unknown = [name for name in kwargs if name not in known]
    if unknown:
        raise TypeError(f"{function}() got an unexpected keyword argument {unknown[0]!r}; it "
                        f"takes {', '.join(known)}")


def _check_message_us(value):
    import numbers
    if value is None:
        return -1.0  # seen from when the consumers started
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"message_us: microseconds as a number, or None, got "
                        f"{type(value).__name__} {value!r}")
    if not 0 <= value <= 1e9:  # NaN too
        raise ValueError(f"message_us: must be between 0 and 1e9 us, got {value!r}")
    return float(value)


def schedule(**kwargs):
    """Each stage's tasks, ('F'|'B'|'W', chunk, microbatch), in the order the hint runs them at
    unit cost (`rrfp schedule show`): hint, pp, vpp, microbatches, placement, split_backward,
    ordered_forwards (True, or False/None: the default), checked as rrfp.simulate checks them.
    A hint file's header gives each of pp, vpp, microbatches and placement not given.
    `out`: a path where a list hint's task list is written, as the command's --out writes it
    (JSON for a name ending .json, else text); None (the default) writes nothing."""
    _check_keywords("schedule", kwargs, _SCHEDULE_KEYWORDS)
    _check_counts(kwargs, ("pp", "vpp", "microbatches"))
    _check_names(kwargs, ("placement", "split_backward"))
    _check_paths(kwargs, (("hint", None),))
    ordered = kwargs.get("ordered_forwards")
    if ordered is not None and not isinstance(ordered, bool):
        raise TypeError(f"ordered_forwards: True, False or None (off), got "
                        f"{type(ordered).__name__} {ordered!r}")
    kwargs["ordered_forwards"] = bool(ordered)
    _refuse_empty(kwargs, ("out",))  # it would write nothing, silently
    if kwargs.get("out") is None:
        kwargs["out"] = ""
    else:
        _check_paths(kwargs, (("out", "a file's path (str or a path object)"),))
        _refuse_out(kwargs["out"], kwargs.get("hint", "1f1b"))
    return _rrfp.schedule(**kwargs)


def _refuse_empty(kwargs, names):
    for name in names:
        if _is_text(kwargs.get(name), ""):  # an unset variable's
            raise ValueError(f"{name}: '' names nothing (an unset variable?); leave it out "
                             "for none")


def _refuse_out(out, hint):
    """What `schedule show --out` refuses, in the function's words: a built-in hint's name
    (`hint` would run the hint, never read the file back), '-' (no standard output here) and
    the hint file it is written from (replaced by its own list)."""
    import os
    if out in ("-", b"-"):
        raise ValueError("out: '-' is no standard output here; give a file's path")
    if isinstance(out, bytes):  # b'gpipe' wrote a file the hint's name would not read back
        out = os.fsdecode(out)
    if isinstance(out, str) and out in _rrfp.hint_names():
        raise ValueError(f"out: '{out}' is a built-in hint's name, which hint= runs instead of "
                         f"the file; give another name (./{out}, {out}.txt or {out}.json)")
    try:
        same = os.path.samefile(out, hint)
    except (OSError, TypeError, ValueError):  # either not there (a name): not one file
        same = False
    if same:
        raise ValueError(f"out: {out!r} is the hint file it would be written from")


def _check_counts(kwargs, names):
    from ._args import INT_MAX, check_whole
    # The range the core takes of each, so that the message gives it (it gave a C int's,
    # -2147483648.., where a limit below 0 or a pp below 1 was refused next).
    lowest = {"limit": 0, "max_pending_w": 0}  # 0: the default
    highest = {"tp": _rrfp._max_tp}
    for name in names:
        if name in kwargs:
            low, high = lowest.get(name, 1), highest.get(name, INT_MAX)
            takes = f"a whole number in {low}..{high}" + (" (0: the default)" if low == 0 else "")
            kwargs[name] = check_whole(name, kwargs[name], takes, low=low, high=high)


def _check_names(kwargs, names):
    for name in names:
        if name in kwargs and not isinstance(kwargs[name], str):
            value = kwargs[name]
            raise TypeError(f"{name}: a name (str), got {type(value).__name__} {value!r}")


def _check_paths(kwargs, names):
    from ._args import HINT_TAKES, path_or_name, warn_hint_shadows
    for name, takes in names:
        if name in kwargs:
            kwargs[name] = path_or_name(name, kwargs[name], takes or HINT_TAKES)
    warn_hint_shadows(kwargs.get("hint"))


def _shutdown():
    # Multi-process runs end their runtimes and MPI before the interpreter goes; a step running
    # on a daemon thread is cancelled (freed under it, its runtime crashed the process), and its
    # Python half given a moment to leave. Under mpirun a call another thread is making ends
    # the job (_rrfp._shutdown's held_call): from here on no call starts there, so none is
    # missed.
    # Said first, over c10d: another process waiting for this one in a call names it.
    _ended.note_end()
    live = list(_live.LIVE)  # held: a daemon thread's pipeline must outlive the wait
    over_mpi = [p._calls for p in live if p._calls.transport == "mpi"]
    for calls in over_mpi:
        calls.exiting = True
    held = [c for c in over_mpi if c.held_here()]
    _rrfp._shutdown(held_call=(held[0].holder or "call") if held else "")
    _live.wait_for_steps(live, 10)


atexit.register(_shutdown)
_children.watch_forks()


def _excepthook(kind, value, tb, _previous=sys.excepthook):
    # An uncaught exception in one process of an mpirun job ends the whole job at once, rather
    # than leaving the other processes waiting for this one until their timeout.
    _previous(kind, value, tb)
    sys.stderr.flush()
    _rrfp._abort(1)


sys.excepthook = _excepthook

hint_names = _rrfp.hint_names
# The CMake build type of the extension ("Release", "Debug", ...): benchmarks state it.
build_type = _rrfp.build_type
# A message that fits no task, or one that is no message (docs/python.md names it rrfp's).
ProtocolError = _rrfp.ProtocolError

__all__ = ["Pipeline", "StageError", "ProtocolError", "GradScaler", "StepRecord", "simulate",
           "schedule", "hint_names", "split", "task_seed"]


def split(model, points=None, *, chunks=None):
    """Cuts an nn.Sequential into pipeline chunks, for Pipeline(chunks, ...).

    points: the indices where a new chunk begins (split(model, [4, 8]) gives model[:4],
        model[4:8], model[8:]); or chunks: how many chunks of near-equal length (the first
        ones take the remainder). The chunks share the model's modules and parameters, so
        training them trains the model. A model that is not an nn.Sequential has a forward of
        its own that no cut can follow: write its chunks as modules (docs/python.md)."""
    from collections import OrderedDict
    from torch import nn

    from ._args import whole_index

    if not isinstance(model, nn.Sequential):
        raise TypeError(f"split: expected an nn.Sequential, got {type(model).__name__}; write "
                        "the chunks of another model as modules of their own")
    # A subclass with a forward of its own (a residual around the sequence, say) or hooks on the
    # whole model do what no cut keeps: each chunk applied the residual to itself, and the hooks
    # were dropped, silently.
    if type(model).forward is not nn.Sequential.forward:
        raise TypeError(f"split: {type(model).__name__} is an nn.Sequential with a forward of "
                        "its own, which no cut by position can follow; write its chunks as "
                        "modules of their own")
    if "forward" in vars(model):  # a forward set on the instance
        raise TypeError("split: the model has a forward of its own (set on it), which no cut by "
                        "position can follow; write its chunks as modules of their own")
    hooks = [name for name in ("_forward_pre_hooks", "_forward_hooks", "_backward_hooks",
                               "_backward_pre_hooks") if getattr(model, name, None)]
    if hooks:
        raise ValueError(f"split: the model has hooks of its own ({', '.join(hooks)}), which "
                         "would run on no chunk; register them on the chunks instead")
    n = len(model)
    if n == 0:
        raise ValueError("split: the model is an empty nn.Sequential: there is nothing to cut")
    if (points is None) == (chunks is None):
        raise ValueError("split: give the cut points or the number of chunks, one of them")
    if chunks is not None:
        if whole_index(chunks) is None:
            raise TypeError(f"split: chunks must be a whole number, got "
                            f"{type(chunks).__name__} {chunks!r}")
        chunks = whole_index(chunks)
        if not 1 <= chunks <= n:
            raise ValueError(f"split: chunks must be a whole number in 1..{n} (the model's "
                             f"length), got {chunks!r}")
        base, extra = divmod(n, chunks)
        points, at = [], 0
        for i in range(chunks - 1):
            at += base + (1 if i < extra else 0)
            points.append(at)
    # One number of any kind (a 0-d tensor iterates into torch's "iteration over a 0-d tensor",
    # which named no argument) is no list.
    try:
        if whole_index(points) is not None or isinstance(points, (str, bytes)):
            raise TypeError
        points = list(points)
    except TypeError:
        raise TypeError(f"split: points must be a list of indices (or give chunks=N), got "
                        f"{type(points).__name__} {points!r}") from None
    # Any integer type: cut points computed with NumPy (np.cumsum of layer counts) are NumPy's.
    idx = [whole_index(p) for p in points]
    if None in idx:
        bad = points[idx.index(None)]
        raise TypeError(f"split: points must be whole numbers, got {type(bad).__name__} "
                        f"{bad!r} in {points!r}")
    points = idx
    if not all(0 < p < n for p in points) or any(a >= b for a, b in zip(points, points[1:])):
        raise ValueError(f"split: points must be increasing indices in 1..{n - 1}, got {points}")
    bounds = [0] + points + [n]
    # Plain nn.Sequential chunks: model[a:b] builds its own class, whose __init__ may take
    # other arguments (torchvision's MLP failed there); its forward is Sequential's, checked.
    items = list(model._modules.items())
    parts = [nn.Sequential(OrderedDict(items[a:b])) for a, b in zip(bounds, bounds[1:])]
    for part in parts:  # a new module trains; the cut of a model in eval() said so of itself
        part.training = model.training
    return parts
