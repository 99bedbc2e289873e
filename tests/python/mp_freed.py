"""Under torchrun (2 processes, P=2): pipelines built and freed one after another keep nothing,
nor do the transports of the steps that failed. Each c10d Pipeline freed kept its transport,
whose receives stayed posted, and with it the Gloo group of its messages: per process 3 threads
and a socket per peer for each (200 pipelines: 605 threads and 410 descriptors), until a script
building one per evaluation ran out of descriptors; so did each failed step's transport (the
next step runs on a new one). A transport now tells its peers it closes and goes once they have
closed theirs (C10dTransport::release_closed), and the group with it."""
import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest  # noqa: F401,E402  (the package path)

import lm  # noqa: E402
import rrfp  # noqa: E402
import torch  # noqa: E402
from rrfp import _rrfp  # noqa: E402


class FailsWhenArmed(torch.nn.Module):
    """The last chunk, whose forward raises while `armed[0]`: the step fails on both processes."""

    def __init__(self, inner, armed):
        super().__init__()
        self.inner, self.armed = inner, armed

    def forward(self, x):
        if self.armed[0]:
            raise ValueError("a bad batch")
        return self.inner(x)


def held():
    """This process's threads and descriptors once every transport freed has gone (the peer
    frees its pipeline at about the same time: 10 s at most)."""
    deadline = time.monotonic() + 10
    while _rrfp._c10d_release_closed() > 0:
        assert time.monotonic() < deadline, "a transport freed here is still kept after 10 s"
        time.sleep(0.01)
    return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))


def steady(counts):
    """Whether (threads, descriptors) stayed: the threads alike, the descriptors within one of
    each other (a socket a failed step's end closes a moment later was seen open or not, 1 of
    5 runs). A transport kept, or its group, adds threads and descriptors each time."""
    fds = [f for _, f in counts]
    return all(t == counts[0][0] for t, _ in counts) and max(fds) - min(fds) <= 1


def main():
    seen = []
    for i in range(15):
        pipe = rrfp.Pipeline(lambda c: lm.chunks(2)[c], lm.loss_fn, pp=2, microbatches=2,
                             timeout=30)
        assert float(pipe.step(*lm.batches(2, seed=i))) > 0
        del pipe
        gc.collect()
        seen.append(held())
    rank = os.environ["RANK"]
    assert steady(seen[1:]), f"rank {rank}: threads, descriptors: {seen}"
    print(f"rank {rank}: 15 pipelines built and freed, threads and descriptors {seen[-1]}",
          flush=True)
    armed = [False]
    pipe = rrfp.Pipeline(lambda c: FailsWhenArmed(lm.chunks(2)[c], armed) if c else
                         lm.chunks(2)[c], lm.loss_fn, pp=2, microbatches=2, timeout=30)
    live = []
    for i in range(12):
        armed[0] = i % 2 == 1
        try:
            pipe.step(*lm.batches(2, seed=i))
            assert not armed[0], "the armed step did not fail"
        except rrfp.StageError:
            assert armed[0], "a step failed unarmed"
        live.append(held())
    # After a failed step its runtime is gone and the next one not yet made: alike every time.
    for after in (live[0::2], live[1::2]):
        assert steady(after), f"rank {rank}: with failed steps: {live}"
    print(f"rank {rank}: 6 failed steps of 12, threads and descriptors {live[-1]}", flush=True)


if __name__ == "__main__":
    main()
