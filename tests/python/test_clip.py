"""Pipeline.clip_grad_norm_: torch.nn.utils.clip_grad_norm_ over the whole model, bitwise, in
threads here (a process per stage: multiprocess_pipeline.py), with a tied parameter counted
once, a frozen one left out, and every norm type torch takes."""
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


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
def test_clipping_is_torchs_over_the_whole_model(norm_type):
    x, y = data()
    ref, model = chunks(), chunks()
    for xi, yi in zip(x.chunk(4), y.chunk(4)):
        h = xi
        for c in ref:
            h = c(h)
        loss_fn(h, yi).backward()
    pipe = rrfp.Pipeline(model, loss_fn, pp=2, vpp=2, microbatches=4, hint="bf", timeout=60)
    pipe.step(x, y)
    want = torch.nn.utils.clip_grad_norm_(model_params(ref), 0.5, norm_type)
    got = pipe.clip_grad_norm_(0.5, norm_type)
    assert torch.equal(got, want) and float(want) > 0.5  # it clipped
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
