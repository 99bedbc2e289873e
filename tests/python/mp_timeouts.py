"""Under torchrun (2 processes, P=2), the pipeline's timeouts and Gloo's.

First, a process that comes to a step later than the pipeline's arrival_timeout: the other
raises within it, naming it (late_to_a_call).

Then pauses between steps longer than the pipeline's timeout (a script that evaluates or saves
between steps), on both processes and on one alone: the steps go on, so no group whose waits
outlast a step was made with the pipeline's timeout, and the processes wait for each other at a
call up to arrival_timeout (one pausing alone used to fail the other's next step). (The
pipeline's receives stay posted between steps, and Gloo fails a wait at its group's timeout and
closes every connection of the group: a pause past torch's 30 minutes failed every later step;
test_c10d_groups.py checks that the messages' groups are made with a timeout outlasting any
pause.)

Then a script that catches a step's TimeoutError and goes on, then ends. Stage 1's first
forward outlasts the pipeline's timeout, so each process leaves that step on its own
TimeoutError at its own time; the later steps may go on (the next waits for the late process)
or fail (where Gloo closed a group in the failed step; documented). The test is the process's
end: a gather left running in Gloo ended only at its
group's own timeout (torch's 30 minutes), and the interpreter's exit waited for it; now the
gathers run on groups whose timeout is the pipeline's, and the job ends within seconds (the
test's own timeout, far below 30 minutes, fails it otherwise)."""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest  # noqa: F401,E402  (the package path)
import lm  # noqa: E402
import rrfp  # noqa: E402

TIMEOUT_S, PAUSE_S, STALL_S, STEPS = 2, 3, 5, 3
ARRIVAL_S, LATE_S = 1.5, 3.5  # late_to_a_call's


class Stalled(torch.nn.Module):
    """`inner`, whose forward sleeps STALL_S seconds first when `armed`."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.armed = inner, False

    def forward(self, x):
        if self.armed:
            self.armed = False
            time.sleep(STALL_S)
        return self.inner(x)


class _SleepInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, seconds):
        ctx.seconds = seconds
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.seconds)
        return grad, None


class SlowLastBackward(torch.nn.Module):
    """`inner`, whose second backward of a step sleeps STALL_S seconds when `armed`."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.armed, self.calls = inner, False, 0

    def forward(self, x):
        self.calls += 1
        slow = self.armed and self.calls % 2 == 0  # microbatch 1's: the step's last backward
        if slow:
            self.armed = False
        return _SleepInBackward.apply(self.inner(x), STALL_S if slow else 0)


def late_to_a_call(rank):
    pipe = rrfp.Pipeline(lambda i: lm.chunks(2)[i], lm.loss_fn, pp=2, microbatches=2, timeout=1,
                         arrival_timeout=ARRIVAL_S)
    xs, ys = lm.batches(2, seed=0)
    if rank == 1:
        time.sleep(LATE_S)
    start = time.monotonic()
    try:
        pipe.step(xs, ys)
    except RuntimeError as e:
        took = time.monotonic() - start
        if rank == 0:
            assert "came to the call later than `arrival_timeout`" in str(e), e
            assert took < LATE_S - 1, f"rank 0 waited {took:.1f} s for rank 1"
    else:
        raise AssertionError(f"rank {rank}: a step went on with a process {LATE_S} s late")
    print(f"rank {rank}: a process {LATE_S} s late to a step with arrival_timeout={ARRIVAL_S} "
          "fails it", flush=True)


def main():
    rank = int(os.environ["RANK"])
    late_to_a_call(rank)
    stalled = {}

    def build(i):
        chunk = lm.chunks(2)[i]
        if i == 1:
            stalled["chunk"] = chunk = Stalled(chunk)
        return chunk
    pipe = rrfp.Pipeline(build, lm.loss_fn, pp=2, microbatches=2, hint="1f1b", policy="fixed",
                         timeout=TIMEOUT_S)
    for s in range(STEPS):
        xs, ys = lm.batches(2, seed=s)
        assert float(pipe.step(xs, ys)) > 0
        time.sleep(PAUSE_S)
    print(f"rank {rank}: {STEPS} steps with pauses of {PAUSE_S} s", flush=True)
    if rank == 0:  # alone: the other waits for it at the step's first gather
        time.sleep(PAUSE_S)
    assert float(pipe.step(*lm.batches(2, seed=STEPS))) > 0
    print(f"rank {rank}: a step after rank 0 paused {PAUSE_S} s alone", flush=True)
    if rank == 1:
        stalled["chunk"].armed = True
    failed = []
    for s in range(STEPS):
        xs, ys = lm.batches(2, seed=s)
        try:
            pipe.step(xs, ys)
        except (TimeoutError, RuntimeError) as e:
            failed.append((s, type(e).__name__))
    # The stalled step fails on both: stage 0 waits for stage 1's output past the timeout,
    # stage 1 runs its stalled forward past it, and whichever watchdog fires first may tell
    # the other (a TimeoutError, or the peer's failure); what the later steps raise depends on
    # when each process left.
    assert failed and failed[0][0] == 0, (rank, failed)
    print(f"rank {rank}: steps failed {failed}", flush=True)
    out_of_step_on_a_callers_group(rank)
    print(f"rank {rank}: leaving", flush=True)


def out_of_step_on_a_callers_group(rank):
    """A group of the caller's keeps a collective given up after `timeout` posted (its own
    timeout is torch's 30 minutes): the next collective of a peer paired with it, and every
    step after was refused as if the processes' batches differed. Now the process that gave it
    up refuses each later step at once, naming it; the other waits for it at its next call
    (a gather over a caller's group waits the group's timeout) and fails when it ends."""
    import torch.distributed as dist
    group = dist.new_group([0, 1], backend="gloo")
    slow = SlowLastBackward(lm.chunks(2)[0])

    def build(i):
        return slow if i == 0 else lm.chunks(2)[i]
    pipe = rrfp.Pipeline(build, lm.loss_fn, pp=2, microbatches=2, timeout=TIMEOUT_S,
                         group=group)
    assert float(pipe.step(*lm.batches(2, seed=0))) > 0
    # Stage 0's last backward outlasts the timeout: stage 1, done with its part, gives up the
    # step's closing gather, which stage 0 then comes to.
    slow.armed = rank == 0
    said = []
    for s in range(3):
        try:
            pipe.step(*lm.batches(2, seed=s))
            said.append("ok")
        except (TimeoutError, RuntimeError) as e:
            said.append(str(e))
    assert "ok" not in said[1:] and "different inputs" not in " ".join(said), (rank, said)
    ends = "out of step on the `group` given" if rank == 1 else "failed (one exited"
    assert ends in said[-1], (rank, said)
    print(f"rank {rank}: after a collective given up on a group of the caller's, the steps "
          "are refused as out of step", flush=True)


if __name__ == "__main__":
    main()
