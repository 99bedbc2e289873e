#!/usr/bin/env python3
"""A blocking run's bytes after the acceptance, or with the offer: the same measured MPI runs
simulated both ways (docs/results-twin.md, "The payload travels with the offer").

Usage: bench/offer_payload.py RRFP [--sizes 1,8,32] [--seeds 1,2,3] [--repeat-32 2]

Each invocation is `rrfp run --transport mpi --compare --repeat 5 --rounds 3` at P=4, J2, with
the size's messages (bench/twin.py's mpi part), which calibrates the transport before each of
its three rounds. Every run is simulated with `rrfp simulate` under each field's median over
the three calibrations (one copy at a time per receiver), with `comm_offer_payload` false (the
bytes move once the receiver accepts, design.md's rendezvous) and true (they move from the
producer's end, as the runtime sends them over MPI; the acceptance sends an acknowledgement),
and again with the bandwidth fitted to the blocking fixed 1F1B run under each (as
`--calibration baseline` does; the other three runs predicted). Only the blocking run's
simulation depends on the flag; the fit carries it to the others. A paired comparison: every
model judged against the very same measured steps. Standard library only; needs an idle
machine. Writes docs/data/offer-payload.csv.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from receive_queues import (compared, fit_with, paired_args,  # noqa: E402
                            print_summaries, simulate_with)
from twin import ROOT, write_csv  # noqa: E402

COLUMNS = ("calibrated, after acceptance", "calibrated, with the offer",
           "baseline, after acceptance", "baseline, with the offer")


def main():
    a = paired_args()
    tmp = os.path.join(ROOT, "build", "offer-payload-workload.json")
    errors = {}  # (mib, column) -> [error]
    rows = []
    print("| MiB | seed | GB/s | run | measured ms | " + " | ".join(COLUMNS) + " |")
    print("|---:|---:|---:|---|---:|" + "---:|" * len(COLUMNS))
    for mib, seed, _, _, runs, model in compared(a):
        median = model["median"]
        measured = {r[0]: r[1] for r in runs}
        fields = {o: dict(median, comm_serial_receive=True, comm_offer_payload=o)
                  for o in (False, True)}
        fitted = {}
        for o in (False, True):
            f = {k: v for k, v in fields[o].items() if k != "comm_bandwidth_gbps"}
            fitted[o] = dict(f, comm_bandwidth_gbps=fit_with(
                a.rrfp, tmp, mib, seed, measured["fixed 1f1b (blocking)"], **f))
        models = (fields[False], fields[True], fitted[False], fitted[True])
        for label, meas in measured.items():
            cells = []
            for column, f in zip(COLUMNS, models):
                e = meas / simulate_with(a.rrfp, tmp, mib, seed, label, **f) - 1
                if not (column.startswith("baseline") and "blocking" in label):
                    errors.setdefault((mib, column), []).append(e)
                cells.append(f"{100 * e:+.1f}%")
            gbps = median["comm_bandwidth_gbps"]
            rows.append((mib, seed, gbps, median["comm_latency_us"], median["comm_links"],
                         median["comm_two_slowdown"], label, meas, *cells))
            print(f"| {mib} | {seed} | {gbps:.2f} | {label} | {meas:.1f} | " + " | ".join(cells)
                  + " |")
            sys.stdout.flush()
    os.remove(tmp)
    write_csv("offer-payload.csv", "mib,seed,calibrated_gbps,latency_us,links,two_slowdown,run,"
              "measured_ms,calibrated_after_acceptance,calibrated_with_offer,"
              "baseline_after_acceptance,baseline_with_offer", rows)
    print_summaries([int(x) for x in a.sizes.split(",")], COLUMNS, errors)


if __name__ == "__main__":
    main()
