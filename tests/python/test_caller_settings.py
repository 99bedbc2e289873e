"""Settings of the calling thread that a step carries to the stages' threads, each checked
against a plain loop under the same `with`: autocast (a step or evaluation step inside it used
to compute in full precision on the stages' threads) and TorchScript's optimized execution.
And TorchScript chunks, bitwise where torch's profiling executor is off. The CUDA case skips,
saying so, where torch sees no GPU; scripts/gpu-check.sh runs it on one."""
import os

# Deterministic cuBLAS needs its workspace fixed before CUDA starts; harmless without a GPU.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import lm  # noqa: E402
import rrfp  # noqa: E402


def loss_fn(y, t):
    return ((y.float() - t) ** 2).sum()


def chunks():
    torch.manual_seed(0)
    return [nn.Sequential(nn.Linear(16, 16), nn.GELU()) for _ in range(4)]


def scripted(hidden=16):
    """TorchScript chunks. Every module of one scripted class shares its executor, so a test
    that needs the executor's first calls takes a width of its own. (tanh: the executor's
    differentiable graph rounds its backward otherwise than eager tanh does.)"""
    torch.manual_seed(0)
    return [torch.jit.script(nn.Sequential(nn.Linear(16, hidden), nn.Tanh(),
                                           nn.Linear(hidden, 16))) for _ in range(4)]


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


SCHEDULES = [("bf", "ready"), ("bfw", "ready"), ("interleaved-1f1b", "fixed")]


def pipeline(model, hint="bf", policy="ready"):
    return rrfp.Pipeline(model, loss_fn, pp=2, vpp=2, microbatches=4, hint=hint, policy=policy,
                         timeout=60, delay_fn=lambda s, k, c, mb: 0.0003 * ((mb + s) % 2))


def grads(model):
    return [p.grad for c in model for p in c.parameters()]


@pytest.mark.parametrize("hint,policy", SCHEDULES)
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


class Shares(nn.Module):
    """A chunk that applies a Linear which another chunk applies too (tied)."""

    def __init__(self, shared):
        super().__init__()
        self.lin, self.shared = nn.Linear(16, 16), shared

    def forward(self, x):
        return torch.tanh(self.shared(torch.tanh(self.lin(x))))


class Twice(nn.Module):
    """A chunk that applies its own Linear twice: one cast serves both uses, as in the loop."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        return self.lin(torch.tanh(self.lin(x)))


def sharing():
    torch.manual_seed(0)
    shared = nn.Linear(16, 16)
    return [Shares(shared), Twice(), Shares(shared), nn.Sequential(nn.Linear(16, 16), nn.GELU())]


@pytest.mark.parametrize("hint,policy", SCHEDULES)
def test_a_weight_two_chunks_share_under_autocast_sums_their_casts_in_float32(hint, policy):
    # A plain loop inside one autocast region casts the shared weight to bf16 once (autocast's
    # cache) for both chunks, so their gradients add in bf16 before the cast's backward takes
    # them to float32; each forward task has a region, and a cache, of its own, so each chunk
    # casts it and the chunks' gradients add in float32, as in a loop with cache_enabled=False
    # where each chunk uses it once. A chunk's own parameters keep the cached loop's bits, a
    # Linear it applies twice included (one cast for both uses, which the uncached loop casts
    # twice); and a step inside a region without the cache is that loop's.
    x, y = data()
    cached, uncached, model, told = sharing(), sharing(), sharing(), sharing()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain(cached, x, y)
        pipeline(model, hint, policy).step(x, y)
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
        plain(uncached, x, y)
        pipeline(told, hint, policy).step(x, y)
    assert_same(uncached, told)
    shared = {id(p) for p in model[0].shared.parameters()}
    for p, a, b in zip([p for c in model for p in c.parameters()], grads(cached),
                       grads(uncached)):
        assert torch.equal(p.grad, b if id(p) in shared else a)
    # Both cases are there: the cache changes the shared weight's bits, and the twice-used one's.
    for c in (0, 1):
        assert any(not torch.equal(a.grad, b.grad)
                   for a, b in zip(cached[c].parameters(), uncached[c].parameters()))


def assert_same(a, b):
    for p, q in zip(grads(a), grads(b)):
        assert torch.equal(p, q)


@pytest.mark.parametrize("hint,policy", SCHEDULES)
def test_a_step_inside_unoptimized_torchscript_execution_is_a_plain_loops_inside_it(hint, policy):
    # The executor's optimized graphs round differently from the plain ones; its flag is the
    # calling thread's, and the stages' threads used to run optimized whatever the caller said.
    x, y = data()
    hidden = 20 + SCHEDULES.index((hint, policy))
    for _ in range(2):  # the executor's first calls and the later ones
        ref, model = scripted(hidden), scripted(hidden)
        with torch.jit.optimized_execution(False):
            plain(ref, x, y)
            pipeline(model, hint, policy).step(x, y)
        assert_same(ref, model)


def scripted_chunks_match_a_plain_loop():
    """Run in a fresh interpreter: the profiling executor is switched off at the start, before
    anything is scripted (switched while executors exist, torch 1.13 crashes)."""
    torch._C._jit_set_profiling_executor(False)
    x, y = data()
    for hint, policy in SCHEDULES:
        for _ in range(2):
            ref, model = scripted(), scripted()
            plain(ref, x, y)
            pipeline(model, hint, policy).step(x, y)
            assert_same(ref, model)


def test_torchscript_chunks_are_bitwise_without_the_profiling_executor():
    # The profiling executor (torch's default) is shared by every module of a scripted class
    # and optimizes after the first calls; which calls those are depends on the timing of
    # stages that run at once, so gradients come within rounding of a plain loop's. Without
    # it they are the plain loop's.
    lm.in_fresh_interpreter("test_caller_settings.scripted_chunks_match_a_plain_loop", "bitwise")


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
