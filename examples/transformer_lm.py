"""A causal transformer language model written in plain PyTorch, trained with rrfp.Pipeline.

Nothing in the model knows about rrfp: it is cut into P*V chunks (an nn.Module each) and handed
to rrfp.Pipeline, which runs their forward and backward tasks with ready-set dispatch. The data
are the bytes of the text files in --data (by default Debian's licence texts).

    export PYTHONPATH=build/python   # the package, built (or `pip install .` instead)
    /usr/bin/python3 examples/transformer_lm.py --pp 2 --steps 200
    tests/mpirun.sh 2 /usr/bin/python3 examples/transformer_lm.py   # mpirun, also as root
    torchrun --nproc_per_node 2 --redirects 1 --tee 1 examples/transformer_lm.py
    tests/mpirun.sh 4 /usr/bin/python3 examples/transformer_lm.py --pp 4 --tie-embeddings
    python3 examples/transformer_lm.py --device cuda --d-model 1024 --layers 8 --seq 512

On a GPU (--device cuda) every stage has a CUDA stream of its own in one process, and a task
counts as done when its kernels have. With --tie-embeddings the first stage's embedding is the
last stage's output projection: each process keeps a copy and the pipeline gives both the same
gradient every step (tied= in rrfp.Pipeline).
"""
import argparse
import glob
import os
import time

import torch
from torch import nn
import torch.nn.functional as F

import rrfp


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.reshape(b, t, self.heads, -1).transpose(1, 2)
                   for z in self.qkv(self.ln1(x)).split(d, dim=-1))
        att = (q @ k.transpose(-1, -2)) * (d // self.heads) ** -0.5
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf"))
        x = x + self.proj((att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.ff(self.ln2(x))


class Embed(nn.Module):
    def __init__(self, d, max_len, vocab=256):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_len, d)

    def forward(self, ids):
        return self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))


class TiedHead(nn.Module):
    """The output projection of a GPT whose embedding and output matrices are one: its weight is
    declared tied to the embedding's (tied= below), so the pipeline keeps the two one
    parameter though they live in different chunks (and processes)."""

    def __init__(self, d, vocab=256):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab, d))  # takes the embedding's values

    def forward(self, h):
        return F.linear(h, self.weight)


def make_chunk(i, n, args, tie=False):
    """Chunk i of n: the first embeds, the last predicts the next byte (tie: by a TiedHead)."""
    torch.manual_seed(1000 + i)  # each chunk on its own: a process builds only its own
    layers = [Embed(args.d_model, args.seq)] if i == 0 else []
    if i == 0 and tie:  # small, as GPT-2's: the matrix also makes the logits
        nn.init.normal_(layers[0].tok.weight, std=0.02)
    layers += [Block(args.d_model, args.heads) for _ in range(args.layers // n)]
    if i == n - 1:
        head = TiedHead(args.d_model) if tie else nn.Linear(args.d_model, 256)
        layers += [nn.LayerNorm(args.d_model), head]
    return nn.Sequential(*layers)


def ties(n, args):
    """The embedding's matrix and the tied head's: chunk 0's module 0 and chunk n-1's last
    (after its blocks and LayerNorm, and the embedding too when there is one chunk)."""
    if not args.tie_embeddings:
        return None
    head = args.layers // n + 1 + (n == 1)
    return [["0.0.tok.weight", f"{n - 1}.{head}.weight"]]


def check_heads(ap, args):
    """--heads must divide --d-model (each head takes an equal share of the width): refused in
    one line, by this script and the benchmarks that build its model, where the first forward
    failed mid-step on the reshape."""
    if args.d_model % args.heads:
        ap.error(f"--heads {args.heads} must divide --d-model {args.d_model}")


def out_of_memory(e):
    """Whether a step failed for want of memory, on the CPU or the GPU: smaller flags fix it
    (--seq 100000 asks 640 GB for one attention matrix)."""
    text = str(e)
    return (isinstance(e.__cause__, MemoryError) or "can't allocate memory" in text
            or "out of memory" in text)


def corpus(path, seq=0):
    """The bytes of a file, or of the files of a folder, as one long sequence of tokens, at
    least 1 KiB and more than `seq` + 1 (a window and its next token; bench/ reads it too)."""
    if os.path.isfile(path):
        files = [path]
    elif os.path.isdir(path):
        files = sorted(glob.glob(os.path.join(glob.escape(path), "*")))
    else:
        raise SystemExit(f"--data {path}: no such file or folder")
    data = b"".join(open(f, "rb").read() for f in files if os.path.isfile(f))
    # A window of --seq tokens and its next token are drawn from it: a shorter text has none.
    need = max(1024, seq + 2)
    if len(data) < need:
        raise SystemExit(f"--data {path}: {len(data)} bytes; needs at least {need} "
                         f"(1 KiB, and more than --seq {seq} + 1)")
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # One stage per process by default, under torchrun (WORLD_SIZE) and mpirun alike.
    launched = os.environ.get("WORLD_SIZE") or os.environ.get("OMPI_COMM_WORLD_SIZE")
    ap.add_argument("--pp", type=int, default=int(launched or 2),
                    help="stages (default: one a process under a launcher, else 2)")
    ap.add_argument("--vpp", type=int, default=1, help="chunks a stage (default: 1)")
    ap.add_argument("--placement", default=None, choices=["loop", "vshape"],
                    help="chunks to stages (default: vshape for --hint zb-v, else loop)")
    ap.add_argument("--microbatches", type=int, default=8, help="microbatches a step (default: 8)")
    ap.add_argument("--rows", type=int, default=4, help="sequences a microbatch (default: 4)")
    ap.add_argument("--seq", type=int, default=64, help="tokens a sequence (default: 64)")
    ap.add_argument("--d-model", type=int, default=64, help="width (default: 64)")
    ap.add_argument("--heads", type=int, default=4, help="attention heads (default: 4)")
    ap.add_argument("--layers", type=int, default=4, help="blocks (default: 4)")
    ap.add_argument("--steps", type=int, default=100, help="training steps (default: 100)")
    ap.add_argument("--lr", type=float, default=3e-3, help="AdamW's (default: 3e-3)")
    ap.add_argument("--hint", default="bf", help="a hint's name or file (default: bf)")
    ap.add_argument("--policy", default="ready", help="ready or fixed (default: ready)")
    ap.add_argument("--transport", default=None, choices=["inproc", "mpi", "c10d"],
                    help="default: by the launcher (mpirun: mpi, torchrun: c10d, else inproc)")
    ap.add_argument("--data", default="/usr/share/common-licenses",
                    help="a text file, or a folder of them (default: the Debian licence texts)")
    ap.add_argument("--seed", type=int, default=0, help="the batches' draw (default: 0)")
    ap.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: the CPU)")
    ap.add_argument("--tie-embeddings", action="store_true",
                    help="the output projection is the embedding's matrix (as in GPT-2)")
    args = ap.parse_args()
    for flag in ("pp", "vpp", "steps", "layers", "heads", "d_model", "seq", "rows",
                 "microbatches"):
        if getattr(args, flag) < 1:  # --steps 0 failed at the end, on a step that never ran
            ap.error(f"--{flag.replace('_', '-')} must be at least 1")
    if not 0 < args.lr < float("inf"):  # nan failed in AdamW's words, after the pipeline's start
        ap.error(f"--lr must be a positive number, got {args.lr}")
    check_heads(ap, args)
    n = args.pp * args.vpp
    # Bad input exits 2, as argparse's own refusals do (these exited 1, as a failed run does).
    if args.layers % n:
        ap.error(f"--layers {args.layers} must be a multiple of pp * vpp = {n}")
    # zb-v runs on the V shape this script picks for it, which takes two chunks a stage.
    if args.hint == "zb-v" and args.placement is None and args.vpp != 2:
        ap.error(f"--hint zb-v runs two chunks a stage, on the V shape: give --vpp 2 "
                 f"(got {args.vpp})")
    try:
        data = corpus(args.data, args.seq)
    except SystemExit as e:
        ap.error(str(e))
    if (args.device or "").startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: torch sees no CUDA device")

    try:
        pipe = rrfp.Pipeline(lambda i: make_chunk(i, n, args, args.tie_embeddings),
                             lambda logits, y: F.cross_entropy(logits.flatten(0, 1),
                                                               y.flatten()),
                             pp=args.pp, vpp=args.vpp, microbatches=args.microbatches,
                             placement=args.placement or ("vshape" if args.hint == "zb-v" else
                                                          "loop"),
                             hint=args.hint, policy=args.policy, transport=args.transport,
                             device=args.device, tied=ties(n, args))
    except ValueError as e:
        # A hint, policy, device, placement or transport the pipeline refuses: its message names
        # the option, this script's flag of the same name (anything else keeps its traceback).
        ap.error(str(e))
    params = [p for c in pipe.chunks.values() for p in c.parameters()]
    opt = torch.optim.AdamW(params, lr=args.lr)
    g = torch.Generator().manual_seed(args.seed)
    m, rows, t = args.microbatches, args.rows, args.seq
    speak = pipe.rank == 0  # every process gets the step's loss and record
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        at = torch.randint(0, len(data) - t - 1, (m * rows,), generator=g)
        seqs = torch.stack([data[i:i + t + 1] for i in at.tolist()])
        opt.zero_grad()
        try:
            loss = pipe.step(seqs[:, :-1], seqs[:, 1:])
        except rrfp.StageError as e:
            if not out_of_memory(e):
                raise  # a bug keeps its traceback
            raise SystemExit(f"transformer_lm.py: {e} (lower --seq, --rows, --d-model or "
                             f"--microbatches)")
        pipe.clip_grad_norm_(1.0)  # by the whole model's norm, whatever process holds a part
        opt.step()
        if speak and (step % 20 == 0 or step in (1, args.steps)):
            tok = step * m * rows * t / (time.perf_counter() - start)
            print(f"step {step}/{args.steps}  loss {loss.item() / m:.3f}  {tok:.0f} tok/s  "
                  f"bubble {100 * pipe.last_step.bubble:.1f}%", flush=True)
    if speak:
        print(pipe.last_step.table())


if __name__ == "__main__":
    main()
