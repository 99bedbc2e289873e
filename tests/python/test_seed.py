"""Pipeline(seed=S): dropout draws the same in every schedule and run, and what a plain loop
draws when it seeds each chunk's forward with rrfp.task_seed; checkpoints keep the step
count, so training on after load() draws as training on without the stop."""
import re
import threading
import time
import warnings

import pytest
import torch
from torch import nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import rrfp

SEED = 1234


class Block(nn.Module):
    def __init__(self, d_in, d_out, ckpt=False):
        super().__init__()
        self.f = nn.Sequential(nn.Linear(d_in, d_out), nn.Dropout(0.3), nn.ReLU())
        self.ckpt = ckpt

    def forward(self, x):
        return checkpoint(self.f, x, use_reentrant=False) if self.ckpt else self.f(x)


def chunks(ckpt=False):
    torch.manual_seed(0)
    return [Block(8, 16), Block(16, 16, ckpt), Block(16, 16), nn.Sequential(Block(16, 16),
                                                                          nn.Linear(16, 4))]


def loss_fn(y, t):
    return F.cross_entropy(y, t)


def data(step):
    g = torch.Generator().manual_seed(10 + step)
    return ([torch.randn(5, 8, generator=g) for _ in range(8)],
            [torch.randint(0, 4, (5,), generator=g) for _ in range(8)])


def plain_step(model, step):
    xs, ys = data(step)
    for mb, (x, y) in enumerate(zip(xs, ys)):
        h = x
        for c, chunk in enumerate(model):
            torch.manual_seed(rrfp.task_seed(SEED, step, c, mb))
            h = chunk(h)
        loss_fn(h, y).backward()


def grads(model):
    return [p.grad.clone() for c in model for p in c.parameters()]


def delay(stage, kind, chunk, mb):
    return 0.0004 * ((stage * 3 + mb) % 4)


SCHEDULES = [dict(hint="1f1b", policy="fixed"), dict(hint="bf"), dict(hint="bfw"),
             dict(hint="adaptive"), dict(hint="bf", vpp=2)]


@pytest.mark.parametrize("kw", SCHEDULES, ids=lambda k: "-".join(map(str, k.values())))
def test_every_schedule_draws_what_the_seeded_plain_loop_draws(kw):
    ref = chunks(ckpt=True)
    plain_step(ref, 0)
    plain_step(ref, 1)
    model = chunks(ckpt=True)
    vpp = kw.get("vpp", 1)
    pipe = rrfp.Pipeline(model, loss_fn, pp=4 // vpp, microbatches=8, seed=SEED, timeout=60,
                         delay_fn=delay, **kw)
    for s in range(2):
        pipe.step(*data(s))
    for a, b in zip(grads(model), grads(ref)):
        assert torch.equal(a, b)


def test_two_seeded_pipelines_stepping_at_once_in_threads_each_draw_their_own():
    # torch's generators are the process's: a lock per pipeline let one pipeline's tasks draw
    # from the other's seeds (gradients off by up to 2.0).
    import threading
    models = [chunks(), chunks()]
    pipes = [rrfp.Pipeline(m, loss_fn, pp=4, microbatches=8, seed=SEED, timeout=60,
                           delay_fn=delay) for m in models]
    failed = []

    def train(pipe):
        try:
            for s in range(2):
                pipe.step(*data(s))
        except BaseException as e:  # noqa: B036 (reported below)
            failed.append(e)

    threads = [threading.Thread(target=train, args=(p,)) for p in pipes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failed, failed
    ref = chunks()
    plain_step(ref, 0)
    plain_step(ref, 1)
    for model in models:
        assert all(torch.equal(a, b) for a, b in zip(grads(model), grads(ref)))


def test_unseeded_runs_draw_otherwise():
    ref = chunks()
    plain_step(ref, 0)
    model = chunks()
    rrfp.Pipeline(model, loss_fn, pp=4, microbatches=8, timeout=60).step(*data(0))
    assert not all(torch.equal(a, b) for a, b in zip(grads(model), grads(ref)))


def test_a_checkpoint_keeps_the_step_count(tmp_path):
    straight = chunks()
    pipe = rrfp.Pipeline(straight, loss_fn, pp=4, microbatches=8, seed=SEED, timeout=60)
    for s in range(3):
        pipe.step(*data(s))
    first = chunks()
    pipe = rrfp.Pipeline(first, loss_fn, pp=4, microbatches=8, seed=SEED, timeout=60)
    for s in range(2):
        pipe.step(*data(s))
    pipe.save(str(tmp_path / "ck"), step=2)
    resumed = chunks()
    pipe = rrfp.Pipeline(resumed, loss_fn, pp=4, microbatches=8, seed=SEED, timeout=60)
    assert pipe.load(str(tmp_path / "ck")) == {"step": 2}
    for c in resumed:  # .grad as the first run left it: the steps add onto it
        for p, q in zip(c.parameters(), first[resumed.index(c)].parameters()):
            p.grad = q.grad.clone()
    pipe.step(*data(2))
    for a, b in zip(grads(resumed), grads(straight)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("bad,error", [(-1, ValueError), (2**64, ValueError),
                                       (2**64 + 5, ValueError), (1.5, TypeError),
                                       ("7", TypeError), (True, TypeError)])
def test_a_bad_seed_is_refused(bad, error):
    # "7" and True were ValueErrors: a wrong type is a TypeError, as for every argument. A seed
    # of 2**64 or more was taken modulo 2**64: seed=2**64 drew what seed=0 draws.
    with pytest.raises(error, match=r"seed: a whole number in 0\.\.2\*\*64-1 or None, got"):
        rrfp.Pipeline(chunks(), loss_fn, pp=4, microbatches=8, seed=bad)


def test_the_largest_seed_is_taken():
    pipe = rrfp.Pipeline(chunks(), loss_fn, pp=4, microbatches=8, seed=2**64 - 1)
    pipe.step(*data(0))
    assert rrfp.task_seed(2**64 - 1, 0, 0, 0) != rrfp.task_seed(0, 0, 0, 0)


@pytest.mark.parametrize("args,error,match", [
    ((-1, 0, 0, 0), ValueError, r"task_seed: seed: a whole number in 0\.\.2\*\*64-1, got -1"),
    (("a", 0, 0, 0), TypeError, r"task_seed: seed: a whole number in 0\.\.2\*\*64-1, got str"),
    ((2**64, 0, 0, 0), ValueError, "task_seed: seed: .* got 18446744073709551616"),
    ((1, 2**64 + 3, 0, 0), ValueError, "task_seed: step: .* got 18446744073709551619"),
    ((1, True, 0, 0), TypeError, "task_seed: step: .* got bool True"),
    ((1, 0, -2, 0), ValueError, "task_seed: chunk: .* got -2"),
    ((1, 0, 2**64, 0), ValueError, "task_seed: chunk: .* got 18446744073709551616"),
    ((1, 0, 0, 0.5), TypeError, "task_seed: mb: .* got float 0.5"),
    ((1, 0, 0, 2**65), ValueError, "task_seed: mb: .* got 36893488147419103232"),
])
def test_task_seed_refuses_what_the_pipeline_would(args, error, match):
    # task_seed(-1, ...) gave a seed no pipeline draws from (seed=-1 is refused), and
    # task_seed("a", ...) failed on its "&", naming no argument. Past 2**64-1 an argument was
    # masked down: task_seed(2**64, 0, 0, 0) was task_seed(0, 0, 0, 0).
    with pytest.raises(error, match=match):
        rrfp.task_seed(*args)


def test_task_seed_takes_numpy_integers():
    # The step or microbatch of a NumPy loop counter was a TypeError.
    import numpy as np
    want = rrfp.task_seed(SEED, 3, 1, 5)
    assert rrfp.task_seed(np.uint64(SEED), np.int64(3), np.int32(1), np.int8(5)) == want
    assert type(rrfp.task_seed(SEED, np.int64(3), 1, 5)) is int


def test_task_seeds_differ_and_fit_in_63_bits():
    seen = {rrfp.task_seed(SEED, s, c, mb) for s in range(4) for c in range(4) for mb in range(8)}
    assert len(seen) == 128
    assert all(0 <= v < 2 ** 63 for v in seen)


def test_a_checkpoint_loaded_under_another_seed_says_so(tmp_path):
    # The seed is saved with the step count: a resume under another seed= (or none) draws
    # other dropout than the run it continues, which it did without a word.
    pipe = rrfp.Pipeline(chunks(), loss_fn, pp=4, microbatches=8, seed=SEED, timeout=60)
    pipe.step(*data(0))
    pipe.save(str(tmp_path / "ck"))
    for other in (SEED + 1, None):
        again = rrfp.Pipeline(chunks(), loss_fn, pp=4, microbatches=8, seed=other, timeout=60)
        with pytest.warns(RuntimeWarning, match=rf"saved by a pipeline with seed={SEED}, this "
                          rf"one has seed={other}: the dropout it draws"):
            again.load(str(tmp_path / "ck"))
    same = rrfp.Pipeline(chunks(), loss_fn, pp=4, microbatches=8, seed=SEED, timeout=60)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same.load(str(tmp_path / "ck"))


def test_a_seeded_task_waits_while_the_generators_change_hands():
    # The wait's limit counts from the last change of hands: tasks holding them in turn for
    # 0.3 s each while this one waits 1.2 s with a limit of 0.9 s is progress, not a hang (a
    # limit on the whole wait failed steps of pp=4 whose tasks each took a third of the
    # timeout). One task holding them past the limit is a hang, reported. Other tasks' turns are
    # counted as take_generators counts them (_TAKEN), by the thread that holds the lock.
    from rrfp import _seed
    taken = threading.Event()

    def hold(turns, seconds):
        assert _seed.take_generators(30)
        taken.set()
        for _ in range(turns):
            time.sleep(seconds)
            _seed._TAKEN[0] += 1  # as the next task's take would count it
        time.sleep(seconds)
        _seed._GENERATORS.release()

    for turns, hold_s, limit, gets in ((3, 0.3, 0.9, True), (0, 1.8, 0.9, False)):
        taken.clear()
        holder = threading.Thread(target=hold, args=(turns, hold_s))
        holder.start()
        assert taken.wait(10)
        start = time.monotonic()
        got = _seed.take_generators(limit)
        waited = time.monotonic() - start
        if got:
            _seed._GENERATORS.release()
        holder.join(30)
        assert got == gets, (turns, waited)
        assert waited >= (1.0 if gets else limit), (turns, waited)


def test_a_task_of_its_own_pipeline_holding_the_generators_past_the_timeout_is_waited_for():
    # The holder runs past the pipeline's timeout, which its watchdog reports, naming it: the
    # waiter's own report raced it (2 steps in 6), a StageError blaming an innocent task and a
    # nesting that was not there. A holder of another pipeline is still reported, named.
    from rrfp import _seed
    ours, theirs = object(), object()
    for owner, gets in ((ours, True), (theirs, False)):
        taken = threading.Event()

        def hold():
            assert _seed.take_generators(30)
            _seed._HOLDER[0] = (ours, "F c1 m1")
            taken.set()
            time.sleep(1.2)
            _seed._HOLDER[0] = None
            _seed._GENERATORS.release()

        holder = threading.Thread(target=hold)
        holder.start()
        assert taken.wait(10)
        start = time.monotonic()
        got = _seed.take_generators(0.4, owner)
        waited = time.monotonic() - start
        if got:
            _seed._GENERATORS.release()
        holder.join(30)
        assert got == gets, waited
        assert waited >= (0.9 if gets else 0.4), waited


def test_a_seeded_task_running_past_the_timeout_is_the_watchdogs_timeout_error():
    class Slow(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.armed = torch.nn.Linear(4, 4), False

        def forward(self, x):
            if self.armed and x.shape[0] == 2:  # microbatch 1
                time.sleep(1.5)
            return self.lin(x)

    for attempt in range(2):
        torch.manual_seed(attempt)
        parts = [torch.nn.Linear(4, 4), Slow(), torch.nn.Linear(4, 4)]
        pipe = rrfp.Pipeline(parts, loss_fn, pp=3, microbatches=4, timeout=0.5, seed=7)
        xs = [torch.randn(k + 1, 4) for k in range(4)]
        pipe.step(xs, xs)
        parts[1].armed = True
        with pytest.raises(TimeoutError, match=r"no progress for \d+ ms .*running F c1 m1"):
            pipe.step(xs, xs)


@pytest.mark.parametrize("seed,turn", [
    (None, "its turn: a pipeline's first step runs its tasks one at a time"),
    (7, "its turn at torch's generators, which seeded tasks take one at a time"),
])
def test_the_stuck_report_says_which_tasks_only_wait_their_turn(seed, turn):
    # Tasks waiting for the generators (seeded), or for their turn in an unseeded pipeline's
    # first step, were reported running "for 500 ms" beside the one task that was slow.
    class Slow(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            if x.shape[0] == 2:  # microbatch 1
                time.sleep(1.5)
            return self.lin(x)

    waiting = 0
    for attempt in range(3):  # another stage reaches its turn microseconds after the slow one
        torch.manual_seed(attempt)
        parts = [Slow(), torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)]
        pipe = rrfp.Pipeline(parts, loss_fn, pp=3, microbatches=4, timeout=0.5, seed=seed)
        xs = [torch.randn(k + 1, 4) for k in range(4)]
        with pytest.raises(TimeoutError) as got:
            pipe.step(xs, xs)
        running = re.findall(r"running (\w c\d m\d) for \d+ ms( \(waiting for [^)]*\))?",
                             str(got.value))
        assert ("F c0 m1", "") in running, str(got.value)
        for task, note in running:
            assert task == "F c0 m1" or note.startswith(f" (waiting for {turn}"), str(got.value)
        waiting += len(running) - 1
        if waiting:
            break
    assert waiting, "no task waited for its turn in 3 steps"
