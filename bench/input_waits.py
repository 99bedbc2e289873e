#!/usr/bin/env python3
"""How long an idle rank takes to start a task once its input has arrived, in a measured step
(docs/results-twin.md, "What the 32 MiB lean is not").

Usage: bench/input_waits.py RRFP [--seed 1] [--mib 32]
       bench/input_waits.py --trace TRACE

Runs `rrfp run --transport mpi --compare --repeat 5` at P=4, J2, with the size's messages
(scripts/workloads/j2-MIBmib-messages.json) and reads its --trace, or reads a given trace of a
measured run. A measured trace gives each task's input arrival (args input_us, the input from
another stage). Where the rank had finished its previous task by then, the rank was idle, and
the time from the arrival to the task's start is the wait for the compute thread to wake and
dispatch, which the simulator does not model beyond the calibrated latency. (In a blocking
run a rank between tasks may also be held by its own send until the peer accepts it: its waits
include those holds.) Prints, per run,
how many such waits, their median, mean, 90th percentile, largest and sum. Standard library
only; needs an idle machine.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from twin import mpi_compare  # noqa: E402


def idle_waits(trace):
    """{run name: [us from an idle rank's input arrival to its task's start]}."""
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    by_lane = {}
    for e in events:
        if e.get("ph") == "X" and "kind" in e.get("args", {}):
            by_lane.setdefault((e["pid"], e.get("tid", 0)), []).append(e)
    waits = {}
    for (pid, _), tasks in sorted(by_lane.items()):
        run = names.get(pid, str(pid)).split(" / ")[0]
        mine = waits.setdefault(run, [])
        free_since = 0.0
        for e in sorted(tasks, key=lambda e: e["ts"]):
            arrived = e["args"].get("input_us")
            if arrived is not None and free_since <= arrived:
                mine.append(e["ts"] - arrived)
            free_since = e["ts"] + e["dur"]
    return waits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rrfp", nargs="?")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mib", type=int, default=32)
    ap.add_argument("--trace", help="a measured run's trace to read instead of running one")
    a = ap.parse_args()
    if not a.trace and not a.rrfp:
        ap.error("give RRFP to run, or --trace")
    with tempfile.TemporaryDirectory() as tmp:
        trace = a.trace
        if not trace:
            trace = os.path.join(tmp, "trace.json")
            mpi_compare(os.path.abspath(a.rrfp), a.mib, a.seed, rounds=1, trace=trace)
        waits = idle_waits(trace)
    print("| run | waits | median us | mean us | p90 us | largest us | sum ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for run, w in waits.items():
        if not w:
            continue
        w.sort()
        print(f"| {run} | {len(w)} | {statistics.median(w):.0f} | {statistics.mean(w):.0f} | "
              f"{w[int(0.9 * (len(w) - 1))]:.0f} | {w[-1]:.0f} | {sum(w) / 1e3:.1f} |")


if __name__ == "__main__":
    main()
