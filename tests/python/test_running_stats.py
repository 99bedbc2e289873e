"""Chunks whose forward updates state of their own (batch norm's running statistics): their
forwards run in microbatch order, so after a step the statistics are bitwise those of a plain
loop, under every hint, the adaptive rule (which reorders forwards) included; gradients are
bitwise in any order. ordered_forwards=False shows what happens otherwise."""
import copy

import pytest
import torch
from torch import nn
import torch.nn.functional as F

import lm
import rrfp

SIZES = [3, 9, 4, 12, 5, 7, 10, 6]  # rows per microbatch: the adaptive rule reorders them


def chunks(seed=5):
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU()),
            nn.Sequential(nn.Linear(16, 16), nn.BatchNorm1d(16), nn.ReLU()),
            nn.Sequential(nn.Linear(16, 16), nn.BatchNorm1d(16), nn.ReLU()),
            nn.Sequential(nn.Linear(16, 16), nn.BatchNorm1d(16), nn.Linear(16, 4))]


def loss_fn(y, t):
    return F.cross_entropy(y, t)


def data(seed=2):
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(n, 8, generator=g) for n in SIZES]
    ys = [torch.randint(0, 4, (n,), generator=g) for n in SIZES]
    return xs, ys


def plain_step(model, xs, ys):
    for x, y in zip(xs, ys):
        h = x
        for c in model:
            h = c(h)
        loss_fn(h, y).backward()


def same(a, b, what):
    return all(torch.equal(x, y) for c, r in zip(a, b) for x, y in zip(what(c), what(r)))


def buffers(m):
    return list(m.buffers())


def grads(m):
    return [p.grad for p in m.parameters()]


@pytest.mark.parametrize("hint", ["adaptive", "bf", "bfw", "1f1b"])
def test_running_statistics_are_a_plain_loops(hint):
    xs, ys = data()
    ref = chunks()
    plain_step(ref, xs, ys)
    plain_step(ref, xs, ys)
    model = chunks()
    policy = "fixed" if hint == "1f1b" else "ready"
    pipe = rrfp.Pipeline(model, loss_fn, pp=4, microbatches=8, hint=hint, policy=policy,
                         timeout=60, delay_fn=lambda s, k, c, mb: 0.0005 * ((mb * 7 + s) % 3))
    assert pipe.ordered_forwards
    pipe.step(xs, ys)
    pipe.step(xs, ys)
    assert same(model, ref, buffers)
    assert same(model, ref, grads)


def test_without_ordered_forwards_the_adaptive_rule_leaves_other_statistics():
    xs, ys = data()
    ref = chunks()
    plain_step(ref, xs, ys)
    model = chunks()
    pipe = rrfp.Pipeline(model, loss_fn, pp=4, microbatches=8, hint="adaptive", timeout=60,
                         ordered_forwards=False)
    assert not pipe.ordered_forwards
    pipe.step(xs, ys)
    assert same(model, ref, grads)  # gradients go through the reorder buffer
    assert not same(model, ref, buffers)  # the statistics saw another order


def test_chunks_without_running_statistics_leave_the_order_free():
    torch.manual_seed(0)
    model = [nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)), nn.Linear(8, 4)]
    assert not rrfp.Pipeline(model, loss_fn, pp=2, microbatches=2).ordered_forwards
    no_stats = [nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8, track_running_stats=False)),
                nn.Linear(8, 4)]
    assert not rrfp.Pipeline(no_stats, loss_fn, pp=2, microbatches=2).ordered_forwards
    assert rrfp.Pipeline(model, loss_fn, pp=2, microbatches=2,
                         ordered_forwards=True).ordered_forwards


def test_other_state_a_forward_updates_is_seen_too():
    torch.manual_seed(0)
    for stateful in (nn.utils.parametrizations.spectral_norm(nn.Linear(8, 8)),
                     nn.utils.spectral_norm(nn.Linear(8, 8)),
                     torch.ao.quantization.MinMaxObserver(),
                     nn.InstanceNorm1d(8, track_running_stats=True)):
        model = [nn.Sequential(nn.Linear(8, 8), stateful), nn.Linear(8, 4)]
        pipe = rrfp.Pipeline(model, loss_fn, pp=2, microbatches=2)
        assert pipe.ordered_forwards, type(stateful).__name__


def compiled_batch_norms_match_a_plain_loop():
    """Run in a fresh interpreter (lm.in_fresh_interpreter): without the profiling executor,
    scripted chunks run bitwise a plain loop's (python.md), and it is switched off before
    anything is scripted."""
    torch._C._jit_set_profiling_executor(False)
    for compile_with in ("script", "trace"):
        def compiled(model):
            if compile_with == "script":
                return [torch.jit.script(c) for c in model]
            return [torch.jit.trace(c, torch.randn(4, 8 if i == 0 else 16))
                    for i, c in enumerate(model)]

        xs, ys = data()
        ref = compiled(chunks())
        plain_step(ref, xs, ys)
        model = compiled(chunks())
        pipe = rrfp.Pipeline(model, loss_fn, pp=4, microbatches=8, hint="adaptive", timeout=60,
                             delay_fn=lambda s, k, c, mb: 0.0005 * ((mb * 7 + s) % 3))
        assert pipe.ordered_forwards, compile_with
        pipe.step(xs, ys)
        assert same(model, ref, buffers), compile_with
        assert same(model, ref, grads), compile_with


def test_scripted_and_traced_batch_norms_order_forwards_too():
    # A scripted BatchNorm1d is no BatchNorm1d to isinstance: its graph tells instead. The
    # pipeline used to leave the order free here, and the statistics differed from the loop's.
    lm.in_fresh_interpreter("test_running_stats.compiled_batch_norms_match_a_plain_loop",
                            "bitwise")


def test_a_scripted_module_whose_forward_only_reads_its_buffers_leaves_the_order_free():
    class Offset(nn.Module):  # a constant buffer, as a positional encoding is
        def __init__(self):
            super().__init__()
            self.register_buffer("offset", torch.randn(8))

        def forward(self, x):
            return x + self.offset

    torch.manual_seed(0)
    model = [torch.jit.script(nn.Sequential(nn.Linear(8, 8), Offset())), nn.Linear(8, 4)]
    assert not rrfp.Pipeline(model, loss_fn, pp=2, microbatches=2).ordered_forwards
    norms = [torch.jit.script(nn.Sequential(nn.Linear(8, 8), nn.InstanceNorm1d(
        8, track_running_stats=True))), nn.Linear(8, 4)]
    assert rrfp.Pipeline(norms, loss_fn, pp=2, microbatches=2).ordered_forwards


def test_a_stateful_module_shared_by_two_chunks_is_refused():
    torch.manual_seed(0)
    bn = nn.BatchNorm1d(8)
    model = [nn.Sequential(nn.Linear(8, 8), bn), nn.Sequential(bn, nn.Linear(8, 4))]
    with pytest.raises(ValueError, match="chunk 0 and chunk 1 share a BatchNorm1d"):
        rrfp.Pipeline(model, loss_fn, pp=2, microbatches=2)
    assert not rrfp.Pipeline(model, loss_fn, pp=2, microbatches=2,
                             ordered_forwards=False).ordered_forwards


class NormedLoss(nn.Module):
    """A loss with running statistics of its own: it runs in the last chunk's forward task."""

    def __init__(self, bn=None):
        super().__init__()
        self.bn = bn if bn is not None else nn.BatchNorm1d(4, affine=False)

    def forward(self, y, t):
        return F.cross_entropy(self.bn(y), t)


def test_a_loss_fn_with_running_statistics_orders_the_forwards():
    # Chunks without state: only the loss has some. It was not looked at, and under the adaptive
    # rule its running mean drifted from a plain loop's (by about 1e-2).
    def stateless(seed=5):
        torch.manual_seed(seed)
        return [nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 4)]

    xs, ys = data()
    ref, ref_loss = stateless(), NormedLoss()
    for x, y in zip(xs, ys):
        h = x
        for c in ref:
            h = c(h)
        ref_loss(h, y).backward()
    model, loss = stateless(), NormedLoss()
    pipe = rrfp.Pipeline(model, loss, pp=4, microbatches=8, hint="adaptive", progress=None,
                         delay_fn=lambda s, k, c, m: 0.002 * ((m * 5) % 3) if k == "F" else 0)
    assert pipe.ordered_forwards
    pipe.step(xs, ys)
    assert same([loss], [ref_loss], buffers)
    assert same(model, ref, grads)
    shared = NormedLoss()
    with pytest.raises(ValueError, match="chunk 3 and loss_fn share a BatchNorm1d"):
        rrfp.Pipeline(stateless()[:3] + [nn.Sequential(nn.Linear(16, 4), shared.bn)], shared,
                      pp=4, microbatches=8)


def test_a_value_not_a_bool_is_refused():
    with pytest.raises(TypeError, match="ordered_forwards"):  # a wrong type, as for pp=True
        rrfp.Pipeline(chunks(), loss_fn, pp=4, microbatches=8, ordered_forwards="yes")


def embedding_chunks():
    """An embedding that renormalizes the rows it looks up to a max_norm, in place, at each
    forward: the weights a microbatch meets depend on the microbatches before it."""
    torch.manual_seed(7)
    return [nn.Sequential(nn.Embedding(32, 16, max_norm=1.0), nn.Flatten(), nn.Linear(48, 16)),
            nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 4)]


def test_an_embedding_with_a_max_norm_is_refused_or_renormalizes_as_in_a_plain_loop():
    # torch 1.13's embedding backward needs the weight a later forward renormalizes in place,
    # and a pipeline runs later forwards before earlier backwards: refused, naming the module
    # (it failed in autograd's words). Where the backward does not need it, the forwards keep
    # microbatch order and the renormalized rows are a plain loop's.
    from rrfp import _order
    g = torch.Generator().manual_seed(3)
    xs = [torch.randint(0, 32, (n, 3), generator=g) for n in SIZES]
    ys = [torch.randint(0, 4, (n,), generator=g) for n in SIZES]
    ref, model = embedding_chunks(), embedding_chunks()
    args = dict(pp=4, microbatches=len(SIZES), hint="adaptive", timeout=60,
                delay_fn=lambda s, k, c, mb: 0.0004 * ((mb * 3 + s) % 4))
    if _order._RENORM_BREAKS_BACKWARD:
        with pytest.raises(ValueError, match=r"chunk 0 holds an embedding with max_norm \('0'\)"):
            rrfp.Pipeline(model, loss_fn, **args)
        return
    plain_step(ref, xs, ys)
    pipe = rrfp.Pipeline(model, loss_fn, **args)
    assert pipe.ordered_forwards
    pipe.step(xs, ys)
    assert same(model, ref, lambda m: list(m.parameters()))  # the renormalized rows
    assert same(model, ref, grads)


class RunningScale(nn.Module):
    """State changed in place and then computed with: autograd saves it for the backward."""

    def __init__(self, d, copy):
        super().__init__()
        self.register_buffer("scale", torch.ones(d))
        self.copy = copy

    def forward(self, x):
        with torch.no_grad():
            self.scale.mul_(0.9).add_(0.1 * x.abs().mean(0))
        return x / (self.scale.clone() if self.copy else self.scale)


def scale_chunks(copy):
    torch.manual_seed(0)
    return [nn.Sequential(nn.Linear(8, 8), RunningScale(8, copy)), nn.Linear(8, 4)]


def test_state_changed_in_place_then_computed_with_is_explained_and_a_copy_trains():
    xs, ys = data()
    # The fixed 1F1B order runs chunk 0's second forward before its first backward. A ready
    # order need not: a stage that took the first backward's gradient before it chose its next
    # task runs that backward first (a loaded machine did), and then nothing fails.
    pipe = rrfp.Pipeline(scale_chunks(False), loss_fn, pp=2, microbatches=len(SIZES),
                         hint="1f1b", policy="fixed", ordered_forwards=True, timeout=60)
    with pytest.raises(rrfp.StageError, match=r"chunk 0's backward needs a tensor its forward "
                       r"saved, which was changed in place since.*x / scale.clone\(\).*"
                       r"autograd: one of the variables needed"):
        pipe.step(xs, ys)
    # Computing with a copy: the plain loop's gradients and state, bitwise.
    model, ref = scale_chunks(True), scale_chunks(True)
    plain_step(ref, xs, ys)
    rrfp.Pipeline(model, loss_fn, pp=2, microbatches=len(SIZES), hint="adaptive",
                  ordered_forwards=True, timeout=60).step(xs, ys)
    for a, b in zip(model, ref):
        assert all(torch.equal(p.grad, q.grad) for p, q in zip(a.parameters(), b.parameters()))
        assert all(torch.equal(p, q) for p, q in zip(a.buffers(), b.buffers()))


class DoublesItsInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 8)

    def forward(self, x):
        x.mul_(2)
        return self.lin(x)


def test_a_first_chunk_changing_views_of_one_batch_in_place_is_told_to_give_a_list():
    # Microbatches cut from one batch tensor are views of it: one's change in place counts as a
    # change of all, and microbatch 0's backward found its saved input changed by microbatch 1's
    # forward. The message named two other causes alone; a list of separate tensors trains.
    torch.manual_seed(0)
    chunks = [DoublesItsInput(), nn.Linear(8, 2)]
    x, y = torch.randn(12, 4), torch.randn(12, 2)
    pipe = rrfp.Pipeline(chunks, lambda o, t: F.mse_loss(o, t), pp=2, microbatches=4,
                         hint="1f1b", policy="fixed", timeout=60)
    with pytest.raises(rrfp.StageError, match=r"changed in place since.*step\(\) was given one "
                       r"batch tensor: its microbatches are views of it.*give a list of separate "
                       r"tensors"):
        pipe.step(x.clone(), y)
    pipe.step([t.clone() for t in x.tensor_split(4)], y)


def test_a_stateful_module_added_after_the_pipeline_was_built_is_refused():
    # Stateful modules were looked for once, as the pipeline was built: a batch norm added
    # later left the forwards unordered (adaptive's statistics another order's), and one shared
    # by two chunks then was updated by two stages at once.
    def stateless(seed=5):
        torch.manual_seed(seed)
        return [nn.Sequential(nn.Linear(8, 16)), nn.Sequential(nn.Linear(16, 16)),
                nn.Sequential(nn.Linear(16, 16)), nn.Sequential(nn.Linear(16, 4))]

    xs, ys = data()
    for shared in (False, True):
        model = stateless()
        pipe = rrfp.Pipeline(model, loss_fn, pp=4, microbatches=8, hint="adaptive",
                             progress=None)
        assert not pipe.ordered_forwards
        pipe.step(xs, ys)
        bn = nn.BatchNorm1d(16)
        model[1].append(bn)
        if shared:
            model[2].append(bn)
        want = ("chunk 1 and chunk 2 share a BatchNorm1d" if shared else
                "chunk 1 holds a BatchNorm1d, whose forward updates its state, added after the "
                "pipeline was built")
        for call in (pipe.step, pipe.eval_step):
            with pytest.raises(ValueError, match=want):
                call(xs, ys)
    # Built with it, or told to order, it trains as a plain loop does.
    model = stateless()
    pipe = rrfp.Pipeline(model, loss_fn, pp=4, microbatches=8, hint="adaptive", progress=None,
                         ordered_forwards=True)
    model[1].append(nn.BatchNorm1d(16))
    ref = copy.deepcopy(model)
    pipe.step(xs, ys)
    plain_step(ref, xs, ys)
    assert same(model, ref, buffers)


def test_a_saved_tensor_the_forward_itself_changes_is_said_as_a_plain_loops_failure_too():
    # The message spoke only of other microbatches' forwards and ordered_forwards, where the
    # chunk's own in-place ReLU, then Hardtanh, fails a plain loop's backward as well.
    chunks = [nn.Linear(4, 8), nn.Sequential(nn.Linear(8, 8), nn.ReLU(inplace=True),
                                             nn.Hardtanh(inplace=True)), nn.Linear(8, 3)]
    pipe = rrfp.Pipeline(chunks, lambda y, t: y.sum(), pp=3, microbatches=2, timeout=60)
    with pytest.raises(rrfp.StageError, match=r"chunk 1's backward needs a tensor its forward "
                       r"saved.*Either the forward itself changed it.*a plain loop fails alike"):
        pipe.step(torch.randn(4, 4))
