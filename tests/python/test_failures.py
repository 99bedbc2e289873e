"""Failure paths of rrfp.Pipeline: each ends in the right Python exception, promptly, with no
.grad changed, no thread left behind, and a pipeline that still works afterwards."""
import gc
import os
import signal
import threading

import pytest
import torch
from torch import nn

import lm
import ports
import rrfp


class Raises(nn.Module):
    def __init__(self, inner, when):
        super().__init__()
        self.inner = inner
        self.when = when
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.when(self.calls):
            raise ValueError("bad microbatch")
        return self.inner(x)


def test_a_module_that_raises_names_stage_and_task_and_chains_the_original():
    base = lm.thread_ids()
    chunks = lm.chunks(2)
    chunks[1] = Raises(chunks[1], lambda n: n == 6)  # the second step's second microbatch
    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=2, microbatches=4)
    xs, ys = lm.batches(4)
    pipe.step(xs, ys)  # calls 1..4 pass
    before = lm.grads(chunks)
    with pytest.raises(rrfp.StageError, match=r"stage 1: task F c1 m\d failed: .*bad microbatch") as e:
        pipe.step(xs, ys)
    assert isinstance(e.value.__cause__, ValueError)
    assert lm.same_grads(before, lm.grads(chunks)), "a failed step changed .grad"
    pipe.step(xs, ys)  # the pipeline recovers
    del pipe
    assert not lm.threads_started_since(base)


@pytest.mark.parametrize("fails_in", ["loss", "timeout"])
def test_a_failed_step_lets_go_of_its_activations_at_once(fails_in):
    # They stayed alive, with each task's exception, until the next step: 144 MiB for a
    # model of 64 MiB, which a caller that catches the error (out of memory) wants back.
    import gc
    import weakref

    class Kept(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.outputs = nn.Linear(8, 8), []

        def forward(self, x):
            y = self.lin(x)
            self.outputs.append(weakref.ref(y))
            return y

    def loss(y, t):
        if fails_in == "loss" and y.shape[0] == 3:  # the last microbatch
            raise ValueError("bad microbatch")
        return ((y - t) ** 2).sum()

    def delay(stage, kind, chunk, mb):
        return 3.0 if fails_in == "timeout" and (kind, mb) == ("B", 3) else 0.0

    chunks = [Kept(), Kept(), nn.Linear(8, 8)]
    # `timeout` 1 s: at 0.3 s a machine busy elsewhere could stall the step before its third
    # forward (the timeout it allows, but not the count of outputs below).
    pipe = rrfp.Pipeline(chunks, loss, pp=3, microbatches=4, hint="gpipe", policy="fixed",
                         timeout=1, delay_fn=delay)
    rows = (4, 4, 4, 3)  # the last microbatch is told by its 3 rows
    xs, ts = [torch.randn(n, 8) for n in rows], [torch.randn(n, 8) for n in rows]
    error, match = (rrfp.StageError, "task F c2 m3 failed: ValueError: bad microbatch") \
        if fails_in == "loss" else (TimeoutError, r"no progress for \d+ ms .*running B c2 m3")
    with pytest.raises(error, match=match):
        pipe.step(xs, ts)
    gc.collect()
    alive = [r for c in chunks[:2] for r in c.outputs if r() is not None]
    assert len(chunks[0].outputs) >= 3 and not alive, f"{len(alive)} activations alive"


def test_a_stalled_stage_is_a_timeout_naming_the_running_task():
    chunks = lm.chunks(2)

    def delay(stage, kind, chunk, mb):
        return 3.0 if (stage, kind, mb) == (1, "F", 1) else 0.0

    # `timeout` 1 s, not 0.3: a stall of the machine's own must not be the one named.
    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=2, microbatches=4, timeout=1, delay_fn=delay)
    xs, ys = lm.batches(4)
    # The watchdog's TimeoutError, naming the task, shows what ended the step. (Python code
    # cannot be interrupted: the step ends when the running task returns.)
    with pytest.raises(TimeoutError, match=r"no progress .*\(`timeout` 1 s\).*running F c1 m1"):
        pipe.step(xs, ys)


def test_wrong_outputs_are_stage_errors():
    chunks = lm.chunks(2)
    chunks[0] = nn.Sequential(chunks[0], nn.Linear(32, 16))  # the next chunk expects width 32
    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=2, microbatches=2)
    xs, ys = lm.batches(2)
    with pytest.raises(rrfp.StageError, match=r"stage 1: task F c1 m\d") as e:
        pipe.step(xs, ys)
    assert isinstance(e.value.__cause__, RuntimeError)

    class Pair(nn.Module):
        def forward(self, x):
            return x, x

    # A pair reaches the next chunk as a pair (structures cross boundaries); a chunk that wants
    # a tensor then fails in its own code, named by stage and task.
    pipe = rrfp.Pipeline([nn.Sequential(lm.chunks(2)[0], Pair()), lm.chunks(2)[1]], lm.loss_fn,
                         pp=2, microbatches=2)
    with pytest.raises(rrfp.StageError, match=r"stage 1: task F c1 m\d failed"):
        pipe.step(xs, ys)


@pytest.mark.parametrize("kwargs,match", [
    (dict(hint="nope"), "unknown hint 'nope'"),
    (dict(pp=0), "pp"),
    (dict(microbatches=0), "microbatches"),
    (dict(policy="sometimes"), "policy"),
    (dict(limit=-1), "limit"),
    (dict(timeout=-1), "timeout"),
    # Before any group is made with it (under torchrun, inf raised an OverflowError and NaN
    # "cannot convert float NaN to integer", naming no argument).
    (dict(timeout=float("nan")), "timeout: must be between 0 and 86400 seconds, got nan"),
    (dict(timeout=float("inf"), transport="c10d"), "timeout: must be between 0 and 86400"),
    (dict(arrival_timeout=-1), "arrival_timeout: must be between 0 and 86400 seconds, got -1"),
    (dict(arrival_timeout=float("nan"), transport="c10d"), "arrival_timeout: must be between"),
    (dict(hint="bfw", split_backward="off"), "bfw: needs `split_backward` on"),
    (dict(transport="carrier-pigeon"), "transport"),
])
def test_bad_arguments_are_value_errors(kwargs, match):
    args = dict(pp=2, microbatches=4)
    args.update(kwargs)
    n = max(args["pp"], 1)
    with pytest.raises(ValueError, match=match):
        rrfp.Pipeline(lm.chunks(n), lm.loss_fn, **args)


@pytest.mark.parametrize("kwargs,match", [
    (dict(delay_fn=3), "delay_fn must be callable or None, got int"),
    (dict(timeout="a"), "timeout: seconds as a number, got str"),
    (dict(arrival_timeout=None), "arrival_timeout: seconds as a number, got NoneType"),
    (dict(loss_fn=None), "loss_fn must be callable"),
    (dict(microbatches=2.5), "microbatches: a whole number, got float 2.5"),
    (dict(pp=True), "pp: a whole number, got bool"),
])
def test_arguments_of_the_wrong_type_are_type_errors(kwargs, match):
    args = dict(pp=2, microbatches=4, loss_fn=lm.loss_fn)
    args.update(kwargs)
    with pytest.raises(TypeError, match=match):
        rrfp.Pipeline(lm.chunks(2), args.pop("loss_fn"), **args)


def test_srun_with_several_tasks_is_refused(monkeypatch):
    """srun starting four tasks of a script: each would have trained the whole model in threads,
    four trainings writing one checkpoint folder. Refused, naming the ways that work; one task
    (an interactive srun on a node) and transport='inproc' run in threads."""
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "4")
    with pytest.raises(ValueError, match="srun started 4 tasks.*mpirun.*torchrun.*inproc"):
        rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=4)
    rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=4, transport="inproc")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "1")
    rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=4)


def test_wrong_numbers_of_chunks_and_microbatches_are_value_errors():
    with pytest.raises(ValueError, match=r"expected pp \* vpp = 4 modules, got 2"):
        rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, vpp=2)
    pipe = rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=4)
    xs, ys = lm.batches(3)
    with pytest.raises(ValueError, match="expected 4 microbatches, got 3"):
        pipe.step(xs, ys)


def test_zero_replicas_or_w_cap_are_value_errors():
    with pytest.raises(ValueError, match=r"`dp`: must be at least 1 \(one replica"):
        rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, dp=0)
    with pytest.raises(ValueError, match="max_pending_w: must be a whole number of at least 1"):
        rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, hint="bfw", max_pending_w=-1)



def test_a_limit_under_the_fixed_policy_is_refused_not_ignored():
    # The fixed policy runs its list: limit=1 under gpipe held 4 activations a stage, unsaid.
    with pytest.raises(ValueError, match=r"limit: bounds what the ready policy holds; the "
                       r"fixed policy runs the hint's order.*limit=1 with policy='fixed'"):
        rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, hint="gpipe", policy="fixed", limit=1)
    with pytest.raises(ValueError, match=r"max_pending_w: .*max_pending_w=2 with policy='fixed'"):
        rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, hint="zb-h1", policy="fixed",
                      max_pending_w=2)
    rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, hint="gpipe", policy="ready", limit=1)
    # Nor is there a W task to cap where the backward is not split.
    with pytest.raises(ValueError, match=r"max_pending_w: caps the W tasks a split backward "
                       r"defers; this pipeline's backward is whole \(split_backward='auto' with "
                       r"hint='bf'"):
        rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, hint="bf", max_pending_w=2)
    rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, hint="bfw", max_pending_w=2)


def test_a_tuple_batch_is_refused_not_read_as_microbatches():
    # (x, mask), as torch.distributed.pipelining's step takes a batch of several tensors: with
    # microbatches=2 it ran x as microbatch 0 and mask as microbatch 1, without a word.
    pipe = rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=2)
    x = torch.randint(0, 64, (4, 8))
    with pytest.raises(TypeError, match=r"inputs: got a tuple; give a list of 2 microbatches"):
        pipe.step((x, x.clone()), [x[:2], x[2:]])
    with pytest.raises(TypeError, match=r"targets: got a tuple.*tensor_split\(2\)"):
        pipe.step([x[:2], x[2:]], (x[:2], x[2:]))
    pipe.step([x[:2], x[2:]], [x[:2], x[2:]])  # a list: fine


def test_ctrl_c_stops_a_step_cleanly():
    chunks = lm.chunks(2)
    started = []  # each task as it starts (delay_fn runs first in every task)

    def delay(stage, kind, chunk, mb):
        started.append((stage, kind, mb))
        return 0.2

    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=2, microbatches=8, delay_fn=delay)
    xs, ys = lm.batches(8)
    before = lm.grads(chunks)
    ctrl_c = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    ctrl_c.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            pipe.step(xs, ys)
    finally:  # a step failing early must not leave the Ctrl-C to the next test
        ctrl_c.cancel()
        ctrl_c.join()
    # The step stopped: of its 32 tasks (2 stages x 8 microbatches x F and B, 0.2 s each, ~3.2 s
    # in all) not all started. A Ctrl-C seen only once the step ended would let all 32 start.
    assert len(started) < 32, started
    assert lm.same_grads(before, lm.grads(chunks))
    pipe.step(xs, ys)


def test_batches_that_do_not_split_evenly_or_match_are_refused():
    pipe = rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=4)
    x = torch.randint(0, 64, (10, 8))
    with pytest.raises(ValueError, match="10 rows does not split evenly into 4 microbatches"):
        pipe.step(x, x)
    with pytest.raises(ValueError, match="inputs: a tensor of no dimensions .a scalar. has no "
                                         "dimension 0 to split into 4 microbatches"):
        pipe.step(torch.tensor(1.0), x)
    with pytest.raises(ValueError, match=r"inputs: an empty batch \(0 rows\) has no row for any "
                                         "of its 4 microbatches"):
        pipe.step(x[:0], x[:0])
    with pytest.raises(ValueError, match="inputs and targets: 8 and 12 rows"):
        pipe.step(torch.randint(0, 64, (8, 8)), torch.randint(0, 64, (12, 8)))
    pipe.step(torch.randint(0, 64, (8, 8)), torch.randint(0, 64, (8, 8)))  # even: fine
    # Inputs in microbatches of chosen sizes, targets whole: their even split would give
    # microbatch k other rows' targets, which a loss that broadcasts takes without a word.
    sizes = [1, 1, 2, 4]
    listed = [torch.randint(0, 64, (k, 8)) for k in sizes]
    with pytest.raises(ValueError, match=r"targets: one batch, split evenly into microbatches "
                                         r"of \[2, 2, 2, 2\] rows, but the inputs came as a "
                                         r"list of microbatches of \[1, 1, 2, 4\] rows"):
        pipe.step(listed, torch.randint(0, 64, (8, 8)))
    with pytest.raises(ValueError, match="inputs: one batch"):
        pipe.step(torch.randint(0, 64, (8, 8)), listed)
    pipe.step([torch.randint(0, 64, (2, 8))] * 4, torch.randint(0, 64, (8, 8)))  # rows agree


def test_a_microbatch_that_cannot_be_pickled_is_still_checked():
    # A lambda in a microbatch's dict made its tensors unfound: 1-row inputs then trained
    # against 2-row targets, broadcast by the loss, without a word.
    class First(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(4, 4)

        def forward(self, mb):
            return self.l(mb["x"])
    pipe = rrfp.Pipeline([First(), nn.Linear(4, 4)], lambda o, t: ((o - t) ** 2).mean(), pp=2,
                         microbatches=2, timeout=60)
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    with pytest.raises(ValueError, match="rows"):
        pipe.step([{"x": x[:1], "t": lambda: 0}, {"x": x[1:2], "t": lambda: 0}], y)


class Masked(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, t):
        x, mask = t
        return self.l(x) * mask


def test_microbatches_of_tuples_against_one_batch_count_their_rows():
    # The rows of (x, mask) were not counted: a loss taking means ran microbatch 0's 1 row
    # against 2 rows of targets without a word.
    def loss(out, y):
        return ((out.mean(0) - y.mean(0)) ** 2).sum()

    pipe = rrfp.Pipeline([Masked(), nn.Linear(4, 4)], loss, pp=2, microbatches=4)
    listed = [(torch.randn(k, 4), torch.ones(k, 1)) for k in (1, 3, 2, 2)]
    with pytest.raises(ValueError, match=r"targets: one batch, split evenly into microbatches "
                                         r"of \[2, 2, 2, 2\] rows, but the inputs came as a "
                                         r"list of microbatches of \[1, 3, 2, 2\] rows"):
        pipe.step(listed, torch.randn(8, 4))
    even = [(torch.randn(2, 4), torch.ones(2, 1)) for _ in range(4)]
    pipe.step(even, torch.randn(8, 4))  # rows agree
    # Tensors of a microbatch that disagree on their rows tell none: not refused.
    odd = [(torch.randn(2, 4), torch.ones(1, 1)) for _ in range(4)]
    pipe.step(odd, torch.randn(8, 4))


def test_a_long_step_shows_its_progress_and_erases_it(capsys):
    chunks = lm.chunks(2)
    xs, ys = lm.batches(4, seed=0)
    pipe = rrfp.Pipeline(chunks, lm.loss_fn, pp=2, microbatches=4, timeout=60, progress=0.05,
                         delay_fn=lambda *_: 0.05)  # 16 tasks, each at least 50 ms
    pipe.step(xs, ys)
    err = capsys.readouterr().err
    assert "rrfp: step 0: " in err and "/16 tasks" in err, err
    assert err.endswith("\r"), repr(err[-80:])  # erased: the prompt comes back clean
    quiet = rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=4, timeout=60,
                          progress=None, delay_fn=lambda *_: 0.02)
    quiet.step(xs, ys)
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="progress"):
        rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, progress=-1)


def test_a_chunk_wrapped_in_distributed_data_parallel_is_refused(tmp_path):
    # DDP's all-reduce runs from hooks on accumulation into .grad, which a stage's
    # autograd.grad never does: its replicas would train apart, silently.
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/rendezvous", rank=0,
                            world_size=1)
    try:
        wrapped = torch.nn.parallel.DistributedDataParallel(nn.Linear(4, 4))
        inner = nn.Sequential(nn.Linear(4, 4), wrapped)
        for chunks, where in (([wrapped, nn.Linear(4, 4)], "chunk 0 holds a Distributed"),
                              ([nn.Linear(4, 4), inner], "chunk 1 holds a DistributedDataParallel "
                                                         "\\(at '1'\\)")):
            with pytest.raises(ValueError, match=where + ".*dp=N"):
                rrfp.Pipeline(chunks, lambda o, t: o.sum(), pp=2, microbatches=2,
                              transport="inproc")
        # Wrapped after the pipeline was built, out of the construction's sight: refused at the
        # first step (the replicas trained apart, silently), and gone, the step runs.
        chunks = [nn.Linear(4, 4), nn.Linear(4, 4)]
        pipe = rrfp.Pipeline(chunks, lambda o, t: o.sum(), pp=2, microbatches=2)
        later = torch.nn.parallel.DistributedDataParallel(chunks[1])
        with pytest.raises(ValueError, match="chunk 1 is wrapped in a DistributedDataParallel "
                                             "made outside the pipeline.*dp=N"):
            pipe.step(torch.ones(4, 4), torch.zeros(4, 4))
        del later
        gc.collect()
        pipe.step(torch.ones(4, 4), torch.zeros(4, 4))
        # A group given to a pipeline that runs in threads was taken and ignored.
        with pytest.raises(ValueError, match="group: the processes of a c10d pipeline; "
                                             "transport='inproc' takes none"):
            rrfp.Pipeline([nn.Linear(4, 4)] * 2, lambda o, t: o.sum(), pp=2, microbatches=2,
                          transport="inproc", group=dist.group.WORLD)
    finally:
        dist.destroy_process_group()


def test_lazy_parameters_not_initialized_yet_are_refused():
    # They would draw their initial values at each chunk's first forward, in an order a plain
    # loop does not share; after one forward on a sample they are ordinary parameters.
    chunks = [nn.Sequential(nn.LazyLinear(4)), nn.Linear(4, 4)]
    with pytest.raises(ValueError, match="chunk 0 has a parameter not initialized yet "
                                         "\\('0.weight'"):
        rrfp.Pipeline(chunks, lambda o, t: o.sum(), pp=2, microbatches=2)
    chunks[0](torch.randn(1, 3))
    pipe = rrfp.Pipeline(chunks, lambda o, t: o.sum(), pp=2, microbatches=2)
    pipe.step(torch.randn(4, 3), torch.zeros(4))
    assert chunks[0][0].weight.grad is not None
    # A lazy buffer alone draws nothing, but load() could not fill it before its first forward.
    chunks = [nn.Sequential(nn.Linear(3, 4), nn.LazyBatchNorm1d(affine=False)), nn.Linear(4, 4)]
    with pytest.raises(ValueError, match="chunk 0 has a buffer not initialized yet "
                                         "\\('1.running_mean'"):
        rrfp.Pipeline(chunks, lambda o, t: o.sum(), pp=2, microbatches=2)


def test_a_process_group_that_never_forms_fails_within_the_timeout():
    # torch.distributed's environment of 2 processes, set by hand (no torchrun): the c10d
    # transport (each process ran the whole pipeline in threads), and the peer that never comes
    # is reported within the pipeline's arrival_timeout (torch's default kept it waiting 30
    # minutes).
    import subprocess
    import sys
    port = ports.free_port()  # a port nothing listens on (a taken one fails otherwise)
    env = dict(os.environ, RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port),
               PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in sys.path if p))
    env.pop("TORCHELASTIC_RUN_ID", None)
    code = ("import rrfp, lm\n"
            "rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=4, timeout=1,\n"
            "              arrival_timeout=2)\n")
    # subprocess.run's timeout bounds a hang; the message shows the 2 s join timeout ended it.
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120, cwd=os.path.dirname(os.path.abspath(__file__)))
    assert done.returncode != 0
    # The store's address and the rank that never came are named.
    assert "transport c10d: the 2 processes of the job did not all join the store at " \
        f"127.0.0.1:{port} (MASTER_ADDR:MASTER_PORT) within 2 s (arrival_timeout, or timeout " \
        "where longer)" in \
        done.stderr, done.stderr[-2000:]
    assert "rank(s) [1] did not join the store" in done.stderr, done.stderr[-2000:]


def test_a_pause_between_steps_longer_than_the_timeout_is_no_failure(tmp_path):
    # Two processes in torch.distributed's environment, timeout 6 s, 8 s between their steps
    # (an evaluation, a checkpoint): the timeout bounds the joining and a stalled step, not
    # the group's operations, whose messages wait between steps (the next step failed). Both
    # have imported torch before either builds its Pipeline (a file each in tmp_path), so a
    # loaded machine's slow import does not spend the timeout of the joining; 6 s, not 2: a
    # process starved for 2 s on a loaded machine (ctest runs others beside it) failed there.
    import subprocess
    import sys
    port = ports.free_port()
    code = ("import os, time, rrfp, lm\n"
            f"open(os.path.join({str(tmp_path)!r}, os.environ['RANK']), 'w').close()\n"
            "end = time.monotonic() + 60\n"
            f"while len(os.listdir({str(tmp_path)!r})) < 2 and time.monotonic() < end:\n"
            "    time.sleep(0.01)\n"
            "pipe = rrfp.Pipeline(lm.chunks(2), lm.loss_fn, pp=2, microbatches=2, timeout=6)\n"
            "x, y = lm.batches(2, seed=0)\n"
            "pipe.step(x, y)\n"
            "time.sleep(8)\n"
            "pipe.step(x, y)\n"
            "print('both steps', flush=True)\n")
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   PYTHONPATH=os.pathsep.join(os.path.abspath(p) for p in sys.path if p))
        env.pop("TORCHELASTIC_RUN_ID", None)
        procs.append(subprocess.Popen([sys.executable, "-c", code], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      cwd=os.path.dirname(os.path.abspath(__file__))))
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and "both steps" in out, err[-2000:]


def test_an_exception_whose_text_cannot_be_made_says_so():
    # Its __str__ raising, the step's error read "E: ", the text just missing.
    class E(Exception):
        def __str__(self):
            raise ValueError("no text")

    class Raises(nn.Module):
        def forward(self, x):
            raise E()

    pipe = rrfp.Pipeline([nn.Linear(4, 4), Raises()], lambda y, t: ((y - t) ** 2).mean(), pp=2,
                         microbatches=2, timeout=60)
    with pytest.raises(rrfp.StageError, match=r"failed: E: \(its text could not be made: its "
                                              r"__str__ raised ValueError\)"):
        pipe.step(torch.randn(4, 4), torch.randn(4, 4))
