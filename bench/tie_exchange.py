"""The cost of a parameter tied across processes: a step of a P-stage model whose first chunk's
embedding (vocab x d, GPT-2's 50,257 x 768 by default) is its last chunk's output projection,
tied (each step the two copies' gradients cross between their processes) or not (--untied),
with a small model between them. Prints the median step time over the steps after the first.

    mpirun -np 4 /usr/bin/python3 bench/tie_exchange.py [--untied]
    torchrun --nproc_per_node 4 --redirects 1 --tee 1 bench/tie_exchange.py [--untied]
"""
import argparse
import os
import statistics
import time
from bench_args import at_least, count, launcher_rank, setting_line

import torch
from torch import nn
import torch.nn.functional as F

import rrfp


class Embed(nn.Module):
    def __init__(self, vocab, d):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)

    def forward(self, x):
        return self.tok(x)


class Mid(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x):
        return torch.tanh(self.lin(x))


class Head(nn.Module):
    def __init__(self, vocab, d):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab, d))

    def forward(self, x):
        return F.linear(x, self.weight)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", type=count, default=50257)
    ap.add_argument("--d", type=count, default=768)
    ap.add_argument("--steps", type=at_least(2, "the first is warm-up"), default=6)
    ap.add_argument("--untied", action="store_true")
    a = ap.parse_args()
    pp = int(os.environ.get("WORLD_SIZE") or os.environ.get("OMPI_COMM_WORLD_SIZE") or 0)
    if pp < 2:
        raise SystemExit("run under mpirun or torchrun with 2 or more processes")
    if launcher_rank() == 0:
        print(setting_line("0 (data), i (chunk i)"), flush=True)

    def build(i):
        torch.manual_seed(i)
        return Embed(a.vocab, a.d) if i == 0 else Head(a.vocab, a.d) if i == pp - 1 else Mid(a.d)

    pipe = rrfp.Pipeline(build, lambda o, y: F.cross_entropy(o.flatten(0, 1), y.flatten()),
                         pp=pp, microbatches=2, timeout=300,
                         tied=None if a.untied else [["0.tok.weight", f"{pp - 1}.weight"]])
    torch.manual_seed(0)
    x, y = torch.randint(0, a.vocab, (2, 4)), torch.randint(0, a.vocab, (2, 4))
    times = []
    for _ in range(a.steps):
        start = time.perf_counter()
        pipe.step(x, y)
        times.append(time.perf_counter() - start)
    if pipe.rank == 0:
        print(f"P={pp} vocab={a.vocab} d={a.d} {'untied' if a.untied else 'tied'}: step median "
              f"{statistics.median(times[1:]) * 1e3:.0f} ms over {a.steps - 1}", flush=True)


if __name__ == "__main__":
    main()
