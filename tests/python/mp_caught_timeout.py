"""Under torchrun (2 processes, P=2): a script that catches a step's TimeoutError and goes on,
then ends. Stage 1's first forward outlasts the pipeline's timeout, so each process leaves
step 0 on its own TimeoutError at its own time, and the later steps fail (their gathers are
out of step; documented). The test is the process's end: a gather left running in Gloo ended
only at its group's own timeout (torch's 30 minutes), and the interpreter's exit waited for it;
now the gathers run on groups whose timeout is the pipeline's, and the job ends within seconds
(the test's own timeout, far below 30 minutes, fails it otherwise)."""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest  # noqa: F401,E402  (the package path)
import lm  # noqa: E402
import rrfp  # noqa: E402

TIMEOUT_S, STALL_S, STEPS = 2, 5, 3


class Stalled(torch.nn.Module):
    """`inner`, whose first forward sleeps STALL_S seconds first."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.calls = inner, 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 1:
            time.sleep(STALL_S)
        return self.inner(x)


def main():
    rank = int(os.environ["RANK"])
    pipe = rrfp.Pipeline(lambda i: Stalled(lm.chunks(2)[i]) if i == 1 else lm.chunks(2)[i],
                         lm.loss_fn, pp=2, microbatches=2, hint="1f1b", policy="fixed",
                         timeout=TIMEOUT_S)
    failed = []
    for s in range(STEPS):
        xs, ys = lm.batches(2, seed=s)
        try:
            pipe.step(xs, ys)
        except (TimeoutError, RuntimeError) as e:
            failed.append((s, type(e).__name__))
    # Step 0 times out on both (stage 0 waits for stage 1's output, stage 1 runs its stalled
    # forward past the timeout); what the later ones raise depends on when each process left.
    assert failed and failed[0] == (0, "TimeoutError"), (rank, failed)
    print(f"rank {rank}: steps failed {failed}; leaving", flush=True)


if __name__ == "__main__":
    main()
