"""Pipeline.eval_step: the forwards of a batch without gradients, through the same pipeline;
its outputs and loss bitwise those of the plain model's forward, in every schedule; no .grad
changes; module.eval() honoured; step() under torch.no_grad() refused."""
import pytest
import torch
from torch import nn

import lm
import rrfp
import test_pytree

SCHEDULES = [
    dict(hint="1f1b", policy="fixed"),
    dict(hint="bf", policy="ready"),
    dict(hint="bfw", policy="ready"),
    dict(hint="zb-h1", policy="fixed"),
    dict(hint="bf", policy="ready", vpp=2),
]


def plain_forward(chunks, xs, ys=None, loss_of=lm.loss_fn):
    outs, total = [], None
    with torch.no_grad():
        for i, x in enumerate(xs):
            h = x
            for c in chunks:
                h = c(h)
            outs.append(h)
            if ys is not None:
                loss = loss_of(h, ys[i])
                total = loss if total is None else total + loss
    return outs, total


@pytest.mark.parametrize("kw", SCHEDULES, ids=lambda k: "-".join(map(str, k.values())))
def test_outputs_and_loss_are_the_plain_forwards(kw):
    n = 2 * kw.get("vpp", 1)
    chunks = lm.chunks(n)
    xs, ys = lm.batches(4, seed=3)
    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=2, microbatches=4, timeout=60, **kw)
    outs, loss = pipe.eval_step(xs, ys)
    want, want_loss = plain_forward(chunks, xs, ys)
    assert len(outs) == 4
    for o, w in zip(outs, want):
        assert torch.equal(o, w)
    assert torch.equal(loss, want_loss)
    assert all(p.grad is None for c in chunks for p in c.parameters())
    assert not any(o.requires_grad for o in outs)
    assert pipe.last_step is not None


def test_a_whole_batch_comes_back_whole_and_no_targets_no_loss():
    chunks = lm.chunks(2)
    torch.manual_seed(1)
    batch = torch.randint(0, 64, (8, 12))
    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=2, microbatches=4, timeout=60)
    outs, loss = pipe.eval_step(batch)
    assert loss is None
    want, _ = plain_forward(chunks, [batch])
    assert outs.shape == want[0].shape
    assert torch.allclose(outs, want[0], atol=1e-6)  # one batch against four microbatches
    want_mb, _ = plain_forward(chunks, list(torch.tensor_split(batch, 4)))
    assert torch.equal(outs, torch.cat(want_mb))


def test_outputs_that_differ_past_dimension_0_come_back_as_a_list():
    # Each microbatch trimmed to its longest row: torch.cat raised on the second dimension, and
    # the step's outputs were lost.
    class Trim(nn.Module):
        def forward(self, ids):
            return ids[:, :int((ids != 0).sum(1).max())].float()

    ids = torch.tensor([[1, 2, 0, 0], [3, 0, 0, 0], [1, 2, 3, 4], [5, 6, 7, 0]])
    pipe = rrfp.Pipeline([Trim(), nn.Identity()], lambda y, t: y.sum(), pp=2, microbatches=2)
    outs, _ = pipe.eval_step(ids)
    assert isinstance(outs, list) and [o.shape for o in outs] == [(2, 2), (2, 4)]
    assert torch.equal(outs[1], ids[2:].float())
    # Of other dtypes, they are not promoted into one either.
    class Widen(nn.Module):
        def forward(self, x):
            return x.double() if x.sum() > 20 else x  # the second microbatch

    pipe = rrfp.Pipeline([nn.Identity(), Widen()], lambda y, t: y.sum(), pp=2, microbatches=2)
    outs, _ = pipe.eval_step(ids.float())
    assert isinstance(outs, list) and [o.dtype for o in outs] == [torch.float32, torch.float64]


@pytest.mark.filterwarnings("ignore:.*(nested tensors|Sparse CSR).*:UserWarning")
def test_outputs_torch_cat_cannot_join_come_back_as_a_list():
    # A ragged output raised in the check (a nested tensor has no sizes), a sparse one in
    # torch.cat; quantized ones were joined at the first microbatch's scale.
    x = torch.randn(4, 8)

    class Ragged(nn.Module):
        def forward(self, h):
            return torch.nested.nested_tensor([r[:i + 1] for i, r in enumerate(h)])

    class Sparse(nn.Module):
        def forward(self, h):
            return h.to_sparse_csr()

    class Quantized(nn.Module):
        def forward(self, h):
            scale = 0.01 if h.abs().max() < 5 else 1.0  # the second microbatch's: coarser
            return torch.quantize_per_tensor(h, scale, 0, torch.qint8)

    x[2:] *= 100
    for last, check in [(Ragged(), lambda o, h: torch.equal(o.unbind()[1], h[1, :2])),
                        (Sparse(), lambda o, h: torch.equal(o.to_dense(), h)),
                        (Quantized(), lambda o, h: o.q_scale() == (0.01 if h.abs().max() < 5
                                                                   else 1.0))]:
        pipe = rrfp.Pipeline([nn.Identity(), last], lambda y, t: 0, pp=2, microbatches=2)
        outs, _ = pipe.eval_step(x)
        assert isinstance(outs, list) and len(outs) == 2, type(last).__name__
        assert all(check(o, x[2 * i:2 * i + 2]) for i, o in enumerate(outs)), type(last).__name__


def test_grads_are_left_as_they_were_and_training_goes_on_after():
    chunks = lm.chunks(2)
    ref = lm.chunks(2)
    xs, ys = lm.batches(4, seed=4)
    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=2, microbatches=4, timeout=60)
    pipe.step(xs, ys)
    before = [p.grad.clone() for c in chunks for p in c.parameters()]
    pipe.eval_step(xs, ys)
    assert all(torch.equal(p.grad, g)
               for p, g in zip((p for c in chunks for p in c.parameters()), before))
    pipe.step(xs, ys)  # the next step adds onto .grad as a plain loop would
    lm.reference_step(ref, xs, ys)
    lm.reference_step(ref, xs, ys)
    for c, r in zip(chunks, ref):
        for p, q in zip(c.parameters(), r.parameters()):
            assert torch.equal(p.grad, q.grad)


def test_module_eval_is_honoured():
    torch.manual_seed(2)
    chunks = [nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)),
              nn.Sequential(nn.Dropout(0.5), nn.Linear(8, 3))]
    xs = [torch.randn(4, 8) for _ in range(4)]
    pipe = rrfp.Pipeline(chunks, lambda o, t: o.sum(), pp=2, microbatches=4, timeout=60)
    for c in chunks:
        c.eval()
    outs, _ = pipe.eval_step(xs)
    want, _ = plain_forward(chunks, xs)
    for o, w in zip(outs, want):
        assert torch.equal(o, w)  # no dropout: deterministic


def test_structures_between_chunks():
    chunks = test_pytree.lstm_lm(3)
    xs, ys = lm.batches(4, seed=5, vocab=test_pytree.VOCAB)
    pipe = rrfp.Pipeline(chunks, test_pytree.loss_fn, pp=3, microbatches=4, timeout=60,
                         hint="bfw")
    outs, loss = pipe.eval_step(xs, ys)
    want, want_loss = plain_forward(chunks, xs, ys, test_pytree.loss_fn)
    for o, w in zip(outs, want):
        assert torch.equal(o, w)
    assert torch.equal(loss, want_loss)


def test_step_under_no_grad_is_refused():
    chunks = lm.chunks(2)
    xs, ys = lm.batches(4, seed=6)
    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=2, microbatches=4, timeout=60)
    with torch.no_grad():
        with pytest.raises(RuntimeError, match="eval_step"):
            pipe.step(xs, ys)
        outs, _ = pipe.eval_step(xs, ys)  # allowed: it needs no gradients
    assert all(p.grad is None for c in chunks for p in c.parameters())
    assert len(outs) == 4


def test_a_failing_forward_raises_and_the_pipeline_still_trains():
    class Boom(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    chunks = lm.chunks(2)
    pipe = rrfp.Pipeline([chunks[0], nn.Sequential(Boom())], lm.loss_fn, pp=2, microbatches=4,
                         timeout=60)
    xs, ys = lm.batches(4, seed=7)
    with pytest.raises(rrfp.StageError) as e:
        pipe.eval_step(xs, ys)
    assert isinstance(e.value.__cause__, ValueError)
