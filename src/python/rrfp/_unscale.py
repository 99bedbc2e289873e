"""The gradients GradScaler.unscale_ divides, and the division itself: each gradient times the
scale's float32 reciprocal, checked for an inf or NaN once unscaled, with one wait a device."""
import torch


def unscalable(optimizer):
    """The gradients of `optimizer`'s parameters that unscale_ multiplies in place (a sparse
    one's values), each checked first: one refused after others were divided left those
    divided, and a retry divided them twice."""
    grads = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is None:
                continue
            if p.grad.dtype == torch.float16:
                raise ValueError(
                    "unscale_: a parameter's gradient is float16, which loses what loss "
                    "scaling keeps; keep the parameters in float32 and compute in float16 "
                    "under torch.autocast")
            # As torch's scaler: a sparse one is coalesced only in float16, refused above.
            g = values(p.grad)
            if any(st == 0 and n > 1 for n, st in zip(g.shape, g.stride())):
                raise ValueError(
                    "unscale_: a parameter's gradient has elements that share memory (an "
                    f"expanded tensor, strides {g.stride()}), which cannot be unscaled in "
                    "place; assign it a copy (p.grad = p.grad.clone())")
            grads.append(g)
    return grads


def values(grad):
    """What unscale_ reads and divides of a gradient: a sparse one's values."""
    return grad._values() if grad.is_sparse else grad


def key(g):
    """What tells a gradient (a sparse one's values come as a new object each time)."""
    return (g.data_ptr(), tuple(g.shape), g.device)


def left_out(pipe, optimizer):
    """The gradients of the pipeline's parameters in this process that `optimizer` does not
    hold (another optimizer's, or no optimizer's), each once (a sparse one's values)."""
    seen = {id(p) for group in optimizer.param_groups for p in group["params"]}
    grads = []
    for c in sorted(pipe.chunks):
        for p in pipe.chunks[c].parameters():
            if id(p) not in seen:
                seen.add(id(p))
                if p.grad is not None:
                    grads.append(values(p.grad))
    return grads


def divide_and_check(scale, grads, done, others, divided=None):
    """Divides each of `grads` by `scale` (a float32 number) in place, except those `done`
    marks (divided by a refused call, unchanged since), and reads `others` unscaled without
    changing them: whether any of either, unscaled, is inf or NaN. `grads` are appended to
    `divided` (a list) once all are divided."""
    # 0-dim, so that it broadcasts to every gradient, a 0-dim parameter's too: a (1,) one
    # failed there, with the gradients before it divided already.
    inv = torch.tensor(scale, dtype=torch.float64).reciprocal().float()
    invs = {inv.device: inv}

    def inv_on(device):
        if device not in invs:
            invs[device] = inv.to(device)
        return invs[device]

    flags = {}  # device -> whether each gradient there holds an inf or a NaN
    for g, before in zip(grads, done):
        if not before:
            g.mul_(inv_on(g.device))
        # The check reads the unscaled gradient: one finite while scaled may overflow once
        # divided by a scale under 1, and the optimizer must not step on it (torch's kernel
        # reads it before the multiply, and stepped).
        flags.setdefault(g.device, []).append(torch.logical_not(torch.isfinite(g)).any())
    if divided is not None:
        divided.extend(grads)
    for g in others:
        # Read, not divided: another optimizer's are divided at its own call, and one of no
        # optimizer's stays as torch leaves it. At a scale of 1 or more the reciprocal is at
        # most 1, so the product is finite exactly where the gradient is, and no copy is made;
        # under 1 the product is taken, as the check reads it unscaled.
        if scale < 1.0:
            g = g * inv_on(g.device)
        flags.setdefault(g.device, []).append(torch.logical_not(torch.isfinite(g)).any())
    # One wait for each device, not one for each gradient.
    return any(bool(torch.stack(fs).any()) for fs in flags.values())
