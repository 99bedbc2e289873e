"""rrfp.split: an nn.Sequential cut into chunks that share its modules; a pipeline over them
trains the model bitwise as a plain loop over the whole model does."""
import pytest
import torch
from torch import nn

import lm
import rrfp
from transformer_lm import Block, Embed


def model():
    torch.manual_seed(0)
    return nn.Sequential(Embed(32, 64, 64), *[Block(32, 4) for _ in range(5)], nn.LayerNorm(32),
                         nn.Linear(32, 64))


def test_points_and_counts():
    m = model()  # 8 modules
    assert [len(c) for c in rrfp.split(m, [2, 5])] == [2, 3, 3]
    assert [len(c) for c in rrfp.split(m, chunks=3)] == [3, 3, 2]
    assert [len(c) for c in rrfp.split(m, chunks=8)] == [1] * 8
    parts = rrfp.split(m, chunks=4)
    assert parts[0][0] is m[0]  # the same modules, so the same parameters


def test_a_pipeline_over_the_parts_trains_the_model_bitwise():
    ref, m = model(), model()
    xs, ys = lm.batches(4, seed=1)
    lm.reference_step([ref], xs, ys)
    pipe = rrfp.Pipeline(rrfp.split(m, chunks=4), lm.loss_fn, pp=2, vpp=2, microbatches=4,
                         timeout=60)
    pipe.step(xs, ys)
    for (n, p), q in zip(ref.named_parameters(), m.parameters()):
        assert torch.equal(p.grad, q.grad), n


@pytest.mark.parametrize("args,kw,match", [
    ((nn.Linear(2, 2),), {"chunks": 2}, "expected an nn.Sequential"),
    ((nn.Sequential(nn.ReLU(), nn.ReLU()),), {}, "one of them"),
    ((nn.Sequential(nn.ReLU(), nn.ReLU()), [1]), {"chunks": 2}, "one of them"),
    ((nn.Sequential(nn.ReLU(), nn.ReLU()),), {"chunks": 3}, "in 1..2"),
    ((nn.Sequential(nn.ReLU(), nn.ReLU(), nn.ReLU()), [2, 1]), {}, "increasing"),
    ((nn.Sequential(nn.ReLU(), nn.ReLU(), nn.ReLU()), [0]), {}, "increasing"),
    ((nn.Sequential(nn.ReLU(), nn.ReLU(), nn.ReLU()), [3]), {}, "increasing"),
])
def test_bad_cuts_are_refused(args, kw, match):
    with pytest.raises((TypeError, ValueError), match=match):
        rrfp.split(*args, **kw)
