"""Pipeline.clip_grad_norm_: torch.nn.utils.clip_grad_norm_ over the whole model, bitwise, in
threads here (a process per stage: multiprocess_pipeline.py), with a tied parameter counted
once, a frozen one left out, and every norm type torch takes (-inf, 0 and negative ones
too)."""
import math

import pytest
import torch
from torch import nn

import rrfp


def loss_fn(y, t):
    return ((y - t) ** 2).sum()


def chunks():
    torch.manual_seed(0)
    shared = nn.Linear(8, 8)
    cs = [nn.Sequential(shared, nn.Tanh()), nn.Sequential(nn.Linear(8, 8), nn.Tanh()),
          nn.Sequential(nn.Linear(8, 8), nn.Tanh()), nn.Sequential(nn.Linear(8, 8), shared)]
    cs[1][0].bias.requires_grad_(False)  # frozen: no gradient, left out of the norm
    return cs


def model_params(cs):
    """The parameters of the model made of its chunks in order, each once, as torch's
    clip_grad_norm_ takes them from model.parameters()."""
    return list(nn.Sequential(*cs).parameters())


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 8, generator=g) * 3, torch.randn(8, 8, generator=g)


# (norm type, a max_norm below the model's norm of that type, so that it clips). -inf is the
# smallest |value|, which torch takes as a p-norm: it was taken as +inf, the largest. torch
# documents the string 'inf' for the norm type.
@pytest.mark.parametrize("norm_type,max_norm", [
    (2.0, 0.5), (1.0, 0.5), (3.0, 0.5), (math.inf, 0.5), (-math.inf, 1e-5), (0.0, 0.5),
    (0.5, 0.5), (-1.0, 1e-5), (-2.0, 1e-5), ("inf", 0.5), ("-inf", 1e-5)])
def test_clipping_is_torchs_over_the_whole_model(norm_type, max_norm):
    x, y = data()
    ref, model = chunks(), chunks()
    for xi, yi in zip(x.chunk(4), y.chunk(4)):
        h = xi
        for c in ref:
            h = c(h)
        loss_fn(h, yi).backward()
    pipe = rrfp.Pipeline(model, loss_fn, pp=2, vpp=2, microbatches=4, hint="bf", timeout=60)
    pipe.step(x, y)
    want = torch.nn.utils.clip_grad_norm_(model_params(ref), max_norm, norm_type)
    got = pipe.clip_grad_norm_(max_norm, norm_type)
    assert torch.equal(got, want) and float(want) > max_norm  # it clipped
    for p, q in zip(model_params(ref), model_params(model)):
        assert (p.grad is None) == (q.grad is None)
        if p.grad is not None:
            assert torch.equal(p.grad, q.grad)


def test_a_non_finite_norm_is_refused_when_asked():
    model = chunks()
    pipe = rrfp.Pipeline(model, loss_fn, pp=2, vpp=2, microbatches=4, hint="bf", timeout=60)
    pipe.step(*data())
    model[2][0].weight.grad[0, 0] = math.inf
    with pytest.raises(RuntimeError, match="non-finite"):
        pipe.clip_grad_norm_(1.0, error_if_nonfinite=True)
    assert math.isinf(float(pipe.clip_grad_norm_(1.0)))


@pytest.mark.parametrize("args,error,says", [
    ((-1.0,), ValueError, "max_norm must be at least 0"),
    ((math.nan,), ValueError, "max_norm must be at least 0"),
    (("1",), TypeError, "max_norm must be a real number, got str"),
    ((True,), TypeError, "max_norm must be a real number, got bool"),
    ((1.0, math.nan), ValueError, "norm_type must be a number or inf, got nan"),
    ((1.0, None), TypeError, "norm_type must be a real number, got NoneType"),
    ((1.0, "two"), ValueError, "norm_type must be a number or 'inf', got 'two'"),
    ((1.0, b"inf"), TypeError, "norm_type must be a real number, got bytes"),
    ((1.0, 2.0, "yes"), TypeError, "error_if_nonfinite must be True or False")])
def test_bad_arguments_are_refused_and_nothing_is_clipped(args, error, says):
    """torch 1.13's clip takes float() of max_norm and scales by it as it is: -1 flipped the
    sign of every gradient, and NaN made them all NaN, without a word."""
    model = chunks()
    pipe = rrfp.Pipeline(model, loss_fn, pp=2, vpp=2, microbatches=4, hint="bf", timeout=60)
    pipe.step(*data())
    before = [p.grad.clone() for p in model_params(model) if p.grad is not None]
    after = lambda: [p.grad for p in model_params(model) if p.grad is not None]
    with pytest.raises(error, match=says):
        pipe.clip_grad_norm_(*args)
    assert all(torch.equal(g, b) for g, b in zip(after(), before, strict=True))
    assert float(pipe.clip_grad_norm_(math.inf)) > 0  # inf: the norm, nothing clipped
    assert all(torch.equal(g, b) for g, b in zip(after(), before, strict=True))


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf, -math.inf])
def test_a_sparse_gradient_is_clipped_too(norm_type):
    """An embedding with sparse=True: its gradient is a sparse tensor, whose norm is taken as
    torch's clip takes it (torch.norm; the infinity norm, which torch 1.13 cannot take of one,
    from its values), and which is scaled too (torch 1.13's clip scales a detached alias of it,
    which leaves the gradient as it was)."""
    def model():
        torch.manual_seed(0)
        return [nn.Embedding(50, 8, sparse=True), nn.Linear(8, 8)]
    ref, cs = model(), model()
    x, y = torch.randint(0, 50, (8,), generator=torch.Generator().manual_seed(2)), data()[1]
    for xi, yi in zip(x.chunk(2), y.chunk(2)):
        loss_fn(ref[1](ref[0](xi)), yi).backward()
    pipe = rrfp.Pipeline(cs, loss_fn, pp=2, microbatches=2, timeout=60)
    pipe.step(x, y)
    max_norm = 0.1 if norm_type > 0 else 1e-4
    got = pipe.clip_grad_norm_(max_norm, norm_type)
    grads = [p.grad for p in model_params(ref)]
    if norm_type == math.inf:
        want = torch.max(torch.stack([g.to_dense().abs().max() for g in grads]))
    else:  # torch 1.13's clip_grad_norm_, written out
        want = torch.norm(torch.stack([torch.norm(g, norm_type) for g in grads]), norm_type)
    coef = torch.clamp(max_norm / (want + 1e-6), max=1.0)
    with torch.no_grad():
        for g in grads:
            g.mul_(coef)
    assert torch.equal(got, want) and float(want) > max_norm  # it clipped
    for p, q in zip(model_params(ref), model_params(cs)):
        assert q.grad.is_sparse == p.grad.is_sparse
        assert torch.equal(p.grad.to_dense(), q.grad.to_dense())
