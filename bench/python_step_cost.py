"""The whole step of a tiny pipeline from Python, one process per stage: what rrfp adds around a
step (the batch check before it, the exchange that closes it, carrying the loss) when the
tasks themselves cost next to nothing. Prints rank 0's median over the steps after the first 50.

    python3 -m torch.distributed.run --nproc_per_node 2 --redirects 1 --tee 1 \
        bench/python_step_cost.py c10d
    tests/mpirun.sh 2 python3 bench/python_step_cost.py mpi
    python3 bench/python_step_cost.py threads          # both stages in this process
Set RRFP_PYTHONPATH to a build's python folder to time that build (docs/results-python.md).
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.environ.get("RRFP_PYTHONPATH", os.path.join(os.path.dirname(
    os.path.abspath(__file__)), "..", "build", "python")))
import torch  # noqa: E402

import rrfp  # noqa: E402

transport = sys.argv[1] if len(sys.argv) > 1 else "c10d"
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 300
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
