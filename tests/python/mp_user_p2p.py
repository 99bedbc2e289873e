"""The caller's own point-to-point messages on the default group, between steps, run by
multiprocess_pipeline.py under torchrun. The pipeline's messages go over a Gloo group of its
own, whose receives stay posted between steps; on the default group those receives took the
caller's dist.send (tag 0, as the pipeline's headers), and the caller's dist.recv waited for
ever while the pipeline's next step failed on a message it did not expect. Under mpirun, the
caller's messages on MPI_COMM_WORLD with the tags the job uses on its own communicators: the
job's gathers, point to point on MPI_COMM_WORLD, took a tag-3 message for a gather's opening
and ended the job "out of step"."""
import ctypes
import datetime
import time

import torch

import lm
import rrfp

WAIT = datetime.timedelta(seconds=20)


def run_mpi(pp, dp, m):
    mpi = ctypes.CDLL("libmpi.so.40", mode=ctypes.RTLD_GLOBAL)  # Debian 12's Open MPI
    handle = lambda name: ctypes.c_void_p(ctypes.addressof(ctypes.c_char.in_dll(mpi, name)))
    world, u64 = handle("ompi_mpi_comm_world"), handle("ompi_mpi_uint64_t")
    pipe = rrfp.Pipeline(lm.chunks(pp), lm.loss_fn, pp=pp, dp=dp, microbatches=m,
                         transport="mpi", timeout=60)
    xs, ys = lm.batches(m)
    pipe.step(xs, ys)
    rank, world_size = ctypes.c_int(), ctypes.c_int()
    mpi.MPI_Comm_rank(world, ctypes.byref(rank))
    mpi.MPI_Comm_size(world, ctypes.byref(world_size))
    rank, world_size = rank.value, world_size.value
    after, before = (rank + 1) % world_size, (rank - 1) % world_size
    tags = (0, 1, 2, 3, 4)
    for tag in tags:  # small: sent at once, and left waiting over the step
        buf = (ctypes.c_uint64 * 2)(rank, tag)
        assert mpi.MPI_Send(buf, 2, u64, after, tag, world) == 0
    pipe.step(xs, ys)  # gathers between and after its tasks
    for tag in tags:
        flag, until = ctypes.c_int(0), time.monotonic() + WAIT.seconds
        while not flag.value and time.monotonic() < until:
            mpi.MPI_Iprobe(before, tag, world, ctypes.byref(flag), None)
            time.sleep(0.001)
        assert flag.value, f"rank {rank}: no tag-{tag} message from rank {before}: taken?"
        got = (ctypes.c_uint64 * 2)(0, 0)
        assert mpi.MPI_Recv(got, 2, u64, before, tag, world, None) == 0
        assert list(got) == [before, tag], f"rank {rank}: tag {tag}: got {list(got)}"
    pipe.step(xs, ys)
    print(f"rank {rank}: the caller's own messages on MPI_COMM_WORLD arrive between steps",
          flush=True)


def run(pp, dp, m, transport):
    if transport == "mpi":
        return run_mpi(pp, dp, m)
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
