"""rrfp.simulate's `limit` and `max_pending_w` refused where `rrfp simulate` and rrfp.Pipeline
refuse them (they were taken and ignored), its counts' messages giving the range the core
takes, and Pipeline taking a NumPy integer for a bound as rrfp.simulate does (and 0 for
the default, as the command does)."""
import pytest
import torch
from torch import nn

import rrfp

SHAPE = dict(pp=2, microbatches=4, workload="uniform", seed=1)


@pytest.mark.parametrize("kwargs,match", [
    (dict(hint="1f1b", policy="fixed", limit=3),
     r"^limit: bounds what the ready policy holds; the fixed policy runs the hint's order.*"
     r"\(got limit=3 with policy='fixed'\)$"),
    (dict(hint="1f1b", policy="fixed", max_pending_w=3),
     r"^max_pending_w: .*\(got max_pending_w=3 with policy='fixed'\)$"),
    (dict(hint="zb-h1", policy="fixed", split_backward="on", max_pending_w=2),
     r"^max_pending_w: .*with policy='fixed'"),
    (dict(hint="bf", split_backward="off", max_pending_w=2),
     r"^`max_pending_w`: caps the W tasks a split backward defers; `split_backward` off keeps "
     r"the backward whole here, so there are none \(got 2; give `split_backward` on"),
    # Adaptive runs unsplit: its cap is refused. A hint that cannot is refused for itself, as
    # the command refuses it (the cap was blamed).
    (dict(hint="adaptive", split_backward="off", max_pending_w=2),
     r"^`max_pending_w`: caps the W tasks a split backward defers; `split_backward` off"),
    (dict(hint="bfw", split_backward="off", max_pending_w=2),
     r"^`hint` bfw: needs `split_backward` on$"),
    (dict(hint="1f1b", max_pending_w=2),  # auto: 1f1b keeps it whole
     r"^`max_pending_w`: .*`split_backward` auto keeps the backward whole here \(it splits it "
     r"for zb-\*, bfw"),
])
def test_a_bound_the_run_ignores_is_refused_naming_it(kwargs, match):
    with pytest.raises(ValueError, match=match):
        rrfp.simulate(**SHAPE, **kwargs)


def test_the_bounds_still_run_where_they_bind():
    # The default (0) under the fixed policy, and each bound under the ready one.
    fixed = rrfp.simulate(**SHAPE, hint="1f1b", policy="fixed", limit=0, max_pending_w=0)
    assert fixed.makespan > 0
    assert rrfp.simulate(**SHAPE, hint="1f1b", policy="ready", limit=2).makespan > 0
    assert rrfp.simulate(**SHAPE, hint="bf", split_backward="on", max_pending_w=2).makespan > 0
    assert rrfp.simulate(**SHAPE, hint="bfw", max_pending_w=1).makespan > 0  # auto splits


@pytest.mark.parametrize("kwargs,match", [
    (dict(limit=2**31), r"^limit: a whole number in 0\.\.2147483647 \(0: the default\), got "
                        r"2147483648$"),
    (dict(limit=-1), r"^limit: a whole number in 0\.\.2147483647"),
    (dict(max_pending_w=-2**31 - 1), r"^max_pending_w: a whole number in 0\.\.2147483647"),
    (dict(pp=0), r"^pp: a whole number in 1\.\.2147483647, got 0$"),
    (dict(vpp=2**31), r"^vpp: a whole number in 1\.\.2147483647, got 2147483648$"),
    (dict(microbatches=-1), r"^microbatches: a whole number in 1\.\.2147483647, got -1$"),
    (dict(tp=0), r"^tp: a whole number in 1\.\.1024, got 0$"),
    (dict(tp=2**31), r"^tp: a whole number in 1\.\.1024, got 2147483648$"),
])
def test_a_count_out_of_range_names_the_range_the_core_takes(kwargs, match):
    # limit=2**31 said "a whole number in -2147483648..2147483647", where -1 was refused too.
    args = dict(pp=2, microbatches=2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        rrfp.simulate(**args)
    if set(kwargs) <= {"pp", "vpp", "microbatches"}:
        with pytest.raises(ValueError, match=match):
            rrfp.schedule(**args)


def chunks():
    torch.manual_seed(0)
    return [nn.Linear(4, 4), nn.Linear(4, 4)]


def loss_fn(out, target):
    return ((out - target) ** 2).sum()


def test_pipeline_takes_a_numpy_bound_as_simulate_does():
    # Pipeline(limit=np.int64(2)) was a TypeError, where rrfp.simulate took it.
    np = pytest.importorskip("numpy")
    rrfp.Pipeline(chunks(), loss_fn, pp=2, microbatches=2, limit=np.int64(2),
                  max_pending_w=np.int32(1), hint="bfw")
    with pytest.raises(ValueError, match=r"^limit: bounds what the ready policy holds.*"
                                         r"\(got limit=2 with policy='fixed'\)$"):
        rrfp.Pipeline(chunks(), loss_fn, pp=2, microbatches=2, hint="1f1b", policy="fixed",
                      limit=np.int64(2))
    with pytest.raises(ValueError, match="limit: must be a whole number of at least 1"):
        rrfp.Pipeline(chunks(), loss_fn, pp=2, microbatches=2, limit=np.int64(-1))
    for bad in (np.bool_(True), True, 2.0, np.float64(2)):
        with pytest.raises(TypeError, match="limit: a whole number or None"):
            rrfp.Pipeline(chunks(), loss_fn, pp=2, microbatches=2, limit=bad)


def test_zero_bounds_are_the_default_and_counts_take_numpy_integers():
    # Pipeline refused 0, which the command and rrfp.simulate take as the default (and
    # rrfp.simulate refused None, Pipeline's); a NumPy count was a TypeError in Pipeline only.
    import numpy as np
    zero = rrfp.Pipeline(chunks(), loss_fn, pp=np.int64(2), microbatches=np.int32(4),
                         hint="bfw", limit=0, max_pending_w=0)
    none = rrfp.Pipeline(chunks(), loss_fn, pp=2, microbatches=4, hint="bfw")
    xs = [torch.randn(2, 4) for _ in range(4)]
    ys = [torch.randn(2, 4) for _ in range(4)]
    assert zero.step(xs, ys).item() == none.step(xs, ys).item()
    assert rrfp.simulate(limit=None, max_pending_w=None, hint="bfw").makespan == \
        rrfp.simulate(hint="bfw").makespan
