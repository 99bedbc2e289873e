"""Activation checkpointing inside chunks: torch.utils.checkpoint with use_reentrant=False
gives a plain loop's gradients bitwise, whole and split backward alike; the reentrant kind,
which cannot give per-microbatch gradients, is refused with a message that says what to pass."""
import pytest
import torch
from torch import nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import rrfp


class Block(nn.Module):
    def __init__(self, reentrant):
        super().__init__()
        self.f = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))
        self.reentrant = reentrant

    def forward(self, x):
        return x + checkpoint(self.f, x, use_reentrant=self.reentrant)


def chunks(reentrant):
    torch.manual_seed(0)
    return [nn.Sequential(nn.Linear(8, 16), Block(reentrant)), Block(reentrant),
            Block(reentrant), nn.Sequential(Block(reentrant), nn.Linear(16, 4))]


def loss_fn(y, t):
    return F.cross_entropy(y, t)


def data():
    g = torch.Generator().manual_seed(1)
    return ([torch.randn(5, 8, generator=g) for _ in range(8)],
            [torch.randint(0, 4, (5,), generator=g) for _ in range(8)])


@pytest.mark.parametrize("hint,policy", [("bf", "ready"), ("bfw", "ready"), ("zb-h1", "fixed")])
def test_non_reentrant_checkpointing_is_a_plain_loops(hint, policy):
    xs, ys = data()
    ref = chunks(False)
    for x, y in zip(xs, ys):
        h = x
        for c in ref:
            h = c(h)
        loss_fn(h, y).backward()
    model = chunks(False)
    pipe = rrfp.Pipeline(model, loss_fn, pp=4, microbatches=8, hint=hint, policy=policy,
                         timeout=60, delay_fn=lambda s, k, c, mb: 0.0003 * ((mb + s) % 2))
    pipe.step(xs, ys)
    for a, b in zip(model, ref):
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.equal(p.grad, q.grad)


def test_reentrant_checkpointing_is_refused_naming_the_fix():
    xs, ys = data()
    pipe = rrfp.Pipeline(chunks(True), loss_fn, pp=4, microbatches=8, timeout=60)
    with pytest.raises(rrfp.StageError, match="use_reentrant=False") as e:
        pipe.step(xs, ys)
    assert "B c3 m0" in str(e.value)
