"""A process forked from one of a job's (a data loader's worker, a user's os.fork()) ends
without touching the job: its normal end ran rrfp's exit handler there, whose end of the script
joined the parent's MPI job (and ended that healthy job, blaming the parent) or crashed under
torchrun; an exception there called MPI_Abort from the child, which hung. A step there is
refused, and the job goes on. Run by multiprocess_pipeline.py under mpirun and torchrun. Under
torchrun a child must end with os._exit, as multiprocessing's children do: torch's own Gloo
groups crash or hang a forked child's interpreter exit, with or without rrfp."""
import os
import sys
import time

import lm
import rrfp

# How each child ends, and the exit code its parent must see.
ENDS = {"exit": 0, "raise": 1, "step": 7}


def _exit_code(pid, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError(f"a forked child was still running after {seconds} s")


def _child(pipe, batch, how):
    if how == "step":
        try:
            pipe.step(*batch)
        except RuntimeError as e:
            os._exit(7 if "was forked from the one that made" in str(e) else 8)
        os._exit(9)
    if how == "raise":
        raise ValueError("a forked child's own error (the test expects it)")
    sys.exit(0)


def run(pp, dp, m, transport):
    pipe = rrfp.Pipeline(lambda i: lm.chunks(pp)[i], lm.loss_fn, pp=pp, dp=dp, microbatches=m,
                         transport=transport, timeout=60)
    batch = lm.batches(m, seed=pipe.replica)
    pipe.step(*batch)
    for how, want in ENDS.items():
        if transport != "mpi" and how != "step":
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(pipe, batch, how)
        code = _exit_code(pid)
        assert code == want, f"rank {pipe.rank}: a child ending by {how} exited {code}"
    assert pipe.step(*batch) is not None
    print(f"rank {pipe.rank}: forked children end alone, and the job goes on", flush=True)
