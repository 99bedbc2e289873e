"""Calls that meet a step running in another thread, or from inside one of its tasks: a second
step of the same pipeline, a step of another pipeline over the same parameters, a seeded
pipeline asked from a seeded task (directly or through a thread it starts), and a step from
inside a task. Each is refused or fails promptly, naming why, where it crashed the interpreter,
dropped gradients silently or hung."""
import re
import threading
import time

import pytest
import torch
from torch import nn

import lm
import rrfp


def slow_first_forward():
    """(an Event set once a step's tasks have begun, an Event that lets them go on, a delay_fn
    that holds the step at its first forward until then): for a call made while a step runs in
    another thread. A hold of 50 ms let a loaded machine finish the step before the call."""
    started, go = threading.Event(), threading.Event()

    def slow(stage, kind, chunk, mb):
        if (kind, mb) == ("F", 0):
            started.set()
            go.wait(30)
        return 0.0

    return started, go, slow


def test_a_second_step_while_one_runs_is_refused_not_a_crash():
    # From another thread: the second call raises RuntimeError at once; the first finishes and
    # is right. (Both ran into one runtime before and crashed the interpreter.)
    chunks = lm.chunks(2)
    started, go, slow = slow_first_forward()
    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=2, microbatches=4, delay_fn=slow)
    xs, ys = lm.batches(4)
    out = {}
    first = threading.Thread(target=lambda: out.setdefault("loss", pipe.step(xs, ys)))
    first.start()
    try:
        assert started.wait(10)
        with pytest.raises(RuntimeError, match="another step of this pipeline is running"):
            pipe.step(xs, ys)
    finally:
        go.set()
    first.join(30)
    assert not first.is_alive()
    assert torch.equal(out["loss"], lm.reference_step(lm.chunks(2), xs, ys))
    pipe.step(xs, ys)  # and the pipeline goes on


def test_pipelines_sharing_parameters_do_not_step_at_once():
    # Each step writes .grad whole as it ends: of two overlapping steps over the same modules,
    # the later write dropped the other's gradients, silently. The second is refused, changing
    # nothing; one after the other they add as two plain loops do.
    chunks = lm.chunks(2)
    started, go, slow = slow_first_forward()
    first = rrfp.Pipeline(chunks, lm.loss_fn, pp=2, microbatches=4, delay_fn=slow)
    second = rrfp.Pipeline(chunks, lm.loss_fn, pp=2, microbatches=4)
    xs, ys = lm.batches(4)
    worker = threading.Thread(target=lambda: first.step(xs, ys))
    worker.start()
    try:
        assert started.wait(10)
        with pytest.raises(RuntimeError, match=r"step: parameter '.*' of chunk 0 is trained by "
                                               r"a step of another rrfp.Pipeline running now"):
            second.step(xs, ys)
    finally:
        go.set()
    worker.join(30)
    assert not worker.is_alive()
    second.step(xs, ys)
    ref = lm.chunks(2)
    lm.reference_step(ref, xs, ys)
    lm.reference_step(ref, xs, ys)
    assert lm.same_grads(lm.grads(chunks), lm.grads(ref))


def test_a_seeded_pipeline_called_from_a_seeded_task_is_refused_not_a_hang():
    # A distillation's loss_fn asking a seeded teacher: the teacher's tasks waited for torch's
    # generators, held by the calling task until it ended, which it never did; both timeouts
    # and Ctrl-C went unheard.
    teacher = rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=2, seed=1, timeout=5)
    xs, _ = lm.batches(2)

    def distill(out, target):
        teacher.eval_step(xs)
        return lm.loss_fn(out, target)

    student = rrfp.Pipeline(lm.chunks(2), distill, pp=2, microbatches=2, seed=2, timeout=5)
    with pytest.raises(rrfp.StageError, match="eval_step\\(\\): called from inside a task of a "
                                              "pipeline with a seed"):
        student.step(*lm.batches(2))
    unseeded = rrfp.Pipeline(lm.chunks(2), distill, pp=2, microbatches=2, timeout=5)
    unseeded.step(*lm.batches(2))  # one of the two without a seed: allowed


def test_pipelines_sharing_only_frozen_parameters_step_at_once():
    # A frozen backbone shared by two tasks' pipelines: a step writes no .grad for it, so the
    # two may overlap (refused as a conflict at first).
    backbone = nn.Linear(8, 8)
    backbone.requires_grad_(False)
    started, go, slow = slow_first_forward()
    heads = [nn.Linear(8, 4), nn.Linear(8, 4)]
    def mse(y, t):
        return ((y - t) ** 2).sum()

    first = rrfp.Pipeline([backbone, heads[0]], mse, pp=2, microbatches=2, delay_fn=slow)
    second = rrfp.Pipeline([backbone, heads[1]], mse, pp=2, microbatches=2)
    x, t = torch.randn(4, 8), torch.randn(4, 4)
    worker = threading.Thread(target=lambda: first.step(x, t))
    worker.start()
    try:
        assert started.wait(10)
        second.step(x, t)  # while the first is held at its first forward
    finally:
        go.set()
    worker.join(30)
    assert backbone.weight.grad is None and all(h.weight.grad is not None for h in heads)


def test_a_seeded_pipeline_reached_through_a_thread_of_a_seeded_task_times_out():
    # The refusal sees the task's own thread only; through a thread the task starts, the
    # teacher's tasks waited for the generators for good, deaf to both timeouts.
    teacher = rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=2, seed=1, timeout=1)
    xs, _ = lm.batches(2)

    failed = []

    def ask_teacher():
        try:
            teacher.eval_step(xs)
        except (TimeoutError, rrfp.StageError) as e:
            failed.append(e)

    def distill(out, target):
        worker = threading.Thread(target=ask_teacher, daemon=True)
        worker.start()
        worker.join(20)
        return lm.loss_fn(out, target)

    student = rrfp.Pipeline(lm.chunks(2), distill, pp=2, microbatches=2, seed=2, timeout=1)
    began = time.monotonic()
    # The student's task waits for the teacher's thread: its watchdog's report, or the teacher's
    # failure where that came first.
    with pytest.raises((TimeoutError, rrfp.StageError),
                       match=r"no progress for \d+ ms|torch's generators were held by task"):
        student.step(*lm.batches(2))
    assert time.monotonic() - began < 15 and failed
    # The teacher's wait for the generators, or its watchdog, which saw the same wait.
    assert re.search(r"torch's generators were held by task [FBW] c\d m\d of another seeded "
                     r"pipeline|running F c0 m0 for \d+ ms \(waiting for its turn at torch's "
                     "generators", str(failed[0])), failed[0]


def test_a_step_from_inside_a_task_fails_that_task_at_once():
    # A delay_fn that calls step() again: that task fails (RuntimeError chained), well within
    # the timeout, where it hung for over 100 s.
    holder = {}

    def reenter(stage, kind, chunk, mb):
        if (stage, kind, mb) == (1, "F", 2):
            holder["pipe"].step(*lm.batches(4))
        return 0.0

    pipe = rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=4, delay_fn=reenter,
                         timeout=5)
    holder["pipe"] = pipe
    # The task's own StageError, not the watchdog's TimeoutError, ended the step.
    with pytest.raises(rrfp.StageError, match="stage 1: task F c1 m2 failed") as e:
        pipe.step(*lm.batches(4))
    assert isinstance(e.value.__cause__, RuntimeError)
