"""The per-task cost of running a stage in Python: tiny chunks (one 8x8 Linear on one row), so
that a task is almost all overhead. For each task kind of stage 0, the median task time the
runtime recorded (start to end: the GIL, the Python call, autograd, encoding the output) minus
the median time of the same PyTorch work done without rrfp (with the loss where stage 0's chunk
is the last, and the adds of the parameter gradients), two ways: a tight loop repeating the one
kind of work 2,000 times, and a plain training step, each microbatch's F then its B, as a
training loop without a pipeline runs them (the tight loop keeps its few kernels' code and data
in cache, which neither a training loop nor a stage does); and the runtime's dispatch gap (a
task's end to the next ready task's start, which does not include the Python call).

The pipeline's steps and the plain steps take turns, one of each per round, and the overhead
over the plain step is the median over rounds of the difference within a round: a machine
whose speed changes over seconds (a shared VM's does, by up to 2x) then weighs on both sides
of each difference alike, where medians taken minutes apart would compare unlike speeds.
Compare with `rrfp run --pp 2 -m 64 --workload uniform`, the same runtime with C++ programs.
With --tree every chunk boundary carries a structure, (y, {"mask": a bool tensor}), instead of
one tensor: the same PyTorch work, so the difference is what packing a structure costs.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py [P] [--tree]
"""
import argparse
import statistics
import time

import torch
from torch import nn

import rrfp
from bench_args import count, setting_line

M, STEPS = 64, 20
P, TREE = 2, False  # set by main from the command line


def parse_args():
    # argparse, not sys.argv by hand: --help ran the whole benchmark, an unknown flag was
    # ignored and a P of 0 or "abc" ended in a traceback.
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("P", nargs="?", type=count, default=2, help="stages (default 2)")
    ap.add_argument("--tree", action="store_true",
                    help="chunk boundaries carry (y, {mask}) instead of one tensor")
    return ap.parse_args()


class TreeLinear(nn.Linear):
    """A Linear between structures: (x, {"mask"}) in (or a tensor, first), the same out."""

    def forward(self, x):
        if isinstance(x, tuple):
            x, extra = x
        else:
            extra = {"mask": x > 0}
        return super().forward(x), extra


def chunk(i):
    torch.manual_seed(i)
    return TreeLinear(8, 8) if TREE else nn.Linear(8, 8)


def loss_fn(o, y):
    return ((o[0] if TREE else o) - y).square().sum()


def _setup():
    torch.manual_seed(1)
    c = nn.Linear(8, 8)
    return c, torch.randn(1, 8), torch.randn(1, 8), torch.randn(1, 8), list(c.parameters())


def _f(c, x, y, last):
    out = c(x)
    return (out - y).square().sum() if last else out


def _b(out, params, sums, g, last):
    for s, d in zip(sums, torch.autograd.grad(out, params, None if last else g)):
        s += d


def tight(kind, last):
    """The work of one task, done directly and repeated 2,000 times: F = the chunk's forward,
    and on the last chunk its loss; B = the chunk's backward (from the loss on the last chunk,
    else from an output gradient) and the adds of its parameter gradients into the step's sums.
    Stage 0 is measured: at P=1 its chunk is also the last (a structure adds no PyTorch work)."""
    c, x, y, g, params = _setup()
    sums = [torch.zeros_like(p) for p in params]
    times = []
    for _ in range(2000):
        t = time.perf_counter()
        out = _f(c, x, y, last)
        if kind == "B":
            t = time.perf_counter()
            _b(out, params, sums, g, last)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


class PlainStep:
    """The same F and B within a plain training step of M microbatches (each one's F, then its
    B): one step per call, returning the step's medians."""

    def __init__(self, last):
        self.c, self.x, self.y, self.g, self.params = _setup()
        self.last = last

    def __call__(self):
        sums = [torch.zeros_like(p) for p in self.params]
        f, b = [], []
        for _ in range(M):
            t0 = time.perf_counter()
            out = _f(self.c, self.x, self.y, self.last)
            t1 = time.perf_counter()
            _b(out, self.params, sums, self.g, self.last)
            f.append(t1 - t0)
            b.append(time.perf_counter() - t1)
        return {"F": statistics.median(f) * 1e6, "B": statistics.median(b) * 1e6}


def main():
    global P, TREE
    a = parse_args()
    P, TREE = a.P, a.tree
    print(setting_line("i (chunk i; the inputs are drawn after the last), "
                       "1 (the plain step's work)"))
    print(f"P={P} M={M}, {STEPS} rounds of one pipeline step and one plain step, torch threads "
          f"{torch.get_num_threads()}, boundaries carry {'(y, {mask})' if TREE else 'one tensor'}")
    for hint, policy in [("1f1b", "fixed"), ("bf", "ready")]:
        pipe = rrfp.Pipeline([chunk(i) for i in range(P)], loss_fn,
                             pp=P, microbatches=M, hint=hint, policy=policy)
        xs = [torch.randn(1, 8) for _ in range(M)]
        plain = PlainStep(P == 1)
        pipe.step(xs, xs)  # warm-up, both sides
        plain()
        gaps, tasks, steps, diffs = [], {"F": [], "B": []}, {"F": [], "B": []}, {"F": [], "B": []}
        for _ in range(STEPS):
            pipe.step(xs, xs)
            gaps.append(pipe.last_step.dispatch_gap_us)
            by_kind = {"F": [], "B": []}
            for stage, task, start, end in pipe.last_step.tasks:
                if stage == 0:  # the first stage: its F sends, its B receives
                    by_kind[task[0]].append((end - start) * 1e6)
            step = plain()
            for k in ("F", "B"):
                tasks[k] += by_kind[k]
                steps[k].append(step[k])
                diffs[k].append(statistics.median(by_kind[k]) - step[k])
        print(f"{policy} {hint}: dispatch gap median {statistics.median(gaps):.1f} us")
        for k in ("F", "B"):
            task = statistics.median(tasks[k])
            work = tight(k, P == 1)
            print(f"  {k}: task {task:.1f} us, the same PyTorch work alone {work:.1f} us, "
                  f"overhead {task - work:.1f} us; in a plain step {statistics.median(steps[k]):.1f}"
                  f" us, overhead {statistics.median(diffs[k]):.1f} us (median of the rounds' "
                  f"differences)")
            # The work alone is timed apart from the pipeline's rounds: on a busy machine it
            # came out slower than the task holding it (-20 us), printed as if an overhead.
            if task < work:
                print(f"  {k}: the work alone took longer than the task: this machine's load "
                      "moved between the measurements; the rounds' differences are the figure "
                      "to read, or rerun on an idle machine")


if __name__ == "__main__":
    main()
