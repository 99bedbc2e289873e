#!/usr/bin/env bash
# Checks that two builds of rrfp give the same deterministic results: every simulated table, the
# sweeps, the paper's tables, the drawn schedules and plans with a fixed evaluation budget. A
# change that claims "no change of results" (a refactoring, a speed-up) runs this with the
# binary before it and the binary after it; only wall times may differ (dropped before the
# comparison).
# Usage: scripts/same-results.sh OLD_RRFP NEW_RRFP [WORK_DIR]
# Exit 0: identical; 1: a difference (the diff is printed); 2: usage; 3: a build failed a
# command (named, with its error), so nothing was compared.
set -euo pipefail
if [ $# -lt 2 ] || [ ! -f "$1" ] || [ ! -x "$1" ] || [ ! -f "$2" ] || [ ! -x "$2" ]; then
  echo "usage: $0 OLD_RRFP NEW_RRFP [WORK_DIR] (both executables)" >&2
  exit 2
fi
old=$(realpath "$1")
new=$(realpath "$2")
work=${3:-$(mktemp -d)}
py=/usr/bin/python3
here=$(cd "$(dirname "$0")" && pwd)

# Each JSON report without its wall-clock fields, keys sorted.
normalize() {
  "$py" - "$@" <<'EOF'
import json, sys
def clean(v):
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items() if not k.endswith("seconds")}
    if isinstance(v, list):
        return [clean(x) for x in v]
    return v
for path in sys.argv[1:]:
    with open(path) as f:
        j = clean(json.load(f))
    with open(path, "w") as f:
        json.dump(j, f, indent=1, sort_keys=True)
EOF
}

outputs() { # outputs RRFP DIR
  local rrfp=$1 dir=$2 i=0
  rm -rf "$dir"
  mkdir -p "$dir"
  cd "$dir"
  sim() { "$rrfp" simulate "$@" --json "sim$((i += 1)).json" >/dev/null; }
  for comm in async blocking; do
    for hint in 1f1b bf bfw adaptive zb-h1; do
      sim --pp 4 -m 12 --comm $comm --hint $hint --policy ready --workload jitter:J2 --seed 3
      sim --pp 4 -m 8 --comm $comm --hint $hint --tp 2 --workload language --seed 2
      sim --pp 4 -m 8 --comm $comm --hint $hint --tp 2 --tp-protocol agree --workload paper-comm
    done
    for hint in 1f1b zb-h1 zb-h2 gpipe; do
      sim --pp 8 -m 16 --comm $comm --hint $hint --policy fixed --workload multimodal --seed 5
    done
    sim --pp 4 --vpp 2 -m 8 --comm $comm --hint interleaved-1f1b --policy both --seed 4
    sim --pp 4 -m 16 --comm $comm --hint bf --workload straggler --limit 3 --seed 7
    sim --pp 6 -m 12 --comm $comm --workload multimodal --seed 9 # the default comparison
    # ZB-V is laid out for asynchronous sends: under blocking its fixed order deadlocks (refused).
    [ "$comm" = async ] && policy=both || policy=ready
    sim --pp 4 --vpp 2 --placement vshape -m 8 --comm $comm --hint zb-v --policy $policy
  done
  sim --pp 64 -m 128 --hint bf --policy ready --seed 11
  # Microbatch counts that are not powers of two, several chunks a stage, TP 3.
  for hint in bf bfw adaptive; do
    sim --pp 8 --vpp 3 -m 37 --hint $hint --policy ready --workload jitter:J3 --seed 12
    sim --pp 6 --vpp 2 -m 21 --hint $hint --split-backward on --limit 4 --seed 14
  done
  sim --pp 12 -m 100 --tp 3 --hint adaptive --policy ready --workload multimodal --seed 13
  sim --pp 4 -m 8 --tp 2 --seed 6 --svg timeline.svg --trace trace.json
  # Large enough for the workload's draws and the lower bound to run in ranges on several threads.
  sim --pp 256 -m 512 --hint bf --policy ready --seed 15
  sim --pp 32 --vpp 2 -m 1024 --tp 2 --split-backward on --hint adaptive --workload jitter:J3 --seed 16
  "$rrfp" sweep --pp 4 8 --tp 1 2 --seeds 2 --quiet --csv sweep.csv >/dev/null
  "$rrfp" sweep --pp 4 --tp 2 --tp-protocol agree --seeds 2 --quiet --csv sweep_agree.csv >/dev/null
  for hint in 1f1b zb-h1 zb-h2 gpipe; do
    "$rrfp" schedule show --pp 4 -m 8 --hint $hint --out "schedule-$hint.txt" >"show-$hint.txt"
  done
  "$rrfp" plan --pp 4 -m 8 --max-evaluations 200 --exact off --seed 2 --json plan.json >/dev/null
  "$rrfp" plan --pp 4 -m 6 --max-evaluations 100 --exact on --split-backward on --seed 3 \
    --json plan_exact.json >/dev/null
  # The paper's tables (results-paper.md), without the line naming the binary.
  "$py" "$here/../bench/paper.py" "$rrfp" --seeds 2 | tail -n +2 >paper.md
  normalize ./*.json
}

echo "same-results: old $old, new $new, outputs in $work" >&2
# A command that fails ends the build's outputs there, said as such (its exit passed for "a
# difference" or "usage", with no diff printed). A trap, not `||`: under `||` bash ignores
# set -e inside the subshell, which went on past the failure.
build_failed() { echo "same-results: $1 failed a command (above)" >&2; exit 3; }
trap 'build_failed "$old"' ERR
(outputs "$old" "$work/old")
trap 'build_failed "$new"' ERR
(outputs "$new" "$work/new")
trap - ERR
if diff -r "$work/old" "$work/new"; then
  echo "same-results: identical ($(ls "$work/new" | wc -l) outputs)"
else
  echo "same-results: the outputs differ (above)"
  exit 1
fi
