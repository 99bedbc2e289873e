#!/usr/bin/env bash
# The CLI under random input, seeded so that a failure reproduces: random bytes as hint and
# workload files, random flags with hostile values, hostile output paths. Never a crash or a
# hang; a refusal is exit 2 with one line (the named refusals: cli_bad_input.sh).
# Usage: cli_fuzz.sh PATH/TO/rrfp [ON|OFF: whether the build has LibTorch]
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cli_check.sh"
# Random bytes, seeded: the same bytes on every run, so a failure reproduces. seeded_bytes SEED
# N: N bytes (N = 0: 1 to 400 of them) from Python's random.Random(SEED).
seeded_bytes() {
  /usr/bin/python3 -c 'import random, sys
r = random.Random(int(sys.argv[1]))
n = int(sys.argv[2]) or r.randrange(1, 401)
sys.stdout.buffer.write(bytes(r.randrange(256) for _ in range(n)))' "$1" "$2"
}
seeded_bytes 0 3000 >"$tmp/random.bin"
check "$tmp/random.bin" schedule check "$tmp/random.bin"
check "--svg: '/nonexistent-dir/x.svg': its folder '/nonexistent-dir' does not exist" simulate --svg /nonexistent-dir/x.svg
check "--seeds: must be at least 1" sweep --seeds 0
check "--mb-factors: 1073741825 x --pp 4 microbatches on 4 stages exceed" sweep --pp 4 --mb-factors 1073741825
# Random bytes as hint files and workload files, many times over: never a crash. Seeded:
# the same 40 files every time.
for i in $(seq 1 40); do
  seeded_bytes "$i" 0 >"$tmp/r$i"
  "$rrfp" schedule check "$tmp/r$i" >/dev/null 2>&1; rc=$?
  [ "$rc" -eq 2 ] || { echo "FAIL: random hint file $i -> rc=$rc"; fails=$((fails + 1)); }
  "$rrfp" simulate --workload-file "$tmp/r$i" >/dev/null 2>&1; rc=$?
  [ "$rc" -eq 2 ] || { echo "FAIL: random workload file $i -> rc=$rc"; fails=$((fails + 1)); }
done
# Flags fuzzed: random flags of simulate, schedule show and train with hostile values (huge,
# negative, non-finite, empty, binary). Every run ends by itself with 0 or 2 within its time
# limit, never with a signal or a hang; one given 0x10 with 2, as no flag reads hexadecimal
# (an integer flag read it as 16, and a leading 0 as octal). Seeded: the same 90 runs every time.
values=(-1 0 1 3 -0 1e308 -1e308 nan inf -inf 2147483648 -2147483649 99999999999999999999999 ""
        abc 0x10 1.5 " " "$(printf '\x01\xff')" "$(head -c 300 /dev/zero | tr '\0' 9)")
sim_flags=(--pp --vpp -m --limit --max-pending-w --tp --seed --workload --hint --policy --comm
           --placement --split-backward --tp-protocol --ordered-forwards)
train_flags=(--lr --clip --weight-decay --warmup --steps --d-model --heads --layers --max-seq
             --min-len --max-len --max-images --eval-every --eval-batches --timeout --seed --dp)
RANDOM=7
fuzzed=0 hexed=0
for i in $(seq 1 90); do
  case $((i % 3)) in
    0) args=(simulate --pp 2 -m 4) flags=("${sim_flags[@]}") ;;
    1) args=(schedule show --pp 2 -m 4) flags=(--pp --vpp -m --placement --split-backward --hint) ;;
    2) args=(train --steps 1 --d-model 16 --layers 2 --heads 2 --eval-every 0 --out "$tmp/fz") flags=("${train_flags[@]}") ;;
  esac
  for _ in 1 2; do
    args+=("${flags[RANDOM % ${#flags[@]}]}" "${values[RANDOM % ${#values[@]}]}")
  done
  timeout 60 "$rrfp" "${args[@]}" >/dev/null 2>"$tmp/fz.err"; rc=$?
  fuzzed=$((fuzzed + 1))
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 2 ]; then
    echo "FAIL: rrfp ${args[*]} -> rc=$rc: $(head -c 300 "$tmp/fz.err")"; fails=$((fails + 1))
  elif [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/fz.err")" -ne 1 ]; then
    echo "FAIL: rrfp ${args[*]} -> $(wc -l <"$tmp/fz.err") stderr lines"; fails=$((fails + 1))
  elif [ "$rc" -eq 0 ] && [[ " ${args[*]} " == *" 0x10 "* ]]; then
    echo "FAIL: rrfp ${args[*]} -> exit 0: a flag read 0x10"; fails=$((fails + 1))
  fi
  [[ " ${args[*]} " == *" 0x10 "* ]] && hexed=$((hexed + 1))
done
echo "fuzzed flags: $fuzzed runs, $hexed given 0x10"
# Output paths fuzzed: every option that writes a file, given hostile paths (a FIFO with no
# reader, a directory, a full device, a missing folder, a name over NAME_MAX, a newline, an
# empty name, a path through a file, /proc). Every run ends by itself within 20 s with 0, 1 or
# 2 and at most one line on stderr; nothing hangs on a FIFO. Seeded: the same 60 runs each time.
mkfifo "$tmp/out-fifo"
mkdir -p "$tmp/out-dir"
touch "$tmp/out-file"
paths=("$tmp/out-fifo" "$tmp/out-dir" /dev/full "$tmp/missing/x.json" \
       "$tmp/$(head -c 300 /dev/zero | tr '\0' n).json" "$tmp/new
line.json" "" "$tmp/out-file/x.json" /proc/rrfp-x.json "$tmp/ok.json" -)
RANDOM=11
for i in $(seq 1 60); do
  p=${paths[RANDOM % ${#paths[@]}]}
  case $((i % 5)) in
    0) args=(simulate --pp 2 -m 4 --json "$p") ;;
    1) args=(simulate --pp 2 -m 4 --svg "$p") ;;
    2) args=(simulate --pp 2 -m 4 --trace "$p") ;;
    3) args=(plan --pp 2 -m 4 --max-evaluations 5 --exact off --out "$p") ;;
    4) args=(schedule show --pp 2 -m 4 --out "$p") ;;
  esac
  (cd "$tmp" && timeout 20 "$rrfp" "${args[@]}" >/dev/null 2>"$tmp/op.err"); rc=$?
  if [ "$rc" -gt 2 ] || [ "$(wc -l <"$tmp/op.err")" -gt 1 ]; then
    echo "FAIL: rrfp ${args[*]} -> rc=$rc, $(wc -l <"$tmp/op.err") stderr lines: $(head -c 300 "$tmp/op.err")"
    fails=$((fails + 1))
  fi
done
echo "fuzzed output paths: 60 runs"
echo "cli fuzz checks: $fails failed"
[ "$fails" -eq 0 ]
