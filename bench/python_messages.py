#!/usr/bin/env python3
"""What the messages between stages cost rrfp.Pipeline in one process: four chunks of almost no
compute (tanh of a scaled input) passing large activations, so a step is mostly its messages
(M=8 microbatches of 2048 x 1024 floats, 8 MiB each way per stage boundary). Median step time
of fixed 1F1B and ready BF over the steps after two warm-up steps. Run it with two builds to
compare them, alternating:

    PYTHONPATH=build/python /usr/bin/python3 bench/python_messages.py
"""
import argparse
import statistics
import time
from bench_args import at_least, count, setting_line

import torch
from torch import nn

import rrfp


class Scale(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.w = nn.Parameter(torch.randn(width))

    def forward(self, x):
        return torch.tanh(x * self.w)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=count, default=1024)
    ap.add_argument("--rows", type=count, default=16384, help="the batch's rows (M=8 parts)")
    ap.add_argument("--steps", type=at_least(3, "the first 2 are warm-up"), default=8,
                    help="steps per schedule, 2 of them warm-up")
    a = ap.parse_args()
    if a.rows % 8:  # else the first step refuses the batch, in a traceback
        ap.error(f"--rows {a.rows} must be a multiple of 8 (the microbatches)")
    print(setting_line(0), flush=True)
    torch.manual_seed(0)
    chunks = [Scale(a.width) for _ in range(4)]
    x, t = torch.randn(a.rows, a.width), torch.randn(a.rows, a.width)
    loss_fn = lambda y, t: ((y - t) ** 2).mean()  # noqa: E731
    for hint, policy in (("1f1b", "fixed"), ("bf", "ready")):
        pipe = rrfp.Pipeline(chunks, loss_fn, pp=4, microbatches=8, hint=hint, policy=policy,
                             split_backward="off", timeout=120)
        times = []
        for _ in range(a.steps):
            start = time.perf_counter()
            pipe.step(x, t)
            times.append(time.perf_counter() - start)
        print(f"{policy} {hint}: median step {1e3 * statistics.median(times[2:]):.0f} ms",
              flush=True)


if __name__ == "__main__":
    main()
