"""What a GradScaler's processes agree on over the job, with a process per stage: whether any
found an inf or NaN, and the scale itself. The last stage scales each microbatch's loss by its
process's scale and every stage unscales its gradients by its own, so processes of different
scales (another init_scale, new_scale or loaded state) trained with gradients off by their
ratio, silently (4x on stage 0 for scales of 1024 and 4096). Each gather carries the scale, and
processes whose scales differ are refused on every process alike (ValueError)."""
from ._launch import agreed_rows


def agreed_found(scaler, fn, message, name):
    """Whether fn() found an inf or NaN on any process of the job (a failure told to every
    process, as agreed() tells it), in the gather of `name` (a call of _calls)."""
    _, rows = agreed_rows(scaler._core(), fn, message,
                          lambda out: [1.0 if out else 0.0, scaler._scale], scaler._call(name))
    _refuse_other_scales(rows, name)
    return any(r[0] > 0 for r in rows)


def agreed_update(scaler, new_scale, found, checked):
    """update()'s gather: (whether any process found an inf or NaN, found() here, or None with
    new_scale; new_scale as checked(new_scale) gives it, or None). Every process passes
    new_scale alike (a process that set it alone kept its own scale, and one that gathered
    met another's next call), or all are refused."""
    def here():
        return (None, checked(new_scale)) if new_scale is not None else (found(), None)

    def values(out):
        given = out[1]
        return [1.0 if out[0] else 0.0, scaler._scale, 0.0 if given is None else 1.0,
                given or 0.0]
    out, rows = agreed_rows(scaler._core(), here, "update: process(es) {bad} could not update "
                            "their scale; their own errors say why", values,
                            scaler._call("GradScaler.update()"))
    _refuse_other_scales(rows, "update")
    if len({(r[2], r[3]) for r in rows}) > 1:
        said = ", ".join(f"job rank {r}: " + (f"{v[3]!r}" if v[2] else "none")
                         for r, v in enumerate(rows))
        raise ValueError(f"update: the processes pass different new_scale ({said}); pass the "
                         "same on every process; no scale changed")
    return any(r[0] > 0 for r in rows), out[1]


def scales_apart(scales, none_said=""):
    """Every process's scale by job rank, said ("job rank 0: 8.0, ..."; `none_said` after a
    scale of 1, where that means no scaler), or None where they are one."""
    if len(set(scales)) <= 1:
        return None
    return ", ".join(f"job rank {r}: {s!r}" + (none_said if s == 1.0 else "")
                     for r, s in enumerate(scales))


def _refuse_other_scales(rows, what):
    said = scales_apart([r[1] for r in rows])
    if said is not None:
        raise ValueError(
            f"{what}: the processes' GradScalers hold different scales ({said}): the last stage "
            "scaled the loss by its own and every stage unscales by its own, so the gradients "
            "are off by their ratio; give every process the same init_scale, growth and backoff "
            "settings, new_scale and checkpoint")
