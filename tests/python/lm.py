"""A small causal transformer LM written in plain PyTorch, cut into pipeline chunks: the kind
of model a user brings (nothing from rrfp inside), with the blocks of the example
examples/transformer_lm.py. Deterministic for a seed."""
import os
import sys

import torch
from torch import nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples"))
from transformer_lm import Block, Embed  # noqa: E402


def chunks(n, *, seed=0, vocab=64, d=32, heads=4, max_len=64, blocks_per_chunk=1):
    """n chunks: the first embeds, the last predicts, each has blocks_per_chunk blocks."""
    torch.manual_seed(seed)
    out = []
    for i in range(n):
        layers = [Embed(d, max_len, vocab)] if i == 0 else []
        layers += [Block(d, heads) for _ in range(blocks_per_chunk)]
        if i == n - 1:
            layers += [nn.LayerNorm(d), nn.Linear(d, vocab)]
        out.append(nn.Sequential(*layers))
    return out


def loss_fn(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def batches(m, *, seed=0, vocab=64, rows=2, lengths=(8, 24)):
    """m microbatches of token ids with lengths drawn from `lengths`: (inputs, targets)."""
    g = torch.Generator().manual_seed(seed)
    xs, ys = [], []
    for _ in range(m):
        t = int(torch.randint(lengths[0], lengths[1] + 1, (1,), generator=g))
        seq = torch.randint(0, vocab, (rows, t + 1), generator=g)
        xs.append(seq[:, :-1])
        ys.append(seq[:, 1:])
    return xs, ys


def grads(chunks):
    """A copy of every parameter's .grad of `chunks`, in order (None where there is none)."""
    return [None if p.grad is None else p.grad.clone() for c in chunks for p in c.parameters()]


def same_grads(a, b):
    """Whether two grads() are bitwise equal, None where the other is None."""
    return all((x is None and y is None) or (x is not None and y is not None and torch.equal(x, y))
               for x, y in zip(a, b))


def reference_step(model_chunks, xs, ys, loss_of=None):
    """A plain loop: each microbatch through every chunk, loss.backward() per microbatch
    (`loss_of`: the loss function, this model's by default)."""
    total = None
    for x, y in zip(xs, ys):
        h = x
        for c in model_chunks:
            h = c(h)
        loss = (loss_of or loss_fn)(h, y)
        loss.backward()
        total = loss.detach() if total is None else total + loss.detach()
    return total


def run_reference(n_chunks, steps, m, *, replicas=1, lr=0.05, clip=None, skip=()):
    """The plain loop the pipeline must match: SGD over `steps` steps of m microbatches (batch
    seed = step, or step * 100 + replica). With replicas > 1, each replica's gradients are
    summed in its loop, then the replicas' sums are added in replica order (data parallel).
    clip: torch's clip_grad_norm_ over the model's parameters before each update. skip: steps
    the loop leaves out (their batches drawn, nothing trained; their loss None).
    Returns the chunks after the last step and each step's loss (replica 0's)."""
    chunks_ = chunks(n_chunks)
    params = [p for c in chunks_ for p in c.parameters()]
    opt = torch.optim.SGD(params, lr=lr)
    losses = []
    for s in range(steps):
        if s in skip:
            losses.append(None)
            continue
        total = [None] * len(params)
        for r in range(replicas):
            xs, ys = batches(m, seed=s if replicas == 1 else s * 100 + r)
            for p in params:
                p.grad = None
            loss = reference_step(chunks_, xs, ys)
            if r == 0:
                losses.append(loss)
            total = [g if t is None else t + g for t, g in zip(total, (p.grad for p in params))]
        for p, g in zip(params, total):
            p.grad = g
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
    return chunks_, losses


def thread_ids():
    """This process's threads, by id: the set a test compares with what it started."""
    return set(os.listdir("/proc/self/task"))


def threads_started_since(before, seconds=5.0):
    """The threads alive now that were not in `before` (thread_ids()), waited for up to
    `seconds` to end. A count compared with a count missed a thread left behind when another
    one (a test's timer) ended meanwhile, and failed when that one was ending at the start."""
    import time
    deadline = time.monotonic() + seconds
    while True:
        left = thread_ids() - before
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.01)


def in_fresh_interpreter(call, said, timeout=240):
    """Runs `call` ("module.function", of this folder) in a new Python of the package in use, and
    asserts that it printed `said`. For what a shared test process cannot hold: torch 1.13's
    profiling executor switched off once modules were scripted there crashed it."""
    import subprocess
    import rrfp
    module, function = call.rsplit(".", 1)
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [here, os.path.dirname(os.path.dirname(rrfp.__file__))]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    done = subprocess.run(
        [sys.executable, "-c", f"import {module} as t; t.{function}(); print({said!r})"],
        env=env, capture_output=True, text=True, timeout=timeout, cwd=here)
    assert done.returncode == 0 and said in done.stdout, done.stderr[-2000:]
