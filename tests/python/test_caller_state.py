"""torch's thread-local state of the thread that calls step() reaches the stages' threads, as it
reaches a plain loop's operations under the same `with`: a profiler, torch function and dispatch
modes, saved-tensor hooks, and the caller's contextvars context. Each was ignored, silently (a
profile of a step held none of its chunks' operations). Autocast, whose switches come along,
stays off in backward tasks."""
import contextvars

import pytest
import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.profiler import ProfilerActivity, profile, record_function
from torch.utils._python_dispatch import TorchDispatchMode

import rrfp

SCALE = contextvars.ContextVar("scale", default=1.0)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(16, 16)

    def forward(self, x):
        with record_function("block"):
            return nn.functional.gelu(self.l(x)) * SCALE.get()


def model():
    torch.manual_seed(0)
    return [Block() for _ in range(4)]


def loss_fn(y, t):
    return ((y.float() - t) ** 2).sum()


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)


def plain(m, x, y):
    for xi, yi in zip(x.chunk(4), y.chunk(4)):
        h = xi
        for c in m:
            h = c(h)
        loss_fn(h, yi).backward()


def piped(m, x, y, hint="bf"):
    rrfp.Pipeline(m, loss_fn, pp=2, vpp=2, microbatches=4, hint=hint, timeout=60).step(x, y)


def same_grads(a, b):
    return all(torch.equal(p.grad, q.grad) for c, d in zip(a, b)
               for p, q in zip(c.parameters(), d.parameters()))


def test_a_profiler_around_a_step_records_the_stages_operations():
    x, y = data()
    counts = []
    for run in (plain, piped):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            run(model(), x, y)
        names = [e.name for e in prof.events()]
        counts.append((names.count("aten::addmm"), names.count("block")))
    assert counts[0] == counts[1] == (16, 16)


class CountMatmuls(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten.addmm.default, torch.ops.aten.mm.default):
            self.n += 1
        return func(*args, **(kwargs or {}))


class TanhForGelu(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is nn.functional.gelu:
            return torch.tanh(args[0])
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("hint", ["bf", "bfw"])
def test_modes_around_a_step_see_and_change_the_stages_operations(hint):
    x, y = data()
    counted = []
    for run in (plain, lambda m, x, y: piped(m, x, y, hint)):
        with CountMatmuls() as mode:
            run(model(), x, y)
        counted.append(mode.n)
    # A microbatch: 4 forward products, 4 weight gradients, 3 input gradients (not the data's).
    assert counted[0] == counted[1] == 4 * (4 + 4 + 3)
    ref, m = model(), model()
    with TanhForGelu():
        plain(ref, x, y)
        piped(m, x, y, hint)
    untouched = model()
    plain(untouched, x, y)
    assert same_grads(m, ref) and not same_grads(m, untouched)


def test_a_context_variable_set_around_a_step_reads_the_same_in_the_chunks():
    x, y = data()
    token = SCALE.set(0.5)
    try:
        ref, m = model(), model()
        plain(ref, x, y)
        piped(m, x, y)
        outputs, _ = rrfp.Pipeline(model(), loss_fn, pp=2, vpp=2, microbatches=4).eval_step(x)
        with torch.no_grad():
            h = x
            for c in model():
                h = c(h)
    finally:
        SCALE.reset(token)
    assert same_grads(m, ref) and torch.equal(outputs, h)
    unscaled = model()
    plain(unscaled, x, y)
    assert not same_grads(m, unscaled)


@pytest.mark.parametrize("hint", ["bf", "bfw"])
def test_saved_tensor_hooks_around_a_step_pack_the_stages_tensors(hint):
    # Packing to bf16 changes the gradients, so they show whether the hooks applied; an unpack
    # that hands its tensor back once shows that a split backward unpacks once (W did again).
    x, y = data()
    grads, packed = [], []
    for run in (plain, lambda m, x, y: piped(m, x, y, hint)):
        store, m = [], model()

        def pack(t):
            store.append(t.to(torch.bfloat16) if t.dtype == torch.float32 else t)
            return len(store) - 1

        def unpack(i):
            t, store[i] = store[i], None
            return t.float() if t.dtype == torch.bfloat16 else t

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            run(m, x, y)
        grads.append(m)
        packed.append(len(store))
    assert packed[0] == packed[1] > 0 and same_grads(*grads)


class Float32Part(nn.Module):
    """A part kept in float32 inside an autocast region."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(16, 16)

    def forward(self, x):
        with torch.autocast("cpu", enabled=False):
            return self.l(x.float())


@pytest.mark.parametrize("hint", ["bf", "bfw"])
def test_backward_tasks_run_with_autocast_off(hint):
    # The stages' threads take the caller's autocast switches with its state: the backward of
    # the float32 part ran in bf16, as a loop calling backward() inside the region computes it.
    def make():
        torch.manual_seed(0)
        return [nn.Linear(16, 16), Float32Part(), nn.Linear(16, 16), Float32Part()]

    x, y = data()
    ref, m = make(), make()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        losses = []
        for xi, yi in zip(x.chunk(4), y.chunk(4)):
            h = xi
            for c in ref:
                h = c(h)
            losses.append(loss_fn(h, yi))
        piped(m, x, y, hint)
    for loss in losses:  # after the region, as torch recommends
        loss.backward()
    assert same_grads(m, ref)


def test_torchs_own_saved_tensor_hooks_around_a_step_keep_the_split():
    # save_on_cpu() hands each tensor back as often as asked: split chunks keep their split
    # (every split chunk computed its whole backward in B under it), where the user's hooks
    # make them compute it whole.
    x, y = data()
    ref, m = model(), model()
    plain(ref, x, y)
    pipe = rrfp.Pipeline(m, loss_fn, pp=2, vpp=2, microbatches=4, hint="bfw", timeout=60)
    with torch.autograd.graph.save_on_cpu():
        pipe.step(x, y)
    assert same_grads(m, ref)
    assert not any(w for r in pipe._runners for w in r.whole.values())
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
        pipe.step(x, y)
    assert all(w for r in pipe._runners for w in r.whole.values())
