"""Parameters that two pipelines of one process share (both built over the same modules): their
steps must not overlap. A step copies each .grad as it begins and writes it back whole as it
ends (rrfp._grads), so of two overlapping steps the later write dropped the other's gradients,
silently, where two plain loops in two threads both add theirs. Stepped one after the other,
or interleaved, they train as plain loops do. (A plain backward or zero_grad on such a
parameter in another thread during a step is refused as the step ends: rrfp._step's
refuse_rewritten.)"""
import threading

from ._grads import parameter_name

_LOCK = threading.Lock()
_STEPPING = {}  # id(parameter) -> the Pipeline whose step trains it now


def claim_parameters(pipe):
    """Claims the parameters a step of `pipe` trains (its runners' params: frozen ones get no
    .grad and are no conflict), or raises RuntimeError when another pipeline's step running now
    trains one of them."""
    mine = {id(p): (c, p) for r in pipe._runners for c, ps in r.params.items() for p in ps}
    with _LOCK:
        for key, (c, p) in mine.items():
            other = _STEPPING.get(key)
            if other is not None and other is not pipe:
                _, name = parameter_name(pipe.chunks, p, [c])
                raise RuntimeError(
                    f"step: parameter {name!r} of chunk {c} is trained by a step of another "
                    "rrfp.Pipeline running now (the two are built over the same modules); "
                    "each step writes .grad whole as it ends, so one would drop the other's "
                    "gradients: step the two pipelines one after the other")
        for key in mine:
            _STEPPING[key] = pipe


def release_parameters(pipe):
    """Lets go of every parameter `pipe` claimed: by owner, so that a claim an interrupt cut
    short is let go of too."""
    with _LOCK:
        for key in [k for k, owner in _STEPPING.items() if owner is pipe]:
            del _STEPPING[key]
