"""Under torchrun (2 processes, P=2): pipelines built and freed one after another keep nothing.
Each c10d Pipeline freed kept its transport, whose receives stayed posted, and with it the Gloo
group of its messages: per process 3 threads and a socket per peer for each (200 pipelines:
605 threads and 410 descriptors), until a script building one per evaluation ran out of
descriptors. Its transport now tells its peers it closes and goes once they have closed theirs
(C10dTransport::release_closed), and the group with it."""
import gc
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest  # noqa: F401,E402  (the package path)

import lm  # noqa: E402
import rrfp  # noqa: E402
from rrfp import _rrfp  # noqa: E402


def held():
    """This process's threads and descriptors once every transport freed has gone (the peer
    frees its pipeline at about the same time: 10 s at most)."""
    deadline = time.monotonic() + 10
    while _rrfp._c10d_release_closed() > 0:
        assert time.monotonic() < deadline, "a transport freed here is still kept after 10 s"
        time.sleep(0.01)
    return len(os.listdir("/proc/self/task")), len(os.listdir("/proc/self/fd"))


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
    assert all(s == seen[1] for s in seen[1:]), f"rank {rank}: threads, descriptors: {seen}"
    print(f"rank {rank}: 15 pipelines built and freed, threads and descriptors {seen[-1]}",
          flush=True)


if __name__ == "__main__":
    main()
