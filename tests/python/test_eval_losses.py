"""eval_step's loss: 0-dim losses added in microbatch order; a loss per sample
(reduction="none") concatenated along dimension 0 in microbatch order, as a plain loop's
torch.cat of them. And step() under torch.inference_mode() says so."""
import contextlib

import pytest
import torch
from torch import nn
import torch.nn.functional as F

import rrfp


def per_sample(y, t):
    return F.cross_entropy(y, t, reduction="none")


def mean(y, t):
    return F.cross_entropy(y, t)


def model():
    torch.manual_seed(0)
    return [nn.Linear(4, 4), nn.Linear(4, 3)]


def plain(chunks, loss_fn, xs, ys):
    """A plain loop's losses over the microbatches, under no_grad: one per microbatch."""
    with torch.no_grad():
        return [loss_fn(chunks[1](chunks[0](x)), y) for x, y in zip(xs, ys)]


def microbatches(rows):
    g = torch.Generator().manual_seed(5)
    return ([torch.randn(n, 4, generator=g) for n in rows],
            [torch.randint(0, 3, (n,), generator=g) for n in rows])


@pytest.mark.parametrize("rows", [[2, 2, 2, 2], [3, 1, 2, 2], [2, 1, 2, 1], [1, 0, 2, 1]],
                         ids=lambda r: "-".join(map(str, r)))
def test_a_loss_per_sample_comes_back_per_sample_in_microbatch_order(rows):
    # It came back added element by element: 8 rows in 4 microbatches gave 2 values (samples
    # 0+2+4+6 and 1+3+5+7); 3,1,2,2 failed to broadcast, and 2,1,2,1 broadcast silently.
    chunks = model()
    xs, ys = microbatches(rows)
    pipe = rrfp.Pipeline(chunks, per_sample, pp=2, microbatches=4, hint="1f1b", timeout=60,
                         progress=None)
    _, loss = pipe.eval_step(xs, ys)
    assert torch.equal(loss, torch.cat(plain(chunks, per_sample, xs, ys)))
    if rows == [2, 2, 2, 2]:  # one batch, split evenly
        _, whole = pipe.eval_step(torch.cat(xs), torch.cat(ys))
        assert torch.equal(whole, loss)


def test_a_loss_per_sample_of_one_row_microbatches_is_joined_too():
    # Told by its elements, a loss per sample of microbatches of one row each was added: the
    # same loss_fn gave 8 values for 8 rows in 4 microbatches and 1 for 4 rows.
    chunks = model()
    xs, ys = microbatches([1, 1, 1, 1])
    pipe = rrfp.Pipeline(chunks, per_sample, pp=2, microbatches=4, timeout=60, progress=None)
    _, loss = pipe.eval_step(xs, ys)
    assert loss.shape == (4,) and torch.equal(loss, torch.cat(plain(chunks, per_sample, xs, ys)))


def test_losses_of_one_element_are_still_added_in_microbatch_order():
    chunks = model()
    xs, ys = microbatches([3, 1, 2, 2])
    pipe = rrfp.Pipeline(chunks, mean, pp=2, microbatches=4, timeout=60, progress=None)
    _, loss = pipe.eval_step(xs, ys)
    want = plain(chunks, mean, xs, ys)
    total = want[0]
    for part in want[1:]:
        total = total + part
    assert loss.shape == () and torch.equal(loss, total)
    assert torch.equal(pipe.step(xs, ys), total)  # a step's: the same sum


@pytest.mark.parametrize("loss_fn,shapes,joined", [
    (lambda y, t: ((y[:, :2] if len(y) == 3 else y) ** 2), "(3, 2), (1, 3)", (12, 2)),
    (lambda y, t: (y ** 2).sum(1) if len(y) == 3 else (y ** 2).sum(), "(3,), (), ", (12,)),
], ids=["other-sizes-past-0", "a-0-dim-among-them"])
def test_losses_that_cannot_be_joined_fail_naming_loss_fn_and_the_shapes(loss_fn, shapes,
                                                                          joined):
    chunks = model()
    xs, ys = microbatches([3, 1, 2, 2])
    pipe = rrfp.Pipeline(chunks, loss_fn, pp=2, microbatches=4, timeout=60, progress=None)
    with pytest.raises(rrfp.StageError, match="loss_fn: eval_step concatenates") as e:
        pipe.eval_step(xs, ys)
    assert isinstance(e.value.__cause__, ValueError)
    assert shapes in str(e.value.__cause__)
    _, loss = pipe.eval_step(xs[:1] * 4, ys[:1] * 4)  # the pipeline goes on
    assert loss.shape == joined


def inference_with_grad():
    """inference_mode with enable_grad() inside: grad mode on, inference mode still on."""
    stack = contextlib.ExitStack()
    stack.enter_context(torch.inference_mode())
    stack.enter_context(torch.enable_grad())
    return stack


@pytest.mark.parametrize("mode,name", [(torch.inference_mode, "inference_mode"),
                                       (torch.no_grad, "no_grad"),
                                       (inference_with_grad, "inference_mode")])
def test_a_step_under_a_mode_without_gradients_names_that_mode(mode, name):
    # Under inference_mode the refusal said torch.no_grad(), which the caller never called; with
    # enable_grad() inside it, every forward ran and the step said no parameter required grad.
    chunks = model()
    xs, ys = microbatches([2, 2, 2, 2])
    pipe = rrfp.Pipeline(chunks, mean, pp=2, microbatches=4, timeout=60, progress=None)
    with mode():
        with pytest.raises(RuntimeError, match=rf"^step: called under torch\.{name}\(\), .*"
                                               "use eval_step"):
            pipe.step(xs, ys)
    assert all(p.grad is None for c in chunks for p in c.parameters())
