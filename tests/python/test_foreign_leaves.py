"""Tensors that want a gradient but belong to no chunk that uses them: another chunk's parameter
reached through a closure or a plain attribute, a parameter of loss_fn, an L2 penalty over the
whole model inside loss_fn. A plain loop's backward gives each its gradient; a chunk's backward
computes its own parameters' alone, so the step refuses them, naming them, where those
gradients used to be silently missing or partial. Tied modules (registered in both chunks) stay
accepted, and a leaf the forward makes itself (a PINN's coordinates) trains as in a plain loop."""
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import rrfp

SCHEDULES = [("bf", "ready"), ("bfw", "ready"), ("interleaved-1f1b", "fixed")]


def mse(y, t):
    return F.mse_loss(y, t)


class Head(nn.Module):
    """Reuses the first chunk's weight through a list, which registers nothing."""

    def __init__(self, first):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self._first = [first]

    def forward(self, h):
        return F.linear(self.proj(h), self._first[0].weight)


def model():
    torch.manual_seed(0)
    first = nn.Linear(8, 8)
    return [first, nn.Tanh(), nn.Linear(8, 8), Head(first)]


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)


def refused(pipe, chunks, match, x=None, y=None):
    d = data()
    with pytest.raises(rrfp.StageError, match=match) as e:
        pipe.step(d[0] if x is None else x, d[1] if y is None else y)
    assert isinstance(e.value.__cause__, ValueError), repr(e.value.__cause__)
    assert all(p.grad is None for c in chunks for p in c.parameters())  # nothing was added


@pytest.mark.parametrize("hint,policy", SCHEDULES)
@pytest.mark.parametrize("pp", [2, 1])
def test_another_chunks_parameter_through_a_closure_is_refused(hint, policy, pp):
    chunks = model()
    pipe = rrfp.Pipeline(chunks, mse, pp=pp, vpp=4 // pp, microbatches=4, hint=hint,
                         policy=policy, timeout=60)
    refused(pipe, chunks, r"chunk 3 \(with loss_fn\) uses chunk 0's parameter 'weight' of shape "
            r"\(8, 8\), which wants a gradient but is not among the chunk's own parameters")


def test_another_chunks_parameter_is_refused_with_chunks_from_a_function():
    chunks = model()
    pipe = rrfp.Pipeline(chunks.__getitem__, mse, pp=2, vpp=2, microbatches=4, timeout=60)
    refused(pipe, chunks, r"chunk 3 \(with loss_fn\) uses chunk 0's parameter 'weight'")


def test_a_parameter_of_loss_fn_is_refused():
    class ScaledLoss(nn.Module):
        def __init__(self):
            super().__init__()
            self.log_scale = nn.Parameter(torch.zeros(()))

        def forward(self, y, t):
            return F.mse_loss(y * self.log_scale.exp(), t)

    chunks = [nn.Linear(8, 8), nn.Linear(8, 8)]
    pipe = rrfp.Pipeline(chunks, ScaledLoss(), pp=2, microbatches=4, timeout=60)
    refused(pipe, chunks, r"chunk 1 \(with loss_fn\) uses loss_fn's parameter 'log_scale' of "
            r"shape \(\), which wants")


def test_an_l2_penalty_over_the_whole_model_in_loss_fn_is_refused():
    chunks = [nn.Linear(8, 8), nn.Linear(8, 8)]
    params = [p for c in chunks for p in c.parameters()]

    def penalised(y, t):
        return mse(y, t) + 1e-2 * sum((p ** 2).sum() for p in params)

    pipe = rrfp.Pipeline(chunks, penalised, pp=2, microbatches=4, timeout=60)
    refused(pipe, chunks, r"uses chunk 0's parameter '(weight|bias)' of shape \(8(, 8)?,?\); "
            r"chunk 0's parameter '(weight|bias)' .*which want a gradient but are not among")
    # What the message advises: the penalty after the step, with its own backward, gives the
    # plain loop's gradients (its M terms added once rather than a microbatch at a time).
    clean = rrfp.Pipeline(chunks, mse, pp=2, microbatches=4, timeout=60)
    x, y = data()
    clean.step(x, y)
    (4 * 1e-2 * sum((p ** 2).sum() for p in params)).backward()
    torch.manual_seed(0)
    ref = [nn.Linear(8, 8), nn.Linear(8, 8)]
    for c, r in zip(chunks, ref):
        r.load_state_dict(c.state_dict())
    ref_params = [p for c in ref for p in c.parameters()]
    for xi, yi in zip(x.chunk(4), y.chunk(4)):
        (mse(ref[1](ref[0](xi)), yi) + 1e-2 * sum((p ** 2).sum() for p in ref_params)).backward()
    for p, q in zip(params, ref_params):
        assert torch.allclose(p.grad, q.grad, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("by_function", [False, True])
def test_a_parameter_of_no_chunk_the_pipeline_runs_is_refused(by_function):
    # A penalty in loss_fn over a copy of the model: each chunk_fn(i) builds the whole model
    # and returns its piece, as under torchrun, where a process holds the other processes'
    # chunks as copies it does not run. The copies' parameters were taken for leaves the
    # forward made: their .grad took the gradient, which the chunks that train never got.
    copy = model()
    params = [p for c in copy for p in c.parameters()]

    def penalised(y, t):
        return mse(y, t) + 1e-2 * sum((p ** 2).sum() for p in params)

    chunks = [nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 8), nn.Linear(8, 8)]
    given = (lambda i: chunks[i]) if by_function else chunks
    pipe = rrfp.Pipeline(given, penalised, pp=2, vpp=2, microbatches=4, timeout=60)
    where = ("6 parameters of no chunk of this process (other processes' copies, or modules "
             "the pipeline was not given)" if by_function else
             "6 parameters of no module the pipeline was given")
    refused(pipe, chunks, r"chunk 3 \(with loss_fn\) uses " + re.escape(where) +
            re.escape(" of shapes (8,), (8, 8), (8,), ..., which want a gradient"))
    one = nn.Parameter(torch.ones(8))
    pipe = rrfp.Pipeline(given, lambda y, t: mse(y * one, t), pp=2, vpp=2, microbatches=4)
    refused(pipe, chunks, r"chunk 3 \(with loss_fn\) uses a parameter of no " +
            (re.escape("chunk of this process (another process's copy, or a module the "
                       "pipeline was not given)") if by_function else
             "module the pipeline was given") + r" of shape \(8,\), which wants a gradient")
    assert one.grad is None
    assert all(p.grad is None for p in params)


@pytest.mark.parametrize("hint,policy", SCHEDULES)
def test_a_module_registered_in_two_chunks_is_tied_not_refused(hint, policy):
    torch.manual_seed(0)
    shared = nn.Linear(8, 8)
    chunks = [nn.Sequential(shared, nn.Tanh()), nn.Linear(8, 8), nn.Tanh(),
              nn.Sequential(nn.Linear(8, 8), shared)]
    pipe = rrfp.Pipeline(chunks, mse, pp=2, vpp=2, microbatches=4, hint=hint, policy=policy,
                         timeout=60)
    x, y = data()
    pipe.step(x, y)
    assert shared.weight.grad is not None


@pytest.mark.parametrize("hint", ["1f1b", "bfw"])
def test_a_use_some_microbatches_make_is_refused(hint):
    # Another chunk's parameter used only for a microbatch of 3 rows: only each chunk's first
    # backward of a step was searched, so where that microbatch came second its gradient was
    # silently missing (chunk 0's bias: [-0.31, -1.45, 10.2, -10.0] for the loop's
    # [-1.33, 7.91, 12.3, -12.7]).
    torch.manual_seed(0)
    first = nn.Linear(4, 4)

    class Second(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(4, 4)
            self.other = [first]  # a closure's reference, not a submodule

        def forward(self, x):
            y = self.l(x)
            return y + self.other[0].bias if x.shape[0] == 3 else y

    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(n, 4, generator=g) for n in (2, 3)]
    ys = [torch.randn(n, 4, generator=g) for n in (2, 3)]
    pipe = rrfp.Pipeline([first, Second()], lambda y, t: ((y - t) ** 2).sum(), pp=2,
                         microbatches=2, hint=hint)
    with pytest.raises(rrfp.StageError, match="chunk 1 \\(with loss_fn\\) uses chunk 0's "
                                              "parameter 'bias'"):
        pipe.step(xs, ys)
    assert first.bias.grad is None


class Derivative(nn.Module):
    """Differentiates its output with respect to a leaf it makes of its input itself (a PINN's
    derivative term; WGAN-GP's gradient penalty does the same to its interpolates)."""

    def __init__(self):
        super().__init__()
        self.l, self.made = nn.Linear(4, 4), {}

    def forward(self, h):
        x = h.detach().requires_grad_(True)
        u = torch.tanh(self.l(x))
        du, = torch.autograd.grad(u.sum(), x, create_graph=True)
        self.made[x.shape[0]] = x  # microbatches of different sizes: found by their rows
        return u + du * du + 0.5 * h


def derivative_model():
    torch.manual_seed(0)
    return [nn.Linear(4, 4), Derivative(), nn.Linear(4, 4)]


@pytest.mark.parametrize("hint,policy,split", [("1f1b", "fixed", "off"), ("bf", "ready", "off"),
                                               ("bfw", "ready", "on")])
def test_a_leaf_the_forward_makes_trains_as_in_a_plain_loop(hint, policy, split):
    # Every step was refused ("uses a tensor of shape (2, 4), which wants a gradient but is
    # not among the chunk's own parameters").
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(n, 4, generator=g) for n in (2, 3, 4)]
    ys = [torch.randn(n, 4, generator=g) for n in (2, 3, 4)]
    ref = derivative_model()
    for x, y in zip(xs, ys):
        mse(ref[2](ref[1](ref[0](x))), y).backward()
    m = derivative_model()
    pipe = rrfp.Pipeline(m, mse, pp=3, microbatches=3, hint=hint, policy=policy,
                         split_backward=split, timeout=60)
    pipe.step(xs, ys)
    for a, b in zip(m, ref):
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.equal(p.grad, q.grad)
    for n, x in ref[1].made.items():  # the leaf's own .grad, as the loop's backward fills it
        assert torch.equal(m[1].made[n].grad, x.grad)


class Kept(Derivative):
    """Keeps the leaf it makes as a plain attribute (for inspection after the step), and
    replaces a cache attribute at every forward, whose freed tensor a later leaf's address may
    reuse."""

    def forward(self, h):
        self.cache = h.detach() * 1
        out = super().forward(h)
        self.x = self.made[h.shape[0]]
        return out


@pytest.mark.parametrize("hint,policy,split", [("1f1b", "fixed", "off"), ("gpipe", "fixed", "off"),
                                               ("bf", "ready", "off"), ("bfw", "ready", "on")])
def test_a_leaf_kept_as_an_attribute_trains_as_in_a_plain_loop(hint, policy, split):
    # The model's tensors were taken (by id) at the first backward that met a foreign leaf:
    # by then the forwards had set self.x, a leaf refused as "chunk 1's tensor attribute 'x'",
    # and replaced self.cache, whose freed address the next leaf could take, refused as
    # "chunk 1's tensor attribute 'cache'", where a plain loop trains both.
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(2, 4, generator=g) for _ in range(8)]
    ys = [torch.randn(2, 4, generator=g) for _ in range(8)]
    torch.manual_seed(0)
    ref = [nn.Linear(4, 4), Kept(), nn.Linear(4, 4)]
    torch.manual_seed(0)
    m = [nn.Linear(4, 4), Kept(), nn.Linear(4, 4)]
    pipe = rrfp.Pipeline(m, mse, pp=3, microbatches=8, hint=hint, policy=policy,
                         split_backward=split, timeout=60)
    for _ in range(3):  # a later step meets the attributes the step before left
        for c in ref + m:
            c.zero_grad(set_to_none=True)
        for x, y in zip(xs, ys):
            mse(ref[2](ref[1](ref[0](x))), y).backward()
        pipe.step(xs, ys)
        for a, b in zip(m, ref):
            for p, q in zip(a.parameters(), b.parameters()):
                assert torch.equal(p.grad, q.grad)
        assert torch.equal(m[1].x.grad, ref[1].x.grad)


def test_a_tensor_attribute_of_the_model_is_refused():
    class Scaled(nn.Linear):
        def __init__(self):
            super().__init__(8, 8)
            self.scale = torch.ones(8, requires_grad=True)  # not registered: no parameter

        def forward(self, x):
            return super().forward(x) * self.scale

    chunks = [nn.Linear(8, 8), Scaled()]
    pipe = rrfp.Pipeline(chunks, mse, pp=2, microbatches=4, timeout=60)
    refused(pipe, chunks, r"chunk 1 \(with loss_fn\) uses chunk 1's tensor attribute 'scale' "
            r"of shape \(8,\), which wants a gradient but is not among")


class ScaledBy(nn.Module):
    """Multiplies by a tensor held outside the model (no parameter, buffer or attribute), which
    every microbatch uses: a plain loop's backward adds each microbatch's share to its .grad."""

    def __init__(self, scale, fail_rows=None):
        super().__init__()
        self.l, self.scale, self.fail_rows = nn.Linear(4, 4), [scale], fail_rows

    def forward(self, h):
        if h.shape[0] == self.fail_rows:
            raise RuntimeError("planted")
        return self.l(h) * self.scale[0]


@pytest.mark.parametrize("hint,policy,split", [("1f1b", "fixed", "off"), ("bfw", "ready", "on")])
def test_a_tensor_outside_the_model_gets_its_gradient_at_the_steps_end(hint, policy, split):
    # Its gradients went to .grad in each backward task, in the order the tasks ran, and a
    # failed step kept those of the microbatches that had run: a step sets .grad last.
    g = torch.Generator().manual_seed(2)
    xs = [torch.randn(n, 4, generator=g) for n in (2, 3, 4)]
    ys = [torch.randn(n, 4, generator=g) for n in (2, 3, 4)]
    torch.manual_seed(0)
    ref_scale = torch.full((4,), 1.5, requires_grad=True)
    ref = [nn.Linear(4, 4), ScaledBy(ref_scale)]
    for x, y in zip(xs, ys):
        mse(ref[1](ref[0](x)), y).backward()
    torch.manual_seed(0)
    scale = torch.full((4,), 1.5, requires_grad=True)
    m = [nn.Linear(4, 4), ScaledBy(scale, fail_rows=4)]
    pipe = rrfp.Pipeline(m, mse, pp=2, microbatches=3, hint=hint, policy=policy,
                         split_backward=split, timeout=60)
    with pytest.raises(rrfp.StageError, match="planted"):
        pipe.step(xs, ys)
    assert scale.grad is None and all(p.grad is None for c in m for p in c.parameters())
    m[1].fail_rows = None
    pipe.step(xs, ys)
    assert torch.equal(scale.grad, ref_scale.grad)
    for a, b in zip(m, ref):
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.equal(p.grad, q.grad)


def test_a_hook_of_a_tensor_outside_the_model_that_raises_changes_no_grad():
    # Its hooks run at the step's end, on the caller's thread: one that raised did so after
    # every parameter's .grad and the first microbatches' share of its own were written.
    g = torch.Generator().manual_seed(2)
    xs = [torch.randn(n, 4, generator=g) for n in (2, 3, 4)]
    ys = [torch.randn(n, 4, generator=g) for n in (2, 3, 4)]
    scale = torch.full((4,), 1.5, requires_grad=True)
    calls = []

    def hook(grad):
        calls.append(grad)
        if len(calls) == 2:
            raise ValueError("refused microbatch 1")
    scale.register_hook(hook)
    m = [nn.Linear(4, 4), ScaledBy(scale)]
    pipe = rrfp.Pipeline(m, mse, pp=2, microbatches=3, timeout=60)
    with pytest.raises(rrfp.StageError, match=r"a hook of a tensor that microbatch 1's forward "
                       r"used, which is no tensor of the model \(shape \(4,\)\), raised: "
                       r"ValueError: refused microbatch 1"):
        pipe.step(xs, ys)
    assert scale.grad is None and all(p.grad is None for c in m for p in c.parameters())


def test_a_hook_that_returns_a_tensor_it_keeps_adds_each_microbatch_once():
    # The hooks of every microbatch run before any .grad is written: a hook that returns one
    # buffer it writes again at each call left every microbatch's entry that buffer, and .grad
    # three times the last microbatch's gradient.
    def run(pipelined):
        torch.manual_seed(0)
        scale = torch.full((4,), 1.5, requires_grad=True)
        kept = torch.zeros(4)

        def hook(grad):
            kept.copy_(grad)
            return kept
        scale.register_hook(hook)
        m = [nn.Linear(4, 4), ScaledBy(scale)]
        g = torch.Generator().manual_seed(2)
        xs = [torch.randn(n, 4, generator=g) for n in (2, 3, 4)]
        ys = [torch.randn(n, 4, generator=g) for n in (2, 3, 4)]
        if pipelined:
            rrfp.Pipeline(m, mse, pp=2, microbatches=3, timeout=60).step(xs, ys)
        else:
            for x, y in zip(xs, ys):
                mse(m[1](m[0](x)), y).backward()
        return scale.grad
    assert torch.equal(run(True), run(False))


class UsesTimes(nn.Module):
    """Applies a tensor held outside the model `k` times, one after the other."""

    def __init__(self, w, k):
        super().__init__()
        self.l, self.w, self.k = nn.Linear(8, 8), [w], k

    def forward(self, h):
        h = self.l(h)
        for j in range(self.k):
            h = torch.tanh(h * self.w[0] + 0.1 * j)
        return h


USES = {2: [(2, 1), (2, 2), (1, 1), (2, 0), (0, 2), (1, 2), (3, 1)],
        3: [(2, 1, 1), (2, 2, 2), (1, 0, 2), (2, 0, 1), (0, 2, 1), (3, 1, 0), (2, 1, 3)]}


@pytest.mark.parametrize("hint,policy,split", [("1f1b", "fixed", "off"), ("bf", "ready", "off"),
                                               ("bfw", "ready", "on"), ("zb-h1", "fixed", "on")])
@pytest.mark.parametrize("pp", [2, 3])
def test_a_tensor_outside_the_model_that_chunks_use_often_sums_as_a_plain_loop(hint, policy,
                                                                                split, pp):
    # A plain loop's backward adds a microbatch's uses into one buffer, the later chunk's first:
    # (g + u2) + u1 for two uses in the first chunk and one in the second. Each chunk's own sum
    # added to the later chunks' gave g + (u2 + u1), one ulp apart in every seed.
    for uses in USES[pp]:
        for seed in range(3):
            torch.manual_seed(seed)
            w_ref = torch.randn(8, requires_grad=True)
            ref = [UsesTimes(w_ref, k) for k in uses]
            w = w_ref.detach().clone().requires_grad_()
            m = [UsesTimes(w, k) for k in uses]
            for a, b in zip(ref, m):
                b.load_state_dict(a.state_dict())
            x, y = torch.randn(8, 8), torch.randn(8, 8)
            for xi, yi in zip(x.chunk(4), y.chunk(4)):
                h = xi
                for c in ref:
                    h = c(h)
                mse(h, yi).backward()
            rrfp.Pipeline(m, mse, pp=pp, microbatches=4, hint=hint, policy=policy,
                          split_backward=split, timeout=60).step(x, y)
            assert torch.equal(w.grad, w_ref.grad), (uses, seed)
            for a, b in zip(ref, m):
                for p, q in zip(a.parameters(), b.parameters()):
                    assert torch.equal(p.grad, q.grad), (uses, seed)


class InPlaceOnView(nn.Module):
    """Changes a slice of its Linear's output in place with `w`, a parameter of its own or a
    tensor held outside the model, as `op` says: torch 1.13's autograd.grad runs w's
    AccumulateGrad there although asked for the gradient only, adding to .grad and running its
    hooks once more."""

    def __init__(self, op, outside=None):
        super().__init__()
        self.l, self.op = nn.Linear(8, 8), op
        if outside is None:
            self.w = nn.Parameter(torch.linspace(0.5, 1.5, 2))
        self._outside = [outside]

    def forward(self, h):
        t = self.l(h)
        w = self._outside[0] if self._outside[0] is not None else self.w
        if self.op == "mul_":
            t[:, :2] *= w
        elif self.op == "add_":
            t[:, 2:4].add_(w)
        elif self.op == "div_":
            t[:, :2].div_(w)
        else:
            t[:, 1:3].addcmul_(w, w)
        return t


@pytest.mark.parametrize("hint,policy,split", [("1f1b", "fixed", "off"), ("bf", "ready", "off"),
                                               ("bfw", "ready", "on")])
@pytest.mark.parametrize("outside", [False, True])
def test_a_leaf_changed_into_a_view_in_place_gets_its_gradient_once(hint, policy, split, outside):
    # The tensor outside the model got twice a plain loop's gradient, silently; the chunk's
    # own parameter failed every step ("its .grad changed during the step") and kept a .grad.
    for op in ("mul_", "add_", "div_", "addcmul_"):
        def run(pipelined):
            torch.manual_seed(0)
            w = torch.linspace(0.5, 1.5, 2).requires_grad_() if outside else None
            m = [nn.Linear(4, 8), InPlaceOnView(op, w), nn.Linear(8, 3)]
            leaf = w if outside else m[1].w
            calls = []
            leaf.register_hook(lambda g: calls.append(g.clone()))
            leaf.grad = torch.full((2,), 0.25)  # added to, as a plain loop adds
            g = torch.Generator().manual_seed(3)
            x, y = torch.randn(8, 4, generator=g), torch.randn(8, 3, generator=g)
            if pipelined:
                rrfp.Pipeline(m, mse, pp=3, microbatches=4, hint=hint, policy=policy,
                              split_backward=split, timeout=60).step(x, y)
            else:
                for xi, yi in zip(x.chunk(4), y.chunk(4)):
                    mse(m[2](m[1](m[0](xi))), yi).backward()
            return leaf.grad, calls, [p.grad for c in m for p in c.parameters()]
        got, want = run(True), run(False)
        assert torch.equal(got[0], want[0]), (op, got[0], want[0])
        assert len(got[1]) == len(want[1]) == 4, op  # the hook ran once a microbatch
        assert all(torch.equal(a, b) for a, b in zip(got[1], want[1])), op
        assert all(torch.equal(a, b) for a, b in zip(got[2], want[2])), op
