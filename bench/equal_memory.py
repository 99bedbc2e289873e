"""Ready BFW and adaptive against fixed ZB-H1 counting what a split backward holds until W.

The back-pressure limit counts F done - B done; a stage also keeps, for each B whose W has not
run, what that W needs (its layers' inputs and output gradient), up to max_pending_w more. ZB-H1
keeps 1F1B's memory even so (F done - W done at most P). This script runs, for `language` and
`multimodal`, P in {4, 8, 16}, M in {2P, 4P, 8P}, seeds 1-3 (TP 1, async), fixed ZB-H1 and ready
BFW and adaptive twice: at the default limit (P) with the default W cap (max_pending_w P), and
held to ZB-H1's total with the W cap 1 (F done - W done then peaks at P + 1 counted as below,
as ZB-H1's does). It prints, per workload and run, the
geometric mean and range of the speedup over ZB-H1 and the largest F done - W done any stage
reached, as a multiple of P (from the trace: a forward's activations counted from its start to
its W's end).
Deterministic: simulated, no timing. Five to ten seconds.

    /usr/bin/python3 bench/equal_memory.py RRFP
"""
import argparse
import json
import math
import os
import tempfile

from bench_args import executable, output_of

WORKLOADS = ["language", "multimodal"]
PPS = [4, 8, 16]
FACTORS = [2, 4, 8]
SEEDS = [1, 2, 3]


def held_peak(trace_path):
    """The largest F done - W done of any stage: +1 at a forward's start, -1 at its W's end."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    per_stage = {}
    for e in events:
        if e.get("ph") != "X" or e.get("tid", 0) != 0 or "kind" not in e.get("args", {}):
            continue
        kind = e["args"]["kind"]
        if kind == "F":
            per_stage.setdefault(e["pid"], []).append((e["ts"], 1))
        elif kind == "W":
            per_stage.setdefault(e["pid"], []).append((e["ts"] + e["dur"], -1))
    peak = 0
    for changes in per_stage.values():
        held = 0
        for _, d in sorted(changes, key=lambda c: (c[0], c[1])):  # a W ending frees first
            held += d
            peak = max(peak, held)
    return peak


def step_and_peak(rrfp, args, trace):
    out = output_of([rrfp, "simulate", "--json", "-", "--trace", trace] + args)
    return json.loads(out)["runs"][0]["makespan_ms"], held_peak(trace)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rrfp", metavar="RRFP", type=executable)
    rrfp = ap.parse_args().rrfp
    runs = [("bfw", "default"), ("bfw", "held"), ("adaptive", "default"), ("adaptive", "held")]
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "t.json")
        print(f"{'workload':11s} {'run':25s} {'x ZB-H1 (geomean, range)':>28s} "
              f"{'F-W / P':>8s} {'ZB-H1':>6s}")
        for wl in WORKLOADS:
            got = {r: ([], 0) for r in runs}
            base_peak = 0
            for pp in PPS:
                for factor in FACTORS:
                    for seed in SEEDS:
                        shape = ["--pp", str(pp), "-m", str(factor * pp), "--workload", wl,
                                 "--seed", str(seed)]
                        base, bp = step_and_peak(rrfp, shape + ["--hint", "zb-h1", "--policy",
                                                                "fixed"], trace)
                        base_peak = max(base_peak, bp / pp)
                        for hint, memory in runs:
                            extra = ["--max-pending-w", "1"] if memory == "held" else []
                            step, peak = step_and_peak(
                                rrfp, shape + ["--hint", hint, "--policy", "ready"] + extra, trace)
                            xs, worst = got[(hint, memory)]
                            xs.append(base / step)
                            got[(hint, memory)] = (xs, max(worst, peak / pp))
            for (hint, memory), (xs, peak) in got.items():
                geo = math.prod(xs) ** (1 / len(xs))
                label = f"ready {hint}, W cap " + ("P" if memory == "default" else "1")
                cell = f"{geo:.3f} ({min(xs):.3f}-{max(xs):.3f})"
                print(f"{wl:11s} {label:25s} {cell:>28s} {peak:8.2f} {base_peak:6.2f}")


if __name__ == "__main__":
    main()
