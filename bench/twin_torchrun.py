#!/usr/bin/env python3
"""How well the twin replays a Python pipeline's step under torchrun (the c10d transport),
where messages are large enough that posting them to Gloo takes time (docs/twin.md).

Usage: bench/twin_torchrun.py RRFP [--steps N] [--width W] [--rows R] [--port PORT]
  Launches 2 processes with torchrun (P=2, V=2, M=8, BFW with its split backward, one
  Linear(W, W) + tanh a chunk, microbatches of R rows: each message R * W * 4 bytes), runs 3
  warm-up steps and N timed ones, saves each timed step's trace (rank 0), replays each with
  `RRFP predict --json -` and prints the measured step, the twin's replay and their
  difference, step by step, then the median. Needs the package on PYTHONPATH (build/python).
Standard library and torch only. Timed: run it on an idle machine.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from bench_args import count, executable, setting_line

WORKER = r"""
import os, sys, torch, rrfp
steps, width, rows, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.manual_seed(0)
chunks = [torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh()) for _ in range(4)]
pipe = rrfp.Pipeline(chunks, lambda y, t: ((y - t) ** 2).mean(), pp=2, vpp=2, microbatches=8,
                     hint="bfw", policy="ready", split_backward="on", transport="c10d",
                     timeout=120)
g = torch.Generator().manual_seed(1)
x, t = torch.randn(8 * rows, width, generator=g), torch.randn(8 * rows, width, generator=g)
for s in range(3 + steps):
    pipe.step(x, t)
    if s >= 3 and pipe.rank == 0:
        pipe.last_step.save_trace(os.path.join(out, f"step{s - 3}.json"))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rrfp", type=executable)
    ap.add_argument("--steps", type=count, default=10)
    ap.add_argument("--width", type=count, default=1024)
    ap.add_argument("--rows", type=count, default=256)
    ap.add_argument("--port", type=int, default=29640)
    a = ap.parse_args()
    print(setting_line("0 (model), 1 (data)"), flush=True)
    with tempfile.TemporaryDirectory() as d:
        worker = os.path.join(d, "worker.py")
        with open(worker, "w") as f:
            f.write(WORKER)
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node",
                               "2", "--master_port", str(a.port), "--redirects", "1", "--tee",
                               "1", worker, str(a.steps), str(a.width), str(a.rows), d],
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            sys.exit(f"torchrun failed (exit {done.returncode}):\n{done.stdout[-3000:]}"
                     f"{done.stderr[-3000:]}")
        errors = []
        print(f"message {a.rows * a.width * 4 / 2**20:.2f} MiB; step, measured ms, twin ms, "
              "twin/measured - 1")
        for s in range(a.steps):
            got = json.loads(subprocess.run(
                [a.rrfp, "predict", os.path.join(d, f"step{s}.json"), "--json", "-"],
                check=True, capture_output=True, text=True, timeout=120).stdout)
            errors.append(got["replayed_ms"] / got["measured_ms"] - 1)
            print(f"{s}, {got['measured_ms']:.2f}, {got['replayed_ms']:.2f}, "
                  f"{100 * errors[-1]:+.1f}%")
        print(f"median {100 * statistics.median(errors):+.1f}% over {a.steps} steps "
              f"(min {100 * min(errors):+.1f}%, max {100 * max(errors):+.1f}%)")


if __name__ == "__main__":
    main()
