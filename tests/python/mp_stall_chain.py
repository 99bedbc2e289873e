"""Under torchrun (3 processes, P=3), a stall whose cause is two processes away: stage 2's first
forward (5 s) outlasts stage 0's timeout (2 s; the others' is a minute), so stage 0 times out
waiting on stage 1, which waits on stage 2. Before it raises, stage 0 asks stage 1 what it waits for
and then stage 2, over the pipeline's c10d messages, and its TimeoutError ends with that chain,
naming the task stage 2 runs (it named stage 1 alone). The other processes raise, told of it.

Then, on a new pipeline, stage 1's process alone is interrupted (SIGINT to it, as its forward of
m0 runs): it raises KeyboardInterrupt, and the others RuntimeError naming it ("stage 1 (c10d rank
1) failed step 0: interrupted"), where they raised TimeoutError though nothing timed out."""
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest  # noqa: F401,E402  (the package path)
import lm  # noqa: E402
import rrfp  # noqa: E402
import torch  # noqa: E402
from mp_timeouts import Stalled  # noqa: E402  (its first forward sleeps 5 s, armed)


def main():
    rank = int(os.environ["RANK"])

    def build(i):
        chunk = lm.chunks(3)[i]
        if i == 2:
            chunk = Stalled(chunk)
            chunk.armed = True
        return chunk
    pipe = rrfp.Pipeline(build, lm.loss_fn, pp=3, microbatches=3, hint="1f1b", policy="fixed",
                         # 2 s: at 1 s, stages 1 and 2, fresh processes, had to reach F c2 m0
                         # within a second of stage 0's last progress on a loaded machine
                         timeout=2 if rank == 0 else 60)
    try:
        pipe.step(*lm.batches(3, seed=0))
    except TimeoutError as e:
        said = str(e)
    else:
        raise AssertionError(f"rank {rank}: the stalled step went on")
    if rank == 0:
        late = r"(, answering only after \d+ ms \(stopped or not run until then\),)?"  # loaded
        chain = (r"asked in turn: stage 1 \(c10d rank 1\)" + late + r" made no progress for \d+ "
                 r"ms and waits for messages from stage 2 \(c10d rank 2\); stage 2 \(c10d rank "
                 r"2\)" + late + r" made no progress for \d+ ms: \[stage 2: [^\]]*running F c2 m0 "
                 r"for \d+ ms")
        assert re.search(chain, said), said
    else:
        assert "stage 0 (c10d rank 0) failed step 0: no progress for" in said, (rank, said)
    print(f"rank {rank}: the stall's report follows the waits to stage 2's task", flush=True)
    interrupted_alone(rank)


class InterruptsItself(torch.nn.Module):
    """`inner`, whose first forward sends its own process SIGINT, then holds the step a second
    (the front end looks for signals every 50 ms)."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.armed = inner, True

    def forward(self, x):
        if self.armed:
            self.armed = False
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        return self.inner(x)


def interrupted_alone(rank):
    def build(i):
        chunk = lm.chunks(3)[i]
        return InterruptsItself(chunk) if i == 1 else chunk
    pipe = rrfp.Pipeline(build, lm.loss_fn, pp=3, microbatches=3, hint="1f1b", policy="fixed",
                         timeout=60)
    try:
        pipe.step(*lm.batches(3, seed=0))
    except KeyboardInterrupt:
        assert rank == 1, f"rank {rank}: interrupted, though only rank 1 was"
    except RuntimeError as e:
        assert rank != 1, f"rank 1: {e}"
        # Told as a cancel (RuntimeError), neither a stall nor a task's failure (a StageError).
        assert not isinstance(e, rrfp.StageError), (rank, str(e))
        assert "stage 1 (c10d rank 1) failed step 0: interrupted" in str(e), (rank, str(e))
    else:
        raise AssertionError(f"rank {rank}: a step stage 1 left went on")
    print(f"rank {rank}: an interruption of stage 1 alone is told as such", flush=True)


if __name__ == "__main__":
    main()
