"""A chunk whose forward changes a view in place under a split backward: `t = lin(h); t += h`
over a 3-D `h` (a Linear's output is then a view of its 2-D product) trained in a plain loop
and under split_backward="off", but every split schedule failed the step in W with torch's bare
"could not compute gradients for some functions": torch 1.13's autograd refuses the parameters'
gradients alone over that graph. Such a chunk now computes its whole backward in B, bitwise the
plain loop's; a chunk without one keeps its split; and should W meet the refusal anyway, the
step names the chunk and split_backward='off'."""
import pytest
import torch
from torch import nn

import rrfp
from rrfp import _graph

W = 4


class Residual(nn.Module):
    """A Linear whose output takes its input in place (`inplace`), or out of place."""

    def __init__(self, inplace):
        super().__init__()
        self.lin, self.inplace = nn.Linear(W, W), inplace

    def forward(self, h):
        t = self.lin(h)
        if self.inplace:
            t += h
            return t
        return t + h


def model(inplace):
    torch.manual_seed(0)
    return [nn.Linear(W, W), Residual(inplace), Residual(inplace)]


def loss_fn(out, y):
    return ((out.mean((1, 2)) - y) ** 2).mean()


def data():
    g = torch.Generator().manual_seed(1)
    return ([torch.randn(2, 3, W, generator=g) for _ in range(3)],
            [torch.randn(2, generator=g) for _ in range(3)])


def plain():
    ref = model(True)
    for x, y in zip(*data()):
        h = x
        for c in ref:
            h = c(h)
        loss_fn(h, y).backward()
    return ref


@pytest.mark.parametrize("hint,split", [("bfw", "auto"), ("zb-h1", "auto"), ("bf", "on"),
                                        ("adaptive", "auto"), ("1f1b", "on")])
def test_a_view_changed_in_place_trains_bitwise_as_a_plain_loop(hint, split):
    ref, m = plain(), model(True)
    pipe = rrfp.Pipeline(m, loss_fn, pp=3, microbatches=3, hint=hint, split_backward=split,
                         timeout=60)
    pipe.step(*data())
    for a, b in zip(m, ref):
        for p, q in zip(a.parameters(), b.parameters()):
            assert torch.equal(p.grad, q.grad)
    # The chunks changing a view in place computed their backward whole; the first keeps its
    # split (it has nothing to split from: its input wants no gradient).
    assert [r.whole.get(i, False) for i, r in zip(range(3), pipe._runners)] == \
        [False, True, True]


def test_without_one_the_split_stays():
    m = model(False)
    pipe = rrfp.Pipeline(m, loss_fn, pp=3, microbatches=3, hint="bfw", timeout=60)
    pipe.step(*data())
    assert not any(w for r in pipe._runners for w in r.whole.values())


def test_ws_refusal_names_the_chunk_and_the_way_out():
    e = RuntimeError("could not compute gradients for some functions")
    said = str(_graph.backward_failure("W", 2, e))
    assert said.startswith("chunk 2's weight gradients could not be computed apart from its "
                           "input's gradient")
    assert "split_backward='off'" in said and said.endswith(
        "(autograd: could not compute gradients for some functions)")
    assert _graph.backward_failure("B", 2, e) is None  # B computes what a plain loop does
    assert _graph.backward_failure("W", 2, RuntimeError("another")) is None
