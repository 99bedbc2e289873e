#!/usr/bin/env bash
# scripts/gpu-check.sh's accounting, with a stand-in rrfp in place of the GPU build: a training
# run that fails fails the check (exit 1) and is named, on the console and in the summary; a
# twin step that cannot be predicted is named and left out of the table rather than breaking it;
# GPU_CHECK_ONLY='twin' brings in the J0 ready runs the twin is compared with; a pattern bash
# cannot read is refused (exit 2) before anything runs. (A failed run passed as exit 0 with no
# word in the summary; a twin wanted alone printed an empty table.) No GPU needed.
source "$(dirname "$0")/gpu_check_repo.sh"
mkdir -p "$repo/build-gpu/tests" "$repo/build-gpu/python/rrfp"
printf '#!/bin/sh\necho "[  PASSED  ] 0 tests."\n' >"$repo/build-gpu/tests/test_train_cuda"
: >"$repo/build-gpu/python/rrfp/_rrfp.stub.so"
# The stand-in: `train` writes five steps of 100 ms (pipeline 90 ms) and a durations file, but
# fails j0-fixed-1f1b-blocking at once and j0-ready-bfw after its steps (exit 3); `simulate`
# predicts 80 ms, but answers step 4 with no JSON.
cat >"$repo/build-gpu/rrfp" <<'EOF'
#!/usr/bin/env bash
cmd=$1
shift
out= step=
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2 ;;
    --step) step=$2 ;;
  esac
  shift
done
case $cmd in
  train)
    [ "${out##*/}" = j0-fixed-1f1b-blocking ] && { echo "rrfp: error: a planted failure"; exit 3; }
    mkdir -p "$out"
    echo "P=4 V=1 M=16 GPT d=64 layers=2"
    echo "step,step_ms,pipeline_ms,tokens,bubble,gap_us_median" >"$out/loss.csv"
    echo "step,stage,kind,mb,ms" >"$out/durations.csv"
    for s in 1 2 3 4 5; do
      echo "$s,100,90,1000,0.25,5" >>"$out/loss.csv"
      echo "$s,0,F,0,1" >>"$out/durations.csv"
    done
    [ "${out##*/}" = j0-ready-bfw ] && { echo "rrfp: error: failed after its steps"; exit 3; }
    # A row cut short (a file damaged): one such row took the whole table with it.
    [ "${out##*/}" = j2-fixed-1f1b ] && echo "6,100" >>"$out/loss.csv"
    # Stopped with the check (both signalled, as a shutdown does): 143 after its step.
    if [ "${out##*/}" = j3-fixed-1f1b ]; then
      trap 'exit 143' TERM
      while :; do sleep 0.1; done
    fi
    echo "done: 5 steps"
    ;;
  simulate)
    [ "$step" = 4 ] && { echo "not json"; exit 0; }
    echo '{"runs": [{"makespan_ms": 80.0}]}'
    ;;
esac
EOF
chmod +x "$repo/build-gpu/rrfp" "$repo/build-gpu/tests/test_train_cuda"
export GPU_CHECK_NO_BUILD=1 GPU_CHECK_HARD=100 GPU_CHECK_SECONDS=60

GPU_CHECK_ONLY='twin|blocking' timeout 90 "$repo/scripts/gpu-check.sh" "$tmp/out" >"$tmp/console" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "a failed run: exit $rc, want 1"
for want in "run j0-ready-bf" "run twin-fixed-1f1b-split" "j0-ready-bfw failed (exit 3)" \
  "j0-fixed-1f1b-blocking failed (exit 3)" \
  "twin: step 4 under ready bf was not predicted" "twin: step 4 under ready bfw was not predicted"; do
  grep -qF -- "$want" "$tmp/console" || fail "the console lacks '$want'"
done
grep -q "run j0-fixed-1f1b$" "$tmp/console" && fail "GPU_CHECK_ONLY='twin' ran j0-fixed-1f1b"
summary=$(cat "$tmp/out/summary.md" 2>/dev/null)
# The summary says how the build and the CUDA tests went (it held the table alone).
for want in "Build: not built (GPU_CHECK_NO_BUILD: the rrfp in build-gpu)" \
  "CUDA tests: exit 0: 0 passed, 0 failed, 0 skipped" \
  "Failed or stopped (see runs/NAME.log): j0-fixed-1f1b-blocking, j0-ready-bfw (exit 3, 3 steps measured)" \
  "| j0-ready-bfw (exit 3) | 3 |" "| ready BF | 90.0 | 80.0 | -11.1% |" \
  "| ready BFW | - | - | j0-ready-bfw failed |"; do
  [[ $summary == *"$want"* ]] || fail "the summary lacks '$want'"
done
[ $fails -eq 0 ] || { echo "--- console"; cat "$tmp/console"; }

# CUDA tests that all skip (a LibTorch that sees no device) exit 0 and checked nothing: the
# check fails, and says so.
cp "$repo/build-gpu/tests/test_train_cuda" "$tmp/passes"
printf '#!/bin/sh\necho "[  SKIPPED ] CudaTrain.Bits (0 ms)"\necho "[  SKIPPED ] 1 test, listed below:"\necho "[  SKIPPED ] CudaTrain.Bits"\n' \
  >"$repo/build-gpu/tests/test_train_cuda"
GPU_CHECK_ONLY='^j0-fixed-1f1b$' timeout 60 "$repo/scripts/gpu-check.sh" "$tmp/out3" >"$tmp/console3" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -qF "1 CUDA test(s) skipped: this build's LibTorch sees no CUDA device?" "$tmp/console3" &&
  grep -qF "CUDA tests: exit 0: 0 passed, 0 failed, 1 skipped" "$tmp/out3/summary.md" ||
  fail "CUDA tests that skip: exit $rc, $(grep -i skip "$tmp/console3")"
cp "$tmp/passes" "$repo/build-gpu/tests/test_train_cuda"

GPU_CHECK_ONLY='j0-(' timeout 30 "$repo/scripts/gpu-check.sh" "$tmp/out2" >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$tmp/stderr")" -eq 1 ] &&
  grep -qF "GPU_CHECK_ONLY 'j0-(' is not an extended regular expression" "$tmp/stderr" ||
  fail "GPU_CHECK_ONLY='j0-(': exit $rc, $(cat "$tmp/stderr")"
[ -s "$tmp/stdout" ] && fail "GPU_CHECK_ONLY='j0-(' ran: $(head -3 "$tmp/stdout")"
[ -e "$tmp/out2" ] && fail "GPU_CHECK_ONLY='j0-(' made OUT, which a corrected rerun finds not empty"

# A damaged row marks its run and keeps the table; a pattern that matches no run measured
# nothing (exit 0, an empty table): refused up front, naming the runs.
GPU_CHECK_ONLY='^(j0|j2)-fixed-1f1b$' timeout 60 "$repo/scripts/gpu-check.sh" "$tmp/out4" \
  >"$tmp/console4" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -qF "| j0-fixed-1f1b | 3 | 100.0 |" "$tmp/out4/summary.md" &&
  grep -qF "| j2-fixed-1f1b (exit 0, 1 unreadable rows in loss.csv) | 3 |" "$tmp/out4/summary.md" ||
  fail "a damaged row: exit $rc, $(cat "$tmp/out4/summary.md")"
GPU_CHECK_ONLY='J2' timeout 60 "$repo/scripts/gpu-check.sh" "$tmp/out5" >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
[ $rc -eq 2 ] && [ "$(wc -l <"$tmp/stderr")" -eq 1 ] && [ ! -e "$tmp/out5" ] &&
  grep -qF "GPU_CHECK_ONLY 'J2' matches no run; the runs are j0-fixed-1f1b, j0-ready-bf, j0-ready-bfw, j0-fixed-1f1b-blocking, twin-fixed-1f1b-split, j2-fixed-1f1b," "$tmp/stderr" &&
  grep -qF "j0s-ready-bfw, pipeline, twin" "$tmp/stderr" ||
  fail "a pattern matching no run: exit $rc, $(cat "$tmp/stderr")"
# Counts that are no whole numbers in range are refused before anything runs ("7m" switched
# the budget off, "9m" gave every run `timeout ''`, 2 steps measured none).
for bad in GPU_CHECK_SECONDS=7m GPU_CHECK_HARD=9m GPU_CHECK_STEPS=2 GPU_CHECK_PY_SECONDS=0; do
  env "$bad" timeout 30 "$repo/scripts/gpu-check.sh" "$tmp/out6" >"$tmp/stdout" 2>"$tmp/stderr"
  rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/stderr")" -eq 1 ] &&
    grep -qF "gpu-check: ${bad%%=*} '${bad#*=}': expected a whole number from" "$tmp/stderr" &&
    [ ! -e "$tmp/out6" ] || fail "$bad: exit $rc, $(cat "$tmp/stderr")"
done
# The check and its run both signalled (a shutdown): the run's exit status is written before
# the check ends, and the summary names it (it read as a complete run, no .rc written).
GPU_CHECK_ONLY='^j3-fixed-1f1b$' setsid "$repo/scripts/gpu-check.sh" "$tmp/out7" \
  >"$tmp/console7" 2>&1 &
check=$!
for _ in $(seq 100); do [ -s "$tmp/out7/gpu-check/runs/j3-fixed-1f1b/loss.csv" ] && break; sleep 0.1; done
sleep 0.3
kill -TERM "$check" $(pgrep -f "runs/j3-fixed-1f1b") 2>/dev/null
wait "$check"
rc=$?
[ $rc -eq 1 ] && grep -qF "j3-fixed-1f1b failed (exit 143, stopped with the check)" "$tmp/console7" &&
  grep -qF "| j3-fixed-1f1b (exit 143) | 3 |" "$tmp/out7/summary.md" ||
  fail "a run stopped with the check: exit $rc, $(tail -3 "$tmp/console7"; cat "$tmp/out7/summary.md")"

[ "$fails" -eq 0 ] || exit 1
echo "gpu-check runs: failures counted and named, twin rows kept apart"
