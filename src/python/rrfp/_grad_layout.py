"""The step's gradients as a plain loop's backward leaves them in `.grad`: added into a `.grad`
that was there, in place, and a first one in the layout autograd stores (the parameter's
strides where it is dense, else contiguous)."""
import torch


def set_grad(p, g):
    """The step's gradient `g` of `p` (the previous .grad included) as a plain loop's backward
    leaves it: written into a dense .grad that was there, as autograd adds into it in place, so
    that whatever holds that tensor (a flat buffer whose views are the .grads, a reference kept
    across steps) sees the step; set where there was none, or of another kind."""
    old = p.grad
    if old is not None and old is not g and old.layout == torch.strided and \
            g.layout == torch.strided and old.shape == g.shape and old.dtype == g.dtype and \
            old.device == g.device:
        with torch.no_grad():
            old.copy_(g)
    else:
        p.grad = _as_autograd_stores(p, g)


def _as_autograd_stores(p, g):
    """A first gradient as autograd stores it (its layout contract): with the parameter's
    strides where the parameter is dense, else contiguous. The sum kept the strides autograd's
    kernels gave it: a conv's weight fed channels-last inputs got a channels-last .grad, which
    .view(-1) refused and whose norm came out in another order than a plain loop's."""
    if g.layout != torch.strided or p.layout != torch.strided:
        return g
    want = p.stride() if _dense(p) else _contiguous_strides(p.shape)
    if _same_strides(g, want):  # nearly always: nothing allocated to find it out
        return g
    return torch.empty_strided(p.shape, want, dtype=g.dtype, device=g.device).copy_(g)


def _dense(t):
    """Whether t's elements fill its storage span without gaps or overlap, in some order of
    its dimensions (what autograd's layout contract calls non-overlapping and dense)."""
    expected = 1
    for stride, size in sorted((st, s) for s, st in zip(t.shape, t.stride()) if s != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _contiguous_strides(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _same_strides(t, strides):
    """t's strides equal `strides` on every dimension of more than one element (a stride of a
    dimension of one says nothing of the layout, and autograd ignores it)."""
    return all(x == y for n, x, y in zip(t.shape, t.stride(), strides) if n != 1)
