"""Failures at a step's edges. A step that fails in two stages at once raises the StageError
of the task the runtime saw fail first, with that task's own exception as its cause (it chained
the first one Python recorded, another stage's in 8 of 60 such steps). A Ctrl-C while the step
writes .grad is raised once every .grad is written (it left some written and the rest not)."""
import os
import re
import signal
import sys
import threading
import time

import pytest
import torch
from torch import nn

import rrfp
import rrfp._step as step_module
from rrfp._step_data import StepData


def test_the_cause_is_the_task_the_message_names():
    data = StepData(loss_fn=None, delay_fn=None)
    first, second = ValueError("stage 0's"), ValueError("stage 1's")
    data.record(0, "F c0 m1", first)
    data.record(1, "F c1 m0", second)
    assert data.error_named_by("stage 1: task F c1 m0 failed: ValueError: stage 1's") is second
    assert data.error_named_by("stage 0: task F c0 m1 failed: ValueError: stage 0's") is first
    # A message naming no task recorded here (a peer's): the first recorded.
    assert data.error_named_by("stage 3 (job rank 3) failed step 0: ...") is first


def test_two_stages_failing_at_once_give_one_task_in_message_and_cause():
    for i in range(12):
        torch.manual_seed(0)
        chunks = [nn.Linear(4, 4), nn.Linear(4, 4)]

        def delay(stage, kind, chunk, mb, i=i):
            if kind == "F" and (stage, mb) in ((0, 1), (1, 0)):
                time.sleep(0.001 * (i % 3))
                raise ValueError(f"from stage {stage} F m{mb}")
            return 0

        pipe = rrfp.Pipeline(chunks, lambda y, t: ((y - t) ** 2).mean(), pp=2, microbatches=4,
                             delay_fn=delay, timeout=60)
        g = torch.Generator().manual_seed(i)
        try:
            pipe.step(torch.randn(8, 4, generator=g), torch.randn(8, 4, generator=g))
        except rrfp.StageError as e:
            cause = str(e.__cause__)
            assert cause.startswith("from stage ") and cause in str(e), (str(e), cause)
        else:
            raise AssertionError("the step did not fail")


def test_ctrl_c_while_the_gradients_are_written_is_raised_once_all_are(monkeypatch):
    torch.manual_seed(0)
    chunks = [nn.Sequential(*[nn.Linear(4, 4) for _ in range(4)]), nn.Linear(4, 4)]
    ref = [nn.Sequential(*[nn.Linear(4, 4) for _ in range(4)]), nn.Linear(4, 4)]
    for a, b in zip(ref, chunks):
        a.load_state_dict(b.state_dict())
    g = torch.Generator().manual_seed(5)
    x, t = torch.randn(8, 4, generator=g), torch.randn(8, 4, generator=g)
    for xm, tm in zip(x.tensor_split(4), t.tensor_split(4)):
        ((ref[1](ref[0](xm)) - tm) ** 2).mean().backward()
    written, set_grad = [], step_module.set_grad

    def interrupted(p, grad):  # Ctrl-C as the third of ten gradients is written
        set_grad(p, grad)
        written.append(p)
        if len(written) == 3:
            os.kill(os.getpid(), signal.SIGINT)
    monkeypatch.setattr(step_module, "set_grad", interrupted)
    pipe = rrfp.Pipeline(chunks, lambda y, t: ((y - t) ** 2).mean(), pp=2, microbatches=4,
                         timeout=60)
    try:
        pipe.step(x, t)
    except KeyboardInterrupt as e:
        assert "the step had completed" in str(e)
    else:
        raise AssertionError("no KeyboardInterrupt")
    assert len(written) == 10
    for a, b in zip(ref, chunks):
        assert all(torch.equal(p.grad, q.grad) for p, q in zip(a.parameters(), b.parameters()))


def test_ctrl_c_while_a_failing_write_runs_is_still_raised(monkeypatch):
    # A Ctrl-C held during the write of .grad, then the write failing: the interrupt was
    # dropped, and the program went on past it with the write's error alone.
    calls = []
    set_grad = step_module.set_grad

    def failing(p, grad):
        calls.append(p)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        if len(calls) == 3:
            raise MemoryError("out of memory writing .grad")
        set_grad(p, grad)
    monkeypatch.setattr(step_module, "set_grad", failing)
    torch.manual_seed(0)
    pipe = rrfp.Pipeline([nn.Linear(4, 4), nn.Linear(4, 4)], lambda y, t: ((y - t) ** 2).mean(),
                         pp=2, microbatches=2, timeout=60)
    try:
        pipe.step(torch.randn(4, 4), torch.randn(4, 4))
    except KeyboardInterrupt as e:
        assert "could not all be written" in str(e)
        assert isinstance(e.__cause__, MemoryError)
    else:
        raise AssertionError("no KeyboardInterrupt")


class Exits(nn.Module):
    """A chunk whose forward ends the program on its third microbatch."""

    def __init__(self):
        super().__init__()
        self.lin, self.calls = nn.Linear(4, 4), 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 3:
            sys.exit("stop requested")
        return self.lin(x)


def test_sys_exit_in_a_task_leaves_the_step_as_systemexit():
    # As in a plain loop: it came as a StageError (a RuntimeError), and a training loop that
    # catches those went on past the exit.
    torch.manual_seed(0)
    pipe = rrfp.Pipeline([nn.Linear(4, 4), Exits()], lambda y, t: y.sum(), pp=2, microbatches=4,
                         timeout=60, progress=None)
    before = [p.grad for p in pipe.chunks[1].parameters()]
    with pytest.raises(SystemExit) as e:
        pipe.step([torch.randn(2, 4) for _ in range(4)])
    assert e.value.code == "stop requested"
    assert not isinstance(e.value, RuntimeError)
    assert "stage 1: task F c1 m2 failed" in "".join(getattr(e.value, "__notes__", []))
    assert [p.grad for p in pipe.chunks[1].parameters()] == before  # no gradient written


def test_eval_step_refuses_a_loss_that_is_no_tensor():
    # It failed as "AttributeError: 'float' object has no attribute 'detach'".
    torch.manual_seed(0)
    pipe = rrfp.Pipeline([nn.Linear(4, 4), nn.Linear(4, 4)],
                         lambda y, t: float(((y - t) ** 2).mean()), pp=2, microbatches=2,
                         timeout=60, progress=None)
    xs = [torch.randn(2, 4) for _ in range(2)]
    with pytest.raises(rrfp.StageError) as e:
        pipe.eval_step(xs, xs)
    assert isinstance(e.value.__cause__, TypeError)
    assert "loss_fn must return a tensor, got float" in str(e.value.__cause__)
    # A step's loss must have one element; an evaluation's may have any shape.
    pipe = rrfp.Pipeline([nn.Linear(4, 4), nn.Linear(4, 4)], lambda y, t: (y - t) ** 2, pp=2,
                         microbatches=2, timeout=60, progress=None)
    assert pipe.eval_step(xs, xs) is not None
    with pytest.raises(rrfp.StageError) as e:
        pipe.step(xs, xs)
    assert isinstance(e.value.__cause__, ValueError)  # a tensor, of the wrong shape
    assert "loss_fn must return a tensor with one element, got shape (2, 4)" in str(
        e.value.__cause__)


def same_as_a_plain_loop(make, between=None):
    """Whether two steps of a two-stage pipeline over make()'s chunks leave the gradients two
    plain loops leave; between(chunks, step) runs before each step, and what it returns (a
    function, or None) after it."""
    def run(pipelined):
        torch.manual_seed(0)
        chunks = make()
        pipe = rrfp.Pipeline(chunks, lambda y, t: y.sum(), pp=2, microbatches=2, timeout=60,
                             progress=None)
        xs = [torch.randn(2, 4, generator=torch.Generator().manual_seed(i)) for i in range(2)]
        for step in range(2):
            after = between(chunks, step) if between is not None else None
            if pipelined:
                pipe.step(xs)
            else:
                for x in xs:
                    chunks[1](chunks[0](x)).sum().backward()
            if after is not None:
                after()
        return [p.grad for c in chunks for p in c.parameters()]

    return all(torch.equal(a, b) for a, b in zip(run(True), run(False)))


class Probed(nn.Module):
    """A chunk whose forward trains a probe of its own with backward() on a detached input, and
    may, wrongly for a pipeline, also backward() through its own layer."""

    def __init__(self, through=False):
        super().__init__()
        self.lin, self.probe, self.through = nn.Linear(4, 4), nn.Linear(4, 1), through

    def forward(self, x):
        h = self.lin(x)
        self.probe((h if self.through else h.detach())).pow(2).sum().backward(
            retain_graph=self.through)
        return h


def test_a_backward_in_a_forward_keeps_what_it_wrote_where_the_step_adds_nothing():
    # The step wrote back each .grad's value at its start where its backward added nothing:
    # from the second step on (a .grad then there), the probe never trained.
    def zero(chunks, step):
        for c in chunks:
            c.zero_grad(set_to_none=False)

    assert same_as_a_plain_loop(lambda: [Probed(), nn.Linear(4, 4)], zero)


def test_a_backward_in_a_forward_through_what_the_step_trains_is_refused():
    # Its gradients were overwritten by the step's, silently.
    torch.manual_seed(0)
    chunks = [Probed(through=True), nn.Linear(4, 4)]
    pipe = rrfp.Pipeline(chunks, lambda y, t: y.sum(), pp=2, microbatches=2, timeout=60,
                         progress=None)
    xs = [torch.randn(2, 4) for _ in range(2)]
    with pytest.raises(rrfp.StageError) as e:
        pipe.step(xs)
    assert "chunk 0's 'lin.weight': its .grad changed during the step" in str(e.value.__cause__)
    assert chunks[1].weight.grad is None  # the step wrote nothing


def test_a_parameter_hook_registered_during_a_step_is_refused():
    # The step ran the hooks each parameter had as it began: a hook registered in a forward ran
    # on no microbatch of that step, and a hook removing itself as it ran went on running.
    class Hooking(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            box = []
            box.append(self.lin.weight.register_hook(lambda g: (box[0].remove(), g * 0.5)[1]))
            return self.lin(x)

    torch.manual_seed(0)
    chunks = [Hooking(), nn.Linear(4, 4)]
    pipe = rrfp.Pipeline(chunks, lambda y, t: y.sum(), pp=2, microbatches=2, timeout=60,
                         progress=None)
    with pytest.raises(rrfp.StageError) as e:
        pipe.step([torch.randn(2, 4) for _ in range(2)])
    assert "chunk 0's 'lin.weight': its hooks changed during the step" in str(e.value.__cause__)
    assert chunks[1].weight.grad is None  # the step wrote nothing
    # Hooks registered between steps run as a plain loop runs them.
    def halve_first_step(chunks, step):
        return chunks[0].weight.register_hook(lambda g: g * 0.5).remove if step == 0 else None

    assert same_as_a_plain_loop(lambda: [nn.Linear(4, 4), nn.Linear(4, 4)], halve_first_step)


def test_an_in_place_module_put_first_between_steps_gets_a_copy_of_its_input():
    # Whether a chunk begins in place was found once, as the pipeline was built: one put first
    # later failed as a chunk that changes its input otherwise (it is an nn.Sequential that
    # begins with it), where a plain loop runs it.
    def put_first(chunks, step):
        if step == 1:
            chunks[1].insert(0, nn.LeakyReLU(0.1, inplace=True))

    assert same_as_a_plain_loop(
        lambda: [nn.Sequential(nn.Linear(4, 4)), nn.Sequential(nn.Linear(4, 4))], put_first)


class Unwanting(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)

    def forward(self, x):
        x.requires_grad_(False)  # a plain loop refuses: x is the previous chunk's output there
        return self.l(x)


@pytest.mark.parametrize("hint", ["bf", "bfw"])
def test_a_chunk_turning_off_its_inputs_requires_grad_is_refused_as_in_a_plain_loop(hint):
    # The chunk receives a leaf, which takes requires_grad_(False): the earlier chunks got no
    # gradient through it, silently.
    x = torch.randn(4, 4)
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf variables"):
        Unwanting()(nn.Linear(4, 4)(x))
    chunks = [nn.Linear(4, 4), Unwanting()]
    pipe = rrfp.Pipeline(chunks, lambda o, y: o.sum(), pp=2, microbatches=2, hint=hint)
    with pytest.raises(rrfp.StageError, match="chunk 1 set requires_grad=False on a tensor it "
                                              r"receives \(x.requires_grad_\(False\), or "
                                              r"x.detach_\(\)\)"):
        pipe.step(x)
    assert chunks[0].weight.grad is None


def test_a_failed_step_waiting_for_a_running_task_says_so(capsys):
    # Python code cannot be interrupted: a step whose timeout passed waits for its running task,
    # and one that never returned (a forward waiting for a lock the caller holds) hung without
    # a word, the timeout's report never shown. After 5 s of waiting the step says why.
    release = threading.Event()

    class Waiting(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(4, 4)

        def forward(self, x):
            release.wait(60)
            return self.l(x)

    pipe = rrfp.Pipeline([nn.Linear(4, 4), Waiting()], lambda o, y: o.sum(), pp=2,
                         microbatches=2, timeout=1)
    timer = threading.Timer(12, release.set)  # the report comes after ~6 s (1 + 5)
    timer.start()
    try:
        with pytest.raises(TimeoutError, match=r"no progress for \d+ ms"):
            pipe.step(torch.randn(4, 4))
    finally:
        release.set()
        timer.cancel()
        timer.join()  # a timer still ending counted as the next test's thread (its base)
    err = capsys.readouterr().err
    assert re.search(r"rrfp: step 0 failed \(no progress for \d+ ms", err), err
    assert "waits for its threads to end, a task still running? Python code cannot be " \
        "interrupted" in err


@pytest.mark.parametrize("text,shown", [
    ("cannot read caf\udce9.bin", r"cannot read caf\udce9.bin"),  # os.listdir's lone surrogate
    ("with\x00nul", r"with\x00nul"),
])
def test_a_tasks_message_in_any_characters_is_kept(text, shown):
    # A lone surrogate lost the task's type and text to pybind's "Unable to cast Python instance
    # to C++ type"; a NUL cut the message there.
    class Raises(nn.Module):
        def forward(self, x):
            raise ValueError(text)

    pipe = rrfp.Pipeline([nn.Linear(4, 4), Raises()], lambda y, t: ((y - t) ** 2).sum(), pp=2,
                         microbatches=2)
    x = torch.randn(4, 4)
    with pytest.raises(rrfp.StageError) as got:
        pipe.step(x, x)
    assert str(got.value) == f"stage 1: task F c1 m0 failed: ValueError: {shown}"
    assert isinstance(got.value.__cause__, ValueError) and str(got.value.__cause__) == text
