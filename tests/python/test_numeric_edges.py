"""Numbers at their edges: a GradScaler whose steps overflow for a long time, a gradient that is
non-finite only once unscaled, one stage's overflow under one optimizer per stage, a 0-dim
parameter, a loss without gradient history, and the seconds a delay_fn returns. Each case here
failed before its fix (see the comments)."""
import math
import warnings

import numpy
import pytest
import torch
from torch import nn

import rrfp

FLOOR = 2.0**-126  # the smallest normal float32: where the scale's back-off stops


def chunks():
    torch.manual_seed(0)
    return [nn.Sequential(nn.Linear(4, 4), nn.Tanh()), nn.Linear(4, 3)]


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(4, 4, generator=g), torch.randint(0, 3, (4,), generator=g)


def ce(out, y):
    return nn.functional.cross_entropy(out, y)


def overflowing_steps(scaler, n):
    """n steps whose gradient is inf; returns the warnings they raised."""
    w = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([w], lr=1.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(n):
            w.grad = torch.tensor([math.inf])
            scaler.step(opt)
            scaler.update()
            assert scaler.get_scale() >= FLOOR
    assert torch.equal(w, torch.zeros(1))  # every step skipped
    return [w for w in caught if issubclass(w.category, RuntimeWarning)]


def test_repeated_overflow_stops_the_scale_at_a_floor_and_says_so_once():
    # With the defaults, 166 overflowing steps took the scale to 0.0 (142 reach 2**-126), the
    # next finite step trained on 0 * inf = NaN, and the scaler's own state failed to load.
    scaler = rrfp.GradScaler()
    said = overflowing_steps(scaler, 200)
    assert scaler.get_scale() == FLOOR
    assert len(said) == 1 and "since step 0" in str(said[0].message)
    fresh = rrfp.GradScaler()
    fresh.load_state_dict(scaler.state_dict())  # a state it saved loads again
    assert fresh.get_scale() == FLOOR
    w = nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([w], lr=1.0)
    w.grad = torch.tensor([1.0, -2.0]) * FLOOR  # a finite step: it trains, on finite numbers
    scaler.step(opt)
    scaler.update()
    assert torch.equal(w, torch.tensor([-1.0, 2.0]))


def test_a_gradient_finite_when_scaled_but_not_once_unscaled_skips_the_step():
    # The check read each gradient before it was unscaled: 1e38 at a scale of 2**-20 passed,
    # and the step trained on inf.
    w = nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([w], lr=1.0)
    scaler = rrfp.GradScaler(init_scale=2.0**-20)
    w.grad = torch.tensor([1e38, 1.0])
    scaler.step(opt)
    scaler.update()
    assert torch.equal(w, torch.zeros(2))
    assert scaler.get_scale() == 2.0**-21


def test_scales_under_the_floor():
    # A state with a scale of 0.0 or a subnormal one (torch's back-off, and rrfp's before it
    # stopped, led there) was refused, or left a scale whose reciprocal is inf; it loads at the
    # floor. Given by hand, such a scale is refused by name (1e-40 was taken as it was).
    state = rrfp.GradScaler().state_dict()
    for low in (0.0, 1e-40, torch.tensor(0.0)):
        scaler = rrfp.GradScaler()
        scaler.load_state_dict(dict(state, scale=low))
        assert scaler.get_scale() == FLOOR
    with pytest.raises(ValueError, match="init_scale"):
        rrfp.GradScaler(init_scale=1e-40)
    with pytest.raises(ValueError, match="new_scale"):
        rrfp.GradScaler().update(1e-40)


def test_a_pipeline_checkpoint_saved_at_the_floor_loads_and_trains_on(tmp_path):
    # backoff_factor 1e-30: two overflowing steps took the scale to 0.0; the checkpoint saved
    # then was refused on load, and the next finite step trained on NaN.
    model = chunks()
    bad = {"on": True}
    pipe = rrfp.Pipeline(model, lambda o, y: ce(o, y) * (math.inf if bad["on"] else 1.0),
                         pp=2, microbatches=2, progress=None)
    opt = torch.optim.SGD([p for c in model for p in c.parameters()], lr=0.1)
    scaler = rrfp.GradScaler(pipe, backoff_factor=1e-30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for step in range(4):
            bad["on"] = step < 2
            opt.zero_grad()
            pipe.step(*data())
            scaler.step(opt)
            scaler.update()
    assert scaler.get_scale() == FLOOR
    assert all(torch.isfinite(p).all() for c in model for p in c.parameters())
    pipe.save(str(tmp_path / "ck"), opt)
    again = rrfp.Pipeline(chunks(), ce, pp=2, microbatches=2, progress=None)
    other = rrfp.GradScaler(again)
    again.load(str(tmp_path / "ck"))
    assert other.get_scale() == FLOOR


class Temperature(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.t = nn.Parameter(torch.tensor(2.0))  # 0-dim, as a learnable temperature

    def forward(self, x):
        return self.lin(x) * self.t


def test_a_zero_dim_parameter_is_unscaled_as_the_others():
    # Its gradient failed the (1,)-shaped reciprocal's broadcast, after the gradients before it
    # were divided already: a retry divided those twice.
    model = [nn.Sequential(nn.Linear(4, 4), nn.Tanh()), Temperature()]
    pipe = rrfp.Pipeline(model, ce, pp=2, microbatches=2, progress=None)
    params = [p for c in model for p in c.parameters()]
    scaler = rrfp.GradScaler(pipe, init_scale=3.0)
    pipe.step(*data())
    before = [p.grad.clone() for p in params]
    scaler.unscale_(torch.optim.SGD(params, lr=0.1))
    inv = torch.tensor(3.0, dtype=torch.float64).reciprocal().float()
    assert all(torch.equal(p.grad, b * inv) for p, b in zip(params, before))
    assert model[1].t.grad.dim() == 0


def test_a_gradient_that_cannot_change_in_place_is_refused_before_any_changes():
    # An expanded gradient (its elements share memory) failed mul_ after the gradients before
    # it were divided.
    a, b = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(3))
    a.grad, b.grad = torch.tensor([4.0, 8.0]), torch.ones(1).expand(3)
    opt = torch.optim.SGD([a, b], lr=0.1)
    scaler = rrfp.GradScaler(init_scale=4.0)
    with pytest.raises(ValueError, match="unscale_: .*share memory"):
        scaler.unscale_(opt)
    assert torch.equal(a.grad, torch.tensor([4.0, 8.0]))
    b.grad = b.grad.clone()
    scaler.unscale_(opt)
    assert torch.equal(a.grad, torch.tensor([1.0, 2.0]))
    assert torch.equal(b.grad, torch.full((3,), 0.25))


class Boosted(nn.Module):
    """A last chunk whose parameter p's gradient is `boost` times the loss's: at 1e38 it
    overflows float32 while scaled by 2**16, or only once unscaled from 2**-20."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)
        self.p = nn.Parameter(torch.zeros(2))
        self.boost = 1e38

    def forward(self, h):
        return self.lin(h) + self.p * self.boost


def summed(y, t):  # t is ones: each output's gradient is 1
    return (y * t).sum()


def boosted():
    torch.manual_seed(0)
    model = [nn.Linear(4, 4), Boosted()]
    return model, rrfp.Pipeline(model, summed, pp=2, microbatches=2, transport="inproc",
                                progress=None)


def boosted_run(boosts, per_stage, **settings):
    """Trains [Linear, Boosted] in threads, one SGD per stage or one over everything; returns
    the parameters after each step and the scales."""
    model, pipe = boosted()
    groups = [list(c.parameters()) for c in model] if per_stage else [
        [p for c in model for p in c.parameters()]]
    opts = [torch.optim.SGD(g, lr=0.01, momentum=0.9) for g in groups]
    scaler = rrfp.GradScaler(pipe, **settings)
    params, scales = [], []
    for step, boost in enumerate(boosts):
        model[1].boost = boost
        for o in opts:
            o.zero_grad()
        pipe.step(torch.randn(4, 4, generator=torch.Generator().manual_seed(step)),
                  torch.ones(4, 2))
        for o in opts:
            scaler.step(o)
        scaler.update()
        params.append([p.detach().clone() for c in model for p in c.parameters()])
        scales.append(scaler.get_scale())
    return params, scales


@pytest.mark.parametrize("scale", [2.0**16, 2.0**-20], ids=["overflow-scaled",
                                                            "overflow-unscaled"])
@pytest.mark.parametrize("stage_1", ["own-optimizer", "no-optimizer"])
def test_one_stage_overflowing_skips_every_stages_optimizer(scale, stage_1):
    # With one optimizer per stage in threads, step(stage 0's) found its own gradients finite
    # and stepped, though stage 1's had overflowed: a process per stage skips both.
    model, pipe = boosted()
    opts = [torch.optim.SGD(model[s].parameters(), lr=0.1) for s in pipe.stages]
    if stage_1 == "no-optimizer":  # its gradients are read, and left scaled
        opts = opts[:1]
    scaler = rrfp.GradScaler(pipe, init_scale=scale)
    before = [p.detach().clone() for c in model for p in c.parameters()]
    pipe.step(torch.randn(4, 4), torch.ones(4, 2))
    scaled = model[1].lin.weight.grad.clone()
    for o in opts:
        scaler.step(o)
    scaler.update()
    assert all(torch.equal(b, p) for b, p in zip(before, [p for c in model
                                                           for p in c.parameters()]))
    assert scaler.get_scale() == scale / 2
    inv = torch.tensor(scale, dtype=torch.float64).reciprocal().float()
    # Divided once, at its own optimizer's call, or not at all without one.
    expected = scaled * inv if stage_1 == "own-optimizer" else scaled
    assert torch.equal(model[1].lin.weight.grad, expected)


def test_one_optimizer_per_stage_trains_as_one_over_everything():
    # Step 0 overflows in stage 1 alone: every optimizer skips and the scale halves; the later
    # steps overflow nowhere and every stage steps. Stage 0 stepped on step 0.
    boosts = [1e38, 1.0, 1.0, 1.0]
    per_stage, scales = boosted_run(boosts, True, growth_interval=2)
    whole, whole_scales = boosted_run(boosts, False, growth_interval=2)
    assert scales == whole_scales == [2.0**15, 2.0**15, 2.0**16, 2.0**16]
    for a, b in zip(per_stage, whole):
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    for earlier, later in zip(per_stage, per_stage[1:]):  # every parameter moves
        assert not any(torch.equal(x, y) for x, y in zip(earlier, later))


@pytest.mark.parametrize("loss_fn", [
    lambda o, y: ce(o.detach(), y),
    lambda o, y: (o.argmax(1) == y).sum(),  # an integer count
    lambda o, y: torch.tensor(1.0),
], ids=["detached", "integer", "constant"])
def test_a_loss_without_gradient_history_blames_loss_fn_not_frozen_parameters(loss_fn):
    # It said "no parameter it came through requires grad ... unfreeze a parameter", of a
    # model whose every parameter requires grad.
    model = chunks()
    pipe = rrfp.Pipeline(model, loss_fn, pp=2, microbatches=2, progress=None)
    with pytest.raises(rrfp.StageError, match="loss_fn returned a loss without gradient "
                                              "history") as e:
        pipe.step(*data())
    assert "unfreeze" not in str(e.value)
    assert all(p.grad is None for c in model for p in c.parameters())


def test_a_frozen_model_still_says_to_unfreeze():
    model = chunks()
    for p in (p for c in model for p in c.parameters()):
        p.requires_grad_(False)
    pipe = rrfp.Pipeline(model, ce, pp=2, microbatches=2, progress=None)
    with pytest.raises(rrfp.StageError, match="no parameter it came through .* unfreeze"):
        pipe.step(*data())


@pytest.mark.parametrize("value,error", [
    (float("nan"), ValueError), (-1.0, ValueError), (math.inf, ValueError),
    (1e300, ValueError), (3601, ValueError), (10**400, ValueError),
    (True, TypeError), (torch.tensor(0.001), TypeError), ("0.1", TypeError),
], ids=lambda v: repr(v)[:12])
def test_a_delay_fn_returning_no_seconds_is_refused_by_name(value, error):
    # They reached time.sleep: NaN and -1 failed with its messages, inf and 1e300 overflowed,
    # a tensor failed as an index, True slept a second.
    pipe = rrfp.Pipeline(chunks(), ce, pp=2, microbatches=2, progress=None, timeout=30,
                         delay_fn=lambda *task: value)
    with pytest.raises(rrfp.StageError) as e:
        pipe.step(*data())
    cause = e.value.__cause__
    assert type(cause) is error and "delay_fn" in str(cause) and "3600" in str(cause)


@pytest.mark.parametrize("value", [0, 0.0, None, 0.001, 1, numpy.float32(0.002)], ids=repr)
def test_a_delay_fn_returning_seconds_runs(value):
    pipe = rrfp.Pipeline(chunks(), ce, pp=2, microbatches=2, progress=None, timeout=30,
                         delay_fn=lambda s, k, c, mb: value if (s, k, mb) == (0, "F", 0) else 0)
    assert torch.isfinite(pipe.step(*data()))
