"""A stage's backward calls autograd's engine directly where torch.autograd.grad's argument
handling has nothing to do (rrfp/_autograd.py, grad). These check that it computes the same bits
as torch.autograd.grad, raises what it raises, and leaves tensors with __torch_function__ to
torch.autograd.grad."""
import pytest
import torch
from torch import nn

from rrfp import _autograd


def _graph(seed):
    torch.manual_seed(seed)
    c = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 4))
    unused = nn.Parameter(torch.randn(3))  # in no graph: its gradient is None
    x = torch.randn(7, 6, requires_grad=True)
    return c, unused, x


def _same(a, b):
    assert len(a) == len(b)
    for u, v in zip(a, b):
        assert (u is None) == (v is None)
        if u is not None:
            assert torch.equal(u, v)


@pytest.mark.parametrize("seed", range(5))
def test_a_scalar_loss_gives_torch_autograd_grad_bits(seed):
    c, unused, x = _graph(seed)
    targets = [x, *c.parameters(), unused]
    loss = c(x).square().mean()
    want = torch.autograd.grad(loss, targets, retain_graph=True, allow_unused=True)
    got = _autograd.grad([loss], targets, None, retain=False)
    _same(got, want)


@pytest.mark.parametrize("seed", range(5))
def test_given_output_gradients_and_a_kept_graph_give_the_same_bits(seed):
    c, unused, x = _graph(seed)
    out = c(x)
    g = torch.randn_like(out)
    params = list(c.parameters())
    want_x = torch.autograd.grad([out], [x], [g], retain_graph=True)
    want_p = torch.autograd.grad([out], params + [unused], [g], retain_graph=True,
                                 allow_unused=True)
    # B then W, as a split backward runs them: the first keeps the graph for the second.
    _same(_autograd.grad([out], [x], [g], retain=True), want_x)
    _same(_autograd.grad([out], params + [unused], [g], retain=False), want_p)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        _autograd.grad([out], [x], [g], retain=False)


def test_a_root_without_a_graph_raises_as_autograd_does():
    x = torch.randn(3, requires_grad=True)
    loss = (x.detach() * 2).sum()
    with pytest.raises(RuntimeError, match="does not require grad"):
        _autograd.grad([loss], [x], None, retain=False)


class Logged(torch.Tensor):
    """A tensor subclass that sees every torch function called on it."""
    calls = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_tensor_with_torch_function_goes_through_torch_autograd_grad():
    x = torch.randn(4, requires_grad=True).as_subclass(Logged)
    loss = (x * 3).sum()
    Logged.calls.clear()
    (got,) = _autograd.grad([loss], [x], None, retain=False)
    assert "grad" in Logged.calls  # dispatched by torch.autograd.grad, not the engine call
    assert torch.equal(got.as_subclass(torch.Tensor), torch.full((4,), 3.0))
