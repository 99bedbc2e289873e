#!/usr/bin/env bash
# `rrfp train --transport mpi` over every layout of processes, for 8 steps: past step 3, where
# durations.csv starts keeping steps (a data-parallel run stopped there once, its record holding
# each task once per replica), every step logged, no negative bubble, the last step validated,
# durations.csv holding steps 3..8 with each task once per TP rank and every message between
# stages timed, and mpirun exiting 0. Then
# checkpoints written by several processes, resumed on other layouts, validating alike.
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
  # loss.csv: a header and 8 rows, bubble (column 9) never negative, a validation loss (column
  # 3) at the last step.
  awk -F, 'NR > 1 { n++; if ($9 < 0) bad = bad " step " $1 "=" $9; val = $3 }
           END { if (n != 8 || bad != "" || val == "") { print "rows " n bad " val " val; exit 1 } }' \
    "$dir/loss.csv" ||
    fail "P=$pp T=$tp D=$dp: loss.csv"
  # durations.csv: steps 3..8, the same number of rows each (every task once per TP rank).
  local tasks=$((3 * pp * 4 * tp))  # F, B and W of every microbatch and stage
  awk -F, -v want=$tasks 'NR > 1 { n[$1]++ }
      END { k = 0; for (s in n) { k++; if (s < 3 || s > 8 || n[s] != want) { print s, n[s]; exit 1 } }
            if (k != 6) { print k " steps"; exit 1 } }' "$dir/durations.csv" ||
    fail "P=$pp T=$tp D=$dp: durations.csv"
  # Every message between stages took some time: the processes' records are merged on one
  # clock. Each process timing from its own step start, 10-16% of them came out as 0 (their
  # consumers seemed to start before their producers ended).
  awk -F, -v pp="$pp" 'NR == 1 { for (i = 1; i <= NF; ++i) if ($i == "send_us") at = i }
      NR > 1 && (($5 == "F" && $2 < pp - 1) || ($5 == "B" && $2 > 0)) {
        n++; if ($at <= 0) zero++ }
      END { if (!at || (pp > 1 && n == 0) || zero > 0) { print zero " of " n " messages took 0 us"; exit 1 } }' \
    "$dir/durations.csv" || fail "P=$pp T=$tp D=$dp: durations.csv's message times"
  echo "P=$pp T=$tp D=$dp: 8 steps in $((SECONDS - start)) s, $(grep -c . "$dir/durations.csv") duration rows"
}

run_case 4 2 1 2
run_case 2 1 1 2
run_case 4 2 2 1
run_case 8 2 2 2

# Checkpoints of a multi-process run: 8 steps straight, and 4 steps then 4 more resumed on
# another layout, write the same checkpoint byte for byte (rank 0 writes the whole model; each
# process of the resumed run reads its own tensors). --warmup 10 keeps the learning rate of
# steps 1-8 independent of --steps.
# ckpt_case NAME NP1 PP1 NP2 PP2 DP: the second half under mpirun -np NP2 (0: in one process)
ckpt_case() {
  local name=$1 np1=$2 pp1=$3 np2=$4 pp2=$5 dp=$6 dir="$out/ckpt-$1"
  local flags=(-m 4 --hint bfw --split-backward on --d-model 32 --layers 4 --max-seq 64
    --max-len 64 --eval-every 0 --warmup 10 --timeout 60 --dp "$dp")
  mkdir -p "$dir"
  train_with() {  # NP PP args...: under mpirun (NP > 0) or in this process
    local np=$1 pp=$2
    shift 2
    if [ "$np" -gt 0 ]; then
      timeout 240 "$here/mpirun.sh" "$np" "$rrfp" train --transport mpi --pp "$pp" "${flags[@]}" "$@"
    else
      timeout 240 "$rrfp" train --pp "$pp" "${flags[@]}" "$@"
    fi
  }
  train_with "$np1" "$pp1" --steps 8 --save-every 8 --out "$dir/a" >"$dir/a.log" 2>&1 ||
    { cat "$dir/a.log"; fail "$name: the straight run"; }
  train_with "$np1" "$pp1" --steps 4 --save-every 4 --out "$dir/b" >"$dir/b1.log" 2>&1 ||
    { cat "$dir/b1.log"; fail "$name: the first half"; }
  train_with "$np2" "$pp2" --steps 8 --save-every 8 --resume "$dir/b/checkpoint.bin" \
    --out "$dir/b" >"$dir/b2.log" 2>&1 || { cat "$dir/b2.log"; fail "$name: the resumed half"; }
  grep -q "resumed from .* at step 4" "$dir/b2.log" || { cat "$dir/b2.log"; fail "$name: no resume"; }
  cmp "$dir/a/checkpoint.bin" "$dir/b/checkpoint.bin" || fail "$name: the checkpoints differ"
  # The same parameters validate alike on any layout: step 8's validation loss, both runs.
  local va vb
  va=$(awk -F, 'END { print $3 }' "$dir/a/loss.csv")
  vb=$(awk -F, 'END { print $3 }' "$dir/b/loss.csv")
  [ -n "$va" ] && [ "$va" = "$vb" ] || fail "$name: validation '$va' straight, '$vb' resumed"
  echo "$name: saved by -np $np1 P=$pp1, resumed on $([ "$np2" -gt 0 ] && echo "-np $np2" || echo "one process") P=$pp2 D=$dp: bitwise the straight run"
}
ckpt_case dp2 4 2 8 4 2
ckpt_case threads 2 2 0 4 1

# A checkpoint of another tensor-parallel size names its shards otherwise: refused, naming --tp
# (it named a shard it lacked).
timeout 120 "$here/mpirun.sh" 4 "$rrfp" train --transport mpi --pp 2 --tp 2 -m 4 --d-model 32 \
  --layers 4 --max-seq 64 --max-len 64 --eval-every 0 --warmup 10 --steps 8 --timeout 60 \
  --resume "$out/ckpt-threads/b/checkpoint.bin" --out "$out/tp2" >"$out/tp2.log" 2>&1 &&
  fail "a TP=1 checkpoint resumed at TP=2"
grep -q "holds the shards of tensor-parallel size 1; this run's --tp is 2" "$out/tp2.log" ||
  { cat "$out/tp2.log"; fail "TP=2 from TP=1: not the expected refusal"; }
echo "a TP=1 checkpoint refused at TP=2"

# An --out in use by another run: rank 0's refusal is every process's, at once and with exit 2
# (the others waited for rank 0 until their --timeout, then exited 1).
mkdir -p "$out/lk"
"$rrfp" train --pp 2 -m 2 --d-model 16 --layers 2 --heads 2 --eval-every 0 --steps 100000 \
  --out "$out/lk" >/dev/null 2>&1 &
holder=$!
# Up to a minute for its first row (LibTorch's start on a busy machine), then said if it never came.
for _ in $(seq 600); do [ -s "$out/lk/loss.csv" ] && break; sleep 0.1; done
[ -s "$out/lk/loss.csv" ] || fail "the holding run wrote no row in 60 s"
start=$SECONDS
timeout 120 "$here/mpirun.sh" 2 "$rrfp" train --transport mpi --pp 2 -m 2 --d-model 16 \
  --layers 2 --heads 2 --eval-every 0 --steps 2 --timeout 60 --out "$out/lk" >"$out/lk.log" 2>&1
rc=$?
kill -9 $holder
wait $holder 2>/dev/null
[ $rc -eq 2 ] && [ $((SECONDS - start)) -lt 30 ] ||
  { cat "$out/lk.log"; fail "an --out in use under mpirun: exit $rc after $((SECONDS - start)) s"; }
grep -q "is in use by another rrfp train" "$out/lk.log" || fail "an --out in use: no line saying so"
echo "an --out in use refused by every process in $((SECONDS - start)) s"
echo "PASS"
