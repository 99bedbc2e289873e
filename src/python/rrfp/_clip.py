"""Gradient clipping by the norm of the whole model's gradient, wherever its chunks run.

With a process per stage, torch.nn.utils.clip_grad_norm_ over a process's own parameters clips
by the norm of that stage's gradient alone, not the model's as a plain loop does: each stage
would scale its gradients by another factor, silently. Pipeline.clip_grad_norm_ gathers every
parameter's gradient norm over the processes of the replica and computes the total as torch
does, over the norms in model order; every process then scales its own gradients by the same
factor. After a step the replicas hold the same summed gradients, so each replica computes the
same total on its own."""
import math

import torch

from ._batch import gather_call
from ._launch import EXACT_IN_DOUBLE


def _norm(g, norm_type):
    """A gradient's norm as torch 1.13's clip takes it: for +inf alone the largest |value|; any
    other order a p-norm, -inf (the smallest |value|) included, which was taken for +inf and
    clipped by the largest."""
    g = g.detach()
    if g.is_sparse:  # an embedding's sparse=True gradient: linalg's norms take no sparse tensor
        if norm_type != math.inf:
            return torch.norm(g, norm_type)  # as torch 1.13's clip computes it
        values = g.coalesce().values()
        return values.abs().max() if values.numel() else torch.zeros((), dtype=g.dtype,
                                                                       device=g.device)
    # torch.norm (torch 1.13's clip) and linalg.vector_norm give the same bits.
    return g.abs().max() if norm_type == math.inf else torch.linalg.vector_norm(g, norm_type)


def _local(chunks):
    """(chunk, index in its parameters(), parameter) of this process's parameters that have a
    gradient, each once (a tied parameter under its first chunk), in model order."""
    out, seen = [], set()
    for c in sorted(chunks):
        for i, p in enumerate(chunks[c].parameters()):
            if id(p) not in seen:
                seen.add(id(p))
                if p.grad is not None:
                    out.append((c, i, p))
    return out


def _check_dtypes(norms):
    for n in norms:
        if n.dtype not in EXACT_IN_DOUBLE:
            raise TypeError(f"clip_grad_norm_: gradients of dtype {n.dtype} are not supported "
                            f"(float32, float64, float16, bfloat16)")


# What every process of a job must pass alike: each clipped by a total of its own, silently.
_SETTINGS = ("max_norm", "norm_type", "error_if_nonfinite")


def _shown(name, value):
    """A setting as the caller passed it: error_if_nonfinite travels as 0.0 or 1.0."""
    return repr(bool(value)) if name == "error_if_nonfinite" else repr(value)


def _gathered(pipe, local, norms, settings, refusal):
    """Every norm of the replica, in model order, as tensors on `local`'s first device (the
    values are exact: a double holds every float32, float16 and bfloat16), once every process
    is found to pass the same `settings` (max_norm, norm_type, error_if_nonfinite) and none
    refused its arguments or gradients (`refusal`, raised here; the others raise RuntimeError
    in the same gather, where they waited for it until their timeout)."""
    flat = [1.0 if refusal is not None else 0.0] + list(settings)
    if refusal is None:
        # One copy to the host for all of them (a GPU's norms would each wait for the device).
        values = torch.stack([n.double() for n in norms]).cpu().tolist() if norms else []
        for (c, i, _), n, v in zip(local, norms, values):
            flat += [float(c), float(i), float(EXACT_IN_DOUBLE.index(n.dtype)), v]
    every = gather_call(pipe, "clip_grad_norm_()", flat)
    bad = [r for r, v in enumerate(every) if v[0]]
    if refusal is not None:
        raise refusal
    if bad:
        raise RuntimeError(f"clip_grad_norm_: process(es) {bad} refused their arguments or "
                           "gradients; their own errors say why; nothing was clipped")
    if len({tuple(x.hex() for x in v[1:4]) for v in every}) > 1:  # NaN equal to NaN
        said = ", ".join(f"job rank {r}: " + ", ".join(f"{n}={_shown(n, v[1 + k])}"
                                                       for k, n in enumerate(_SETTINGS))
                         for r, v in enumerate(every))
        raise ValueError(f"clip_grad_norm_: the processes of the job pass different arguments "
                         f"({said}); each would clip by another total: pass the same on "
                         "every process; nothing was clipped")
    replica = every[pipe.replica * pipe.pp:(pipe.replica + 1) * pipe.pp]
    entries = sorted((int(v[k]), int(v[k + 1]), int(v[k + 2]), v[k + 3])
                     for v in replica for k in range(4, len(v), 4))
    device = local[0][2].device if local else torch.device("cpu")
    return [torch.tensor(value, dtype=EXACT_IN_DOUBLE[code], device=device)
            for _, _, code, value in entries]


def _real(name, value):
    """`value` as a float: a real number (an int, a float, a NumPy scalar, a one-element
    tensor), not a bool or a string (torch's clip takes float() of either: True clipped to 1,
    and "1" to 1.0)."""
    if isinstance(value, (bool, str, bytes)):
        raise TypeError(f"clip_grad_norm_: {name} must be a real number, got "
                        f"{type(value).__name__} {value!r}")
    try:
        return float(value)
    except OverflowError:  # a whole number past a double's
        raise ValueError(f"clip_grad_norm_: {name} must be a real number within a double's "
                         "range, got a whole number past it") from None
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"clip_grad_norm_: {name} must be a real number, got "
                        f"{type(value).__name__}") from None


def _norm_type(value):
    """norm_type as a float: torch documents the string 'inf' for it (and takes float() of any
    string), so a string naming a number is taken here too; max_norm's type is a float."""
    if not isinstance(value, str):
        return _real("norm_type", value)
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"clip_grad_norm_: norm_type must be a number or 'inf', got {value!r}") \
            from None


def _checked(max_norm, norm_type, error_if_nonfinite):
    """The arguments as floats, checked: torch 1.13's clip scales by max_norm / total as it
    is, so a negative max_norm flipped every gradient's sign (the optimizer then climbs) and a
    NaN made every gradient NaN, without a word."""
    max_norm, norm_type = _real("max_norm", max_norm), _norm_type(norm_type)
    if not max_norm >= 0:
        raise ValueError(f"clip_grad_norm_: max_norm must be at least 0 (inf: no clipping), "
                         f"got {max_norm!r}")
    if math.isnan(norm_type):
        raise ValueError("clip_grad_norm_: norm_type must be a number or inf, got nan")
    if not isinstance(error_if_nonfinite, bool):
        raise TypeError(f"clip_grad_norm_: error_if_nonfinite must be True or False, got "
                        f"{type(error_if_nonfinite).__name__} {error_if_nonfinite!r}")
    return max_norm, norm_type


def clip_grad_norm(pipe, max_norm, norm_type=2.0, error_if_nonfinite=False):
    refusal, settings, scaled, local, norms = None, [math.nan] * 3, [], [], []
    try:
        max_norm, norm_type = _checked(max_norm, norm_type, error_if_nonfinite)
        settings = [max_norm, norm_type, float(bool(error_if_nonfinite))]
        scaled = _local(pipe.chunks)
        # A parameter tied across processes counts once, at its first copy; every copy is
        # scaled.
        elsewhere = pipe._ties.secondary if pipe._ties else ()
        local = [e for e in scaled if id(e[2]) not in elsewhere]
        norms = [_norm(p.grad, norm_type) for _, _, p in local]
        if pipe._core.world > 1:  # the gather's doubles hold these exactly
            _check_dtypes(norms)
    except (TypeError, ValueError, RuntimeError) as e:
        if pipe._core.world <= 1:
            raise
        refusal = e  # told to every process in the gather below
    if pipe._core.world > 1:
        norms = _gathered(pipe, local, norms, settings, refusal)
    if not norms:
        return torch.tensor(0.0)
    if norm_type == math.inf:  # torch's special case; -inf is a p-norm like any other
        total = norms[0] if len(norms) == 1 else torch.max(torch.stack(norms))
    else:
        total = torch.linalg.vector_norm(torch.stack(norms), norm_type)
    if error_if_nonfinite and (total.isnan() or total.isinf()):
        raise RuntimeError(f"clip_grad_norm_: the total norm of order {norm_type} of the "
                           "gradients is non-finite, so it cannot be clipped; pass "
                           "error_if_nonfinite=False to scale by it anyway")
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    with torch.no_grad():
        for _, _, p in scaled:
            # Not through detach(), as torch 1.13's clip does: a sparse gradient's detached
            # alias takes the product, and the gradient stays as it was.
            p.grad.mul_(coef.to(p.grad.device))
    return total
