#!/usr/bin/env python3
"""The tables of scripts/gpu-check.sh, from the runs it left under OUT: per run the median step
and pipeline time and throughput over the steps after the first two, the bubble, the median
dispatch gap (median, and the median of each step's p99 where the log has it), host
CPU per task (the process's CPU time in a step over its tasks), the device wait (how long a
stage's thread waited for its task's kernels after launching the last: median per task, and
the waits' share of the stages' time), and (text model) MFU against the GPU's dense bf16 peak;
then the twin's prediction next to the measured step. A run that failed or was stopped at its
limit (runs/NAME.rc, its exit status, other than 0), or left a log and no measured step, is named
under the table; its rows, if any, stay in it, marked, and no twin compares with them.
Usage: gpu_table.py OUT"""
import csv
import os
import re
import statistics
import sys

PEAK_BF16_TFLOPS = 989.0  # H100 and H200 SXM, dense, the vendor's datasheet


# The columns the table reads, each a number where the file has it (the last four are newer).
NUMBERS = ("step", "tokens", "step_ms", "pipeline_ms", "bubble", "gap_us_median", "cpu_ms",
           "gap_us_p99", "wait_us_median", "wait_ms")


def readable(r):
    try:
        return all(float(r[k]) == float(r[k]) for k in NUMBERS if k in r)  # NaN: unreadable
    except (TypeError, ValueError):  # a row cut short (None) or a field gone wrong
        return False


def rows(path):
    """The steps after the first two, and how many rows could not be read (a file cut short
    or damaged: one such row took the whole table with it, a traceback in its place)."""
    with open(path) as f:
        every = list(csv.DictReader(f))
    good = [r for r in every if readable(r)]
    return [r for r in good if int(float(r["step"])) > 2], len(every) - len(good)


def model_of(log, name):
    # The banner gives the placement after V ("V=1 (loop)") since it names a V-shape.
    m = re.search(r"P=(\d+) V=(\d+)(?: \(\w+\))? M=(\d+).*GPT d=(\d+) layers=(\d+)", log)
    if not m:
        sys.exit("gpu_table.py: %s.log has no banner line 'rrfp train: P=.. V=.. M=.. ...'" % name)
    return dict(zip("pp vpp mb d layers".split(), map(int, m.groups())))


def flops_per_token(cfg, seq):
    d, layers = cfg["d"], cfg["layers"]
    params = layers * (12 * d * d + 13 * d) + 2 * 256 * d
    return 6 * params + 12 * layers * seq * d  # attention: the whole square (mask applied after)


def exit_status(runs, name):
    """The run's exit status as gpu-check.sh wrote it, 0 where it wrote none."""
    try:
        with open(os.path.join(runs, name + ".rc")) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def main(out):
    runs = os.path.join(out, "runs")
    table, measured, failed, stopped = [], {}, [], set()
    for name in sorted(os.listdir(runs)) if os.path.isdir(runs) else []:
        if name.endswith(".log") and not os.path.isdir(os.path.join(runs, name[:-4])):
            failed.append(name[:-4])  # a run that wrote nothing
            stopped.add(name[:-4])
        loss = os.path.join(runs, name, "loss.csv")
        if not os.path.isdir(os.path.join(runs, name)):
            continue
        rs, unreadable = rows(loss) if os.path.isfile(loss) else ([], 0)
        if not rs:
            failed.append(name + (f" ({unreadable} unreadable rows in loss.csv)"
                                  if unreadable else ""))
            stopped.add(name)
            continue
        log = open(os.path.join(runs, name + ".log")).read()
        cfg = model_of(log, name)
        step_ms = statistics.median(float(r["step_ms"]) for r in rs)
        pipe_ms = statistics.median(float(r["pipeline_ms"]) for r in rs)
        tokens = sum(int(r["tokens"]) for r in rs)
        tok_s = tokens / (sum(float(r["step_ms"]) for r in rs) / 1e3)
        bubble = statistics.mean(float(r["bubble"]) for r in rs)
        gap = "%.1f" % statistics.median(float(r["gap_us_median"]) for r in rs)
        wait = "-"
        if "gap_us_p99" in rs[0]:
            gap += ", %.1f" % statistics.median(float(r["gap_us_p99"]) for r in rs)
            waits = sum(float(r["wait_ms"]) for r in rs)
            share = waits / (sum(float(r["pipeline_ms"]) for r in rs) * cfg["pp"])
            wait = "%.0f, %.1f%%" % (statistics.median(float(r["wait_us_median"]) for r in rs),
                                     100 * share)
        if name.split("-")[0].endswith("w"):
            # Under a window the host does not wait for a task's kernels: its waits are not
            # measured, and their zeros would read as none. Its gaps are, those of dispatches
            # with no task in flight.
            wait = "- (window)"
        kinds = 3 if "bfw" in name or "split" in name else 2
        cpu = "-"
        if "cpu_ms" in rs[0]:
            per_step = statistics.median(float(r["cpu_ms"]) for r in rs)
            cpu = "%.0f" % (per_step * 1e3 / (cfg["pp"] * cfg["mb"] * kinds))
        mfu = "-"
        if cfg and not name.startswith("img"):
            seq = tokens / len(rs) / cfg["mb"]
            mfu = "%.1f%%" % (100 * tok_s * flops_per_token(cfg, seq) / (PEAK_BF16_TFLOPS * 1e12))
        rc = exit_status(runs, name)
        bad = f", {unreadable} unreadable rows in loss.csv" if unreadable else ""
        if rc or unreadable:
            failed.append(f"{name} (exit {rc}, {len(rs)} steps measured{bad})")
            stopped.add(name)
            name += f" (exit {rc}{bad})"
        else:
            measured[name] = [float(r["pipeline_ms"]) for r in rs], [int(r["step"]) for r in rs]
        table.append((name, step_ms, pipe_ms, tok_s, bubble, gap, cpu, wait, mfu, len(rs)))
    # Each run against fixed 1F1B (async) of its group: the same jitter, task and partitions,
    # polled, one task in flight (a trailing c, s or w: a callback's or spin's completion, a
    # window of tasks; such a run compares with the group's base).
    def group(name):
        g = name.split("-")[0]
        return g[:-1] if g[-1] in "csw" and len(g) > 1 else g

    base = {t[0].split("-")[0]: t[1] for t in table if t[0].endswith("-fixed-1f1b")}
    print("| run | steps | step ms (median) | vs fixed 1F1B | pipeline ms | tokens/s | bubble "
          "| dispatch gap us (median, p99) | host CPU us/task | device wait us, share | MFU |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, step_ms, pipe_ms, tok_s, bubble, gap, cpu, wait, mfu, n in table:
        b = base.get(group(name))
        speed = "%.2fx" % (b / step_ms) if b else "-"
        print(f"| {name} | {n} | {step_ms:.1f} | {speed} | {pipe_ms:.1f} | {tok_s:.0f} | "
              f"{100 * bubble:.1f}% | {gap} | {cpu} | {wait} | {mfu} |")
    if failed:
        print("\nFailed or stopped (see runs/NAME.log): " + ", ".join(failed))
    twin = os.path.join(out, "twin.csv")
    if os.path.isfile(twin):
        pred = {}
        for r in csv.DictReader(open(twin)):
            if r.get("predicted_ms"):  # a step the script could not predict is left out
                pred.setdefault(r["hint"], {})[int(r["step"])] = float(r["predicted_ms"])
        print("\n| twin: from fixed 1F1B's durations | measured pipeline ms (mean) "
              "| predicted ms (mean) | error |")
        print("|---|---|---|---|")
        for hint, run in (("bf", "j0-ready-bf"), ("bfw", "j0-ready-bfw")):
            if run not in measured or hint not in pred:
                why = (f"{run} failed" if run in stopped else f"no {run} run"
                       if run not in measured else "no step predicted")
                print(f"| ready {hint.upper()} | - | - | {why} |")
                continue
            ms, steps = measured[run]
            common = [(m, pred[hint][s]) for m, s in zip(ms, steps) if s in pred[hint]]
            if not common:
                print(f"| ready {hint.upper()} | - | - | no step both measured and predicted |")
                continue
            mm = statistics.mean(m for m, _ in common)
            pp = statistics.mean(p for _, p in common)
            print(f"| ready {hint.upper()} | {mm:.1f} | {pp:.1f} | {100 * (pp - mm) / mm:+.1f}% |")


if __name__ == "__main__":
    if sys.argv[1:] in (["-h"], ["--help"]):  # asked for: said on stdout, exit 0
        print("usage: gpu_table.py OUT (the folder gpu-check.sh wrote its runs into)")
        sys.exit(0)
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):  # an IndexError's traceback
        print("usage: gpu_table.py OUT (the folder gpu-check.sh wrote its runs into)",
              file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
