#!/usr/bin/env python3
"""32 MiB messages with more rounds: does a longer comparison land closer? (docs/results-twin.md,
"More rounds at 32 MiB").

Usage: bench/more_rounds.py RRFP [--seeds 1,2,3] [--rounds 3,6] [--mib 32] [--csv more-rounds.csv]

For each seed, `rrfp run --transport mpi --compare --repeat 5 --rounds R` at P=4, J2, with the
size's messages (bench/twin.py's mpi part), once per R in turn, so every R sees the machine of
the same minutes. More rounds give each run more timed steps (5 R) and the model more
calibrations (R, each field's median). Prints each run's error, simulated (modelled task
durations) and replayed (the run's own), and per R the worst, the mean and how many of the
runs are within 5%. Standard library only; needs an idle machine. Writes docs/data/ and the
--csv name.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from twin import REPEAT, error_cells, mpi_compare, write_csv  # noqa: E402


def ints(text):
    return [int(x) for x in text.split(",")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rrfp")
    ap.add_argument("--seeds", type=ints, default=[1, 2, 3])
    ap.add_argument("--rounds", type=ints, default=[3, 6])
    ap.add_argument("--mib", type=int, default=32)
    ap.add_argument("--csv", default="more-rounds.csv", help="the file in docs/data to write")
    a = ap.parse_args()
    rrfp = os.path.abspath(a.rrfp)
    rows = []
    print("| rounds | seed | GB/s | run | measured ms | range ms | simulated | error | replayed | "
          "error |")
    print("|---:|---:|---:|---|---:|---|---:|---:|---:|---:|")
    for seed in a.seeds:
        for rounds in a.rounds:
            gbps, links, runs = mpi_compare(rrfp, a.mib, seed, rounds=rounds)
            for label, meas, simd, _sm, _ss, lo, hi, repl in runs:
                rows.append((rounds, seed, gbps, links, label, meas, lo, hi, simd, meas / simd - 1,
                             repl, meas / repl - 1))
                print(f"| {rounds} | {seed} | {gbps:.2f} | {label} | {meas:.1f} | {lo:.0f}-{hi:.0f} "
                      f"| {simd:.1f} | {100 * (meas / simd - 1):+.1f}% | {repl:.1f} | "
                      f"{100 * (meas / repl - 1):+.1f}% |")
                sys.stdout.flush()
    write_csv(a.csv, "rounds,seed,calibrated_gbps,links,run,measured_ms,"
              "measured_min_ms,measured_max_ms,simulated_ms,error,replayed_ms,replayed_error", rows)
    print()
    print("| rounds | timed steps per run | simulated: worst | mean | within 5% | replayed: worst | "
          "mean | within 5% |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for rounds in a.rounds:
        mine = [r for r in rows if r[0] == rounds]
        cells = []
        for k in (9, 11):
            errs = [r[k] for r in mine]
            cells += error_cells(errs)
        print(f"| {rounds} | {REPEAT * rounds} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
