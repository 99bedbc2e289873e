#!/usr/bin/env python3
"""rrfp.Pipeline on one GPU: fixed 1F1B against ready BF and ready BFW on a model rrfp's C++ side
does not define (examples/transformer_lm.py's causal transformer, plain PyTorch), in bf16
autocast, under no jitter and the J2/J3 presets.

Every run is one configuration of one process, in the order given: a fresh model (the same
seed), warm-up steps, then measured steps, each the pipeline's step and AdamW's update; per
run it reports the median step and tokens/s over the measured steps, the bubble, the dispatch
gap (median and p99 over every gap of the measured steps), host CPU per task, MFU against the
GPU's dense bf16 peak and, from one more step under torch's profiler, each stage's idle share:
the part of the time a task of the stage was running (dispatched, its kernels not yet
complete) in which the stage's stream ran no kernel. A running task is work that is ready; the
stream idles inside it while the host is still launching its kernels.

Jitter: as `rrfp train --inject-jitter`, an F or B task (never a W) is hit with probability p
and its stage's thread stalls for alpha * floor * (0.5 + U) before it (J2: p 0.2, floor 10 ms,
alpha 1; J3: 0.3, 15 ms, 1.5); the draws are a function of (seed, step, stage, task) only, so
every schedule sees the same hits. (`rrfp train` stalls after the task, for alpha * max(floor,
the task's time); the GPU's tasks here are shorter than the floor.)

    PYTHONPATH=build-gpu/python python3 bench/pipeline_gpu.py --out pipeline.csv
    (on the CPU, a smoke run: --device cpu --dtype f32 --d-model 32 --heads 2 --layers 4 ...)
"""
import argparse
import csv
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import rrfp  # noqa: E402
from transformer_lm import check_heads, corpus, make_chunk  # noqa: E402
from bench_args import at_least, count, non_negative, setting_line  # noqa: E402

PEAK_BF16_TFLOPS = 989.0  # H100 and H200 SXM, dense, the vendor's datasheet
JITTER = {"J0": None, "J2": (0.2, 0.010, 1.0), "J3": (0.3, 0.015, 1.5)}
SCHEDULES = {"fixed-1f1b": ("1f1b", "fixed", "off"), "ready-bf": ("bf", "ready", "off"),
             "ready-bfw": ("bfw", "ready", "on")}


class Autocast(torch.nn.Module):
    """A chunk whose forward runs under bf16 autocast. (A step called inside `with
    torch.autocast` now carries it to the stages' threads too; inside the chunk it leaves the
    loss in full precision, as the tables measured from the start.) Its backward follows the
    forward's dtypes."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return self.inner(x)


def unit(*key):
    """A uniform draw in [0, 1) that is a function of `key` alone."""
    h = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") / 2.0**64


class Jitter:
    """delay_fn for Pipeline: the stall a task's stage takes before it (see the module)."""

    def __init__(self, level, seed):
        self.level, self.seed, self.step = JITTER[level], seed, 0

    def __call__(self, stage, kind, chunk, mb):
        if self.level is None or kind == "W":
            return 0.0
        p, floor, alpha = self.level
        if unit(self.seed, "hit", self.step, stage, kind, chunk, mb) >= p:
            return 0.0
        return alpha * floor * (0.5 + unit(self.seed, "size", self.step, stage, kind, chunk, mb))


def flops_per_token(a, params):
    # 6 per parameter (forward and backward) plus attention's two products over the whole
    # square (the mask is applied after them).
    return 6 * params + 12 * a.layers * a.seq * a.d_model


def kernel_busy_by_stage(trace_path, pp):
    """Per stage: the union of its stream's kernel (and copy) intervals, in µs, read from the
    profiler's Chrome trace. Streams are named by the marker kernel each stage's stream ran
    first: stage s slept (s + 1) units, so the marker's duration orders the streams."""
    events = json.load(open(trace_path))["traceEvents"]
    by_stream = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            by_stream.setdefault(e["args"].get("stream"), []).append(e)
    markers = []
    for s, es in by_stream.items():
        spins = [e for e in es if "spin" in e["name"].lower() or "sleep" in e["name"].lower()]
        if spins:
            markers.append((spins[0]["dur"], s, spins[0]))
    if len(markers) < pp:
        return None
    markers = sorted(markers)[-pp:]  # the longest pp: the markers (not the default stream)
    busy = []
    for _, s, marker in markers:
        iv = sorted((e["ts"], e["ts"] + e["dur"]) for e in by_stream[s] if e is not marker)
        total, end = 0.0, -1.0
        for a, b in iv:
            if b > end:
                total += b - max(a, end)
                end = b
        busy.append(total)
    return busy


def idle_shares(run, stream_of, args):
    """One more step, without jitter, under the profiler: per stage, 1 - its stream's kernel
    time / the time a task of it was running. None (saying why) where that fails."""
    from torch.profiler import ProfilerActivity, profile
    delays = run.delays
    level, delays.level = delays.level, None
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for s in range(args.pp):  # the markers, each on its stage's stream
                with torch.cuda.stream(stream_of[s]):
                    torch.cuda._sleep(200_000 * (s + 1))
            torch.cuda.synchronize()
            run.step()
            torch.cuda.synchronize()
        path = os.path.join(tempfile.mkdtemp(), "trace.json")
        prof.export_chrome_trace(path)
        busy = kernel_busy_by_stage(path, args.pp)
    except Exception as e:  # the profiler is a measurement aid: the table goes on without it
        print(f"[pipeline_gpu] no idle shares: {type(e).__name__}: {e}", file=sys.stderr)
        return None
    finally:
        delays.level = level
    if busy is None:
        print("[pipeline_gpu] no idle shares: the trace lacks a marker per stage", file=sys.stderr)
        return None
    return idle_of(busy, run.pipe.last_step.tasks, args.pp)


def idle_of(busy_us, tasks, pp):
    """Per stage: the share of its tasks' running time (tasks: (stage, name, start s, end s))
    not covered by `busy_us`, its stream's kernel time."""
    running = [0.0] * pp
    for stage, _, start, end in tasks:
        running[stage] += (end - start) * 1e6
    return [max(0.0, 1 - b / r) if r > 0 else 0.0 for b, r in zip(busy_us, running)]


class Run:
    """One configuration: its pipeline over a fresh model (the same seed every run), its
    optimizer, and its own draws of data and jitter."""

    def __init__(self, name, jitter, args, data):
        hint, policy, split = SCHEDULES[name]
        n = args.pp
        self.args, self.data = args, data
        self.delays = Jitter(jitter, args.seed)

        def chunk(i):
            m = make_chunk(i, n, args)
            return Autocast(m) if args.dtype == "bf16" else m

        self.pipe = rrfp.Pipeline(
            chunk, lambda logits, y: F.cross_entropy(logits.float().flatten(0, 1), y.flatten()),
            pp=n, microbatches=args.microbatches, hint=hint, policy=policy,
            split_backward=split, delay_fn=self.delays, device=args.device)
        self.params = [p for c in self.pipe.chunks.values() for p in c.parameters()]
        self.opt = torch.optim.AdamW(self.params, lr=args.lr)
        self.gen = torch.Generator().manual_seed(args.seed)

    def step(self):
        """One training step: the pipeline's, then AdamW's update."""
        m, rows, t = self.args.microbatches, self.args.rows, self.args.seq
        at = torch.randint(0, len(self.data) - t - 1, (m * rows,), generator=self.gen)
        seqs = torch.stack([self.data[i:i + t + 1] for i in at.tolist()])
        self.opt.zero_grad()
        loss = self.pipe.step(seqs[:, :-1], seqs[:, 1:])
        self.opt.step()
        self.delays.step += 1
        return loss


def sync(args):
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(name, jitter, args, data):
    run = Run(name, jitter, args, data)
    pipe = run.pipe
    params = sum(p.numel() for p in run.params)
    steps, gaps, cpus, bubbles = [], [], [], []
    for k in range(args.warmup + args.steps):
        sync(args)
        t0, c0 = time.perf_counter(), time.process_time()
        run.step()
        sync(args)
        if k >= args.warmup:
            steps.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            gaps += pipe.last_step.dispatch_gaps_us
            bubbles.append(pipe.last_step.bubble)
    tasks = len(pipe.last_step.tasks)
    stream_of = [r.device.stream for r in sorted(pipe._runners, key=lambda r: r.stage)]
    idle = idle_shares(run, stream_of, args) if args.profile else None
    tokens = args.microbatches * args.rows * args.seq
    step = statistics.median(steps)
    gaps.sort()
    return {
        "run": f"{jitter.lower()}-{name}", "steps": len(steps), "step_ms": 1e3 * step,
        "tokens_s": tokens / step, "bubble": statistics.mean(bubbles),
        "gap_us_median": gaps[len(gaps) // 2] if gaps else 0,
        "gap_us_p99": gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))] if gaps else 0,
        "cpu_us_task": 1e6 * statistics.median(cpus) / tasks,
        # Against the GPU's bf16 peak: on the CPU none ("0.0%" in every row read as a result).
        "mfu": (tokens / step * flops_per_token(args, params) / (PEAK_BF16_TFLOPS * 1e12)
                if args.device.startswith("cuda") else ""),
        "idle": "" if idle is None else " ".join(f"{x:.3f}" for x in idle),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--deterministic", default="on", choices=["on", "off"])
    ap.add_argument("--pp", type=count, default=4)
    ap.add_argument("--microbatches", type=count, default=16)
    ap.add_argument("--rows", type=count, default=2, help="sequences per microbatch")
    ap.add_argument("--seq", type=count, default=512)
    ap.add_argument("--d-model", type=count, default=1024)
    ap.add_argument("--heads", type=count, default=16)
    ap.add_argument("--layers", type=count, default=12)
    ap.add_argument("--lr", type=non_negative, default=3e-4)
    ap.add_argument("--warmup", type=at_least(0), default=3)
    ap.add_argument("--steps", type=count, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runs", default="J0:fixed-1f1b,J0:ready-bf,J0:ready-bfw,"
                    "J2:fixed-1f1b,J2:ready-bfw,J3:fixed-1f1b,J3:ready-bfw",
                    help="JITTER:SCHEDULE,... (J0, J2, J3; " + ", ".join(SCHEDULES) + ")")
    ap.add_argument("--profile", default="on", choices=["on", "off"],
                    help="one profiled step per run for the stages' idle shares")
    ap.add_argument("--budget-s", type=non_negative, default=0,
                    help="start no run past this many seconds (0: no limit), naming each skipped")
    ap.add_argument("--data", default="/usr/share/common-licenses")
    ap.add_argument("--out", default=None, help="CSV of the rows (default: none)")
    args = ap.parse_args()
    # Refused here in one line each: a bad shape was found mid-run, in a traceback (a --heads
    # not dividing --d-model failed the first forward, after the model was built).
    check_heads(ap, args)
    if args.out and not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        ap.error(f"--out {args.out}: no such folder")  # it was found after the first run
    args.profile = args.profile == "on" and args.device.startswith("cuda")
    if args.dtype == "bf16" and not args.device.startswith("cuda"):
        ap.error("--dtype bf16 (autocast) needs --device cuda; the CPU runs f32")
    if args.layers % args.pp:
        ap.error(f"--layers {args.layers} must be a multiple of --pp {args.pp}")
    runs = []
    for spec in args.runs.split(","):
        jitter, _, name = spec.partition(":")
        if jitter not in JITTER or name not in SCHEDULES:
            raise SystemExit(f"--runs: '{spec}' is not JITTER:SCHEDULE (JITTER in "
                             f"{', '.join(JITTER)}; SCHEDULE in {', '.join(SCHEDULES)})")
        runs.append((jitter, name))
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {args.device}: torch sees no GPU here (give --device cpu)")
    if args.deterministic == "on":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
    data = corpus(args.data, args.seq)  # refuses a text too short for a window of --seq
    # On stderr: stdout is the table alone.
    print(f"[pipeline_gpu] {setting_line(f'{args.seed} (data, jitter), 1000 + i (chunk i)')}",
          file=sys.stderr, flush=True)
    rows, start = [], time.perf_counter()
    for jitter, name in runs:
        t0 = time.perf_counter()
        if args.budget_s and t0 - start > args.budget_s:
            print(f"[pipeline_gpu] skip {jitter}:{name} (past the {args.budget_s:.0f} s budget)",
                  file=sys.stderr, flush=True)
            continue
        rows.append(measure(name, jitter, args, data))
        print(f"[pipeline_gpu] {rows[-1]['run']}: {rows[-1]['step_ms']:.1f} ms/step "
              f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
        if args.out:
            with open(args.out, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
    base = {r["run"].split("-")[0]: r["step_ms"] for r in rows if r["run"].endswith("fixed-1f1b")}
    print("| run | step ms | vs fixed 1F1B | tokens/s | bubble | gap us (median, p99) "
          "| host CPU us/task | MFU | idle while running, by stage |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        b = base.get(r["run"].split("-")[0])
        idle = " ".join(f"{100 * float(x):.0f}%" for x in r["idle"].split()) or "-"
        mfu = "-" if r["mfu"] == "" else f"{100 * float(r['mfu']):.1f}%"
        print(f"| {r['run']} | {r['step_ms']:.1f} | {'%.2fx' % (b / r['step_ms']) if b else '-'} "
              f"| {r['tokens_s']:.0f} | {100 * r['bubble']:.1f}% | {r['gap_us_median']:.1f}, "
              f"{r['gap_us_p99']:.1f} | {r['cpu_us_task']:.0f} | {mfu} | {idle} |")


if __name__ == "__main__":
    main()
