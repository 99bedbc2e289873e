#!/usr/bin/env python3
"""The paper's tables next to rrfp's simulation of them (docs/results-paper.md).

Usage: bench/paper.py RRFP [--seeds N] > tables.md
Every number is simulated with `--workload paper` (src/sim/workload.cpp says how it is
calibrated) and averaged over seeds 1..N; standard library only; deterministic.
Microbatch size 1 is assumed (the paper does not state it), so M = the global batch size.
"""
import argparse
import json
import os
import statistics
import tempfile
from bench_args import count, executable, output_of

PAPER = {
    "t3": {1: (2.581, 0.859, 66.72, 1.788, 1.020, 42.95, 0.0),
           2: (2.644, 0.946, 64.22, 1.824, 1.026, 43.20, 0.55),
           4: (2.750, 0.938, 65.89, 1.942, 1.054, 44.95, 0.77)},
    "t6": {0: (7.19, 0.0, 4.45, 0.0), 1: (7.39, 2.82, 4.53, 1.81),
           2: (8.00, 11.27, 4.75, 6.82), 3: (8.49, 18.06, 4.96, 11.36)},
    "t7": {"bf": 0.0, "fb": 0.45, "b-priority": 0.84, "f-priority": 4.92},
}
JITTER = {0: (0, 0, 0), 1: (0.1, 5000, 0.5), 2: (0.2, 10000, 1.0), 3: (0.3, 15000, 1.5)}


def sim(rrfp, args, seed, extra=()):
    cmd = [rrfp, "simulate", "--workload", "paper", "--seed", str(seed), "--json", "-", *args,
           *extra]
    return json.loads(output_of(cmd))


def run(rrfp, seeds, args, hint, policy, comm, extra=()):
    """Mean over seeds of (makespan s, compute s, waiting %, coordination %)."""
    out = []
    for seed in range(1, seeds + 1):
        r = sim(rrfp, [*args, "--hint", hint, "--policy", policy, "--comm", comm], seed, extra)
        r = r["runs"][0]
        st = r["stages"]
        busy = sum(s["busy_ms"] for s in st) / len(st)
        ms = r["makespan_ms"]
        out.append((ms / 1e3, busy / 1e3, 100 * (ms - busy) / ms,
                    100 * r["coordination_ms_per_rank"] / ms))
    return [statistics.mean(x[i] for x in out) for i in range(4)], [x[0] for x in out]


def baseline(rrfp, seeds, args, extra=()):
    return run(rrfp, seeds, args, "1f1b", "fixed", "blocking", extra)


def rrfp_bf(rrfp, seeds, args, extra=(), hint="bf"):
    return run(rrfp, seeds, [*args, "--limit", "32"], hint, "ready", "async", extra)


def table3(a):
    print("### Table 3: where the time goes (PP16, M = 32, limit 32)\n")
    print("| TP | paper 1F1B: iter s / compute s / blocked | rrfp 1F1B | paper RRFP: iter / "
          "compute / blocked / coord | rrfp BF | speedup paper / rrfp |")
    print("|---|---|---|---|---|---|")
    for tp in (1, 2, 4):
        args = ["--pp", "16", "-m", "32", "--tp", str(tp)]
        (b, _), (r, _) = baseline(a.rrfp, a.seeds, args), rrfp_bf(a.rrfp, a.seeds, args)
        p = PAPER["t3"][tp]
        print(f"| {tp} | {p[0]:.3f} / {p[1]:.3f} / {p[2]:.1f}% | {b[0]:.3f} / {b[1]:.3f} / "
              f"{b[2]:.1f}% | {p[3]:.3f} / {p[4]:.3f} / {p[5]:.1f}% / {p[6]:.2f}% | {r[0]:.3f} / "
              f"{r[1]:.3f} / {r[2]:.1f}% / {r[3]:.2f}% | {p[0] / p[3]:.2f}x / {b[0] / r[0]:.2f}x |")


def table6(a):
    print("\n### Table 6: jitter (PP8, TP2, M = 96)\n")
    print("| level | paper 1F1B s (slowdown) | rrfp 1F1B s (slowdown) std | paper RRFP | "
          "rrfp BF s (slowdown) std |")
    print("|---|---|---|---|---|")
    args = ["--pp", "8", "-m", "96", "--tp", "2"]
    base = {}
    with tempfile.TemporaryDirectory() as tmp:
        for lvl in (0, 1, 2, 3):
            path = os.path.join(tmp, f"j{lvl}.json")
            p_, floor, alpha = JITTER[lvl]
            with open(path, "w") as f:
                json.dump({"jitter_p": p_, "jitter_floor_us": floor, "jitter_alpha": alpha}, f)
            extra = ["--workload-file", path]
            (b, bs), (r, rs) = (baseline(a.rrfp, a.seeds, args, extra),
                                rrfp_bf(a.rrfp, a.seeds, args, extra))
            if lvl == 0:
                base = {"b": b[0], "r": r[0]}
            p = PAPER["t6"][lvl]
            print(f"| J{lvl} | {p[0]:.2f} ({p[1]:.2f}%) | {b[0]:.2f} "
                  f"({100 * (b[0] / base['b'] - 1):.2f}%) {statistics.pstdev(bs):.3f} | "
                  f"{p[2]:.2f} ({p[3]:.2f}%) | {r[0]:.2f} ({100 * (r[0] / base['r'] - 1):.2f}%) "
                  f"{statistics.pstdev(rs):.3f} |")


def table7(a):
    print("\n### Table 7: hint orders (PP8, TP1, M = 192, limit 32)\n")
    print("| hint | paper (vs BF) | rrfp s (vs BF) |")
    print("|---|---|---|")
    args = ["--pp", "8", "-m", "192"]
    bf = None
    for hint in ("bf", "fb", "b-priority", "f-priority", "adaptive"):
        (r, _) = rrfp_bf(a.rrfp, a.seeds, args, hint=hint,
                         extra=["--split-backward", "off"])
        bf = bf or r[0]
        paper = f"+{PAPER['t7'][hint]:.2f}%" if hint in PAPER["t7"] else "-"
        print(f"| {hint} | {paper} | {r[0]:.3f} ({100 * (r[0] / bf - 1):+.2f}%) |")


def table8(a):
    print("\n### Table 8: scaling (speedup of ready BF over fixed 1F1B, limit 32)\n")
    print("| sweep | setting | paper | rrfp BF | rrfp BFW |")
    print("|---|---|---|---|---|")
    rows = [("PP, Q1.7B+H TP1 GBS192", [("PP4", 4, 192, 1, 1.07), ("PP8", 8, 192, 1, 1.94),
                                          ("PP16", 16, 192, 1, 2.01)]),
            ("PP, L3-8B+5B TP1 GBS64", [("PP8", 8, 64, 1, 1.79), ("PP16", 16, 64, 1, 2.13),
                                         ("PP32", 32, 64, 1, 2.31)]),
            ("PP, Q4B+Big TP2 GBS64", [("PP4", 4, 64, 2, 1.03), ("PP8", 8, 64, 2, 1.64),
                                        ("PP16", 16, 64, 2, 1.72)]),
            ("GBS, Q4B+Big TP1 PP16", [("64", 16, 64, 1, 1.98), ("128", 16, 128, 1, 2.14),
                                        ("192", 16, 192, 1, 2.18)]),
            ("GBS, L3-8B+5B TP2 PP32", [("64", 32, 64, 2, 2.62), ("128", 32, 128, 2, 2.72),
                                         ("192", 32, 192, 2, 2.82)])]
    for name, pts in rows:
        for label, pp, m, tp, paper in pts:
            args = ["--pp", str(pp), "-m", str(m), "--tp", str(tp)]
            (b, _) = baseline(a.rrfp, a.seeds, args)
            (r, _) = rrfp_bf(a.rrfp, a.seeds, args)
            (w, _) = rrfp_bf(a.rrfp, a.seeds, args, hint="bfw")
            print(f"| {name} | {label} | {paper:.2f}x | {b[0] / r[0]:.2f}x | {b[0] / w[0]:.2f}x |")


def fig5(a):
    print("\n### Fig. 5: the back-pressure limit (PP8, TP1, M = 192, ready BF)\n")
    print("| limit | rrfp s | vs limit 48 |")
    print("|---|---|---|")
    args = ["--pp", "8", "-m", "192", "--hint", "bf", "--policy", "ready"]
    res = {}
    for limit in (4, 8, 16, 32, 48):
        out = [sim(a.rrfp, [*args, "--limit", str(limit)], s)["runs"][0]["makespan_ms"] / 1e3
               for s in range(1, a.seeds + 1)]
        res[limit] = statistics.mean(out)
    for limit, v in res.items():
        print(f"| {limit} | {v:.3f} | {v / res[48]:.3f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rrfp", type=executable)
    ap.add_argument("--seeds", type=count, default=5)
    a = ap.parse_args()
    print(f"Simulated with `bench/paper.py {a.rrfp} --seeds {a.seeds}` (means over seeds 1..{a.seeds}).\n")
    table3(a)
    table6(a)
    table7(a)
    table8(a)
    fig5(a)


if __name__ == "__main__":
    main()
