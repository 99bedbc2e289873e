#!/usr/bin/env python3
"""Two or more messages at once each at least `comm_two_slowdown` times as long, or only the
links' share: the same measured MPI runs simulated both ways (docs/results-twin.md, "Two at
once cost more than the links say").

Usage: bench/two_slowdown.py RRFP [--sizes 1,8,32] [--seeds 1,2,3] [--repeat-32 2]

Each invocation is `rrfp run --transport mpi --compare --repeat 5 --rounds 3` at P=4, J2, with
the size's messages (bench/twin.py's mpi part); its calibration gives the latency,
bandwidth, links, the two streams' slowdown and the largest size's stream time, and its
measured medians are kept. (Measured in docs/results-twin.md with one calibration at startup;
since `--compare` calibrates before each round, the model is the rounds' medians and the stream
time the last round's.) Every run is then simulated with `rrfp simulate` under that
calibration (one copy at a time per receiver), five ways: the ping-pong's bandwidth with the
two slowdown at 1 and as measured (the latter is what `--compare` prints), the bandwidth of one
stream (the largest size over its stream time) both ways, and the bandwidth fitted to the
blocking fixed 1F1B run with the slowdown as measured (as `--calibration baseline` does; the
other three runs predicted). A paired comparison: every model judged against the very same
measured steps. Standard library only; needs an idle machine. Writes
docs/data/two-slowdown.csv.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from receive_queues import (compared, fit_with, paired_args,  # noqa: E402
                            print_summaries, simulate_with)
from twin import ROOT, write_csv  # noqa: E402

COLUMNS = ("ping-pong, links only", "ping-pong, two slowdown", "streams, links only",
           "streams, two slowdown", "baseline, two slowdown")


def main():
    a = paired_args()
    rrfp = a.rrfp
    tmp = os.path.join(ROOT, "build", "two-slowdown-workload.json")
    sizes = [int(x) for x in a.sizes.split(",")]
    errors = {}  # (mib, column) -> [error]
    rows = []
    print("| MiB | seed | ping-pong GB/s | streams GB/s | links | two | run | measured ms | "
          + " | ".join(COLUMNS) + " |")
    print("|---:|---:|---:|---:|---:|---:|---|---:|" + "---:|" * len(COLUMNS))
    for mib, seed, gbps, links, runs, model in compared(a):
        two = model["two_slowdown"]
        stream_gbps = model["bytes"] / model["stream_us"] / 1e3
        measured = {r[0]: r[1] for r in runs}
        fields = {t: dict(comm_latency_us=model["latency_us"], comm_links=links,
                          comm_serial_receive=True, comm_two_slowdown=t) for t in (1.0, two)}
        fitted = fit_with(rrfp, tmp, mib, seed, measured["fixed 1f1b (blocking)"], **fields[two])
        models = ((gbps, 1.0), (gbps, two), (stream_gbps, 1.0), (stream_gbps, two), (fitted, two))
        for label, meas in measured.items():
            cells = []
            for column, (bw, t) in zip(COLUMNS, models):
                e = meas / simulate_with(rrfp, tmp, mib, seed, label, comm_bandwidth_gbps=bw,
                                         **fields[t]) - 1
                if not (column.startswith("baseline") and "blocking" in label):
                    errors.setdefault((mib, column), []).append(e)
                cells.append(f"{100 * e:+.1f}%")
            rows.append((mib, seed, gbps, stream_gbps, links, two, label, meas, *cells))
            print(f"| {mib} | {seed} | {gbps:.2f} | {stream_gbps:.2f} | {links:.2f} | {two:.2f} | "
                  f"{label} | {meas:.1f} | " + " | ".join(cells) + " |")
            sys.stdout.flush()
    os.remove(tmp)
    write_csv("two-slowdown.csv", "mib,seed,pingpong_gbps,stream_gbps,links,two_slowdown,run,"
              "measured_ms,pingpong_links_only,pingpong_two_slowdown,streams_links_only,"
              "streams_two_slowdown,baseline_two_slowdown", rows)
    print_summaries(sizes, COLUMNS, errors)


if __name__ == "__main__":
    main()
