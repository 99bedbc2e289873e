#!/usr/bin/env python3
"""Where a measured step and its simulation part ways (docs/results-twin.md).

Usage: bench/compare_timelines.py MEASURED SIMULATED [--every K]

Both are Chrome traces of the same run (`rrfp run --trace` and `rrfp simulate --trace` with the
same workload, seed, hint, policy and comm mode; V=1, TP 1). For each stage, its F and B tasks in
the measured order, every K-th one shown (default 4), with how much later it started in the
measured step than in the simulated one (ms): a drift that grows steadily is a cost the model
charges differently per task or message; a jump is one event. Then each stage's drift at its
last task, and for blocking runs, how long senders were held past the receiver's acceptance
(what the acknowledgement took; the simulator releases a sender at the transfer's end).
Standard library only.
"""
import argparse
import json


def load(path):
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    tasks = {}
    for e in events:
        a = e.get("args", {})
        if e.get("cat") in ("F", "B"):
            tasks[(e["pid"], a["kind"], a["microbatch"])] = e
    held = [e for e in events if e.get("cat") == "blocked" and e["name"] == "blocked: send"]
    return tasks, held


def makespan(tasks):
    return max(e["ts"] + e["dur"] for e in tasks.values()) - min(e["ts"] for e in tasks.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("measured")
    ap.add_argument("simulated")
    ap.add_argument("--every", type=int, default=4)
    a = ap.parse_args()
    real, held = load(a.measured)
    sim, _ = load(a.simulated)
    missing = set(real) ^ set(sim)
    if missing:
        raise SystemExit("the traces hold different tasks, e.g. %s" % sorted(missing)[:3])
    t0r = min(e["ts"] for e in real.values())
    t0s = min(e["ts"] for e in sim.values())
    print("makespan: measured %.1f ms, simulated %.1f ms (%+.1f%%)" % (
        makespan(real) / 1e3, makespan(sim) / 1e3, 100 * (makespan(real) / makespan(sim) - 1)))
    stages = sorted({k[0] for k in real})
    for p in stages:
        keys = sorted((k for k in real if k[0] == p), key=lambda k: real[k]["ts"])
        drift = [((real[k]["ts"] - t0r) - (sim[k]["ts"] - t0s)) / 1e3 for k in keys]
        shown = ["%s%d:%+.1f" % (k[1], k[2], d) for i, (k, d) in enumerate(zip(keys, drift))
                 if i % a.every == 0 or i == len(keys) - 1]
        print("stage %d: %s" % (p, " ".join(shown)))
    if held:
        # A sender is held from its task's end until the acknowledgement; the receiver accepted
        # at the task's end plus its send_us.
        late = []
        for e in real.values():
            s = e["args"].get("send_us")
            if s is None:
                continue
            end = e["ts"] + e["dur"]
            h = [x for x in held if x["pid"] == e["pid"] and abs(x["ts"] - end) < 50]
            if h:
                late.append(h[0]["dur"] - s)
        late.sort()
        if late:
            print("held past acceptance: %d sends, median %.2f ms, %d over 1 ms, largest %.1f ms, "
                  "%.1f ms in all" % (len(late), late[len(late) // 2] / 1e3,
                                      sum(1 for x in late if x > 1000), late[-1] / 1e3,
                                      sum(x for x in late if x > 0) / 1e3))


if __name__ == "__main__":
    main()
