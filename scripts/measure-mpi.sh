#!/usr/bin/env bash
# Measures the Open MPI transport and the multi-process runtime (docs/results-mpi.md):
#  1. bench_mpi: one-way latency and bandwidth of the transport against a raw MPI ping-pong in
#     the same job (2 processes)            -> docs/data/mpi-pingpong.csv
#  2. rrfp run --transport mpi --compare at P=8, M=32 (8 processes), seeds 1-3, two workloads
#     with activations scaled to 16 bytes per token (see the doc for why)
#                                            -> docs/data/mpi-fidelity.csv, mpi-runs.txt
#  3. TP coordination, leader vs agree, TP=2 (P=4) and TP=4 (P=2), 8 processes, ready BF,
#     M=16, next to `rrfp simulate` on the same flags -> docs/data/mpi-tp-coordination.csv
# Usage: scripts/measure-mpi.sh [build dir] [output dir] (a Release build with Open MPI; an idle
# machine). The output dir defaults to docs/data.
set -euo pipefail
# A folder given is the caller's (it was read from the repository's root).
given() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
# A third argument was ignored, and an output folder given as measure-runtime.sh takes it
# went unsaid, the repository's tables overwritten.
[ $# -le 2 ] || { echo "$0: takes [build dir] [output dir], got $# arguments" >&2; exit 2; }
build=$(given "${1:-$(dirname "$0")/../build}")
dest=$(given "${2:-$(dirname "$0")/../docs/data}")
cd "$(dirname "$0")/.."
rrfp=$build/rrfp
mpirun=tests/mpirun.sh
# The output folder made and tried first: one that could not be made or written failed at the
# end, its minutes of measurements thrown away.
mkdir -p "$dest" && [ -w "$dest" ] || { echo "$0: cannot write to $dest" >&2; exit 2; }
# Before any output is touched: a wrong folder emptied the tables, then failed unsaid.
for bin in "$rrfp" "$build/bench_mpi"; do
  [ -f "$bin" ] && [ -x "$bin" ] ||
    { echo "$0: no $bin (give a Release build folder with Open MPI)" >&2; exit 2; }
done
# Written aside and moved into the output dir once whole: a failure midway left the tables cut short.
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Each run's errors are shown where it fails (they were thrown away, the script ending unsaid).
quiet() {  # quiet COMMAND...: its stdout; its stderr only if it fails
  "$@" 2>"$out/err" || { cat "$out/err" >&2; echo "$0: $* failed; $dest left as it was" >&2; return 1; }
}

echo "== bench_mpi" >&2
"$mpirun" 2 "$build/bench_mpi" 20000 200 | tee "$out/mpi-pingpong.csv"

echo "== fidelity at P=8" >&2
raw=$out/mpi-runs.txt
: >"$raw"
csv=$out/mpi-fidelity.csv
echo "workload,seed,run,measured_ms,simulated_ms,makespan_error_pct,speedup_measured,speedup_simulated,speedup_diff_pct,replayed_ms,replayed_error_pct" >"$csv"
for wl in multimodal-small-messages j2-small-messages; do
  for seed in 1 2 3; do
    args=(run --transport mpi --compare --pp 8 -m 32 --workload-file "scripts/workloads/$wl.json"
          --seed "$seed" --timeout 30)
    echo "== mpirun -np 8 rrfp ${args[*]}" | tee -a "$raw" >&2
    report=$(quiet "$mpirun" 8 "$rrfp" "${args[@]}")
    echo "$report" >>"$raw"
    echo "$report" | awk -v w="$wl" -v s="$seed" -f scripts/fidelity.awk >>"$csv"
  done
done

echo "== TP coordination" >&2
tp=$out/mpi-tp-coordination.csv
echo "tp,pp,protocol,seed,source,makespan_ms,rounds,failed_rounds,coordination_ms_per_rank,collective_wait_ms_per_rank" >"$tp"
fields='import json,sys; r=json.load(sys.stdin)["runs"][0]; print(",".join(str(round(r[k],3)) for k in ("makespan_ms","coordination_rounds","failed_coordination_rounds","coordination_ms_per_rank","collective_wait_ms_per_rank")))'
for t in 2 4; do
  p=$((8 / t))
  for proto in leader agree; do
    for seed in 1 2 3; do
      args=(--pp "$p" --tp "$t" --tp-protocol "$proto" -m 16 --hint bf --policy ready
            --workload-file scripts/workloads/multimodal-small-messages.json --seed "$seed")
      echo "== tp $t $proto seed $seed" >&2
      m=$(quiet "$mpirun" 8 "$rrfp" run --transport mpi "${args[@]}" --json - | python3 -c "$fields")
      s=$(quiet "$rrfp" simulate "${args[@]}" --json - | python3 -c "$fields")
      echo "$t,$p,$proto,$seed,measured,$m" >>"$tp"
      echo "$t,$p,$proto,$seed,simulated,$s" >>"$tp"
    done
  done
done
cat "$tp"
mkdir -p "$dest"
mv "$out/mpi-pingpong.csv" "$out/mpi-runs.txt" "$out/mpi-fidelity.csv" "$tp" "$dest/"
echo "wrote $dest/mpi-pingpong.csv, mpi-runs.txt, mpi-fidelity.csv and mpi-tp-coordination.csv" >&2
