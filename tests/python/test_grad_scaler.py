"""rrfp.GradScaler: loss scaling with torch.cuda.amp.GradScaler's rules, in threads here (a
process per stage: mp_scaler.py, run by multiprocess_pipeline.py).

A pipeline with a scaler trains bitwise as a plain loop with one: the scale starts so high
that the first steps overflow and are skipped, backs off, then grows after growth_interval
good steps; the losses come back unscaled; the state survives a checkpoint."""
import math

import pytest
import torch
from torch import nn

import rrfp

M, STEPS = 4, 8
# 2**126: the first steps' gradients overflow float32, so they are skipped and the scale
# backs off; growth_interval 2 then grows it again within the run.
SETTINGS = dict(init_scale=2.0**126, growth_interval=2)


def loss_fn(y, t):
    return ((y - t) ** 2).sum()


def chunks():
    torch.manual_seed(0)
    return [nn.Sequential(nn.Linear(8, 16), nn.Tanh()), nn.Sequential(nn.Linear(16, 16), nn.Tanh()),
            nn.Sequential(nn.Linear(16, 16), nn.Tanh()), nn.Linear(16, 8)]


def data(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)


def params(cs):
    return list(nn.Sequential(*cs).parameters())


def scaled_backward(model, x, y, m, scaler):
    """A plain loop's microbatches: each loss's scaled backward; returns the losses' sum."""
    total = None
    for xi, yi in zip(x.chunk(m), y.chunk(m)):
        h = xi
        for c in model:
            h = c(h)
        loss = loss_fn(h, yi)
        scaler.scale(loss).backward()
        total = loss.detach() if total is None else total + loss.detach()
    return total


def plain_loop(steps=STEPS, clip=None):
    model = chunks()
    opt = torch.optim.SGD(params(model), lr=0.01, momentum=0.9)
    scaler = rrfp.GradScaler(**SETTINGS)
    scales, losses = [], []
    for s in range(steps):
        opt.zero_grad(set_to_none=True)
        total = scaled_backward(model, *data(s), M, scaler)
        if clip is not None:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(params(model), clip)
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        losses.append(total)
    return model, scales, losses


def pipelined(steps=STEPS, clip=None, **kw):
    model = chunks()
    opt = torch.optim.SGD(params(model), lr=0.01, momentum=0.9)
    pipe = rrfp.Pipeline(model, loss_fn, pp=2, vpp=2, microbatches=M, timeout=60, **kw)
    scaler = rrfp.GradScaler(pipe, **SETTINGS)
    scales, losses = [], []
    for s in range(steps):
        opt.zero_grad(set_to_none=True)
        losses.append(pipe.step(*data(s)))
        if clip is not None:
            scaler.unscale_(opt)
            pipe.clip_grad_norm_(clip)
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    return model, scales, losses, (pipe, scaler, opt)


@pytest.mark.parametrize("hint,split,policy", [("bf", "off", "ready"), ("bfw", "on", "ready"),
                                               ("interleaved-1f1b", "off", "fixed")])
@pytest.mark.parametrize("clip", [None, 1.0])
def test_a_pipeline_with_a_scaler_trains_as_a_plain_loop_with_one(hint, split, policy, clip):
    ref, ref_scales, ref_losses = plain_loop(clip=clip)
    model, scales, losses, _ = pipelined(clip=clip, hint=hint, split_backward=split,
                                         policy=policy)
    # The run skipped steps, backed off and grew: the rules were exercised, not only one.
    steps = list(zip([SETTINGS["init_scale"]] + scales, scales))
    assert sum(b < a for a, b in steps) >= 2 and any(b > a for a, b in steps)
    assert scales == ref_scales
    for a, b in zip(losses, ref_losses):
        assert torch.equal(a, b)  # unscaled
    for p, q in zip(params(ref), params(model)):
        assert torch.equal(p, q)


def test_torchs_update_rule():
    """The scale after each step, by the rule written out: backoff on a step that found an
    inf, growth after growth_interval good ones, the tracker reset by either."""
    w = nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([w], lr=0.0)
    scaler = rrfp.GradScaler(init_scale=8.0, growth_factor=3.0, backoff_factor=0.25,
                             growth_interval=2)
    want, scale, tracker = [], 8.0, 0
    for g in [1.0, math.inf, 1.0, 1.0, 1.0, math.nan, 1.0, 1.0]:
        w.grad = torch.tensor([g])
        stepped = []
        opt.step = lambda *a, **k: stepped.append(1)  # noqa: B023
        scaler.step(opt)
        scaler.update()
        finite = math.isfinite(g)
        assert stepped == ([1] if finite else [])
        if not finite:
            scale, tracker = scale * 0.25, 0
        elif tracker + 1 == 2:
            scale, tracker = scale * 3.0, 0
        else:
            tracker += 1
        want.append(scale)
        assert scaler.get_scale() == scale
    assert want == [8.0, 2.0, 2.0, 6.0, 6.0, 1.5, 1.5, 4.5]


def test_unscale_divides_by_the_float32_reciprocal():
    w = nn.Parameter(torch.zeros(3))
    opt = torch.optim.SGD([w], lr=1.0)
    scaler = rrfp.GradScaler(init_scale=3.0)
    w.grad = torch.tensor([3.0, 1.0, -6.0])
    scaler.unscale_(opt)
    inv = torch.tensor([3.0], dtype=torch.float64).reciprocal().float()
    assert torch.equal(w.grad, torch.tensor([3.0, 1.0, -6.0]) * inv)


def test_a_checkpoint_keeps_the_scale(tmp_path):
    steps = 5
    model, scales, _, (pipe, scaler, opt) = pipelined(steps=steps)
    pipe.save(str(tmp_path / "ck"), opt)
    # Resume on another layout, with a fresh scaler: the saved scale and tracker come back.
    fresh = chunks()
    opt2 = torch.optim.SGD(params(fresh), lr=0.01, momentum=0.9)
    pipe2 = rrfp.Pipeline(fresh, loss_fn, pp=4, microbatches=M, timeout=60)
    scaler2 = rrfp.GradScaler(pipe2, **SETTINGS)
    pipe2.load(str(tmp_path / "ck"), opt2)
    assert scaler2.state_dict() == scaler.state_dict() and scaler2.get_scale() == scales[-1]
    for s in range(steps, STEPS):
        opt2.zero_grad(set_to_none=True)
        pipe2.step(*data(s))
        scaler2.step(opt2)
        scaler2.update()
    ref, ref_scales, _ = plain_loop()
    assert scaler2.get_scale() == ref_scales[-1]
    for p, q in zip(params(ref), params(fresh)):
        assert torch.equal(p, q)


def test_a_scaler_made_after_load_takes_the_saved_state(tmp_path):
    # It was dropped: the scale started over from init_scale, silently.
    _, _, _, (pipe, scaler, opt) = pipelined(steps=5)
    saved = scaler.state_dict()
    pipe.save(str(tmp_path / "ck"), opt, step=5)

    def resumed(folder, **kw):
        fresh = chunks()
        p = rrfp.Pipeline(fresh, loss_fn, pp=4, microbatches=M, timeout=60)
        o = torch.optim.SGD(params(fresh), lr=0.01, momentum=0.9)
        assert p.load(folder, o) == {"step": 5}
        return p, o
    pipe2, opt2 = resumed(str(tmp_path / "ck"))
    # Saved again before any scaler is made: the state goes on into the new checkpoint.
    pipe2.save(str(tmp_path / "again"), opt2, step=5)
    assert rrfp.GradScaler(pipe2, init_scale=3.0).state_dict() == saved
    pipe3, _ = resumed(str(tmp_path / "again"))
    assert rrfp.GradScaler(pipe3).state_dict() == saved
    pipe4, _ = resumed(str(tmp_path / "ck"))
    assert rrfp.GradScaler(pipe4, enabled=False).get_scale() == 1.0  # disabled: not scaling
    # A later load of a checkpoint without a scaler's state leaves none to take.
    pipe5, opt5 = resumed(str(tmp_path / "ck"))
    scaler._enabled = False  # its pipeline saves no scaler state
    pipe.save(str(tmp_path / "none"), opt, step=5)
    pipe5.load(str(tmp_path / "none"), opt5)
    assert rrfp.GradScaler(pipe5, init_scale=3.0).get_scale() == 3.0


def test_a_refused_scaler_state_changes_nothing():
    scaler = rrfp.GradScaler(init_scale=4.0, growth_interval=3)
    before = scaler.state_dict()
    good = dict(before, scale=8.0, _growth_tracker=1)
    for key, bad, error in (("growth_interval", 2.5, TypeError),
                            ("_growth_tracker", -1, ValueError),
                            ("backoff_factor", 2.0, ValueError), ("scale", "8", TypeError),
                            ("growth_factor", float("nan"), ValueError)):
        with pytest.raises(error, match=key.lstrip("_")):
            scaler.load_state_dict(dict(good, **{key: bad}))
        assert scaler.state_dict() == before, key
    with pytest.raises(TypeError, match="a dict"):
        scaler.load_state_dict([("scale", 1.0)])
    scaler.load_state_dict(dict(good, scale=torch.tensor(8.0), _growth_tracker=torch.tensor(1)))
    assert scaler.state_dict() == good


def _torchs_scalers():
    """(device, torch's GradScaler for it) where this torch has one that runs: CUDA's where a
    GPU is seen, the CPU's from torch 2.3 (torch.amp.GradScaler("cpu"))."""
    out = []
    amp_scaler = getattr(torch.amp, "GradScaler", None)
    if torch.cuda.is_available():  # torch.amp's where it has one: torch.cuda.amp's is deprecated
        out.append(("cuda", lambda **kw: amp_scaler("cuda", **kw)) if amp_scaler is not None
                   else ("cuda", lambda **kw: torch.cuda.amp.GradScaler(**kw)))
    if amp_scaler is not None:
        try:
            amp_scaler("cpu")
            out.append(("cpu", lambda **kw: amp_scaler("cpu", **kw)))
        except (RuntimeError, TypeError, ValueError):
            pass
    return out


@pytest.mark.parametrize("which", range(2))
def test_the_same_bits_as_torchs_grad_scaler(which):
    """A plain loop stepped by torch's GradScaler and by rrfp's: the same scales, parameters
    and momentum, through skipped steps and growth (float32 parameters; on CUDA under float16
    autocast)."""
    found = _torchs_scalers()
    if which >= len(found):
        pytest.skip("torch's GradScaler does not run here (torch 1.13 has none for the CPU, "
                    "and there is no GPU); scripts/gpu-check.sh runs this on CUDA")
    device, make = found[which]
    runs = []
    for scaler in (make(**SETTINGS), rrfp.GradScaler(**SETTINGS)):
        model = [c.to(device) for c in chunks()]
        opt = torch.optim.SGD(params(model), lr=0.01, momentum=0.9)
        scales = []
        for s in range(STEPS):
            opt.zero_grad(set_to_none=True)
            x, y = (t.to(device) for t in data(s))
            with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
                scaled_backward(model, x, y, M, scaler)
            scaler.step(opt)
            scaler.update()
            scales.append(float(scaler.get_scale()))
        runs.append((scales, params(model)))
    (want_scales, want), (got_scales, got) = runs
    assert got_scales == want_scales
    for p, q in zip(want, got):
        assert torch.equal(p, q)


@pytest.mark.parametrize("call", ["make", "update"])
def test_a_scaler_made_or_changed_while_a_step_runs_is_refused(call):
    # Made (or its scale set) from inside a task, or from another thread, during a step, the
    # scaler was taken at once: the later microbatches' losses alone were scaled, and no factor
    # recovered the gradients. Now it is refused, as a load or clip is.
    cs, ref = chunks(), chunks()
    errors, scaler = [], None

    def loss_and_call(y, t):
        try:
            rrfp.GradScaler(pipe) if call == "make" else scaler.update(new_scale=2.0)
        except RuntimeError as e:
            errors.append(str(e).split(":")[0])
        return loss_fn(y, t)

    pipe = rrfp.Pipeline(cs, loss_and_call, pp=4, microbatches=M)
    if call == "update":
        scaler = rrfp.GradScaler(pipe, init_scale=4.0)  # between steps: taken
    x, y = data(0)
    pipe.step(x, y)
    assert errors == [{"make": "GradScaler", "update": "update"}[call]] * M
    scale = 4.0 if call == "update" else 1.0
    for xm, ym in zip(x.chunk(M), y.chunk(M)):
        (loss_fn(nn.Sequential(*ref)(xm), ym) * scale).backward()
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(params(cs), params(ref)))


def test_a_loss_fn_that_scales_its_own_loss_is_refused():
    # As a plain loop's `scaler.scale(loss).backward()` would: the pipeline scales each loss
    # itself, and trained on the scale squared (16x the gradients at a scale of 4).
    scaler = None

    def scaled(y, t):
        return scaler.scale(loss_fn(y, t))

    pipe = rrfp.Pipeline(chunks(), scaled, pp=4, microbatches=M)
    scaler = rrfp.GradScaler(pipe, init_scale=4.0)
    with pytest.raises(rrfp.StageError, match="scale: the pipeline scales each microbatch's "
                                              "loss itself while its step runs"):
        pipe.step(*data(0))
