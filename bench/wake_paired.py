#!/usr/bin/env python3
"""What modelling the idle ranks' wake-ups is worth, on the same measured runs
(docs/results-twin.md, "Waking idle ranks").

Usage: bench/wake_paired.py RRFP [--seeds 1,2,3] [--mib 32] [--rounds 3]
                                 [--wakes 0:0,40:0,40:100,40:200,40:300] [--csv wake-paired.csv]

For each seed, one `rrfp run --transport mpi --compare --repeat 5 --rounds R` at P=4, J2 (bench/
twin.py's mpi part). Then each of its four runs is simulated again with `rrfp simulate`: the
message model the comparison simulated with (latency, bandwidth, links, two slowdown, one copy
at a time per receiver, a blocking run's payload on its offer) plus each wake-up of --wakes
(comm_wake_us:comm_wake_per_copy_us), so every model is judged on the same measured steps. The
first should be 0:0: it re-derives the comparison's own simulation (a check, printed). Prints
each run's error (measured / simulated - 1) under every model and, per model, the worst, the
mean and how many runs are within 5%. Standard library only; needs an idle machine. Writes
docs/data/ and the --csv name.
"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from more_rounds import ints  # noqa: E402
from receive_queues import simulate_with  # noqa: E402
from twin import error_cells, mpi_compare, write_csv  # noqa: E402


def wakes(text):
    return [tuple(float(x) for x in pair.split(":")) for pair in text.split(",")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rrfp")
    ap.add_argument("--seeds", type=ints, default=[1, 2, 3])
    ap.add_argument("--mib", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--wakes", type=wakes, default=wakes("0:0,40:0,40:100,40:200,40:300"))
    ap.add_argument("--csv", default="wake-paired.csv")
    a = ap.parse_args()
    rows, errors = [], {w: [] for w in a.wakes}
    names = " | ".join(f"{b:g} + {c:g}/copy us" for b, c in a.wakes)
    print(f"| seed | run | measured ms | simulated ms (comparison) | {names} |")
    print("|---|---|---:|---:|" + "---:|" * len(a.wakes))
    with tempfile.TemporaryDirectory() as tmp:
        workload = os.path.join(tmp, "workload.json")
        for seed in a.seeds:
            model = {}
            gbps, links, runs = mpi_compare(a.rrfp, a.mib, seed, model=model, rounds=a.rounds)
            fields = dict(comm_latency_us=model["latency_us"], comm_bandwidth_gbps=gbps,
                          comm_links=links, comm_two_slowdown=model["two_slowdown"],
                          comm_serial_receive=True)
            for label, measured, simulated, *_ in runs:
                cells = []
                for base, per_copy in a.wakes:
                    ms = simulate_with(a.rrfp, workload, a.mib, seed, label, **fields,
                                       comm_offer_payload="blocking" in label,
                                       comm_wake_us=base, comm_wake_per_copy_us=per_copy)
                    err = measured / ms - 1
                    errors[(base, per_copy)].append(err)
                    cells.append(f"{ms:.1f} ({100 * err:+.1f}%)")
                    rows.append((seed, label, base, per_copy, measured, simulated, ms, err))
                print(f"| {seed} | {label} | {measured:.1f} | {simulated:.1f} | "
                      + " | ".join(cells) + " |", flush=True)
    print()
    print("| wake-up | worst error | mean error | within 5% |")
    print("|---|---:|---:|---:|")
    for (base, per_copy), e in errors.items():
        print(f"| {base:g} us + {per_copy:g} us per copy | " + " | ".join(error_cells(e)) + " |")
    write_csv(a.csv, "seed,run,wake_us,wake_per_copy_us,measured_ms,compare_simulated_ms,"
              "simulated_ms,error", rows)


if __name__ == "__main__":
    main()
