#!/usr/bin/env python3
"""How well the twin reproduces and predicts recorded steps (docs/results-twin.md).

Usage: bench/twin.py RRFP [--steps N] [--rounds R] [--out-dir DIR]
                          [--part imports|runs|mpi|mpi-baseline|train|cores|all]
  imports: the PyTorch profiler fixture (tests/data/torch-pp2), each step replayed in its order;
  runs:    `rrfp run` on threads and under mpirun (P=4), its --trace replayed by `rrfp predict`;
  mpi:     `rrfp calibrate --transport mpi` (shown), then `rrfp run --transport mpi --compare
           --repeat 5 --rounds 3` (or --rounds R; calibrating before each round; the four runs
           take turns, each time warm-up steps and five timed ones; each run's median of 5 R) at
           P=4 and 1, 8, 32 MiB messages, 3 seeds (writes twin-mpi.csv, or with --rounds R other
           than 3, twin-mpi-R-rounds.csv, in --out-dir: docs/data unless told);
  mpi-baseline: the same with --calibration baseline (the first run fits the bandwidth, the
           other three are predicted);
  train:   `rrfp train` at P=2 (a core per stage here): each run's mean step against the twin's
           replay of durations.csv, and a clean fixed run's durations predicting ready runs and
           jitter (the preset injected on the replay, one jitter seed per step); writes
           twin-train.csv in --out-dir.
  cores:   `rrfp train` at P=4 (4 stages on 2 cores) and P=2, the same replays.
Standard library only. Needs an idle machine: training and MPI runs are timed.
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
from bench_args import at_least, count, executable, output_of as sh

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# Where the parts' CSV tables go (--out-dir): the repository's docs/data unless told.
OUT_DIR = os.path.join(ROOT, "docs", "data")


def write_csv(name, header, rows):
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(os.path.join(OUT_DIR, name), "w") as f:
        f.write(header + "\n")
        for r in rows:
            f.write(",".join(str(round(x, 4)) if isinstance(x, float) else str(x) for x in r)
                    + "\n")


def error_cells(errs):
    """Table cells of errors (measured / simulated - 1): the worst (the largest in size, signed),
    the mean, and how many are within 5%."""
    return [f"{100 * max(errs, key=abs):+.1f}%", f"{100 * statistics.mean(errs):+.1f}%",
            f"{sum(abs(e) <= 0.05 for e in errs)} of {len(errs)}"]


def predict(rrfp, trace, *extra):
    return json.loads(sh([rrfp, "predict", trace, "--json", "-", *extra]))


def part_imports(rrfp):
    print("| timeline | step | measured ms | twin, recorded order ms | error | messages timed |")
    print("|---|---|---:|---:|---:|---:|")
    fixture = os.path.join(ROOT, "tests", "data", "torch-pp2")
    for step in (1, 2):
        p = predict(rrfp, fixture, "--step", str(step))
        print(f"| PyTorch profiler, torch 1.13, 2 ranks (tests/data/torch-pp2) | {p['step']} | "
              f"{p['measured_ms']:.2f} | {p['replayed_ms']:.2f} | "
              f"{100 * p['reproduction_error']:+.2f}% | {p['messages_timed']} |")


def part_runs(rrfp, tmp):
    print("| run | policy | measured ms | twin, recorded order ms | error | messages timed |")
    print("|---|---|---:|---:|---:|---:|")
    mpirun = os.path.join(ROOT, "tests", "mpirun.sh")
    shape = ["--pp", "4", "-m", "16", "--workload", "multimodal"]
    for where in ("threads", "mpi"):
        for hint, policy in (("1f1b", "fixed"), ("bf", "ready")):
            errs = []
            for seed in (1, 2, 3):
                trace = os.path.join(tmp, f"{where}-{hint}-{seed}.json")
                cmd = [rrfp, "run", *shape, "--hint", hint, "--policy", policy, "--seed",
                       str(seed), "--trace", trace]
                if where == "mpi":
                    cmd = [mpirun, "4", *cmd, "--transport", "mpi"]
                sh(cmd)
                p = predict(rrfp, trace)
                errs.append(p["reproduction_error"])
                print(f"| `rrfp run` on {where}, P=4 M=16 multimodal, seed {seed} | {policy} {hint} | "
                      f"{p['measured_ms']:.2f} | {p['replayed_ms']:.2f} | "
                      f"{100 * p['reproduction_error']:+.2f}% | {p['messages_timed']} |")
            print(f"| **worst, {where} {policy} {hint}** | | | | "
                  f"**{100 * max(errs, key=abs):+.2f}%** | |", file=sys.stderr)


REPEAT, ROUNDS = 5, 3  # per run: 5 timed steps in each of 3 interleaved rounds; the median of 15
STEPS = REPEAT * ROUNDS


def mpi_compare(rrfp, mib, seed, calibration=None, model=None, rounds=ROUNDS, runs_out=None,
                trace=None):
    """One `rrfp run --transport mpi --compare --repeat 5 --rounds 3` (calibrating before each
    round, the default: this VM's copy bandwidth drifts within an hour, so one calibration for
    all runs would date). Returns the GB/s and links' capacity (messages' worth) it simulated
    with and [(run, measured median ms, simulated ms, speedups, measured min ms, measured max
    ms, replayed ms)], replayed: simulated with the run's own measured task durations. If the
    dict `model` is given, it receives the simulated latency_us and two_slowdown (1: none), each
    calibration's fit ("fits", as workload fields), and the last calibration's largest size
    ("bytes") and its stream time ("stream_us"). If the list `runs_out` is given, it receives the
    report's "compare" runs as they are (each timed step and the buffers it mapped afresh). With
    `trace`, the run's --trace goes there."""
    mpirun = os.path.join(ROOT, "tests", "mpirun.sh")
    load = os.path.join(ROOT, "scripts", "workloads", f"j2-{mib}mib-messages.json")
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "compare.json")
        r = subprocess.run([mpirun, "4", rrfp, "run", "--transport", "mpi", "--compare",
                            "--workload-file", load, "--pp", "4", "-m", "16", "--seed", str(seed),
                            "--repeat", str(REPEAT), "--rounds", str(rounds), "--json", report,
                            *(["--calibration", calibration] if calibration else []),
                            *(["--trace", trace] if trace else [])],
                           check=True, capture_output=True, text=True)
        with open(report) as f:
            compared = json.load(f)["compare"]["runs"]
    if runs_out is not None:
        runs_out.extend(compared)
    line = [l for l in r.stderr.splitlines() if l.startswith(("simulating", "fitted"))][-1]
    gbps = float(line.split(" GB/s")[0].split()[-1]) if " GB/s" in line else 0.0
    if model is not None:
        model["latency_us"] = float(line.split("): ")[1].split(" us")[0])
        # The last calibration table's largest size: bytes, one-way us, GB/s, overlapped us,
        # slowdown, stream us, 2 streams, 4 streams (then the wake-ups).
        table = [l.split() for l in r.stderr.splitlines()
                 if len(l.split()) >= 8 and l.split()[0].isdigit()]
        if table:
            model["bytes"], model["stream_us"] = int(table[-1][0]), float(table[-1][5])
        # Each calibration's fit (one per round): latency, bandwidth, two slowdown, links.
        model["fits"] = []
        for l in r.stderr.splitlines():
            if l.startswith("fit"):
                two = l.split(", two ")[1].split("x")[0] if ", two " in l else "1"
                model["fits"].append(dict(
                    comm_latency_us=float(l.split("latency ")[1].split(" us")[0]),
                    comm_bandwidth_gbps=float(l.split("bytes / ")[1].split(" GB/s")[0]),
                    comm_two_slowdown=float(two),
                    comm_links=float(l.split(": links ")[1].split()[0])))
        model["two_slowdown"] = (float(line.split("each at least ")[1].split("x")[0])
                                 if "each at least " in line else 1.0)
    links = float(line.split(" messages' worth")[0].split()[-1]) if "worth" in line else 0.0
    first = compared[0]
    runs = [(c["label"], c["measured_ms"], c["simulated_ms"],
             first["measured_ms"] / c["measured_ms"], first["simulated_ms"] / c["simulated_ms"],
             min(c["measured_steps_ms"]), max(c["measured_steps_ms"]), c["replayed_ms"])
            for c in compared]
    return gbps, links, runs


def mpi_grid(rrfp, calibration=None, rounds=ROUNDS):
    """Every (messages, seed) invocation of the mpi parts: yields (mib, seed, gbps, links,
    runs)."""
    for mib in (1, 8, 32):
        for seed in (1, 2, 3):
            yield (mib, seed, *mpi_compare(rrfp, mib, seed, calibration, rounds=rounds))


def part_mpi(rrfp, tmp, rounds=ROUNDS):
    """`rrfp run --transport mpi --compare` at P=4 with 1, 8 and 32 MiB messages, each run's
    median over `rounds` interleaved rounds of 5 timed steps."""
    mpirun = os.path.join(ROOT, "tests", "mpirun.sh")
    print(sh([mpirun, "4", rrfp, "calibrate", "--transport", "mpi", "--streams"]))
    print(f"| messages | seed | calibrated GB/s | links | run | measured ms (median of "
          f"{REPEAT * rounds}) | "
          "range ms | simulated ms | error | replayed ms | error | speedup measured | simulated |")
    print("|---|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|")
    rows = []
    for mib, seed, gbps, links, runs in mpi_grid(rrfp, rounds=rounds):
        for label, meas, simd, sp_m, sp_s, lo, hi, repl in runs:
            rows.append((mib, seed, gbps, links, label, meas, simd, meas / simd - 1, sp_m, sp_s,
                         lo, hi, repl, meas / repl - 1))
            print(f"| {mib} MiB | {seed} | {gbps:.2f} | {links:.2f} | {label} | {meas:.1f} | "
                  f"{lo:.0f}-{hi:.0f} | {simd:.1f} | {100 * (meas / simd - 1):+.1f}% | "
                  f"{repl:.1f} | {100 * (meas / repl - 1):+.1f}% | {sp_m:.3f}x | {sp_s:.3f}x |")
            sys.stdout.flush()
    write_csv("twin-mpi.csv" if rounds == ROUNDS else f"twin-mpi-{rounds}-rounds.csv",
              "mib,seed,calibrated_gbps,calibrated_links,run,measured_ms,"
              "simulated_ms,error,"
              "speedup_measured,speedup_simulated,measured_min_ms,measured_max_ms,replayed_ms,"
              "replayed_error", rows)
    print()
    print("| messages | worst error | mean error | within 5% | replayed: worst | mean | within 5% | "
          "widest range of a run's steps | ready BF / fixed 1F1B async, measured | "
          "ready BFW / fixed 1F1B async |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mib in (1, 8, 32):
        mine = [r for r in rows if r[0] == mib]
        errs = [r[7] for r in mine]
        replayed = [r[13] for r in mine]
        spread = max((r[11] - r[10]) / r[5] for r in mine)

        def ratio(label):
            got = []
            for seed in (1, 2, 3):
                by = {r[4]: r[5] for r in mine if r[1] == seed}
                got.append(by["fixed 1f1b (async)"] / by[label])
            return statistics.mean(got)
        print(f"| {mib} MiB | " + " | ".join(error_cells(errs) + error_cells(replayed)) + " | "
              f"{100 * spread:.0f}% | "
              f"{ratio('ready bf (async)'):.3f}x | {ratio('ready bfw (async)'):.3f}x |")
    # The same invocation three times: how far apart identical inputs land on this machine.
    print()
    print("| messages | run | measured median ms, 3 invocations of seed 1 | simulated ms | "
          "calibrated GB/s | links |")
    print("|---|---|---|---|---|---|")
    for mib in (8, 32):
        reps = [mpi_compare(rrfp, mib, 1, rounds=rounds) for _ in range(3)]
        for i, (label, *_rest) in enumerate(reps[0][2]):
            meas = " / ".join(f"{r[2][i][1]:.0f}" for r in reps)
            simd = " / ".join(f"{r[2][i][2]:.0f}" for r in reps)
            gb = " / ".join(f"{g:.2f}" for g, _, _ in reps)
            ln = " / ".join(f"{k:.2f}" for _, k, _ in reps)
            print(f"| {mib} MiB | {label} | {meas} | {simd} | {gb} | {ln} |")
            sys.stdout.flush()


def part_mpi_baseline(rrfp, tmp):
    """`--calibration baseline`: the first run (fixed 1F1B with rendezvous) fits the bandwidth,
    the other three are predicted from it."""
    print(f"| messages | seed | fitted GB/s | run | measured ms (median of {STEPS}) | range ms | "
          "predicted ms | error |")
    print("|---|---:|---:|---|---:|---|---:|---:|")
    rows = []
    for mib, seed, gbps, _links, runs in mpi_grid(rrfp, "baseline"):
        for i, (label, meas, simd, _sm, _ss, lo, hi, _repl) in enumerate(runs):
            fitted = " (fitted)" if i == 0 else ""
            if i:
                rows.append((mib, meas / simd - 1))
            print(f"| {mib} MiB | {seed} | {gbps:.2f} | {label}{fitted} | {meas:.1f} | "
                  f"{lo:.0f}-{hi:.0f} | {simd:.1f} | {100 * (meas / simd - 1):+.1f}% |")
            sys.stdout.flush()
    print()
    print("| messages | worst error of the 9 predicted runs | mean error |")
    print("|---|---:|---:|")
    for mib in (1, 8, 32):
        errs = [e for m, e in rows if m == mib]
        print(f"| {mib} MiB | " + " | ".join(error_cells(errs)[:2]) + " |")


def mean_ms(loss_csv, column, skip):
    with open(loss_csv) as f:
        rows = list(csv.DictReader(f))[skip:]
    return statistics.mean(float(r[column]) for r in rows), len(rows)


def twin_mean(rrfp, durations, steps, hint, policy, split, workload=None, pp=2):
    """The twin's mean step: every recorded step replayed, with a jitter preset on top where
    `workload` names one (its seed = the step; a replay takes no other preset, nor a seed
    without one: `rrfp simulate` refuses them)."""
    out = []
    for step in steps:
        jitter = [] if workload is None else ["--workload", workload, "--seed", str(step)]
        r = json.loads(sh([rrfp, "simulate", "--replay", durations, "--step", str(step),
                           "--pp", str(pp), "-m", "8", "--hint", hint, "--policy", policy,
                           "--split-backward", split, *jitter, "--json", "-"]))
        out.append(r["runs"][0]["makespan_ms"])
    return statistics.mean(out)


def steps_of(durations):
    with open(durations) as f:
        return sorted({int(r["step"]) for r in csv.DictReader(f)})


def train(rrfp, tmp, name, steps, *args):
    out = os.path.join(tmp, name)
    pp = [] if "--pp" in args else ["--pp", "2"]
    sh([rrfp, "train", *pp, "--steps", str(steps), "--eval-every", "0", "--out", out, *args])
    return out


def part_cores(rrfp, tmp):
    """`rrfp train` at P=4 (4 stages on 2 cores) and P=2, fixed 1F1B and ready BF, 30 steps:
    each run's own durations.csv replayed, and the fixed run's replayed under BF."""
    print("| P | run | measured pipeline ms/step | twin, own durations | error | "
          "twin, from the fixed run | error |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for pp in (4, 2):
        outs = {}
        for hint, policy in (("1f1b", "fixed"), ("bf", "ready")):
            outs[hint] = train(rrfp, tmp, f"p{pp}-{hint}", 30, "--pp", str(pp), "-m", "8",
                               "--hint", hint, "--policy", policy, "--split-backward", "off")
        for hint, policy in (("1f1b", "fixed"), ("bf", "ready")):
            pipe, _ = mean_ms(os.path.join(outs[hint], "loss.csv"), "pipeline_ms", 2)
            own_d = os.path.join(outs[hint], "durations.csv")
            src_d = os.path.join(outs["1f1b"], "durations.csv")
            own = twin_mean(rrfp, own_d, steps_of(own_d), hint, policy, "off", pp=pp)
            pred = twin_mean(rrfp, src_d, steps_of(src_d), hint, policy, "off", pp=pp)
            print(f"| {pp} | {policy} {hint} | {pipe:.1f} | {own:.1f} | "
                  f"{100 * (own / pipe - 1):+.1f}% | {pred:.1f} | {100 * (pred / pipe - 1):+.1f}% |")
            sys.stdout.flush()


def part_train(rrfp, tmp, steps):
    skip = 2  # as durations.csv: the first two steps start up
    specs = {  # name: (hint, policy, split)
        "fixed 1F1B": ("1f1b", "fixed", "off"),
        "ready BF": ("bf", "ready", "off"),
        "ready BFW": ("bfw", "ready", "on"),
    }
    # Sources of the prediction: clean fixed runs, whole backward (1F1B) and split (ZB-H1).
    src_whole = train(rrfp, tmp, "src-1f1b", steps, "--hint", "1f1b", "--policy", "fixed",
                      "--split-backward", "off")
    src_split = train(rrfp, tmp, "src-zbh1", steps, "--hint", "zb-h1", "--policy", "fixed")
    print("| jitter | run | measured pipeline ms/step | measured step ms | "
          "twin, own durations | error | twin, from the clean fixed run | error |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    rows = []
    for jitter in ("J0", "J2"):
        for name, (hint, policy, split) in specs.items():
            args = ["--hint", hint, "--policy", policy, "--split-backward", split]
            if jitter != "J0":
                args += ["--inject-jitter", f"jitter:{jitter}"]
            out = train(rrfp, tmp, f"{jitter}-{hint}", steps, *args)
            pipe, n = mean_ms(os.path.join(out, "loss.csv"), "pipeline_ms", skip)
            step_ms, _ = mean_ms(os.path.join(out, "loss.csv"), "step_ms", skip)
            own_d = os.path.join(out, "durations.csv")
            own = twin_mean(rrfp, own_d, steps_of(own_d), hint, policy, split)
            src = os.path.join(src_split if split == "on" else src_whole, "durations.csv")
            load = None if jitter == "J0" else f"jitter:{jitter}"
            pred = twin_mean(rrfp, src, steps_of(src), hint, policy, split, load)
            rows.append((jitter, name, pipe, step_ms, own, own / pipe - 1, pred, pred / pipe - 1))
            print(f"| {jitter} | {name} | {pipe:.1f} | {step_ms:.1f} | {own:.1f} | "
                  f"{100 * (own / pipe - 1):+.1f}% | {pred:.1f} | {100 * (pred / pipe - 1):+.1f}% |")
            sys.stdout.flush()
    write_csv("twin-train.csv", "jitter,run,pipeline_ms,step_ms,twin_own_ms,own_error,"
              "twin_from_clean_ms,clean_error", rows)


def main():
    global OUT_DIR
    ap = argparse.ArgumentParser()
    ap.add_argument("rrfp", type=executable)
    ap.add_argument("--steps", type=at_least(3, "the train part skips the first 2"), default=40)
    ap.add_argument("--rounds", type=count, default=ROUNDS,
                    help="the mpi part's interleaved rounds per invocation (5 timed steps each)")
    ap.add_argument("--part", default="all", choices=["imports", "runs", "mpi", "mpi-baseline", "train", "cores", "all"])
    ap.add_argument("--out-dir", default=OUT_DIR,
                    help="where the mpi and train parts write their CSV tables "
                         "(default: the repository's docs/data)")
    a = ap.parse_args()
    OUT_DIR = os.path.abspath(a.out_dir)
    rrfp = os.path.abspath(a.rrfp)
    with tempfile.TemporaryDirectory() as tmp:
        if a.part in ("imports", "all"):
            part_imports(rrfp)
            print()
        if a.part in ("runs", "all"):
            part_runs(rrfp, tmp)
            print()
        if a.part in ("mpi", "all"):
            part_mpi(rrfp, tmp, a.rounds)
            print()
        if a.part in ("mpi-baseline", "all"):
            part_mpi_baseline(rrfp, tmp)
            print()
        if a.part in ("train", "all"):
            part_train(rrfp, tmp, a.steps)
            print()
        if a.part in ("cores", "all"):
            part_cores(rrfp, tmp)


if __name__ == "__main__":
    main()
