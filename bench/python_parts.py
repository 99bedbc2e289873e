"""Where a Python stage's per-task overhead goes, at P=1 on the tiny chunk of
bench/python_overhead.py (one 8x8 Linear on one row, its loss, M=64):

- the runner: StageRunner.forward and .backward called directly from Python, without the
  runtime, against the same F and B in a plain step (each microbatch's F, then its B), in the
  same round: what the runner's own Python adds;
- the crossing: an evaluation step's B task, whose Python returns at once, on the runtime's
  clock (the GIL taken and dropped, the call from C++, the task's record), next to the same
  call made from Python.

Each line is one round; the machine's speed may change between rounds, so compare within one.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_parts.py [ROUNDS]
"""
import argparse
import statistics
import time

import torch
from torch import nn

import rrfp
from rrfp._grads import GradSums
from rrfp._stage import StageRunner
from rrfp._step_data import StepData
from bench_args import count, setting_line

M, STEPS = 64, 20


def loss_fn(o, y):
    return (o - y).square().sum()


def runner_vs_plain():
    """Medians of F and B: the runner called directly, then the plain step."""
    torch.manual_seed(0)
    c = nn.Linear(8, 8)
    data = StepData(loss_fn, None)
    data.inputs = [torch.randn(1, 8) for _ in range(M)]
    data.targets = data.inputs
    runner = StageRunner(0, {0: c}, 0, False, data)
    params = list(c.parameters())
    times = {"rF": [], "rB": [], "pF": [], "pB": []}
    for _ in range(STEPS):
        data.sums = GradSums({0: runner.params[0]}, True)
        runner.begin_step(0)
        sums = [torch.zeros_like(p) for p in params]
        for mb in range(M):
            t0 = time.perf_counter()
            runner.forward(0, mb, None)
            t1 = time.perf_counter()
            runner.backward(0, mb, None)
            t2 = time.perf_counter()
            out = loss_fn(c(data.inputs[mb]), data.targets[mb])
            t3 = time.perf_counter()
            for s, d in zip(sums, torch.autograd.grad(out, params)):
                s += d
            t4 = time.perf_counter()
            for k, v in (("rF", t1 - t0), ("rB", t2 - t1), ("pF", t3 - t2), ("pB", t4 - t3)):
                times[k].append(v)
    return {k: statistics.median(v) * 1e6 for k, v in times.items()}


def crossing(pipe, xs):
    """An evaluation step's B task on the runtime's clock, and the same call from Python."""
    b = []
    for _ in range(STEPS):
        pipe.eval_step(xs)
        b += [(e - s) * 1e6 for _, task, s, e in pipe.last_step.tasks if task[0] == "B"]
    runner = pipe._runners[0]
    runner.data.eval = True
    direct = []
    for _ in range(STEPS * M):
        t0 = time.perf_counter()
        runner.backward(0, 0, None)
        direct.append(time.perf_counter() - t0)
    runner.data.eval = False
    return statistics.median(b), statistics.median(direct) * 1e6


def main():
    # argparse, not sys.argv by hand: "x" ended in a traceback and 0 printed nothing.
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rounds", metavar="ROUNDS", nargs="?", type=count, default=5,
                    help="lines to print, one a round (default 5)")
    rounds = ap.parse_args().rounds
    print(setting_line(0), flush=True)
    torch.manual_seed(0)  # the pipeline's Linear and its inputs: drawn unseeded before
    pipe = rrfp.Pipeline([nn.Linear(8, 8)], loss_fn, pp=1, microbatches=M, hint="1f1b",
                         policy="fixed")
    xs = [torch.randn(1, 8) for _ in range(M)]
    for _ in range(rounds):
        t = runner_vs_plain()
        task, call = crossing(pipe, xs)
        print(f"runner F {t['rF']:.1f} B {t['rB']:.1f} us, plain F {t['pF']:.1f} B {t['pB']:.1f} "
              f"us: the runner adds F {t['rF'] - t['pF']:.1f} B {t['rB'] - t['pB']:.1f} us | "
              f"a B that returns at once: task {task:.2f} us, called from Python {call:.2f} us")


if __name__ == "__main__":
    main()
