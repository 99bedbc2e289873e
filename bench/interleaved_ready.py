"""Ready dispatch with V >= 2 chunks a stage, against the fixed order (async): the step of ready
BF, BFW and adaptive at the default limit (the fixed order's own peak D: interleaved 1F1B's for
the loop placement, ZB-V's for the V-shape) as a speedup over the fixed order, and the largest
peak D of any stage, for two builds of rrfp side by side. Five workloads, six shapes (loop
placement against interleaved 1F1B, V-shape against ZB-V), seed 1. Deterministic: simulated,
no timing. A few seconds.

    /usr/bin/python3 bench/interleaved_ready.py OLD_RRFP NEW_RRFP
"""
import argparse
import json
import math

from bench_args import executable, output_of

WORKLOADS = ["multimodal", "uniform", "language", "jitter:J2", "straggler"]
SHAPES = [(4, 2, 16, "loop"), (8, 2, 32, "loop"), (8, 2, 64, "loop"), (4, 3, 24, "loop"),
          (8, 2, 32, "vshape"), (4, 2, 8, "vshape")]
HINTS = ["bf", "bfw", "adaptive"]


def run(rrfp, workload, pp, v, m, placement, hint):
    """(speedup over the fixed order, largest peak D) of ready `hint`."""
    fixed = "interleaved-1f1b" if placement == "loop" else "zb-v"
    args = [rrfp, "simulate", "--pp", str(pp), "--vpp", str(v), "-m", str(m), "--placement",
            placement, "--workload", workload, "--json", "-"]
    base = json.loads(output_of(args + ["--hint", fixed, "--policy", "fixed"]))
    ready = json.loads(output_of(args + ["--hint", hint, "--policy", "ready"]))
    b, r = base["runs"][0], ready["runs"][0]
    return b["makespan_ms"] / r["makespan_ms"], max(s["peak_d"] for s in r["stages"])


def main():
    # argparse: --help was taken for a path, printing the usage but exiting 1, and a wrong path
    # surfaced as a FileNotFoundError traceback at the first simulation.
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", metavar="OLD_RRFP", type=executable)
    ap.add_argument("new", metavar="NEW_RRFP", type=executable)
    a = ap.parse_args()
    old, new = a.old, a.new
    print(f"{'workload':11s} {'shape':12s} {'hint':8s} {'old x':>7s} {'D':>3s} {'new x':>7s} {'D':>3s}")
    got = {h: ([], []) for h in HINTS}
    for wl in WORKLOADS:
        for pp, v, m, pl in SHAPES:
            for hint in HINTS:
                o, n = run(old, wl, pp, v, m, pl, hint), run(new, wl, pp, v, m, pl, hint)
                got[hint][0].append(o[0])
                got[hint][1].append(n[0])
                shape = f"P{pp} V{v} M{m} {pl[0]}"
                print(f"{wl:11s} {shape:12s} {hint:8s} {o[0]:7.3f} {o[1]:3d} {n[0]:7.3f} {n[1]:3d}")
    for hint, (o, n) in got.items():
        geo = lambda xs: math.prod(xs) ** (1 / len(xs))
        print(f"{hint}: old {min(o):.2f}-{max(o):.2f} (geometric mean {geo(o):.3f}), "
              f"new {min(n):.2f}-{max(n):.2f} ({geo(n):.3f}), new below 1 at {sum(x < 1 for x in n)} of {len(n)}")


if __name__ == "__main__":
    main()
