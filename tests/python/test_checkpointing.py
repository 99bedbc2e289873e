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


def test_reentrant_checkpointing_of_every_chunk_is_named_too():
    # Checkpointed whole, every chunk's output wants no gradient (its input wants none), and the
    # loss none: the message blamed frozen parameters, of a model whose every parameter trains.
    class Whole(nn.Module):
        def __init__(self):
            super().__init__()
            self.f = nn.Linear(8, 8)

        def forward(self, x):
            return checkpoint(self.f, x)  # use_reentrant=True, torch 1.13's default

    torch.manual_seed(0)
    pipe = rrfp.Pipeline([Whole(), Whole()], loss_fn, pp=2, microbatches=2, timeout=60)
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad"):
        with pytest.raises(rrfp.StageError, match="chunk 1's output requires none, though "
                           "parameters of it do: .* pass use_reentrant=False"):
            pipe.step(torch.randn(4, 8), torch.randn(4, 8))


class NormedBlock(nn.Module):
    def __init__(self, checkpointed):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 3, 3, padding=1), nn.BatchNorm2d(3), nn.ReLU())
        self.checkpointed = checkpointed

    def forward(self, x):
        return checkpoint(self.body, x, use_reentrant=False) if self.checkpointed else self.body(x)


@pytest.mark.parametrize("checkpointed,eval_first", [(True, False), (True, True),
                                                     (False, False)])
def test_running_statistics_a_recompute_updates_are_said(checkpointed, eval_first, recwarn):
    # The backward's recompute updates a BatchNorm's running statistics again, in the order the
    # schedule runs backwards: chunk 0's running mean came out 1e-3 off a plain loop's, silently.
    torch.manual_seed(0)
    chunks = [NormedBlock(checkpointed), NormedBlock(checkpointed)]
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(2, 3, 8, 8, generator=g) for _ in range(4)]
    ys = [torch.randn(2, 3, 8, 8, generator=g) for _ in range(4)]
    pipe = rrfp.Pipeline(chunks, lambda y, t: ((y - t) ** 2).sum(), pp=2, microbatches=4,
                         hint="1f1b", policy="fixed")
    if eval_first:  # a validation before training: the step after it is still watched
        pipe.eval_step(xs, ys)
    pipe.step(xs, ys)
    said = [str(w.message) for w in recwarn if issubclass(w.category, RuntimeWarning)]
    if checkpointed:
        assert any("chunk 0's backward updates its running statistics" in s for s in said), said
    else:
        assert not any("running statistics" in s for s in said), said
    pipe.step(xs, ys)  # said once: watched until a step that ran the backward
    again = [str(w.message) for w in recwarn if issubclass(w.category, RuntimeWarning)]
    assert len(again) == len(said)


@pytest.mark.parametrize("change", ["train", "replace"])
def test_running_statistics_are_watched_again_after_train_or_a_new_module(change, recwarn):
    # Watched once for good: a first step with the batch norms in eval() (frozen, updating
    # nothing), or one outside the checkpointed region replaced by a new one inside it, left
    # the recompute's updates unsaid, the running means 1e-2 off a plain loop's.
    torch.manual_seed(0)
    chunks = [NormedBlock(change == "train"), NormedBlock(change == "train")]
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(2, 3, 8, 8, generator=g) for _ in range(4)]
    ys = [torch.randn(2, 3, 8, 8, generator=g) for _ in range(4)]
    pipe = rrfp.Pipeline(chunks, lambda y, t: ((y - t) ** 2).sum(), pp=2, microbatches=4,
                         hint="1f1b", policy="fixed")
    for c in chunks:
        if change == "train":
            c.eval()
    pipe.step(xs, ys)
    assert not [w for w in recwarn if "running statistics" in str(w.message)]
    for c in chunks:
        if change == "train":
            c.train()
        else:
            c.body[1], c.checkpointed = nn.BatchNorm2d(3), True
    pipe.step(xs, ys)
    said = [str(w.message) for w in recwarn if "running statistics" in str(w.message)]
    assert any("chunk 0's backward updates its running statistics" in s for s in said), said
