"""The whole step of a tiny pipeline from Python, one process per stage: what rrfp adds around a
step (the batch check before it, the exchange that closes it, carrying the loss) when the
tasks themselves cost next to nothing. Prints rank 0's median over the steps after the first 50.

    python3 -m torch.distributed.run --nproc_per_node 2 --redirects 1 --tee 1 \
        bench/python_step_cost.py c10d
    tests/mpirun.sh 2 python3 bench/python_step_cost.py mpi
    python3 bench/python_step_cost.py threads          # both stages in this process
Set RRFP_PYTHONPATH to a build's python folder to time that build (docs/results-python.md).
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.environ.get("RRFP_PYTHONPATH", os.path.join(os.path.dirname(
    os.path.abspath(__file__)), "..", "build", "python")))
import torch  # noqa: E402

import rrfp  # noqa: E402
from bench_args import at_least, launcher_rank, setting_line  # noqa: E402

# argparse, not sys.argv by hand: an unknown transport or a count of steps that left none after
# the first 50 ended in a traceback.
ap = argparse.ArgumentParser(description=__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("transport", nargs="?", default="c10d", choices=["c10d", "mpi", "threads"],
                help="how the two stages run (default c10d)")
ap.add_argument("steps", nargs="?", type=at_least(51, "the first 50 are warm-up"), default=300,
                help="steps in all (default 300)")
a = ap.parse_args()
transport, steps = a.transport, a.steps
if launcher_rank() == 0:
    print(setting_line(0), flush=True)
torch.manual_seed(0)
pipe = rrfp.Pipeline(lambda i: torch.nn.Linear(16, 16), lambda o, y: (o - y).square().sum(),
                     pp=2, microbatches=4, transport=None if transport == "threads" else transport,
                     timeout=60)
x, y = torch.randn(8, 16), torch.randn(8, 16)
times, spans = [], []
for _ in range(steps):
    start = time.perf_counter()
    pipe.step(x, y)
    times.append(time.perf_counter() - start)
    spans.append(pipe.last_step.makespan)
if pipe.rank == 0:
    kept = times[50:]
    print(f"{transport}: median step {statistics.median(kept) * 1e3:.2f} ms (p10 "
          f"{sorted(kept)[len(kept) // 10] * 1e3:.2f} ms), of which the pipeline's makespan "
          f"{statistics.median(spans[50:]) * 1e3:.2f} ms, over {len(kept)} steps")
