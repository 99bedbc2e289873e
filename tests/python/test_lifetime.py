"""A pipeline that nothing refers to any more is freed, threads and all, even where a cycle of
references runs through it: a GradScaler made for it, or a loss_fn that refers to it (a bound
method of a trainer holding it). The C++ half held its stage runners strongly, out of the
collector's sight, and every such pipeline stayed alive for good."""
import gc
import weakref

import pytest
import torch
from torch import nn

import lm
import rrfp


class Trainer:
    """Holds its pipeline and hands it its own loss: the pipeline refers back to it."""

    def __init__(self, scaler):
        torch.manual_seed(0)
        self.pipe = rrfp.Pipeline([nn.Sequential(nn.Linear(8, 8), nn.Tanh()), nn.Linear(8, 4)],
                                  self.loss, pp=2, microbatches=4, timeout=60)
        self.scaler = rrfp.GradScaler(self.pipe, enabled=False) if scaler else None

    def loss(self, y, t):
        return nn.functional.cross_entropy(y, t)


def batch():
    g = torch.Generator().manual_seed(1)
    return ([torch.randn(3, 8, generator=g) for _ in range(4)],
            [torch.randint(0, 4, (3,), generator=g) for _ in range(4)])


@pytest.mark.parametrize("scaler", [False, True], ids=["loss_fn", "scaler"])
def test_a_pipeline_in_a_cycle_is_freed_with_its_threads(scaler):
    gc.collect()
    before = lm.thread_ids()
    gone = []
    for _ in range(3):
        t = Trainer(scaler)
        t.pipe.step(*batch())
        gone.append(weakref.ref(t.pipe))
        del t
    gc.collect()
    assert [r() is None for r in gone] == [True] * 3
    assert not lm.threads_started_since(before)


def test_the_runners_live_as_long_as_the_pipeline():
    # The C++ half refers to the stage runners weakly now: the pipeline alone keeps them, and
    # a collection between steps takes nothing it still runs.
    pipe = Trainer(True).pipe  # its trainer lives on in its loss_fn
    first = pipe.step(*batch())
    gc.collect()
    assert torch.isfinite(first) and torch.isfinite(pipe.step(*batch()))
