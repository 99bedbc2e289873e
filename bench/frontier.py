#!/usr/bin/env python3
"""How far from the best possible (docs/results-frontier.md).

  small  -- the exact optimum against the heuristic search on small shapes (P <= 4, M <= 6),
            with the lower bounds and BF/BFW/adaptive; writes docs/data/frontier-small.csv
  grid   -- presets x P x M x limits: fixed 1F1B, BF, BFW, adaptive and the clairvoyant plan
            (free microbatch order, and in microbatch order at the first stage); writes
            docs/data/frontier-grid.csv

Usage: bench/frontier.py RRFP small|grid [--budget S] [--out CSV]
Needs only the standard library. Every run is deterministic except the plan's time budget
(the small instances use an evaluation cap instead, so they are reproducible anywhere).
"""
import argparse
import csv
import itertools
import json
import math
import os
import sys
from bench_args import executable, output_of, positive


def run_json(cmd):
    return json.loads(output_of(cmd))


def makespan(rrfp, flags, hint, policy, comm="async", split="off"):
    if policy == "fixed":  # the fixed policy takes no --limit: its list decides what it holds
        at = flags.index("--limit") if "--limit" in flags else -1
        flags = flags[:at] + flags[at + 2:] if at >= 0 else flags
    j = run_json([rrfp, "simulate", *flags, "--hint", hint, "--policy", policy, "--comm", comm,
                  "--split-backward", split, "--json", "-"])
    return j["runs"][0]["makespan_ms"], j["runs"][0]


def plan(rrfp, flags, split, extra):
    return run_json([rrfp, "plan", *flags, "--split-backward", split, "--json", "-", *extra])


def small(args):
    rows = []
    shapes = [(2, 2), (2, 4), (2, 6), (3, 2), (3, 4), (3, 6), (4, 2), (4, 4), (4, 6)]
    loads = ["language", "multimodal", "jitter:J2", "straggler"]
    for (p, m), w, limit in itertools.product(shapes, loads, [0, 1]):
        flags = ["--pp", str(p), "-m", str(m), "--workload", w, "--seed", "1", "--limit", str(limit)]
        j = plan(args.rrfp, flags, "off",
                 ["--max-evaluations", "3000", "--exact", "on", "--exact-budget", str(args.budget)])
        pl = j["plan"]
        ex = pl["exact"]
        run = j["runs"][0]
        bf, _ = makespan(args.rrfp, flags, "bf", "ready")
        f1, _ = makespan(args.rrfp, flags, "1f1b", "fixed")
        ad, _ = makespan(args.rrfp, flags, "adaptive", "ready", split="off")
        rows.append(dict(pp=p, microbatches=m, workload=w, limit_flag=limit, limit=pl["limit"],
                         exact_ms=ex["makespan_ms"], proven=ex["proven"], nodes=ex["nodes"],
                         exact_s=round(ex["seconds"], 3), search_ms=pl["search_ms"],
                         bound_ms=pl["lower_bound_ms"], bound_old_ms=run["lower_bound_ms"],
                         bf_ms=bf, adaptive_ms=ad, fixed_1f1b_ms=f1))
        print(f"P={p} M={m} {w:10s} L={pl['limit']}: exact {ex['makespan_ms']:.3f} "
              f"({'proven' if ex['proven'] else 'NOT proven'}, {ex['nodes']} nodes), search "
              f"{pl['search_ms']:.3f}, bound {pl['lower_bound_ms']:.3f}, bf {bf:.3f}",
              file=sys.stderr)
    write(args.out, rows)
    proven = [r for r in rows if r["proven"]]
    gaps = [r["search_ms"] / r["exact_ms"] - 1 for r in proven]
    print(f"\n{len(proven)} of {len(rows)} instances proven optimal")
    print(f"heuristic above the optimum: mean {100 * sum(gaps) / len(gaps):.2f}%, "
          f"max {100 * max(gaps):.2f}%, equal on {sum(g < 1e-12 for g in gaps)}")
    for key, name in [("bound_ms", "new bound"), ("bound_old_ms", "old bound"),
                      ("bf_ms", "ready BF"), ("adaptive_ms", "ready adaptive (whole B)"),
                      ("fixed_1f1b_ms", "fixed 1F1B (default limit only)")]:
        # Fixed 1F1B ignores a limit below its own peak: compare it where the limit is its own.
        sel = [r for r in proven if key != "fixed_1f1b_ms" or r["limit_flag"] == 0]
        ratio = [r[key] / r["exact_ms"] for r in sel]
        print(f"{name:26s} / optimum: mean {sum(ratio) / len(ratio):.3f}, "
              f"min {min(ratio):.3f}, max {max(ratio):.3f}")


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def grid(args):
    rows = []
    loads = ["language", "multimodal", "paper-comm", "jitter:J0", "jitter:J1", "jitter:J2",
             "jitter:J3"]
    for w, limit, p, factor in itertools.product(loads, [0, 32], [4, 8], [2, 4]):
        m = p * factor
        flags = ["--pp", str(p), "-m", str(m), "--workload", w, "--seed", "1", "--limit", str(limit)]
        row = dict(workload=w, limit_flag=limit, pp=p, microbatches=m)
        row["fixed_1f1b"], _ = makespan(args.rrfp, flags, "1f1b", "fixed")
        row["bf"], _ = makespan(args.rrfp, flags, "bf", "ready")
        row["bfw"], _ = makespan(args.rrfp, flags, "bfw", "ready", split="on")
        row["adaptive"], _ = makespan(args.rrfp, flags, "adaptive", "ready", split="on")
        budget = ["--budget", str(args.budget), "--exact", "off"]
        row["plan"] = plan(args.rrfp, flags, "on", budget)["plan"]["makespan_ms"]
        row["plan_in_order"] = plan(args.rrfp, flags, "on",
                                    budget + ["--entry", "in-order"])["plan"]["makespan_ms"]
        row["plan_whole_b"] = plan(args.rrfp, flags, "off", budget)["plan"]["makespan_ms"]
        rows.append(row)
        print(" ".join(f"{k}={v}" for k, v in row.items()), file=sys.stderr)
    write(args.out, rows)
    runs = ["fixed_1f1b", "bf", "bfw", "adaptive", "plan_in_order", "plan"]
    print("| workload | limit | " + " | ".join(runs) + " |")
    print("|---|---|" + "---|" * len(runs))
    for w, limit in itertools.product(loads, [0, 32]):
        sel = [r for r in rows if r["workload"] == w and r["limit_flag"] == limit]
        eff = [f"{geomean([r['plan'] / r[k] for r in sel]):.3f}" for k in runs]
        print(f"| {w} | {'default' if limit == 0 else limit} | " + " | ".join(eff) + " |")
    for k in runs:
        e = [r["plan"] / r[k] for r in rows]
        vs1 = [r["fixed_1f1b"] / r[k] for r in rows]
        print(f"{k}: efficiency vs clairvoyant geomean {geomean(e):.3f} (min {min(e):.3f}); "
              f"vs fixed 1F1B geomean {geomean(vs1):.3f} (min {min(vs1):.3f}, "
              f"below 1F1B at {sum(v < 0.999 for v in vs1)} of {len(vs1)} points)")


def write(path, rows):
    with open(path, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        wr.writeheader()
        wr.writerows(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rrfp", type=executable)
    ap.add_argument("what", choices=["small", "grid"])
    ap.add_argument("--budget", type=positive, default=2.0,
                    help="seconds per plan (grid) or per exact search (small)")
    ap.add_argument("--out", help="the CSV (default: the repository's docs/data/frontier-WHAT.csv)")
    args = ap.parse_args()
    # Checked before the run, and the default is the repository's wherever the script is run
    # from: a relative default, looked for at the end, lost a run of minutes.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args.out = args.out or os.path.join(root, "docs", "data", f"frontier-{args.what}.csv")
    if not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        ap.error(f"--out {args.out}: no such folder")
    small(args) if args.what == "small" else grid(args)


if __name__ == "__main__":
    main()
