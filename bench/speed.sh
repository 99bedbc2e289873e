#!/usr/bin/env bash
# The speed rows of docs/results-speed.md, two builds side by side in one sitting: each
# measurement alternates between the builds, three times (median kept), so that drift of the
# machine falls on both alike.
# Usage: bench/speed.sh BEFORE_DIR AFTER_DIR [OUT_DIR]
#   each DIR holds `rrfp` and `bench_core` of one Release build (a build folder, or copies).
# Prints one line per row (before, after, after/before); the raw outputs go to OUT_DIR.
# Where both dirs also hold bench_mpi and bench_c10d, the transports' ping-pongs follow (each
# against its raw library, three alternations). All of it took 13 minutes on a 2-core VM. The
# MPI hand-off columns come only from a bench_mpi that has them.
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) ends the script, not an empty column
if [ $# -lt 2 ] || [ ! -x "$1/rrfp" ] || [ ! -x "$2/rrfp" ] || [ ! -x "$1/bench_core" ] ||
  [ ! -x "$2/bench_core" ]; then
  echo "usage: $0 BEFORE_DIR AFTER_DIR [OUT_DIR] (each with rrfp and bench_core)" >&2
  exit 2
fi
command -v /usr/bin/time >/dev/null || { echo "$0: needs GNU time (apt-get install time)" >&2; exit 2; }
before=$(realpath "$1")
after=$(realpath "$2")
out=${3:-$(mktemp -d)}
mkdir -p "$out"
py=/usr/bin/python3
echo "speed: before $before, after $after, raw outputs in $out" >&2
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" >&2

median() { "$py" -c 'import sys, statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
ratio() { "$py" -c 'import sys; print(f"{float(sys.argv[2]) / float(sys.argv[1]):.2f}x")' "$1" "$2"; }
row() {  # row NAME UNIT BEFORE AFTER
  local r
  r=$(ratio "$3" "$4")  # its failure ends the script (an argument's was lost: an empty ratio)
  printf '%-58s %12s %12s %8s  %s\n' "$1" "$3" "$4" "$r" "$2"
}

# Wall seconds and max RSS (KB) of one simulate, over three alternating runs each.
simulate_row() {  # simulate_row LABEL ARGS...
  local label=$1 b a tb=() mb=() ta=() ma=()
  shift
  for i in 1 2 3; do
    for which in before after; do
      local dir=$before
      [ $which = after ] && dir=$after
      /usr/bin/time -f "%e %M" -o "$out/time" "$dir/rrfp" simulate "$@" >"$out/sim-$which-$label.txt"
      read -r s kb <"$out/time"
      if [ $which = before ]; then tb+=("$s"); mb+=("$kb"); else ta+=("$s"); ma+=("$kb"); fi
    done
  done
  b=$(median "${tb[@]}")
  a=$(median "${ta[@]}")
  row "$label: wall s" "median of 3" "$b" "$a"
  b=$(median "${mb[@]}" | awk '{print $1 / 1024}')
  a=$(median "${ma[@]}" | awk '{print $1 / 1024}')
  row "$label: max RSS MB" "median of 3" "$b" "$a"
}

simulate_row "simulate P=M=1024 bf ready" --pp 1024 -m 1024 --hint bf --policy ready
simulate_row "simulate P=M=4096 bf ready" --pp 4096 -m 4096 --hint bf --policy ready

# The simulator's hot loop and the arbiter's decisions (Google Benchmark, 3 repetitions each).
for which in before after; do
  dir=$before
  [ $which = after ] && dir=$after
  "$dir/bench_core" --benchmark_repetitions=3 --benchmark_format=json \
    --benchmark_out="$out/core-$which.json" >/dev/null 2>"$out/core-$which.err" ||
    { cat "$out/core-$which.err" >&2; echo "$0: $dir/bench_core failed" >&2; exit 1; }
done
"$py" - "$out/core-before.json" "$out/core-after.json" <<'EOF'
import json, sys, statistics
def medians(path):
    runs = {}
    for b in json.load(open(path))["benchmarks"]:
        name = b["run_name"]
        if b.get("run_type") == "aggregate":
            # Benchmarks that repeat themselves report only aggregates: their median.
            if b.get("aggregate_name") == "median" and "Decision/" in name:
                runs.setdefault(name, []).append(b["real_time"])
            continue
        value = 1e9 / b["items_per_second"] if "items_per_second" in b else b["real_time"]
        runs.setdefault(name, []).append(value)
    return {k: statistics.median(v) for k, v in runs.items()}
before, after = medians(sys.argv[1]), medians(sys.argv[2])
for name in before:
    if name in after:
        b, a = before[name], after[name]
        print(f"{'bench_core ' + name + ': ns per item':58s} {b:12.1f} {a:12.1f} {a / b:7.2f}x  median of 3")
EOF

# The runtime: dispatch gap and buffers settling, default run and 32 MiB messages.
for i in 1 2 3; do
  for which in before after; do
    dir=$before
    [ $which = after ] && dir=$after
    "$dir/rrfp" run >"$out/run-$which-$i.txt" 2>&1
    "$dir/rrfp" run --workload-file "$(dirname "$0")/../scripts/workloads/j2-32mib-messages.json" \
      --pp 4 -m 16 >"$out/run32-$which-$i.txt" 2>&1
  done
done
"$py" - "$out" <<'EOF'
import re, statistics, sys, pathlib
out = pathlib.Path(sys.argv[1])
def field(which, prefix, pattern):
    vals = []
    for p in sorted(out.glob(f"{prefix}-{which}-*.txt")):
        m = re.search(pattern, p.read_text())
        vals.append(m.groups())
    return vals
for prefix, label in (("run", "rrfp run (default)"), ("run32", "rrfp run, 32 MiB messages")):
    cols = {}
    for which in ("before", "after"):
        gaps = field(which, prefix, r"median ([0-9.]+) us, p99 ([0-9.]+) us")
        fresh = field(which, prefix, r"fresh buffers[^:]*: ([0-9]+) of ([0-9]+)")
        cols[which] = (statistics.median(float(g[0]) for g in gaps),
                       statistics.median(float(g[1]) for g in gaps),
                       sum(int(f[0]) for f in fresh), sum(int(f[1]) for f in fresh))
    b, a = cols["before"], cols["after"]
    print(f"{label + ': dispatch gap median us':58s} {b[0]:12.1f} {a[0]:12.1f} {a[0] / b[0]:7.2f}x  median of 3 runs")
    print(f"{label + ': dispatch gap p99 us':58s} {b[1]:12.1f} {a[1]:12.1f} {a[1] / b[1]:7.2f}x  median of 3 runs")
    print(f"{label + ': timed steps mapping fresh buffers':58s} {f'{b[2]} of {b[3]}':>12s} {f'{a[2]} of {a[3]}':>12s}")
EOF

# The planner: orders evaluated and the best makespan found at P=8 M=32 in 1 s and 10 s.
for budget in 1 10; do
  for which in before after; do
    dir=$before
    [ $which = after ] && dir=$after
    "$dir/rrfp" plan --pp 8 -m 32 --budget $budget >"$out/plan-$which-$budget.txt" 2>&1
  done
  "$py" - "$out/plan-before-$budget.txt" "$out/plan-after-$budget.txt" "$budget" <<'EOF'
import re, sys
def read(path):
    m = re.search(r"search: ([0-9.]+) ms.*?; ([0-9]+) orders in ([0-9.]+) s", open(path).read())
    return float(m.group(1)), int(m.group(2)) / float(m.group(3))
(bm, be), (am, ae) = read(sys.argv[1]), read(sys.argv[2])
b = sys.argv[3]
print(f"{'plan P=8 M=32 --budget ' + b + ': orders per second':58s} {be:12.0f} {ae:12.0f} {ae / be:7.2f}x")
print(f"{'plan P=8 M=32 --budget ' + b + ': best makespan ms':58s} {bm:12.3f} {am:12.3f} {am / bm:7.2f}x")
EOF
done

# The transports, against their raw libraries in the same process pair: latency as a multiple
# of raw, bandwidth as a share of raw; each build's own benchmark, alternating, medians of 3.
[ -x "$before/bench_mpi" ] && [ -x "$after/bench_mpi" ] && [ -x "$before/bench_c10d" ] &&
  [ -x "$after/bench_c10d" ] || exit 0
mpirun_sh=$(dirname "$0")/../tests/mpirun.sh
for i in 1 2 3; do
  for which in before after; do
    dir=$before
    [ $which = after ] && dir=$after
    "$mpirun_sh" 2 "$dir/bench_mpi" 20000 200 >"$out/mpi-$which-$i.csv" 2>&1
    "$dir/bench_c10d" 2000 50 $((29700 + i)) >"$out/c10d-$which-$i.csv" 2>&1
  done
done
"$py" - "$out" <<'EOF'
import csv, statistics, sys, pathlib
out = pathlib.Path(sys.argv[1])
def rows(which, prefix):  # {bytes: [the row of each run]}
    by = {}
    for p in sorted(out.glob(f"{prefix}-{which}-*.csv")):
        lines = [l for l in p.read_text().splitlines() if l[:1].isdigit() or l.startswith("bytes,")]
        for r in csv.DictReader(lines):
            by.setdefault(int(r["bytes"]), []).append(r)
    return by
def med(rs, col):
    vals = [float(r[col].rstrip("%")) for r in rs if r.get(col)]
    return statistics.median(vals) if vals else None
for prefix, name in (("mpi", "MPI"), ("c10d", "c10d")):
    b, a = rows("before", prefix), rows("after", prefix)
    for size in sorted(b):
        if size not in a:
            continue
        small = size < (1 << 20)
        col, what = ("latency_ratio", "latency / raw") if small else ("bandwidth_share", "bandwidth % of raw")
        bv, av = med(b[size], col), med(a[size], col)
        print(f"{f'{name} {size} B: {what}':58s} {bv:12.2f} {av:12.2f} {av / bv:7.2f}x  median of 3")
        for col in ("handoff_ratio", "spin_handoff_ratio") if small else ():
            v = med(a[size], col)
            if v is not None:
                print(f"{f'{name} {size} B: {col} (after only)':58s} {'':>12s} {v:12.2f}")
EOF
