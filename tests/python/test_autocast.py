"""A step or evaluation step called inside `with torch.autocast(...)` computes as a plain loop
under the same `with`: autocast is thread-local and the forwards run on the stages' threads,
which used to compute in full precision there. The CUDA case skips, saying so, where torch sees
no GPU; scripts/gpu-check.sh runs it on one."""
import os

# Deterministic cuBLAS needs its workspace fixed before CUDA starts; harmless without a GPU.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import pytest
import torch
from torch import nn

import rrfp


def loss_fn(y, t):
    return ((y.float() - t) ** 2).sum()


def chunks():
    torch.manual_seed(0)
    return [nn.Sequential(nn.Linear(16, 16), nn.GELU()) for _ in range(4)]


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)


def plain(model, x, y, train=True):
    outs, losses = [], []
    for xi, yi in zip(x.chunk(4), y.chunk(4)):
        h = xi
        for c in model:
            h = c(h)
        outs.append(h)
        losses.append(loss_fn(h, yi))
    if train:
        for loss in losses:
            loss.backward()
    return torch.cat(outs)


def pipeline(model, hint="bf", policy="ready"):
    return rrfp.Pipeline(model, loss_fn, pp=2, vpp=2, microbatches=4, hint=hint, policy=policy,
                         timeout=60, delay_fn=lambda s, k, c, mb: 0.0003 * ((mb + s) % 2))


def grads(model):
    return [p.grad for c in model for p in c.parameters()]


@pytest.mark.parametrize("hint,policy", [("bf", "ready"), ("bfw", "ready"),
                                         ("interleaved-1f1b", "fixed")])
def test_a_step_inside_autocast_is_a_plain_loops_inside_it(hint, policy):
    x, y = data()
    ref, model, full = chunks(), chunks(), chunks()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain(ref, x, y)
        pipeline(model, hint, policy).step(x, y)
    pipeline(full, hint, policy).step(x, y)  # outside: full precision, other bits
    for a, b, c in zip(grads(ref), grads(model), grads(full)):
        assert torch.equal(a, b)
    assert any(not torch.equal(a, c) for a, c in zip(grads(ref), grads(full)))


def test_an_evaluation_step_inside_autocast_gives_the_plain_outputs():
    x, y = data()
    ref, model = chunks(), chunks()
    pipe = pipeline(model)
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        want = plain(ref, x, y, train=False)
        got, _ = pipe.eval_step(x, y)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, want)
    out, _ = pipe.eval_step(x, y)  # the region ended with the step: full precision again
    assert out.dtype == torch.float32


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device: torch.cuda.is_available() is False (the GPU half "
                           "runs on a GPU machine)")
def test_a_step_inside_cuda_autocast_on_the_device_is_the_plain_loops():
    x, y = data()
    ref = [c.cuda() for c in chunks()]
    model = chunks()
    pipe = rrfp.Pipeline(model, loss_fn, pp=2, vpp=2, microbatches=4, hint="bf", timeout=60,
                         device="cuda")
    torch.use_deterministic_algorithms(True)
    try:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            plain(ref, x.cuda(), y.cuda())
            pipe.step(x, y)
    finally:
        torch.use_deterministic_algorithms(False)
    for a, b in zip(grads(ref), grads(model)):
        assert torch.equal(a, b)
