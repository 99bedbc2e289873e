"""rrfp.Pipeline against torch.distributed.pipeline.sync.Pipe (GPipe, in Debian's torch 1.13) on
the same model, data and machine: examples/transformer_lm.py's LM cut into P chunks, M
microbatches of equal length (Pipe splits one batch), SGD on the batch's mean loss (the same
gradients in both, up to the order of additions). Medians of --steps steps after one
warm-up step, each configuration in turn, in one process. --jitter adds the same random sleep
to the forward of every chunk in both (seeded by chunk and call count).

    PYTHONPATH=build/python /usr/bin/python3 bench/python_vs_pipe.py [--jitter 0.3]
"""
import argparse
import os
import random
import statistics
import sys
import time
from bench_args import count, non_negative, setting_line

import torch
from torch import nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import transformer_lm as lm  # noqa: E402

import rrfp  # noqa: E402


class Jitter(nn.Module):
    """Sleeps before the forward of `inner`: with probability 0.3, up to `scale` times the
    chunk's mean forward time (a straggling kernel, a slow link)."""

    def __init__(self, inner, chunk, scale, mean_s):
        super().__init__()
        self.inner, self.chunk, self.scale, self.mean_s, self.calls = inner, chunk, scale, mean_s, 0

    def forward(self, x):
        self.calls += 1
        r = random.Random(f"{self.chunk}-{self.calls}")
        if self.scale and r.random() < 0.3:
            time.sleep(r.random() * self.scale * self.mean_s * 2)
        return self.inner(x)


def chunks(args, jitter_mean):
    n = args.pp
    return [Jitter(lm.make_chunk(i, n, args), i, args.jitter, jitter_mean) for i in range(n)]


def loss_fn(logits, y):
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


def data(args):
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(args.steps + 1):
        seqs = torch.randint(0, 256, (args.microbatches * args.rows, args.seq + 1), generator=g)
        out.append((seqs[:, :-1], seqs[:, 1:]))
    return out


def run_rrfp(args, hint, policy, batches, jitter_mean):
    cs = chunks(args, jitter_mean)
    # The mean over the batch, as Pipe's loss: each microbatch's mean / M, summed.
    m = args.microbatches
    pipe = rrfp.Pipeline(cs, lambda out, y: loss_fn(out, y) / m, pp=args.pp, microbatches=m,
                         hint=hint, policy=policy)
    opt = torch.optim.SGD([p for c in cs for p in c.parameters()], lr=0.01)
    times, loss = [], None
    for i, (x, y) in enumerate(batches):
        t = time.perf_counter()
        opt.zero_grad()
        loss = pipe.step(x, y)
        opt.step()
        if i:
            times.append(time.perf_counter() - t)
    return times, loss.item()


def run_pipe(args, batches, jitter_mean):
    from torch.distributed.pipeline.sync import Pipe
    cs = chunks(args, jitter_mean)
    model = Pipe(nn.Sequential(*cs), chunks=args.microbatches, checkpoint="never")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times, loss = [], None
    for i, (x, y) in enumerate(batches):
        t = time.perf_counter()
        opt.zero_grad()
        out = model(x).local_value()
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        if i:
            times.append(time.perf_counter() - t)
    return times, loss.item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pp", type=count, default=2)
    ap.add_argument("--microbatches", type=count, default=8)
    ap.add_argument("--rows", type=count, default=2)
    ap.add_argument("--seq", type=count, default=64)
    ap.add_argument("--d-model", type=count, default=128)
    ap.add_argument("--heads", type=count, default=4)
    ap.add_argument("--layers", type=count, default=4)
    ap.add_argument("--steps", type=count, default=10)
    ap.add_argument("--jitter", type=non_negative, default=0.0)
    args = ap.parse_args()
    lm.check_heads(ap, args)
    print(setting_line("0 (data), 1000 + i (chunk i), the jitter's by chunk and call"),
          flush=True)
    import torch.distributed.rpc as rpc
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29610")
    rpc.init_rpc("bench", rank=0, world_size=1)  # Pipe needs the RPC framework
    batches = data(args)
    # The chunk's mean forward time, for the jitter's scale.
    c0 = lm.make_chunk(1, args.pp, args)
    x = torch.randn(args.rows, args.seq, args.d_model)
    t = time.perf_counter()
    for _ in range(5):
        c0(x)
    mean_fwd = (time.perf_counter() - t) / 5
    runs = [("Pipe (GPipe)", lambda: run_pipe(args, batches, mean_fwd))]
    for name, hint, policy in [("rrfp fixed gpipe", "gpipe", "fixed"),
                               ("rrfp fixed 1f1b", "1f1b", "fixed"),
                               ("rrfp ready bf", "bf", "ready"),
                               ("rrfp ready bfw", "bfw", "ready")]:
        runs.append((name, lambda h=hint, p=policy: run_rrfp(args, h, p, batches, mean_fwd)))
    print(f"P={args.pp} M={args.microbatches} rows={args.rows} seq={args.seq} "
          f"d={args.d_model} layers={args.layers} jitter={args.jitter}, median of {args.steps} "
          f"steps, torch threads {torch.get_num_threads()}")
    # The rows alone were not a Markdown table, as docs/results-python.md shows them.
    print(f"\n| run | median step ms | vs Pipe | loss after {args.steps + 1} steps |")
    print("|---|---|---|---|", flush=True)
    base = None
    for name, fn in runs:
        times, loss = fn()
        med = statistics.median(times)
        base = base or med
        print(f"| {name} | {1e3 * med:.1f} | {base / med:.2f}x | {loss:.4f} |", flush=True)
    rpc.shutdown()


if __name__ == "__main__":
    main()
