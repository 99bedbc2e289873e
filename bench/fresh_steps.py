#!/usr/bin/env python3
"""Steps that map fresh payload buffers, and how busy the machine is, at 32 MiB under MPI
(docs/results-twin.md, "What the 32 MiB lean is not").

Usage: bench/fresh_steps.py RRFP [--seeds 1,2,3] [--rounds 6] [--mib 32] [--csv fresh-steps.csv]

For each seed, one `rrfp run --transport mpi --compare --repeat 5 --rounds R` at P=4, J2 (bench/
twin.py's mpi part). Each timed step reports the payload buffers it mapped afresh (their page
faults are in its time); per run this prints how many steps did, the error of the reported
median and of the median of the steps that mapped none, and how much slower the others were.
While each invocation runs, /proc/stat gives the machine's user, system, idle and steal shares.
Standard library only; needs an idle machine. Writes docs/data/ and the --csv name.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from more_rounds import ints  # noqa: E402
from twin import mpi_compare, write_csv  # noqa: E402


def cpu_times():
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:9]]


def lower_median(v):
    return sorted(v)[(len(v) - 1) // 2] if v else float("nan")


class CpuShare:
    """The shares of user, system, idle and steal time between start and stop."""

    def __enter__(self):
        self.start = cpu_times()
        return self

    def __exit__(self, *exc):
        d = [b - a for a, b in zip(self.start, cpu_times())]
        total = sum(d) or 1
        self.user, self.sys, self.idle, self.steal = (d[i] / total for i in (0, 2, 3, 7))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rrfp")
    ap.add_argument("--seeds", type=ints, default=[1, 2, 3])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--mib", type=int, default=32)
    ap.add_argument("--csv", default="fresh-steps.csv", help="the file in docs/data to write")
    a = ap.parse_args()
    rrfp = os.path.abspath(a.rrfp)
    rows = []
    print("| seed | run | steps that mapped buffers | error | error, steps that mapped none | "
          "the others' median against theirs | replayed error | cpu user / sys / idle / steal |")
    print("|---:|---|---:|---:|---:|---:|---:|---|")
    for seed in a.seeds:
        report = []
        with CpuShare() as cpu:
            mpi_compare(rrfp, a.mib, seed, rounds=a.rounds, runs_out=report)
        for c in report:
            steps, fresh = c["measured_steps_ms"], c["measured_steps_fresh_buffers"]
            clean = [s for s, n in zip(steps, fresh) if n == 0]
            mapped = [s for s, n in zip(steps, fresh) if n > 0]
            clean_error = lower_median(clean) / c["simulated_ms"] - 1
            slower = lower_median(mapped) / lower_median(clean) - 1 if mapped else 0.0
            rows.append((seed, c["label"], len(steps), len(mapped), c["measured_ms"],
                         c["simulated_ms"], c["error"], clean_error, slower, c["replayed_error"],
                         cpu.user, cpu.sys, cpu.idle, cpu.steal))
            print(f"| {seed} | {c['label']} | {len(mapped)} of {len(steps)} | "
                  f"{100 * c['error']:+.1f}% | {100 * clean_error:+.1f}% | {100 * slower:+.1f}% | "
                  f"{100 * c['replayed_error']:+.1f}% | {100 * cpu.user:.0f} / {100 * cpu.sys:.0f} / "
                  f"{100 * cpu.idle:.0f} / {100 * cpu.steal:.2f}% |")
            sys.stdout.flush()
    write_csv(a.csv, "seed,run,steps,steps_mapping_buffers,measured_ms,simulated_ms,error,"
              "error_steps_mapping_none,mapping_over_none,replayed_error,cpu_user,cpu_sys,"
              "cpu_idle,cpu_steal", rows)


if __name__ == "__main__":
    main()
