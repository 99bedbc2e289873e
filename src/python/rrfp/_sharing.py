"""Parameters that two pipelines of one process share (both built over the same modules): their
steps must not overlap. A step copies each .grad as it begins and writes it back whole as it
ends (rrfp._grads), so of two overlapping steps the later write dropped the other's gradients,
silently, where two plain loops in two threads both add theirs. Stepped one after the other,
or interleaved, they train as plain loops do. (A plain backward or zero_grad on such a
parameter in another thread during a step is refused as the step ends: rrfp._step's
refuse_rewritten.)"""
import threading

from ._grads import parameter_name
from ._order import _SPECTRAL_HOOK, torch_class

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


# torch's hooks that set a module's weight as an attribute before each forward (weight_norm's
# and the older spectral_norm's): module.weight = the weight computed from its parameters.
_SETS_WEIGHT = tuple(c for c in (torch_class("torch.nn.utils.weight_norm", "WeightNorm"),
                                 _SPECTRAL_HOOK) if c is not None)


def refuse_weight_set_across_stages(stages):
    """Refuses a module that chunks of two stages of this process share (stages: {stage:
    {chunk: module}}) whose forward hook sets its weight as an attribute: the stages run as
    threads at once, and one's forward took the weight the other's hook had just set, whose
    graph both backwards then went through (the second failed, "Trying to backward through the
    graph a second time", after some steps, at random). Chunks of one stage run one at a time."""
    seen = {}  # id(module) -> (stage, chunk) of its first user
    for stage, modules in stages.items():
        for c, chunk in modules.items():
            for name, m in chunk.named_modules():
                if not any(isinstance(h, _SETS_WEIGHT) for h in m._forward_pre_hooks.values()):
                    continue
                first = seen.setdefault(id(m), (stage, c))
                if first[0] != stage:
                    hook = next(type(h).__name__ for h in m._forward_pre_hooks.values()
                                if isinstance(h, _SETS_WEIGHT))
                    raise ValueError(
                        f"chunks: chunks {first[1]} and {c} share '{name}', whose {hook} hook "
                        "sets its weight as an attribute at each forward; their stages run at "
                        "once in this process, and one stage's forward would take the weight "
                        "the other's just set (a later backward failed); give each chunk its "
                        "own module, or compute the weight as a parametrization "
                        "(torch.nn.utils.parametrize), which computes it at each use")
