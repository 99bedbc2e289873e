"""Random numbers outside a seeded forward: a seeded pipeline's backward tasks each draw from a
seed of their own, the same in every schedule; an unseeded pipeline whose stages share torch's
generator says, once, which chunks draw there (activation checkpointing's recompute would draw
another mask than their forward did)."""
import warnings

import pytest
import torch
from torch import nn

import rrfp

SEED = 77
DRAWN = []  # what each backward of Noisy drew, in the order they ran


class Noisy(torch.autograd.Function):
    """The identity, whose backward adds noise to the gradient (gradient noise, stochastic
    rounding): random numbers drawn in a backward task."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        noise = torch.rand(g.shape[-1])
        DRAWN.append(noise)
        return g + noise * 1e-3


class Block(nn.Module):
    def __init__(self, p=0.0):
        super().__init__()
        self.lin, self.drop = nn.Linear(4, 4), nn.Dropout(p)

    def forward(self, x):
        return Noisy.apply(self.drop(self.lin(x)))


def squared(y, t):
    return ((y - t) ** 2).sum()


def blocks(p=0.0, n=3):
    torch.manual_seed(0)
    return [Block(p) for _ in range(n)]


def batch():
    g = torch.Generator().manual_seed(3)
    return torch.randn(8, 4, generator=g), torch.randn(8, 4, generator=g)


def grads(chunks):
    return [p.grad.clone() for c in chunks for p in c.parameters()]


def test_every_backward_task_of_a_seeded_pipeline_draws_its_own_numbers():
    # Each began from the caller's generator as it was: 24 backward draws over 2 steps, all
    # one value.
    pipe = rrfp.Pipeline(blocks(), squared, pp=3, microbatches=4, hint="1f1b", seed=SEED,
                         timeout=60, progress=None)
    DRAWN.clear()
    for _ in range(2):
        pipe.step(*batch())
    assert len(DRAWN) == 24
    assert len({tuple(d.tolist()) for d in DRAWN}) == 24


@pytest.mark.parametrize("kw", [dict(hint="1f1b", policy="fixed"), dict(hint="bf"),
                                dict(hint="bfw"), dict(hint="bf", vpp=3)],
                         ids=lambda k: "-".join(map(str, k.values())))
def test_backward_draws_are_the_same_in_every_schedule_whatever_the_callers_generator(kw):
    # GPipe's order against another; the caller's generator set apart before each, which the
    # backward tasks used to start from.
    got = []
    for caller_seed, hints in ((1, dict(hint="gpipe", policy="fixed")), (2, kw)):
        chunks = blocks(p=0.25)
        pipe = rrfp.Pipeline(chunks, squared, pp=3 // hints.get("vpp", 1), microbatches=4,
                             seed=SEED, timeout=60, progress=None, **hints)
        torch.manual_seed(caller_seed)
        DRAWN.clear()
        pipe.step(*batch())
        got.append((grads(chunks), sorted(tuple(d.tolist()) for d in DRAWN)))
    assert got[0][1] == got[1][1]
    assert all(torch.equal(a, b) for a, b in zip(got[0][0], got[1][0]))


def test_seeded_forwards_still_draw_what_the_task_seed_loop_draws():
    # The loss depends on the forwards' dropout alone: the pipeline's is the plain loop's that
    # seeds each chunk's forward with task_seed, bitwise, backward draws or not.
    x, y = batch()
    pipe = rrfp.Pipeline(blocks(p=0.5), squared, pp=3, microbatches=4, hint="bfw", seed=SEED,
                         timeout=60, progress=None)
    pipe.step(x, y)
    loss = pipe.step(x, y)
    ref, total = blocks(p=0.5), None
    for mb, (xm, ym) in enumerate(zip(x.tensor_split(4), y.tensor_split(4))):
        h = xm
        for c, chunk in enumerate(ref):
            torch.manual_seed(rrfp.task_seed(SEED, 1, c, mb))
            h = chunk(h)
        part = squared(h, ym).detach()
        total = part if total is None else total + part
    assert torch.equal(loss, total)


class Drawing(nn.Module):
    """A chunk that draws (dropout) or not."""

    def __init__(self, p):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(p) if p else nn.Identity()

    def forward(self, x):
        return self.drop(self.lin(x))


def stepped(ps, **kw):
    """The RuntimeWarnings of two steps of a pipeline of Drawing(p) for each p, each step's."""
    torch.manual_seed(0)
    pipe = rrfp.Pipeline([Drawing(p) for p in ps], squared, microbatches=4, timeout=60,
                         progress=None, **kw)
    said = []
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pipe.step(*batch())
        said.append([w for w in caught if issubclass(w.category, RuntimeWarning)])
    return said


def test_an_unseeded_chunk_that_draws_among_stage_threads_is_said_once():
    # Its checkpointed recompute drew another mask than its forward (147 of 192 at pp=4),
    # without a word.
    first, second = stepped([0.0, 0.5, 0.0], pp=3)
    assert len(first) == 1 and not second
    message = str(first[0].message)
    assert message.startswith("chunk 1 of a pipeline without a seed drew random numbers")
    assert "activation checkpointing's recompute" in message and "seed=" in message
    assert first[0].filename == __file__  # at the line that called step()
    first, _ = stepped([0.5, 0.0, 0.5, 0.0], pp=2, vpp=2)
    assert [str(w.message).split(" of ")[0] for w in first] == ["chunks 0, 2"]


@pytest.mark.parametrize("ps,kw", [([0.5, 0.5], dict(pp=2, seed=SEED)),
                                   ([0.0, 0.0], dict(pp=2)),
                                   ([0.5, 0.5], dict(pp=1, vpp=2))],
                         ids=["seeded", "no-draws", "one-stage"])
def test_nothing_is_said_seeded_without_draws_or_on_one_thread(ps, kw):
    assert stepped(ps, **kw) == [[], []]


def test_an_evaluation_first_leaves_the_first_training_step_watched():
    torch.manual_seed(0)
    pipe = rrfp.Pipeline([Drawing(0.5), Drawing(0.0)], squared, pp=2, microbatches=4,
                         timeout=60, progress=None)
    pipe.eval_step(*batch())
    with pytest.warns(RuntimeWarning, match="^chunk 0 of a pipeline without a seed"):
        pipe.step(*batch())


def test_a_first_step_in_eval_mode_leaves_the_first_step_in_training_mode_watched():
    # Watched then, a step drawing no mask, the steps after train() drew without a word.
    torch.manual_seed(0)
    chunks = [Drawing(0.5), Drawing(0.0)]
    pipe = rrfp.Pipeline(chunks, squared, pp=2, microbatches=4, timeout=60, progress=None)
    for c in chunks:
        c.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pipe.step(*batch())
    for c in chunks:
        c.train()
    with pytest.warns(RuntimeWarning, match="^chunk 0 of a pipeline without a seed"):
        pipe.step(*batch())


@pytest.mark.parametrize("how", ["eval", "p=0"])
def test_a_module_that_starts_drawing_after_the_watched_step_is_watched_then(how):
    # A frozen backbone (its chunks in eval(), another chunk training) or a dropout warm-up
    # (p=0 at first): the first training step was watched and saw no draw, and the steps after
    # train(), or after p was raised, drew without a word.
    torch.manual_seed(0)
    chunks = [Drawing(0.5), Drawing(0.0), Drawing(0.0)]
    pipe = rrfp.Pipeline(chunks, squared, pp=3, microbatches=4, timeout=60, progress=None)
    if how == "eval":
        chunks[0].eval()
    else:
        chunks[0].drop.p = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pipe.step(*batch())
        pipe.step(*batch())  # nothing changed: not watched again
    if how == "eval":
        chunks[0].train()
    else:
        chunks[0].drop.p = 0.5
    with pytest.warns(RuntimeWarning, match="^chunk 0 of a pipeline without a seed"):
        pipe.step(*batch())
