#!/usr/bin/env python3
"""One calibration before the runs, or one before each round and their median: the same
measured MPI runs simulated both ways (docs/results-twin.md, "A calibration before each round").

Usage: bench/round_calibrations.py RRFP [--sizes 1,8,32] [--seeds 1,2,3] [--repeat-32 2]

Each invocation is `rrfp run --transport mpi --compare --repeat 5 --rounds 3` at P=4, J2, with
the size's messages (bench/twin.py's mpi part), which calibrates the transport before each of
its three rounds. Every run is simulated with `rrfp simulate` under the first round's
calibration alone (what a calibration at startup gave) and under each field's median over the
three (what `--compare` now uses). A paired comparison: both models judged against the very
same measured steps. Standard library only; needs an idle machine. Writes
docs/data/round-calibrations.csv.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from receive_queues import (compared, paired_args, print_summaries,  # noqa: E402
                            simulate_with)
from twin import ROOT, write_csv  # noqa: E402

COLUMNS = ("first round's calibration", "median of the rounds'")


def main():
    a = paired_args()
    tmp = os.path.join(ROOT, "build", "round-calibrations-workload.json")
    errors = {}  # (mib, column) -> [error]
    rows = []
    print("| MiB | seed | GB/s by round | run | measured ms | " + " | ".join(COLUMNS) + " |")
    print("|---:|---:|---|---|---:|---:|---:|")
    for mib, seed, _, _, runs, model in compared(a):
        fits, median = model["fits"], model["median"]
        gbps = "/".join(f"{f['comm_bandwidth_gbps']:.2f}" for f in fits)
        for label, meas, *_ in runs:
            cells = []
            for column, fields in zip(COLUMNS, (fits[0], median)):
                e = meas / simulate_with(a.rrfp, tmp, mib, seed, label, comm_serial_receive=True,
                                         **fields) - 1
                errors.setdefault((mib, column), []).append(e)
                cells.append(f"{100 * e:+.1f}%")
            rows.append((mib, seed, gbps, label, meas, *cells))
            print(f"| {mib} | {seed} | {gbps} | {label} | {meas:.1f} | " + " | ".join(cells) + " |")
            sys.stdout.flush()
    os.remove(tmp)
    write_csv("round-calibrations.csv", "mib,seed,gbps_by_round,run,measured_ms,first_round,"
              "median_of_rounds", rows)
    print_summaries([int(x) for x in a.sizes.split(",")], COLUMNS, errors)


if __name__ == "__main__":
    main()
