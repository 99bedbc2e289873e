"""A model with a heavy, variable front: a convolutional image encoder in front of a small
transformer, with 0 to --max-images images per microbatch. How long the first stage works on a
microbatch depends on how many images it has, so a fixed schedule waits where ready dispatch
finds other work. Runs the same steps (same weights, same data) under fixed 1F1B and ready BF,
alternating between the two step by step so that the machine's load falls on both alike (one
after the other, a busy machine moved their ratio from 0.7x to 1.6x), and prints their step
times side by side; the losses are bitwise equal.

    PYTHONPATH=build/python /usr/bin/python3 examples/variable_front.py --steps 10
"""
import argparse
import statistics
import time

import torch
from torch import nn
import torch.nn.functional as F

import rrfp


class Front(nn.Module):
    """Images -> 4 tokens each (a small CNN), then the text tokens; one sequence per sample."""

    def __init__(self, d):
        super().__init__()
        self.cnn = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(2))
        self.img = nn.Linear(64, d)
        self.tok = nn.Embedding(256, d)

    def forward(self, batch):  # the first chunk gets the microbatch as given: here a tuple
        ids, images = batch  # (B, T), (B, n, 3, 32, 32)
        b, n = images.shape[:2]
        text = self.tok(ids)
        if n == 0:
            return text
        feats = self.cnn(images.flatten(0, 1))  # (B*n, 64, 2, 2)
        feats = self.img(feats.flatten(2).transpose(1, 2)).reshape(b, n * 4, -1)
        return torch.cat([feats, text], dim=1)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.ff = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(),
                                nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.ln(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.ff(x)


def make_chunk(i, n, d):
    torch.manual_seed(2000 + i)
    layers = [Front(d)] if i == 0 else [Block(d)]
    if i == n - 1:
        layers += [nn.LayerNorm(d), nn.Linear(d, 256)]
    return nn.Sequential(*layers)


def loss_fn(logits, target):  # the text positions are the last T
    return F.cross_entropy(logits[:, -target.shape[1]:].flatten(0, 1), target.flatten())


def batches(steps, m, rows, t, max_images, seed):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        xs, ys = [], []
        for _ in range(m):
            n = int(torch.randint(0, max_images + 1, (1,), generator=g))
            seq = torch.randint(0, 256, (rows, t + 1), generator=g)
            xs.append((seq[:, :-1], torch.randn(rows, n, 3, 32, 32, generator=g)))
            ys.append(seq[:, 1:])
        out.append((xs, ys))
    return out


def build(hint, policy, args):
    n = args.pp
    pipe = rrfp.Pipeline(lambda i: make_chunk(i, n, args.d_model), loss_fn, pp=args.pp,
                         microbatches=args.microbatches, hint=hint, policy=policy)
    opt = torch.optim.SGD([p for c in pipe.chunks.values() for p in c.parameters()], lr=0.01)
    return pipe, opt


def timed_step(pipe, opt, xs, ys):
    t0 = time.perf_counter()
    opt.zero_grad()
    loss = pipe.step(xs, ys)
    opt.step()
    return time.perf_counter() - t0, loss


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--rows", type=int, default=2)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--max-images", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    for flag in ("pp", "steps", "microbatches", "rows", "seq", "d_model"):
        if getattr(args, flag) < 1:  # --steps 0 failed at the end: no median of no times
            ap.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.d_model % 4:  # the attention's 4 heads: an AssertionError mid-build
        ap.error(f"--d-model must be a multiple of 4 (the attention's heads), got {args.d_model}")
    if args.max_images < 0:
        ap.error("--max-images must be at least 0")
    data = batches(args.steps, args.microbatches, args.rows, args.seq, args.max_images, args.seed)
    runs = [("fixed 1f1b", "1f1b", "fixed"), ("ready bf", "bf", "ready")]
    built = {name: build(hint, policy, args) for name, hint, policy in runs}
    times = {name: [] for name in built}
    losses = {name: [] for name in built}
    for k, (xs, ys) in enumerate(data):
        for name in (built if k % 2 == 0 else reversed(built)):  # each first half the time
            dt, loss = timed_step(*built[name], xs, ys)
            times[name].append(dt)
            losses[name].append(loss)
    results = {name: (times[name], losses[name], built[name][0].last_step) for name in built}
    base = statistics.median(results["fixed 1f1b"][0])
    print(f"P={args.pp} M={args.microbatches}, 0..{args.max_images} images per microbatch, "
          f"{args.steps} steps (median step time)")
    for name, (times, losses, rec) in results.items():
        med = statistics.median(times)
        print(f"  {name:11s} {1e3 * med:8.1f} ms   {base / med:.2f}x   bubble "
              f"{100 * rec.bubble:.1f}%   last loss {losses[-1].item() / args.microbatches:.4f}")
    same = all(torch.equal(a, b) for a, b in zip(results["fixed 1f1b"][1], results["ready bf"][1]))
    print("losses bitwise equal across schedules:", same)
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
