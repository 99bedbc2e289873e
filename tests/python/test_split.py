"""rrfp.split: an nn.Sequential cut into chunks that share its modules; a pipeline over them
trains the model bitwise as a plain loop over the whole model does."""
import numpy as np
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
    # Cuts of any integer type: NumPy's were refused ("points must be whole numbers, got
    # array([2, 5])"), a count too.
    assert [len(c) for c in rrfp.split(m, np.array([2, 5]))] == [2, 3, 3]
    assert [len(c) for c in rrfp.split(m, chunks=np.int64(3))] == [3, 3, 2]
    # The chunks are in the model's mode: those of a model in eval() said they trained.
    assert all(c.training for c in rrfp.split(m, chunks=2))
    assert not any(c.training for c in rrfp.split(m.eval(), chunks=2))


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


class Residual(nn.Sequential):
    def forward(self, x):
        return x + super().forward(x)


@pytest.mark.parametrize("args,kw,error,match", [
    ((nn.Sequential(nn.ReLU(), nn.ReLU()), 2), {}, TypeError, "points must be a list"),
    ((nn.Sequential(nn.ReLU(), nn.ReLU()), [True]), {}, TypeError, "whole numbers"),
    ((nn.Sequential(nn.ReLU(), nn.ReLU()),), {"chunks": True}, TypeError, "whole number"),
    ((nn.Sequential(nn.ReLU(), nn.ReLU()),), {"chunks": 2.0}, TypeError, "whole number"),
    ((nn.Sequential(nn.ReLU(), nn.ReLU()), np.array([True])), {}, TypeError, "whole numbers"),
    ((nn.Sequential(nn.ReLU(), nn.ReLU()), [1.0]), {}, TypeError, "got float 1.0 in"),
    # A 0-d tensor iterated into torch's "iteration over a 0-d tensor", naming no argument.
    ((nn.Sequential(nn.ReLU(), nn.ReLU()), torch.tensor(1)), {}, TypeError,
     "points must be a list"),
    ((nn.Sequential(nn.ReLU(), nn.ReLU()), torch.tensor(1.0)), {}, TypeError,
     "points must be a list"),
])
def test_cuts_of_the_wrong_type_are_type_errors(args, kw, error, match):
    # split(m, 2) said "'int' object is not iterable"; True passed as a count and as a cut.
    with pytest.raises(error, match=match):
        rrfp.split(*args, **kw)


def test_what_no_cut_keeps_is_refused():
    # A Sequential with a forward of its own: each chunk applied the residual to itself (the
    # output 1.2 off the model's). Hooks on the whole model ran on no chunk.
    with pytest.raises(TypeError, match="Residual is an nn.Sequential with a forward of its own"):
        rrfp.split(Residual(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4)), chunks=2)
    hooked = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    hooked.register_forward_pre_hook(lambda m, inp: (inp[0] * 10,))
    with pytest.raises(ValueError, match="hooks of its own"):
        rrfp.split(hooked, chunks=2)
    patched = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    patched.forward = lambda x: x
    with pytest.raises(TypeError, match="forward of its own \\(set on it\\)"):
        rrfp.split(patched, chunks=2)


class Mlp(nn.Sequential):
    """A subclass whose __init__ takes other arguments (as torchvision's MLP): its slices
    could not be built (model[a:b] calls the class with a dict)."""

    def __init__(self, width, depth):
        super().__init__(*[nn.Linear(width, width) for _ in range(depth)])


def test_a_sequential_subclass_without_a_forward_of_its_own_is_cut():
    torch.manual_seed(0)
    m = Mlp(4, 4)
    parts = rrfp.split(m, chunks=2)
    assert [type(p) for p in parts] == [nn.Sequential] * 2 and parts[1][0] is m[2]
    x = torch.randn(3, 4)
    assert torch.equal(parts[1](parts[0](x)), m(x))


def vgg_like():
    """A VGG-style nn.Sequential: each convolution followed by an in-place ReLU, so cuts after
    a convolution give chunks that begin by changing their input in place."""
    torch.manual_seed(0)
    layers = []
    for a, b in [(3, 8), (8, 8), (8, 16), (16, 16)]:
        layers += [nn.Conv2d(a, b, 3, padding=1), nn.ReLU(inplace=True)]
    return nn.Sequential(*layers, nn.Flatten(), nn.Dropout(0.0, inplace=True),
                         nn.Linear(16 * 8 * 8, 10))


@pytest.fixture(params=[1, 2], ids=["1 thread", "2 threads"])
def torch_threads(request):
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("hint", ["bf", "bfw"])
def test_chunks_that_begin_in_place_train_bitwise(hint, torch_threads):
    # Cut before each ReLU and before the dropout: the received input used to be a leaf that
    # wants its gradient, which autograd lets no in-place ReLU change. And the convolutions'
    # weight gradients, whose reductions split by thread count, came out otherwise where the
    # stages' threads took OpenMP's default count instead of torch's.
    ref, m = vgg_like(), vgg_like()
    g = torch.Generator().manual_seed(2)
    xs = [torch.randn(2, 3, 8, 8, generator=g) for _ in range(4)]
    ys = [torch.randint(0, 10, (2,), generator=g) for _ in range(4)]
    loss_fn = nn.CrossEntropyLoss()
    for x, y in zip(xs, ys):
        loss_fn(ref(x), y).backward()
    pipe = rrfp.Pipeline(rrfp.split(m, [1, 3, 9]), loss_fn, pp=4, microbatches=4, hint=hint)
    pipe.step(xs, ys)
    for p, q in zip(ref.parameters(), m.parameters()):
        assert torch.equal(p.grad, q.grad)


class ChangesInputLater(nn.Module):
    def forward(self, x):
        y = x * 2
        x.add_(1)
        return x + y


def test_a_chunk_that_changes_its_input_in_place_later_is_told_what_to_do():
    chunks = [nn.Linear(4, 4), ChangesInputLater()]
    pipe = rrfp.Pipeline(chunks, lambda o, t: o.sum(), pp=2, microbatches=2)
    with pytest.raises(rrfp.StageError, match="chunk 1 changes the input it receives in place"):
        pipe.step(torch.randn(4, 4), torch.zeros(4))
