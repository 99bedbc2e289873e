"""Python that runs inside a chunk's backward (module backward hooks, custom autograd
Functions) runs once a microbatch, as in a plain loop, with a split backward too: there W would
run again the part of the graph that leads to both the input and the parameters, so a chunk
that holds such Python computes its whole backward in B and W hands its gradients over."""
import pytest
import torch
import torch.utils.checkpoint
from torch import nn
import torch.nn.functional as F

import rrfp

SCHEDULES = [("1f1b", "fixed", "off"), ("bf", "ready", "off"), ("bfw", "ready", "on"),
             ("zb-h1", "fixed", "on"), ("adaptive", "ready", "on")]


class Counted(torch.autograd.Function):
    """x * x whose backward logs its calls and frees what it kept, as memory-saving kernels
    do: a second backward finds nothing to use."""

    @staticmethod
    def forward(ctx, x, log):
        ctx.x, ctx.log = x.detach(), log
        return x * x

    @staticmethod
    def backward(ctx, g):
        x = ctx.x
        del ctx.x
        ctx.log.append(("function", float(g.sum())))
        return 2 * x * g, None


class Block(nn.Module):
    def __init__(self, log, name, hook_kind):
        super().__init__()
        self.a, self.b = nn.Linear(6, 6), nn.Linear(6, 6)
        self.log, self.name, self.hook_kind = log, name, hook_kind
        self.kept = {}  # "retain": the tensors kept, by their values' sum (one per microbatch)
        record = (lambda m, gi, go: log.append((name, float(go[0].sum()))))
        if hook_kind == "full":
            self.b.register_full_backward_hook(record)
        elif hook_kind == "old":
            self.b.register_backward_hook(record)

    def forward(self, x):
        if self.hook_kind == "saved":
            return self.saved_once(x)
        h = torch.tanh(self.a(x))
        if self.hook_kind == "function":
            h = Counted.apply(h, self.log)
        elif self.hook_kind == "tensor":  # a hook on a tensor of the forward's own
            h.register_hook(lambda g: self.log.append(("tensor " + self.name, float(g.sum()))))
        elif self.hook_kind == "retain":
            h.retain_grad()
            self.kept[float(h.sum())] = h
        return self.b(h)

    def saved_once(self, x):
        """Saved-tensor hooks that hand each tensor back once and let it go, as an offloader
        that frees its copy does."""
        store = []

        def pack(t):
            store.append(t.clone())
            return len(store) - 1

        def unpack(i):
            t, store[i] = store[i], None
            self.log.append(("unpack " + self.name, float(t.sum())))
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            return self.b(torch.tanh(self.a(x)))


def model(log, hook_kind):
    torch.manual_seed(0)
    return [Block(log, "c0", hook_kind), Block(log, "c1", hook_kind),
            nn.Sequential(Block(log, "c2", hook_kind), nn.Linear(6, 3))]


def data():
    g = torch.Generator().manual_seed(1)
    return ([torch.randn(2, 6, generator=g) for _ in range(4)],
            [torch.randint(0, 3, (2,), generator=g) for _ in range(4)])


def calls(log):
    """Each hook's calls: how many, and the sum of what they saw, by name."""
    out = {}
    for name, v in log:
        n, total = out.get(name, (0, 0.0))
        out[name] = (n + 1, total + v)
    return out


def plain(hook_kind):
    log = []
    ref = model(log, hook_kind)
    xs, ys = data()
    for x, y in zip(xs, ys):
        h = x
        for c in ref:
            h = c(h)
        F.cross_entropy(h, y).backward()
    return ref, log


@pytest.mark.filterwarnings("ignore:Using a non-full backward hook")
@pytest.mark.parametrize("hook_kind", ["full", "old", "function", "tensor", "saved"])
@pytest.mark.parametrize("hint,policy,split", SCHEDULES)
def test_backward_python_runs_once_a_microbatch(hook_kind, hint, policy, split):
    # A hook on a tensor inside the forward, and saved-tensor hooks, live on autograd's nodes,
    # where torch 1.13 shows them to no one: with a split backward the first ran in B and in W,
    # the second failed in W (its tensor handed back already), until rrfp watched the forward.
    ref, ref_log = plain(hook_kind)
    log = []
    m = model(log, hook_kind)
    xs, ys = data()
    pipe = rrfp.Pipeline(m, F.cross_entropy, pp=3, microbatches=4, hint=hint, policy=policy,
                         split_backward=split, timeout=60)
    pipe.step(xs, ys)
    assert calls(log).keys() == calls(ref_log).keys()
    for name, (n, total) in calls(ref_log).items():
        assert calls(log)[name][0] == n, name
        assert calls(log)[name][1] == pytest.approx(total), name
    for a, b in zip(m, ref):
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.equal(p.grad, q.grad)


def test_a_global_module_hook_counts_for_every_chunk():
    log = []
    handle = torch.nn.modules.module.register_module_full_backward_hook(
        lambda m, gi, go: log.append(type(m).__name__) if isinstance(m, nn.Linear) else None)
    try:
        m = model([], "none")
        xs, ys = data()
        pipe = rrfp.Pipeline(m, F.cross_entropy, pp=3, microbatches=4, hint="bfw")
        pipe.step(xs, ys)
    finally:
        handle.remove()
    assert len(log) == 7 * 4  # seven Linears, once a microbatch each


def test_chunks_without_such_python_keep_their_split():
    m = model([], "none")
    xs, ys = data()
    pipe = rrfp.Pipeline(m, F.cross_entropy, pp=3, microbatches=4, hint="bfw",
                         split_backward="on")
    pipe.step(xs, ys)
    assert not any(w for r in pipe._runners for w in r.whole.values())
    hooked = model([], "function")
    pipe = rrfp.Pipeline(hooked, F.cross_entropy, pp=3, microbatches=4, hint="bfw",
                         split_backward="on")
    pipe.step(xs, ys)
    assert all(w for r in pipe._runners for w in r.whole.values())


@pytest.mark.parametrize("hint,policy,split", SCHEDULES)
def test_retain_grad_inside_a_forward_reads_a_plain_loops_gradient(hint, policy, split):
    # With a split backward, B and W each added the tensor's gradient to its .grad: twice it.
    ref, _ = plain("retain")
    m = model([], "retain")
    xs, ys = data()
    rrfp.Pipeline(m, F.cross_entropy, pp=3, microbatches=4, hint=hint, policy=policy,
                  split_backward=split, timeout=60).step(xs, ys)
    blocks = [m[0], m[1], m[2][0]], [ref[0], ref[1], ref[2][0]]
    for got, want in zip(*blocks):
        assert got.kept.keys() == want.kept.keys()
        for k, h in want.kept.items():
            assert torch.equal(got.kept[k].grad, h.grad)


def test_torchs_own_saved_tensor_hooks_keep_the_split():
    # Non-reentrant checkpointing's hooks recompute what is asked for as often as asked: a
    # chunk that uses them keeps its split backward (W recomputes its forward, as documented).
    class Checkpointed(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(6, 6)

        def forward(self, x):
            return torch.utils.checkpoint.checkpoint(self.l, x, use_reentrant=False)

    torch.manual_seed(0)
    m = [Checkpointed(), Checkpointed(), nn.Linear(6, 3)]
    xs, ys = data()
    pipe = rrfp.Pipeline(m, F.cross_entropy, pp=3, microbatches=4, hint="bfw",
                         split_backward="on")
    pipe.step(xs, ys)
    assert not any(w for r in pipe._runners for w in r.whole.values())


class Reversed(nn.Module):
    """Registers hooks on the tensor it receives (a gradient reversal, as domain-adversarial
    training puts between an encoder and a domain head, then a clip) and keeps it with
    retain_grad() to read its gradient after the step (Grad-CAM). With `as_dict` it receives a
    dict holding that tensor and a mask."""

    def __init__(self, as_dict):
        super().__init__()
        self.l, self.as_dict, self.seen = nn.Linear(6, 6), as_dict, {}

    def forward(self, got):
        h = got["h"] if self.as_dict else got
        h.register_hook(lambda g: -0.5 * g)
        h.register_hook(lambda g: g.clamp(-0.02, 0.02))
        h.retain_grad()  # after the hooks: its .grad is what they return, in any torch
        self.seen[h.shape[0]] = h  # microbatches of different sizes: found by their rows
        return self.l(h)


class Encoder(nn.Module):
    def __init__(self, as_dict):
        super().__init__()
        self.l, self.as_dict = nn.Linear(6, 6), as_dict

    def forward(self, x):
        h = torch.tanh(self.l(x))
        return {"h": h, "mask": x > 0} if self.as_dict else h


def reversed_model(as_dict):
    torch.manual_seed(0)
    return [Encoder(as_dict), Reversed(as_dict), nn.Linear(6, 3)]


@pytest.mark.parametrize("as_dict", [False, True])
@pytest.mark.parametrize("hint,policy,split", SCHEDULES[:3])
def test_hooks_on_the_received_tensor_run_as_in_a_plain_loop(as_dict, hint, policy, split):
    # The received tensor is a leaf, whose hooks torch 1.13's autograd.grad does not run: the
    # encoder's gradients came out unreversed (twice the loop's, with the opposite sign), and
    # the retained .grad stayed None.
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(n, 6, generator=g) for n in (2, 3, 4, 5)]
    ys = [torch.randint(0, 3, (n,), generator=g) for n in (2, 3, 4, 5)]
    ref = reversed_model(as_dict)
    for x, y in zip(xs, ys):
        F.cross_entropy(ref[2](ref[1](ref[0](x))), y).backward()
    m = reversed_model(as_dict)
    pipe = rrfp.Pipeline(m, F.cross_entropy, pp=3, microbatches=4, hint=hint, policy=policy,
                         split_backward=split, timeout=60)
    pipe.step(xs, ys)
    for a, b in zip(m, ref):
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.equal(p.grad, q.grad)
    assert sorted(m[1].seen) == sorted(ref[1].seen)
    for n, h in ref[1].seen.items():
        assert torch.equal(m[1].seen[n].grad, h.grad)


def test_a_hook_on_the_received_tensor_returning_another_size_fails_the_step():
    class Bad(nn.Module):
        def forward(self, h):
            h.register_hook(lambda g: g[:1])
            return h * 2

    pipe = rrfp.Pipeline([nn.Linear(6, 6), Bad()], lambda y, t: y.sum(), pp=2, microbatches=2)
    with pytest.raises(rrfp.StageError) as e:
        pipe.step(torch.randn(4, 6))
    assert "has changed the size of value" in str(e.value.__cause__)


class InPlaceHooks(nn.Module):
    """Doubles in place, from tensor hooks, the gradient of the tensor it receives and of its
    output; `x + b` passes the output's gradient through to the input as the same tensor."""

    def __init__(self, calls):
        super().__init__()
        self.b, self.calls = nn.Parameter(torch.randn(2, 6)), calls

    def forward(self, x):
        def double(g):
            self.calls.append(1)
            return g.mul_(2)

        x.register_hook(double)
        y = x + self.b
        y.register_hook(double)
        return y


@pytest.mark.parametrize("hint,policy,split", SCHEDULES)
def test_hooks_that_change_a_gradient_in_place_run_once_and_as_in_a_plain_loop(hint, policy,
                                                                                 split):
    # With a split backward, the output's hook ran in B and again in W (the weights' gradients
    # doubled twice), and the input's changed the output gradient W kept (the same tensor).
    def make(calls):
        torch.manual_seed(0)
        return [nn.Linear(6, 6), InPlaceHooks(calls), nn.Linear(6, 3)]

    xs, ys = data()
    ref_calls, calls = [], []
    ref = make(ref_calls)
    for x, y in zip(xs, ys):
        F.cross_entropy(ref[2](ref[1](ref[0](x))), y).backward()
    m = make(calls)
    rrfp.Pipeline(m, F.cross_entropy, pp=3, microbatches=4, hint=hint, policy=policy,
                  split_backward=split, timeout=60).step(xs, ys)
    assert len(calls) == len(ref_calls) == 8
    for a, b in zip(m, ref):
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.equal(p.grad, q.grad)
