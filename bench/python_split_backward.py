"""What the generic split backward of rrfp.Pipeline costs, on one chunk of the test transformer
(tests/python/lm.py): time of an unsplit backward against B (input gradient, graph kept) plus W
(parameter gradients from the kept graph), and the bytes autograd saves for backward, which a
split keeps from the end of B to the end of W. Median of --reps runs, one thread.
    PYTHONPATH=build/python /usr/bin/python3 bench/python_split_backward.py
"""
import argparse
import os
import statistics
import sys
import time
from bench_args import count, setting_line

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "python"))
import lm  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--d", type=count, default=256)
ap.add_argument("--blocks", type=count, default=4)
ap.add_argument("--rows", type=count, default=8)
ap.add_argument("--seq", type=count, default=128)
ap.add_argument("--reps", type=count, default=15)
a = ap.parse_args()
if a.d % 8:  # else the first forward fails splitting d into heads, in a traceback
    ap.error(f"--d {a.d} must be a multiple of 8 (the chunk's attention heads)")
print(setting_line(0), flush=True)
torch.manual_seed(0)
chunk = lm.chunks(3, d=a.d, heads=8, max_len=a.seq, blocks_per_chunk=a.blocks)[1]  # a middle one
params = list(chunk.parameters())
x0 = torch.randn(a.rows, a.seq, a.d)
g = torch.randn(a.rows, a.seq, a.d)


def forward():
    x = x0.clone().requires_grad_()
    return x, chunk(x)


def unsplit():
    x, out = forward()
    t = time.perf_counter()
    torch.autograd.grad(out, [x] + params, g)
    return time.perf_counter() - t, 0.0


def split():
    x, out = forward()
    t = time.perf_counter()
    torch.autograd.grad(out, [x], g, retain_graph=True)
    b = time.perf_counter() - t
    t = time.perf_counter()
    torch.autograd.grad(out, params, g)
    return b, time.perf_counter() - t


saved = 0


def pack(t):
    global saved
    saved += t.numel() * t.element_size()
    return t


with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
    forward()
for f in (unsplit, split):  # warm-up
    f()
u = [unsplit()[0] for _ in range(a.reps)]
s = [split() for _ in range(a.reps)]
ub = statistics.median(u) * 1e3
sb = statistics.median(x[0] for x in s) * 1e3
sw = statistics.median(x[1] for x in s) * 1e3
print(f"chunk: {a.blocks} blocks, d={a.d}, {a.rows}x{a.seq} tokens, torch threads "
      f"{torch.get_num_threads()}")
print(f"unsplit backward        {ub:7.2f} ms")
print(f"split: B (input grad)   {sb:7.2f} ms  ({sb / ub:.2f}x the unsplit)")
print(f"split: W (param grads)  {sw:7.2f} ms  ({sw / ub:.2f}x)")
print(f"split: B + W            {sb + sw:7.2f} ms  ({(sb + sw) / ub:.2f}x)")
print(f"kept from B to W: {saved / 2**20:.1f} MiB of saved activations per microbatch-chunk")
