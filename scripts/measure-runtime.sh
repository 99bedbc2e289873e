#!/usr/bin/env bash
# Measures the threaded runtime against the simulator (docs/results-runtime.md): for each
# workload and seed, `rrfp run --compare` at P=8, M=32 for the default comparison (fixed 1F1B,
# ready BF, ready BFW), for 1F1B under both policies, and for the default comparison at the
# paper's back-pressure limit 32. Writes the raw reports to
# docs/data/runtime-runs.txt, one CSV row per run to docs/data/runtime-fidelity.csv and the
# dispatch gaps of each invocation to docs/data/runtime-dispatch-gaps.csv.
# Usage: scripts/measure-runtime.sh [build dir] [output dir] (a Release build; an idle machine).
set -euo pipefail
# Folders given are the caller's (they were read from the repository's root); the defaults are
# the repository's.
given() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
rrfp=$(given "${1:-$(dirname "$0")/../build}")/rrfp
out=$(given "${2:-$(dirname "$0")/../docs/data}")
cd "$(dirname "$0")/.."
# Before any output is touched: a wrong folder emptied the tables, then exited 127 unsaid.
[ -f "$rrfp" ] && [ -x "$rrfp" ] || { echo "$0: no $rrfp (give a Release build folder)" >&2; exit 2; }
mkdir -p "$out"
# Written aside and moved in once whole: a failure or Ctrl-C midway left the tables cut short.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
raw=$stage/runtime-runs.txt
csv=$stage/runtime-fidelity.csv
: >"$raw"
gaps=$stage/runtime-dispatch-gaps.csv
echo "workload,seed,variant,gap_median_us,gap_p99_us,dispatches" >"$gaps"
echo "workload,seed,run,measured_ms,simulated_ms,makespan_error_pct,speedup_measured,speedup_simulated,speedup_diff_pct,replayed_ms,replayed_error_pct" >"$csv"
for workload in multimodal jitter:J1 jitter:J2 jitter:J3; do
  for seed in 1 2 3; do
    for variant in default 1f1b limit32; do
      args=(run --compare --pp 8 -m 32 --workload "$workload" --seed "$seed" --timeout 30)
      [ "$variant" = 1f1b ] && args+=(--hint 1f1b --policy both)
      [ "$variant" = limit32 ] && args+=(--limit 32)
      echo "== rrfp ${args[*]}" | tee -a "$raw" >&2
      report=$("$rrfp" "${args[@]}" 2>"$stage/err") ||
        { cat "$stage/err" >&2; echo "$0: rrfp ${args[*]} failed; $out left as it was" >&2; exit 1; }
      echo "$report" >>"$raw"
      echo "$report" | awk -v w="$workload" -v s="$seed" -v v="$variant" '
        /^runtime overhead/ {print w "," s "," v "," $(NF-7) "," $(NF-4) "," $(NF-1)}' >>"$gaps"
      suffix=; [ "$variant" = limit32 ] && suffix=" limit 32"
      echo "$report" |
        awk -v w="$workload" -v s="$seed" -v suffix="$suffix" -f scripts/fidelity.awk >>"$csv"
    done
  done
done
mv "$raw" "$csv" "$gaps" "$out/"
echo "wrote $out/runtime-runs.txt, runtime-fidelity.csv and runtime-dispatch-gaps.csv" >&2
