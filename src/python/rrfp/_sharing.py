"""Parameters that two pipelines of one process share (both built over the same modules): their
steps must not overlap. A step copies each .grad as it begins and writes it back whole as it
ends (rrfp._grads), so of two overlapping steps the later write dropped the other's gradients,
silently, where two plain loops in two threads both add theirs. Stepped one after the other,
or interleaved, they train as plain loops do."""
import threading

_LOCK = threading.Lock()
_STEPPING = {}  # id(parameter) -> the step's owner (a Pipeline) whose step trains it now


def claim_parameters(pipe):
    """Claims the parameters of this process's chunks of `pipe` for its step, or raises
    RuntimeError when another pipeline's step running now trains one of them. Returns the
    claim, for release_parameters."""
    mine = {}
    for c, module in pipe.chunks.items():
        for name, p in module.named_parameters():
            mine.setdefault(id(p), (c, name))
    with _LOCK:
        for key, (c, name) in mine.items():
            other = _STEPPING.get(key)
            if other is not None and other is not pipe:
                raise RuntimeError(
                    f"step: parameter {name!r} of chunk {c} is trained by a step of another "
                    "rrfp.Pipeline running now (the two are built over the same modules); "
                    "each step writes .grad whole as it ends, so one would drop the other's "
                    "gradients: step the two pipelines one after the other")
        for key in mine:
            _STEPPING[key] = pipe
    return list(mine)


def release_parameters(claim):
    with _LOCK:
        for key in claim:
            _STEPPING.pop(key, None)
