"""Under torchrun (2 processes, P=2): a process that leaves the pipeline's calls is named by the
other, whose next call's gather fails on Gloo's closed connection (it said only "Connection
closed by peer [127.0.0.1]:64128"). Each tells torch.distributed's store, before its groups
close, that it freed a Pipeline or that its script ended (rrfp/_ended.py). First rank 1 frees a
Pipeline, a local of a function that returned, while rank 0 makes one more step; then rank 1's
script ends while rank 0 makes one more step of another. Under mpirun the end is met in that
gather as a call of its own (mpi_failure.sh). Before both, rank 1's building of a Pipeline fails
on an option it alone refuses, and rank 0 says so. Between, both make calls under
torch.inference_mode(), whose gathers failed on every process ("Inplace update to inference
tensor outside InferenceMode", told as another process's failure)."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftest  # noqa: F401,E402  (the package path)

import lm  # noqa: E402
import rrfp  # noqa: E402


def pipeline():
    return rrfp.Pipeline(lambda i: lm.chunks(2)[i], lm.loss_fn, pp=2, microbatches=2, timeout=5)


def one_step_more(pipe, words):
    """Rank 0's step, which must fail with `words` at the start of its message."""
    try:
        pipe.step(*lm.batches(2, seed=1))
        said = None
    except RuntimeError as e:
        said = str(e)
    assert said and said.startswith(words), said


def freed_in_a_function(rank):
    pipe = pipeline()
    assert float(pipe.step(*lm.batches(2, seed=0))) > 0
    if rank == 0:
        one_step_more(pipe, "step(): global rank(s) [1] had freed a Pipeline this process still "
                            "uses (no longer referenced")
        print("rank 0: the process that freed its Pipeline is named", flush=True)


KEPT = []


def failed_build(rank):
    """Rank 1 refuses a hint on its own once the groups are made: rank 0, whose building then
    fails in its gather, names it as such (it was told rank 1 "had freed a Pipeline"). Rank 1
    holds its exception (as pytest.raises would): its groups are closed all the same (rank 0
    waited out its arrival_timeout)."""
    began = time.monotonic()
    try:
        rrfp.Pipeline(lambda i: lm.chunks(2)[i], lm.loss_fn, pp=2, microbatches=2, timeout=5,
                      arrival_timeout=20, hint="1f1b" if rank == 0 else "no-such-hint")
        said = None
    except (ValueError, RuntimeError) as e:
        said = f"{type(e).__name__}: {e}"
        KEPT.append(e)  # its traceback, and the frames it holds, kept to the end
    want = ("ValueError: `hint`: unknown hint 'no-such-hint'" if rank == 1 else
            "RuntimeError: Pipeline(): global rank(s) [1] refused, on its own, the Pipeline "
            "being built")
    assert said and said.startswith(want), said
    # At once, not at the end of the 20 s arrival_timeout.
    assert time.monotonic() - began < 10, time.monotonic() - began
    if rank == 0:
        print("rank 0: the process whose building failed is named", flush=True)


def under_inference_mode(pipe):
    """eval_step and clip_grad_norm_ run as outside it; step refuses it, naming the mode."""
    import torch
    with torch.inference_mode():
        assert float(pipe.eval_step(*lm.batches(2, seed=2))[1]) > 0
        assert float(pipe.clip_grad_norm_(1.0)) > 0
        try:
            pipe.step(*lm.batches(2, seed=2))
            said = None
        except RuntimeError as e:
            said = str(e)
    assert said and said.startswith("step: called under torch.inference_mode()"), said


def main():
    rank = int(os.environ["RANK"])
    failed_build(rank)
    freed_in_a_function(rank)
    global PIPE  # held to the end of the script
    PIPE = pipeline()
    assert float(PIPE.step(*lm.batches(2, seed=0))) > 0
    under_inference_mode(PIPE)
    if rank == 1:
        print("rank 1: ending its script", flush=True)
        return
    one_step_more(PIPE, "step(): the script of global rank(s) [1] had ended")
    print("rank 0: the process whose script ended is named", flush=True)


if __name__ == "__main__":
    main()
