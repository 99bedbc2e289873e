"""One process pausing alone between calls for longer than the pipeline's timeout (rank 0
evaluating, logging or writing a checkpoint while the others go on to the next step): the others
wait for it at the call's first gather, up to arrival_timeout, and training goes on. Under
mpirun that pause ended the whole job (the gather's deadline was the timeout, and MPI_Abort);
under torchrun it failed the others' next step, and Gloo closed the groups for good. Run by
multiprocess_pipeline.py under mpirun with one replica and under torchrun with two (the
replicas' arrival groups; mp_timeouts.py pauses one process of one replica under torchrun).
Under torchrun every process then pauses past the messages' groups' own timeout."""
import time

import lm
import rrfp

TIMEOUT_S, PAUSE_S = 2, 3


def run(pp, dp, m, transport, rank):
    pipe = rrfp.Pipeline(lambda i: lm.chunks(pp)[i], lm.loss_fn, pp=pp, microbatches=m,
                         transport=transport, dp=dp, timeout=TIMEOUT_S)
    xs, ys = lm.batches(m, seed=7)
    first = pipe.step(xs, ys)
    if rank == 0:
        time.sleep(PAUSE_S)
    again = pipe.step(xs, ys)
    assert (first is None) == (again is None), rank
    print(f"rank {rank}: steps went on after rank 0 paused alone {PAUSE_S} s (timeout "
          f"{TIMEOUT_S} s)", flush=True)
    if transport == "c10d":
        every_process_pauses(pp, dp, m, rank, xs, ys, first)


def every_process_pauses(pp, dp, m, rank, xs, ys, first):
    """Every process pausing longer than the messages' groups' own timeout (arrival_timeout,
    within which they are made): the receives posted between steps wait with the transport's
    own limit, and Gloo, which fails a wait at the group's timeout and closes the group ("pair
    closure"), lets them be."""
    pipe = rrfp.Pipeline(lambda i: lm.chunks(pp)[i], lm.loss_fn, pp=pp, microbatches=m,
                         transport="c10d", dp=dp, timeout=TIMEOUT_S, arrival_timeout=TIMEOUT_S)
    assert (pipe.step(xs, ys) is None) == (first is None), rank
    time.sleep(PAUSE_S)
    assert (pipe.step(xs, ys) is None) == (first is None), rank
    print(f"rank {rank}: steps went on after every process paused {PAUSE_S} s (the messages' "
          f"groups made within {TIMEOUT_S} s)", flush=True)
