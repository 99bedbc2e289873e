"""The caller's own point-to-point messages on the default group, between steps, run by
multiprocess_pipeline.py under torchrun. The pipeline's messages go over a Gloo group of its
own, whose receives stay posted between steps; on the default group those receives took the
caller's dist.send (tag 0, as the pipeline's headers), and the caller's dist.recv waited for
ever while the pipeline's next step failed on a message it did not expect."""
import datetime

import torch

import lm
import rrfp

WAIT = datetime.timedelta(seconds=20)


def run(pp, dp, m, transport):
    if transport != "c10d":
        return  # mpirun: the pipeline sends on a communicator of its own (MPI_Comm_dup)
    import torch.distributed as dist
    pipe = rrfp.Pipeline(lm.chunks(pp), lm.loss_fn, pp=pp, dp=dp, microbatches=m,
                         transport=transport, timeout=60)
    xs, ys = lm.batches(m)
    pipe.step(xs, ys)
    # A ring: each process sends its rank to the next, even ranks first.
    rank, world = dist.get_rank(), dist.get_world_size()
    mine, got = torch.tensor([float(rank)]), torch.tensor([-1.0])
    after, before = (rank + 1) % world, (rank - 1) % world
    for send_first in ([True, False] if rank % 2 == 0 else [False, True]):
        if send_first:
            dist.isend(mine, after).wait(WAIT)
        else:
            try:
                dist.irecv(got, before).wait(WAIT)
            except RuntimeError as e:
                raise AssertionError(f"rank {rank}: no message from rank {before} within "
                                     f"{WAIT.seconds} s: the pipeline took it? ({e})") from e
    assert got.item() == before, f"rank {rank}: got {got.item()}, want {before}"
    pipe.step(xs, ys)  # and the pipeline's own messages still arrive
    print(f"rank {rank}: the caller's own send and receive on the default group arrive "
          "between steps", flush=True)
