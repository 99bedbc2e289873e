#!/usr/bin/env bash
# A hint file whose order its dependencies allow but the blocking rendezvous deadlocks: schedule
# check says so, and simulate, run and train refuse it under --policy fixed --comm blocking (exit
# 2, one line naming the file and the stuck ranks) instead of failing or stalling on it.
# Usage: cli_hint_blocking.sh PATH/TO/rrfp
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cli_check.sh"
head='rrfp-hint 1 pp=2 vpp=1 microbatches=2 placement=loop split=0'
# Stage 1 lists F m1 first: its one posted receive is m1's, while stage 0 waits on m0's.
printf '%s\nstage 0: F0:0 F0:1 B0:0 B0:1\nstage 1: F1:1 F1:0 B1:0 B1:1\n' "$head" >"$tmp/swap.txt"
printf '%s\nstage 0: F0:0 F0:1 B0:0 B0:1\nstage 1: F1:0 B1:0 F1:1 B1:1\n' "$head" >"$tmp/1f1b.txt"
"$rrfp" schedule check --pp 2 -m 2 "$tmp/swap.txt" >"$tmp/out" 2>&1 &&
  grep -q "is a valid hint for P=2 V=1 (loop) M=2 under async transfers;" "$tmp/out" &&
  grep -q "^deadlocks under --comm blocking with --policy fixed .*the receive posted in list order is F c1 m1" "$tmp/out" ||
  { echo "FAIL: schedule check of a list that deadlocks under blocking:"; cat "$tmp/out"; fails=$((fails + 1)); }
"$rrfp" schedule check --pp 2 -m 2 "$tmp/1f1b.txt" >"$tmp/out" 2>&1 &&
  grep -q "under async and blocking transfers;" "$tmp/out" && ! grep -q deadlocks "$tmp/out" ||
  { echo "FAIL: schedule check of 1F1B:"; cat "$tmp/out"; fails=$((fails + 1)); }
want="--hint $tmp/swap.txt: its order deadlocks under --comm blocking with --policy fixed"
check "$want" simulate --pp 2 -m 2 --workload uniform --hint "$tmp/swap.txt" --policy fixed --comm blocking
# The refusal says what to give instead, as the built-in zb-v's does; a stage held on its send
# is not said to wait for a ready task (its next one was ready).
check "$want (receives posted one at a time in list order; give --comm async, or --policy ready): stage 0: ran 1/4, next in fixed order F c0 m1 (ready)" \
  simulate --pp 2 -m 2 --workload uniform --hint "$tmp/swap.txt" --policy fixed --comm blocking
check "held on 1 unacknowledged send(s); waits for its send(s) to be accepted before it computes again" \
  simulate --pp 2 -m 2 --workload uniform --hint "$tmp/swap.txt" --policy fixed --comm blocking
check "$want" run --pp 2 -m 2 --workload uniform --hint "$tmp/swap.txt" --policy fixed --comm blocking --timeout 5
# rrfp train too, where this build trains (it trained until the watchdog stopped the first
# step); the 1F1B file trains.
if [ "$trains" = ON ]; then
  check "$want" train --pp 2 -m 2 --hint "$tmp/swap.txt" --policy fixed --comm blocking \
    --timeout 5 --out "$tmp/t"
  small=(--d-model 16 --heads 2 --layers 2 --max-seq 32 --max-len 32 --min-len 8 --eval-every 0
    --eval-batches 1 --steps 1)
  "$rrfp" train --pp 2 -m 2 --hint "$tmp/1f1b.txt" --policy fixed --comm blocking --timeout 30 \
    "${small[@]}" --out "$tmp/t1" >"$tmp/out" 2>&1 ||
    { echo "FAIL: train the 1F1B file under blocking:"; tail -3 "$tmp/out"; fails=$((fails + 1)); }
fi
# Async runs it, and blocking runs the 1F1B file.
"$rrfp" simulate --pp 2 -m 2 --workload uniform --hint "$tmp/swap.txt" --policy fixed --comm async >/dev/null ||
  { echo "FAIL: simulate the swapped list under async"; fails=$((fails + 1)); }
"$rrfp" simulate --pp 2 -m 2 --workload uniform --hint "$tmp/1f1b.txt" --policy fixed --comm blocking >/dev/null ||
  { echo "FAIL: simulate the 1F1B file under blocking"; fails=$((fails + 1)); }
echo "cli hint blocking checks: $fails failed"
[ "$fails" -eq 0 ]
