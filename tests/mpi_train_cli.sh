#!/usr/bin/env bash
# `rrfp train --transport mpi` over every layout of processes, for 8 steps: past step 3, where
# durations.csv starts keeping steps (a data-parallel run stopped there once, its record holding
# each task once per replica), every step logged, no negative bubble, durations.csv holding
# steps 3..8 with each task once per TP rank, and mpirun exiting 0.
# Usage: mpi_train_cli.sh path/to/rrfp
set -uo pipefail
rrfp=$1
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# run_case NP PP TP DP
run_case() {
  local np=$1 pp=$2 tp=$3 dp=$4 dir="$out/p$2t$3d$4"
  local start=$SECONDS
  timeout 240 "$here/mpirun.sh" "$np" "$rrfp" train --transport mpi --pp "$pp" --tp "$tp" \
    --dp "$dp" -m 4 --hint bfw --split-backward on --d-model 32 --layers 4 --max-seq 64 \
    --max-len 64 --eval-every 0 --steps 8 --timeout 60 --out "$dir" >"$dir.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { cat "$dir.log"; fail "P=$pp T=$tp D=$dp: mpirun exited $rc"; }
  grep -q "^done: 8 steps" "$dir.log" || { cat "$dir.log"; fail "P=$pp T=$tp D=$dp: no 'done'"; }
  # loss.csv: a header and 8 rows, bubble (column 9) never negative.
  awk -F, 'NR > 1 { n++; if ($9 < 0) bad = bad " step " $1 "=" $9 }
           END { if (n != 8 || bad != "") { print "rows " n bad; exit 1 } }' "$dir/loss.csv" ||
    fail "P=$pp T=$tp D=$dp: loss.csv"
  # durations.csv: steps 3..8, the same number of rows each (every task once per TP rank).
  local tasks=$((3 * pp * 4 * tp))  # F, B and W of every microbatch and stage
  awk -F, -v want=$tasks 'NR > 1 { n[$1]++ }
      END { k = 0; for (s in n) { k++; if (s < 3 || s > 8 || n[s] != want) { print s, n[s]; exit 1 } }
            if (k != 6) { print k " steps"; exit 1 } }' "$dir/durations.csv" ||
    fail "P=$pp T=$tp D=$dp: durations.csv"
  echo "P=$pp T=$tp D=$dp: 8 steps in $((SECONDS - start)) s, $(grep -c . "$dir/durations.csv") duration rows"
}

run_case 4 2 1 2
run_case 2 1 1 2
run_case 4 2 2 1
run_case 8 2 2 2
echo "PASS"
