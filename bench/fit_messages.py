#!/usr/bin/env python3
"""The fluid message model fitted to the messages of one traced step (docs/results-twin.md).

Usage: bench/fit_messages.py TRACE [--bytes N] [--latency-us L] [--by-concurrency]

TRACE is an `rrfp run --trace` (or `rrfp simulate --trace`) file of a P-stage run with V=1 and
TP 1: each F or B span's `send_us` is its message's time from the task's end to the arrival at
the next (F) or previous (B) stage. Every message is taken to carry --bytes (default 32 MiB, the
j2-32mib workload's). With the latency fixed (--latency-us, default 30), the model of
sim/shared_links.hpp says a message's bytes move at min(1, links / n(t)) of the rate alone while
n messages are past their latency; so for each links in [1, 4] (steps of 0.02) the work each
message did, W_i = integral of min(1, links / n(t)) over its transfer, should be bytes_i / rate,
and the rate follows by least squares. Prints the links and bandwidth of the least residual.

--by-concurrency also prints the messages' times grouped by how many others were in flight with
them (on average over each message's time, rounded, 3 or more together) and whether one of
those went to the same stage: the slowdown a fluid model would have to explain, with no model.

On a simulated trace it gives back the model it was simulated with (a step simulated at 5.1 GB/s
and 1.35 links came back as 5.13 GB/s and 1.34 links). Standard library only.
"""
import argparse
import json


def messages(path, nbytes):
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and "args" in e]
    stages = max(e["pid"] for e in events) + 1
    out = []
    for e in events:
        a = e["args"]
        if a.get("send_us") is None or a["kind"] not in ("F", "B"):
            continue
        dst = e["pid"] + (1 if a["kind"] == "F" else -1)
        if 0 <= dst < stages:
            end = e["ts"] + e["dur"]
            out.append((end, end + a["send_us"], nbytes, dst))
    return out


def fit(msgs, latency_us):
    spans = [(s + latency_us, e, b) for s, e, b, _ in msgs if e > s + latency_us]
    cuts = sorted({t for s, e, _ in spans for t in (s, e)})
    # How many messages move in each interval between consecutive starts and ends.
    pieces = []
    for t0, t1 in zip(cuts, cuts[1:]):
        mid = (t0 + t1) / 2
        pieces.append((t0, t1, sum(1 for s, e, _ in spans if s <= mid < e)))
    best = None
    for k in range(151):
        links = 1 + 0.02 * k
        work = []
        for s, e, _ in spans:
            w = 0.0
            for t0, t1, n in pieces:
                if t1 > s and t0 < e:
                    w += (min(t1, e) - max(t0, s)) * min(1.0, links / n)
            work.append(w)
        sizes = [b for _, _, b in spans]
        us_per_byte = sum(w * b for w, b in zip(work, sizes)) / sum(b * b for b in sizes)
        residual = sum((w - b * us_per_byte) ** 2 for w, b in zip(work, sizes))
        if best is None or residual < best[0]:
            best = (residual, links, 1e-3 / us_per_byte)
    return best, len(spans)


def by_concurrency(msgs):
    groups = {}
    for i, (s, e, _, d) in enumerate(msgs):
        others = same = 0.0
        for j, (s2, e2, _, d2) in enumerate(msgs):
            if j != i:
                o = max(0.0, min(e, e2) - max(s, s2)) / (e - s)
                others += o
                same += o if d2 == d else 0.0
        groups.setdefault((min(3, round(others)), min(1, round(same))), []).append((e - s) / 1e3)
    print("others in flight  to the same stage  messages  median ms  p10 ms  p90 ms")
    for (others, same), v in sorted(groups.items()):
        v.sort()
        print(f"{others:>16}{'+' if others == 3 else ' '} {('yes' if same else 'no'):>18}"
              f"  {len(v):>8}  {v[len(v) // 2]:>9.2f}  {v[len(v) // 10]:>6.2f}"
              f"  {v[int(len(v) * 0.9)]:>6.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--bytes", type=int, default=32 << 20)
    ap.add_argument("--latency-us", type=float, default=30.0)
    ap.add_argument("--by-concurrency", action="store_true")
    a = ap.parse_args()
    msgs = messages(a.trace, a.bytes)
    if not msgs:
        raise SystemExit(f"fit_messages: {a.trace} holds no message times (send_us)")
    (residual, links, gbps), n = fit(msgs, a.latency_us)
    print(f"{n} messages: latency {a.latency_us:.1f} us (given) + bytes / {gbps:.2f} GB/s, "
          f"links {links:.2f}; rms of the work {(residual / n) ** 0.5 / 1e3:.2f} ms")
    if a.by_concurrency:
        by_concurrency(msgs)


if __name__ == "__main__":
    main()
