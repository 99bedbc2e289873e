#!/usr/bin/env python3
"""One copy at a time per receiver, or all at once: the same measured MPI runs simulated both
ways (docs/results-twin.md, "One copy at a time per receiver").

Usage: bench/receive_queues.py RRFP [--sizes 1,8,32] [--seeds 1,2,3] [--repeat-32 2]

Each invocation is `rrfp run --transport mpi --compare --repeat 5 --rounds 3` at P=4, J2, with
the size's messages (bench/twin.py's mpi part). Its measured medians and startup calibration
(latency, bandwidth, links) are kept; then every run is simulated with `rrfp simulate` under that
calibration, with `comm_serial_receive` false and true, and once more with the bandwidth fitted
(by bisection, as `--calibration baseline` does) to the blocking fixed 1F1B run, the other three
predicted. A paired comparison: both models judged against the very same measured steps, so the
machine's drift between invocations does not enter the difference. Standard library only;
needs an idle machine. Writes docs/data/receive-queues.csv.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from twin import ROOT, error_cells, mpi_compare, write_csv  # noqa: E402

# `rrfp simulate` flags of each run `rrfp run --compare` makes by default (cli/experiment_cmd.cpp's
# plan_runs).
RUNS = {"fixed 1f1b (blocking)": ["--comm", "blocking", "--hint", "1f1b", "--policy", "fixed"],
        "fixed 1f1b (async)": ["--hint", "1f1b", "--policy", "fixed"],
        "ready bf (async)": ["--hint", "bf", "--policy", "ready"],
        "ready bfw (async)": ["--hint", "bfw", "--policy", "ready"]}


def simulate_with(rrfp, tmp, mib, seed, label, **fields):
    """`label`'s run simulated on the size's workload, its message model replaced by `fields`
    (workload fields, noise off)."""
    with open(os.path.join(ROOT, "scripts", "workloads", f"j2-{mib}mib-messages.json")) as f:
        w = json.load(f)
    w.update(comm_sigma=0, comm_slow_prob=0, **fields)
    with open(tmp, "w") as f:
        json.dump(w, f)
    out = subprocess.run([rrfp, "simulate", "--workload-file", tmp, "--pp", "4", "-m", "16",
                          "--seed", str(seed), "--json", "-", *RUNS[label]],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["runs"][0]["makespan_ms"]


def simulate(rrfp, tmp, mib, seed, lat, gbps, links, serial, label):
    return simulate_with(rrfp, tmp, mib, seed, label, comm_latency_us=lat,
                         comm_bandwidth_gbps=gbps, comm_links=links, comm_serial_receive=serial)


def fit_with(rrfp, tmp, mib, seed, measured, **fields):
    """The bandwidth at which the blocking run's simulation under `fields` takes `measured`
    ms."""
    lo, hi = 0.1, 100.0
    for _ in range(30):
        mid = math.sqrt(lo * hi)
        slow = simulate_with(rrfp, tmp, mib, seed, "fixed 1f1b (blocking)",
                             comm_bandwidth_gbps=mid, **fields)
        lo, hi = (mid, hi) if slow > measured else (lo, mid)
    return math.sqrt(lo * hi)


def fit(rrfp, tmp, mib, seed, lat, links, serial, measured):
    return fit_with(rrfp, tmp, mib, seed, measured, comm_latency_us=lat, comm_links=links,
                    comm_serial_receive=serial)


def summary(errs):
    return " / ".join(error_cells(errs))


def print_summaries(sizes, columns, errors):
    """The table of each size's worst / mean / within 5% by column (errors[(mib, column)])."""
    print()
    print("| MiB | " + " | ".join(c + ": worst / mean / within 5%" for c in columns) + " |")
    print("|---:|" + "---:|" * len(columns))
    for mib in sizes:
        print(f"| {mib} | " + " | ".join(summary(errors[(mib, c)]) for c in columns) + " |")


def invocations(a):
    """The (MiB, seed) of each `rrfp run --compare` invocation of a paired comparison, in turn."""
    for mib in (int(x) for x in a.sizes.split(",")):
        for _ in range(a.repeat_32 if mib == 32 else 1):
            for seed in (int(x) for x in a.seeds.split(",")):
                yield mib, seed


def compared(a):
    """Each `rrfp run --compare` invocation of a paired comparison, in turn: (MiB, seed, the GB/s
    and links it simulated with, its runs, twin.mpi_compare's model dict with "median": each
    fitted field's median over the invocation's calibrations, one per round)."""
    for mib, seed in invocations(a):
        model = {}
        gbps, links, runs = mpi_compare(a.rrfp, mib, seed, model=model)
        fits = model["fits"]
        model["median"] = {k: statistics.median(f[k] for f in fits) for k in fits[0]}
        yield mib, seed, gbps, links, runs, model


def paired_args():
    """The command line of a paired comparison: RRFP [--sizes] [--seeds] [--repeat-32]."""
    ap = argparse.ArgumentParser()
    ap.add_argument("rrfp")
    ap.add_argument("--sizes", default="1,8,32")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--repeat-32", type=int, default=2, help="invocations of each 32 MiB seed")
    a = ap.parse_args()
    a.rrfp = os.path.abspath(a.rrfp)
    return a


def main():
    a = paired_args()
    rrfp = a.rrfp
    tmp = os.path.join(ROOT, "build", "receive-queues-workload.json")
    sizes = [int(x) for x in a.sizes.split(",")]
    errors = {}  # (mib, column) -> [error]
    rows = []
    print("| MiB | seed | GB/s | run | measured ms | startup: all at once | one at a time | "
          "baseline fit: all at once | one at a time |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    for mib, seed, gbps, links, runs, model in compared(a):
        lat = model["latency_us"]
        measured = {r[0]: r[1] for r in runs}
        fitted = {s: fit(rrfp, tmp, mib, seed, lat, links, s, measured["fixed 1f1b (blocking)"])
                  for s in (False, True)}
        for label, meas in measured.items():
            cells = []
            for column, bw, serial in (("startup all", gbps, False), ("startup one", gbps, True),
                                       ("baseline all", fitted[False], False),
                                       ("baseline one", fitted[True], True)):
                e = meas / simulate(rrfp, tmp, mib, seed, lat, bw, links, serial, label) - 1
                if not (column.startswith("baseline") and "blocking" in label):
                    errors.setdefault((mib, column), []).append(e)
                cells.append(f"{100 * e:+.1f}%")
            rows.append((mib, seed, gbps, links, lat, label, meas, *cells))
            print(f"| {mib} | {seed} | {gbps:.2f} | {label} | {meas:.1f} | " + " | ".join(cells)
                  + " |")
            sys.stdout.flush()
    os.remove(tmp)
    write_csv("receive-queues.csv", "mib,seed,calibrated_gbps,links,latency_us,run,measured_ms,"
              "startup_all_at_once,startup_one_at_a_time,baseline_all_at_once,"
              "baseline_one_at_a_time", rows)
    print()
    print("| MiB | startup, all at once: worst / mean / within 5% | one at a time | "
          "baseline fit, all at once (the 3 predicted runs) | one at a time |")
    print("|---:|---:|---:|---:|---:|")
    for mib in sizes:
        print(f"| {mib} | " + " | ".join(summary(errors[(mib, c)]) for c in (
            "startup all", "startup one", "baseline all", "baseline one")) + " |")


if __name__ == "__main__":
    main()
