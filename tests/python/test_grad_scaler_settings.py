"""rrfp.GradScaler's settings and refusals: disabled it passes through, misuse and bad settings
are refused by name, one scaler a pipeline, torch's setters and their checks, a sparse
gradient, and the scale as given until first used. Its training against a plain loop is in
test_grad_scaler.py, whose model and data these share."""
import gc

import pytest
import torch
from torch import nn

import rrfp
from test_grad_scaler import (M, _torchs_scalers, chunks, data, loss_fn, params,
                              scaled_backward)


def test_disabled_passes_through():
    model = chunks()
    opt = torch.optim.SGD(params(model), lr=0.01)
    pipe = rrfp.Pipeline(model, loss_fn, pp=2, vpp=2, microbatches=M, timeout=60)
    scaler = rrfp.GradScaler(pipe, enabled=False)
    pipe.step(*data(0))
    grads = [p.grad.clone() for p in params(model)]
    scaler.unscale_(opt)
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, params(model)))
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 1.0 and scaler.state_dict() == {}
    x = torch.ones(2)
    assert scaler.scale(x) is x
    # A disabled scaler loads nothing, as torch's does (a resume with AMP off raised).
    scaler.load_state_dict({})
    scaler.load_state_dict({"scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                            "growth_interval": 2000, "_growth_tracker": 0})
    assert scaler.get_scale() == 1.0 and scaler.state_dict() == {}


def test_misuse_is_refused():
    w = nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([w], lr=0.1)
    scaler = rrfp.GradScaler()
    w.grad = torch.ones(2)
    scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="already called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="after step"):
        scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="already called"):
        scaler.step(opt)
    scaler.update()
    with pytest.raises(RuntimeError, match="no optimizer"):
        scaler.update()
    with pytest.raises(RuntimeError, match="closure"):
        scaler.step(opt, closure=lambda: None)
    half = nn.Parameter(torch.ones(2, dtype=torch.float16))
    half.grad = torch.ones(2, dtype=torch.float16)
    with pytest.raises(ValueError, match="float16"):
        rrfp.GradScaler().unscale_(torch.optim.SGD([half], lr=0.1))
    with pytest.raises(TypeError, match="scale"):
        scaler.scale(3.0)
    with pytest.raises(RuntimeError, match="empty"):
        scaler.load_state_dict({})
    with pytest.raises(KeyError, match="_growth_tracker"):
        scaler.load_state_dict({"scale": 1.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                                "growth_interval": 3})


@pytest.mark.parametrize("kw,error,words", [
    (dict(init_scale=0.0), ValueError, "init_scale"),
    (dict(init_scale=1e39), ValueError, "init_scale"),  # beyond float32
    (dict(init_scale="1"), TypeError, "init_scale"),
    (dict(growth_factor=1.0), ValueError, "growth_factor"),
    (dict(backoff_factor=1.0), ValueError, "backoff_factor"),
    (dict(backoff_factor=0.0), ValueError, "backoff_factor"),
    (dict(growth_interval=0), ValueError, "growth_interval"),
    (dict(growth_interval=2.0), TypeError, "growth_interval: a whole number .* float"),
    (dict(growth_interval=True), TypeError, "growth_interval"),
    (dict(growth_interval=2**63), ValueError, "growth_interval"),
    (dict(enabled=1), TypeError, "enabled"),
    # A whole number past a double's range: float() raised OverflowError.
    (dict(init_scale=10**400), ValueError, "init_scale"),
    (dict(growth_factor=10**400), ValueError, "growth_factor"),
])
def test_bad_settings_name_themselves(kw, error, words):
    with pytest.raises(error, match=words):
        rrfp.GradScaler(**kw)


def test_numpy_scalars_are_numbers_here_as_in_counts():
    # Refused as "a number, got float32" where every count took NumPy integers.
    np = pytest.importorskip("numpy")
    scaler = rrfp.GradScaler(init_scale=np.float32(2.0), growth_interval=np.int64(3))
    assert scaler.get_scale() == 2.0 and scaler.get_growth_interval() == 3
    with pytest.raises(ValueError, match="scale"):
        scaler.load_state_dict({"scale": 10**400, "growth_factor": 2.0, "backoff_factor": 0.5,
                                "growth_interval": 3, "_growth_tracker": 0})


def test_one_scaler_a_pipeline():
    pipe = rrfp.Pipeline(chunks(), loss_fn, pp=2, vpp=2, microbatches=M, timeout=60)
    first = rrfp.GradScaler(pipe)
    with pytest.raises(ValueError, match="GradScaler already.*detach"):
        rrfp.GradScaler(pipe)
    with pytest.raises(TypeError, match="pipe"):
        rrfp.GradScaler(object())
    first.detach()
    rrfp.GradScaler(pipe, enabled=False)


def test_a_scaler_detached_or_let_go_scales_no_more():
    # The pipeline kept its scaler for good: dropped, it still scaled every loss (gradients
    # 65,536x a plain loop's), and no other could be made.
    x, y = data(0)
    for drop in ("detach", "del"):
        model, ref = chunks(), chunks()
        pipe = rrfp.Pipeline(model, loss_fn, pp=2, vpp=2, microbatches=M, timeout=60)
        scaler = rrfp.GradScaler(pipe)
        pipe.step(x, y)
        for c in model:
            c.zero_grad(set_to_none=True)
        if drop == "detach":
            scaler.detach()  # and kept: detached, not let go of
        else:
            del scaler
            gc.collect()
        pipe.step(x, y)
        scaled_backward(ref, x, y, M, rrfp.GradScaler(enabled=False))
        assert all(torch.equal(p.grad, q.grad) for c, r in zip(model, ref)
                   for p, q in zip(c.parameters(), r.parameters())), drop


def test_torchs_setters_and_their_checks():
    scaler = rrfp.GradScaler(growth_interval=2)
    scaler.set_growth_factor(3.0)
    scaler.set_backoff_factor(0.25)
    scaler.set_growth_interval(5)
    assert (scaler.get_growth_factor(), scaler.get_backoff_factor(),
            scaler.get_growth_interval()) == (3.0, 0.25, 5)
    for call, bad in ((scaler.set_growth_factor, 1.0), (scaler.set_backoff_factor, 1.5),
                      (scaler.set_growth_interval, 0)):
        with pytest.raises(ValueError, match="new_"):
            call(bad)
    with pytest.raises(TypeError, match="new_interval"):  # as the constructor refuses it
        scaler.set_growth_interval(5.0)


def test_a_sparse_gradient_is_unscaled_as_it_is():
    # torch's scaler coalesces a sparse gradient only in float16 (refused here): a float32 one
    # keeps its repeated rows, each unscaled, where coalescing added them first (other bits).
    emb = nn.Embedding(4, 2, sparse=True)
    emb(torch.tensor([1, 1, 2])).sum().backward()
    assert not emb.weight.grad.is_coalesced()
    before = emb.weight.grad._values().clone()
    rrfp.GradScaler(init_scale=4.0).unscale_(torch.optim.SGD(emb.parameters(), lr=0.1))
    assert not emb.weight.grad.is_coalesced()
    assert torch.equal(emb.weight.grad._values(), before * 0.25)


def test_update_to_a_new_scale():
    scaler = rrfp.GradScaler()
    scaler.update(torch.tensor([4.0]))
    assert scaler.get_scale() == 4.0
    with pytest.raises(ValueError, match="new_scale"):
        scaler.update(-1.0)


def test_the_scale_as_given_until_first_used():
    """torch's get_scale() and state_dict() give init_scale (or a loaded scale) as the number
    given until the scale tensor exists, then its float32 value; ours gave the float32 at once
    (0.10000000149011612 for 0.1)."""
    f32 = float(torch.tensor(0.1, dtype=torch.float32))
    scaler = rrfp.GradScaler(init_scale=0.1)
    assert scaler.get_scale() == 0.1 and scaler.state_dict()["scale"] == 0.1
    for refused, error, match in (  # each changes nothing
            (lambda: scaler.update(), RuntimeError, "update: no optimizer was unscaled or stepped"),
            (lambda: scaler.update(-1.0), ValueError, "new_scale: a finite float32 of at least")):
        with pytest.raises(error, match=match):
            refused()
        assert scaler.get_scale() == 0.1
    fresh = rrfp.GradScaler()
    fresh.load_state_dict(scaler.state_dict())
    assert fresh.get_scale() == 0.1
    scaler.scale(torch.ones(1))
    assert scaler.get_scale() == f32 and scaler.state_dict()["scale"] == f32
    scaler.load_state_dict({**scaler.state_dict(), "scale": 0.3})  # used: loads its float32
    assert scaler.get_scale() == float(torch.tensor(0.3, dtype=torch.float32))
    for make in [make for _, make in _torchs_scalers()]:  # where torch's runs, the same
        theirs = make(init_scale=0.1)
        assert theirs.get_scale() == 0.1
