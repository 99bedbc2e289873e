#!/usr/bin/env bash
# The one script run on a GPU machine (docs/gpu.md): builds rrfp against the machine's CUDA
# PyTorch, runs the CUDA tests, then measures `rrfp train --device cuda --dtype bf16` at P=4
# (fixed 1F1B, ready BF, ready BFW; a window of tasks per stream; the three ways a stage learns
# of completion; the default and a wide model; then, as the budget allows, partitions, jitter,
# the image-text model and the digital twin's prediction of ready BF and BFW from the fixed 1F1B
# run's measured durations) and rrfp.Pipeline's table (bench/pipeline_gpu.py). Each `rrfp train`
# run is one process of 22 steps (the first two, start-up, are left out of every number).
# Prints a short table last; writes OUT/summary.md (the device, the build, the CUDA tests, the
# runs skipped, the table; written again after each run, so that a call killed from outside
# still brings back what was measured) and everything else into OUT/gpu-check.tgz.
# Usage: scripts/gpu-check.sh OUT [build dir]
#   GPU_CHECK_SECONDS  time budget (default 420): runs that would start after it are skipped
#   GPU_CHECK_HARD     hard limit (default 540): every wait ends by then (a run deaf to its
#                      SIGTERM 15 s later, killed), and the summary and archive are written on
#                      any exit (give the caller's own limit about 35 s more)
#   GPU_CHECK_ARGS     the device flags (default: --device cuda --dtype bf16)
#   GPU_CHECK_STEPS    steps per run (default 22)
#   GPU_CHECK_NO_BUILD set: use the rrfp already in the build dir
#   GPU_CHECK_PY_SECONDS, GPU_CHECK_PY_RUNS  bench/pipeline_gpu.py's budget (100) and runs
#   GPU_CHECK_ONLY     an extended regular expression: only the runs whose names match (the
#                      `rrfp train` runs' names below; `pipeline` for rrfp.Pipeline's table and
#                      device tests; `twin` for the prediction, which brings in its source,
#                      twin-fixed-1f1b-split, and the runs it is compared with, j0-ready-bf and
#                      j0-ready-bfw). The build and the CUDA tests always run; the Python
#                      extension is built only where `pipeline` is wanted. E.g.
#                      '^(j0|j0p|j2|j3|img)-(fixed-1f1b|ready-bfw?)$': what the fifth sitting's
#                      budget left out, with the J0 runs the partitioned ones are compared with.
# Needs .gpu-deps (scripts/gpu-deps.sh, on a Debian machine) beside the source.
# OUT must be a fresh empty folder (or not yet made) outside the source tree: the archive takes
# what the script writes, and that alone is deleted once archived. A console.log there (the
# caller's own copy of the console) is left as it is.
set -uo pipefail
# OUT as given, resolved before the `cd` below: a relative one (`.`) named the repository root.
dest=${1:?usage: scripts/gpu-check.sh OUT [build dir]}
dest=$(realpath -m -- "$dest")
# So is a build folder given (it was read from the repository's root, unlike OUT).
build=${2:+$(realpath -m -- "$2")}
# The interpreter build-gpu.sh built the extension for (PYTHON there too).
py=${PYTHON:-python3}
cd "$(dirname "$0")/.." || exit 2
root=$(pwd -P)
# A pattern bash cannot read matches nothing, silently: refused before OUT is touched (a
# corrected rerun into the same OUT was refused as not empty) and the window spent on the build.
only=${GPU_CHECK_ONLY:-}
[[ "" =~ $only ]]
if [ $? -eq 2 ]; then
  echo "gpu-check: GPU_CHECK_ONLY '$only' is not an extended regular expression" >&2
  exit 2
fi
# One that matches no run (J2 for j2) measured nothing after the build and the CUDA tests.
if [ -n "$only" ]; then
  names=$(sed -n 's/^\(STEPS=[0-9]* \)\{0,1\}train \([a-z0-9-]*\) .*/\2/p' \
    "$root/scripts/gpu-check.sh")
  matched=
  for n in $names pipeline twin; do [[ $n =~ $only ]] && matched=1; done
  if [ -z "$matched" ]; then
    echo "gpu-check: GPU_CHECK_ONLY '$only' matches no run; the runs are" \
      "$(echo $names pipeline twin | sed 's/ /, /g')" >&2
    exit 2
  fi
fi
# Each count a whole number in its range, refused before anything runs: "7m" switched the
# budget off unsaid, "9m" gave every run `timeout ''` (exit 125), 2 steps left none measured.
for spec in GPU_CHECK_SECONDS:0:86400 GPU_CHECK_HARD:1:86400 GPU_CHECK_STEPS:3:100000 \
  GPU_CHECK_PY_SECONDS:1:86400; do
  IFS=: read -r var lo hi <<<"$spec"
  val=${!var-}
  [ -z "$val" ] && continue
  if ! [[ $val =~ ^[0-9]{1,6}$ ]] || [ $((10#$val)) -lt "$lo" ] || [ $((10#$val)) -gt "$hi" ]; then
    note=""
    [ "$var" = GPU_CHECK_STEPS ] && note=" (the first two steps, start-up, are left out)"
    echo "gpu-check: $var '$val': expected a whole number from $lo to $hi$note" >&2
    exit 2
  fi
done
refuse() {
  echo "gpu-check: OUT $dest $*: give a fresh empty folder outside the source tree" >&2
  exit 2
}
d=${dest%/}/ r=$root/  # with one trailing slash each, "/" included
if [ "$d" = "$r" ]; then
  refuse "is the repository"
elif [[ $r == "$d"* ]]; then
  refuse "contains the repository $root"
elif [[ $d == "$r"* ]]; then
  # Inside the repository only where git ignores it (build*/, rrfp-out/), not in the tracked
  # tree; without git to ask, not at all.
  git check-ignore -q -- "${d#"$r"}" 2>/dev/null ||
    refuse "lies inside the repository $root, in no folder git ignores"
fi
if [ -e "$dest" ] && [ ! -d "$dest" ]; then
  refuse "is not a folder"
elif [ -n "$(find "$dest" -mindepth 1 -maxdepth 1 ! -name console.log -print -quit 2>/dev/null)" ]; then
  refuse "is not empty"
fi
if [ -z "${GPU_CHECK_NO_BUILD:-}" ] && [ ! -d .gpu-deps ]; then
  echo "gpu-check: .gpu-deps is missing: make it with scripts/gpu-deps.sh on a Debian machine" \
    "and carry it to this one" >&2
  exit 2
fi
# Runs on CUDA where neither nvidia-smi nor the interpreter's torch sees a GPU: every part
# failed one by one (the CUDA tests exit 127, each run refused), and a summary of failures came
# back exit 1. Either one seeing a GPU will do: a refusal on the GPU machine costs its window.
device_args=${GPU_CHECK_ARGS:---device cuda --dtype bf16}
if [[ " $device_args" =~ \ --device[=\ ]+cuda ]] &&
  ! nvidia-smi -L 2>/dev/null | grep -q '^GPU ' &&
  ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 3)' 2>/dev/null; then
  echo "gpu-check: no GPU here (nvidia-smi lists none or is not installed, and $py's torch sees" \
    "none): run it on the GPU machine, or name the interpreter of its CUDA torch in PYTHON" >&2
  exit 2
fi
build=${build:-build-gpu}
# Everything but the summary is written under OUT/gpu-check, which the script makes and, once
# archived, deletes: nothing else in OUT is touched.
out=$dest/gpu-check
mkdir -p "$out" || exit 2
start=$(date +%s)
budget=${GPU_CHECK_SECONDS:-420}
# Whether the run NAME is wanted (GPU_CHECK_ONLY, read above).
wanted() { [ -z "$only" ] || [[ $1 =~ $only ]]; }
# The twin's table compares its prediction with the J0 ready runs: wanting it wants them.
wanted_run() {
  wanted "$1" || { wanted twin && [[ $1 == j0-ready-bf || $1 == j0-ready-bfw ]]; }
}
hard=${GPU_CHECK_HARD:-540}
failed=0  # set by a part that failed: the exit status, once the summary is written
steps=${GPU_CHECK_STEPS:-22}
read -r -a dev <<<"$device_args"
runs=$out/runs
mkdir -p "$runs"
elapsed() { echo $(($(date +%s) - start)); }
log() { echo "[gpu-check $(elapsed)s] $*"; }
# A part's timeout: its own, or what is left before the hard limit if less (at least 1 s).
cap() {
  local left=$((hard - $(elapsed)))
  [ "$left" -lt 1 ] && left=1
  echo $(($1 < left ? $1 : left))
}

# OUT/summary.md: what ran where, how the build and the CUDA tests went, the runs skipped, then
# the table (an H100's summary was otherwise told from an H200's by the console alone).
write_summary() {
  {
    # Every GPU nvidia-smi lists, then torch's line (a second GPU's line was the software).
    [ -s "$out/gpus.txt" ] && echo "Device: $(paste -sd';' "$out/gpus.txt" | sed 's/;/; /g')"
    [ -s "$out/versions.txt" ] && echo "Software: $(grep -m1 '^torch ' "$out/versions.txt")"
    [ -s "$out/build.status" ] && echo "Build: $(cat "$out/build.status")"
    [ -s "$out/tests.status" ] && echo "CUDA tests: $(cat "$out/tests.status")"
    [ -s "$out/skipped.txt" ] && echo "Skipped: $(paste -sd, "$out/skipped.txt" | sed 's/,/, /g')"
    echo
    "$py" scripts/gpu_table.py "$out"
  } >"$dest/summary.md.tmp" 2>&1
  mv -f "$dest/summary.md.tmp" "$dest/summary.md"  # with the table maker's error, if it failed
}

# The summary, then everything but the console and the summary in one archive (at most a few
# files come back from a GPU machine): on any exit, a part that failed or a limit reached too.
finished=
finish() {
  [ -n "$finished" ] && return
  finished=1
  log "summary"
  write_summary
  # A run the table names as failed or stopped (a loss.csv it could not read, say) fails the
  # check too, though its process ended well.
  grep -q "^Failed or stopped" "$dest/summary.md" && failed=1
  cat "$dest/summary.md"
  if [ -s "$out/pipeline.md" ]; then
    echo
    echo "rrfp.Pipeline (bench/pipeline_gpu.py):"
    cat "$out/pipeline.md"
  fi
  local tgz
  tgz=$(mktemp /tmp/gpu-check.XXXXXX)
  if tar czf "$tgz" -C "$out" .; then
    rm -rf "$out"
    mv "$tgz" "$dest/gpu-check.tgz"
  fi
  log "done (exit $failed)"
  exit "$failed"
}
trap finish EXIT
# Inside a training run, a signal is taken once the run's exit status is written (train, below):
# taken at once, the run had no .rc and read as complete in the summary.
in_run=
trap 'failed=1; stop=1; [ -n "$in_run" ] || exit 1' TERM INT

if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader \
    >"$out/gpus.txt" 2>&1
else
  echo "no nvidia-smi on this machine" >"$out/gpus.txt"
fi
{
  cat "$out/gpus.txt"
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
    torch.cuda.get_device_name() if torch.cuda.is_available() else "no device",
    torch.cuda.get_device_properties(0).multi_processor_count if torch.cuda.is_available() else 0, "SMs")'
  nvcc --version | tail -1
  c++ --version | head -1
  nproc
} >"$out/versions.txt" 2>&1
cat "$out/versions.txt"

if [ -z "${GPU_CHECK_NO_BUILD:-}" ]; then
  log "build"
  # The extension only where rrfp.Pipeline's table is wanted: about 40 s of the build.
  export BUILD_GPU_PYTHON=1
  wanted pipeline || BUILD_GPU_PYTHON=0
  timeout "$(cap 330)" scripts/build-gpu.sh "$build" >"$out/build.log" 2>&1
  rc=$?
  echo "ok" >"$out/build.status"
  if [ $rc -ne 0 ]; then
    grep -E "error" "$out/build.log" | head -20
    # Out of time (124): a second build has less; a precondition refused (2) stays refused;
    # else it may be the partitions' code (its compile, its link, CUDA's driver library it
    # alone needs): again without it.
    if [ $rc -eq 124 ]; then
      echo "ran out of time" >"$out/build.status"
      log "the build ran out of time"
      failed=1
      exit 1
    elif [ $rc -eq 2 ]; then
      echo "failed (exit $rc): $(grep -m1 -E "error|build-gpu:" "$out/build.log" | cut -c1-200)" \
        >"$out/build.status"
      tail -5 "$out/build.log"
      failed=1
      exit 1
    fi
    log "build failed; again without SM partitions"
    echo "ok without SM partitions (the build with them failed)" >"$out/build.status"
    if ! RRFP_CMAKE_ARGS=-DRRFP_SM_PARTITIONS=OFF timeout "$(cap 330)" scripts/build-gpu.sh \
      "$build" >>"$out/build.log" 2>&1; then
      echo "failed, with and without SM partitions" >"$out/build.status"
      tail -30 "$out/build.log"
      failed=1
      exit 1
    fi
  fi
  if wanted pipeline && ! ls "$build"/python/rrfp/_rrfp*.so >/dev/null 2>&1; then
    echo "$(cat "$out/build.status"); the Python extension did not build" >"$out/build.status"
    log "the Python extension did not build:"
    grep -m20 -E "error" "$out/build.log"
  fi
else
  echo "not built (GPU_CHECK_NO_BUILD: the rrfp in $build)" >"$out/build.status"
fi
rrfp=$build/rrfp

log "CUDA tests"
timeout "$(cap 180)" "$build/tests/test_train_cuda" >"$out/tests.log" 2>&1
rc=$?
echo "tests exit $rc" >>"$out/tests.log"
[ $rc -eq 0 ] || failed=1
# A test that skips (no CUDA device seen by LibTorch) exits 0: a check of nothing fails.
count() { grep -cE "^\[ +$1 +\] [A-Za-z].* \([0-9]+ ms\)$" "$out/tests.log"; }
ok=$(count OK) bad=$(count FAILED) skip=$(count SKIPPED)
echo "exit $rc: $ok passed, $bad failed, $skip skipped" >"$out/tests.status"
if [ "$skip" -gt 0 ]; then
  failed=1
  log "$skip CUDA test(s) skipped: this build's LibTorch sees no CUDA device?"
fi
grep -E "^\[ +(OK|FAILED|SKIPPED) +\]|tests exit|Failure|Expected|Which is" "$out/tests.log" | head -30

# rrfp.Pipeline(device="cuda"), where the extension was built: its table (bench/pipeline_gpu.py:
# a model the C++ side does not define, fixed 1F1B against ready BF and BFW, J0 and J2, with
# each stage's idle share from the profiler), then its device tests (bitwise against the plain
# loop on the GPU, tied weights across stage streams, evaluation).
py_table() {
  wanted pipeline || return 0
  if ! ls "$build"/python/rrfp/_rrfp*.so >/dev/null 2>&1; then
    log "no Python extension in $build: the Python device tests and table are skipped"
    failed=1
    return
  fi
  if [ "$(elapsed)" -gt "$budget" ]; then
    log "skip the rrfp.Pipeline table and tests (past the ${budget}s budget)"
    return
  fi
  local pypath
  pypath=$(cd "$build/python" && pwd)
  log "rrfp.Pipeline table"
  PYTHONUNBUFFERED=1 PYTHONPATH=$pypath timeout "$(cap 200)" "$py" bench/pipeline_gpu.py \
    --data .gpu-deps/corpus --out "$out/pipeline.csv" --budget-s "${GPU_CHECK_PY_SECONDS:-100}" \
    --runs "${GPU_CHECK_PY_RUNS:-J0:fixed-1f1b,J0:ready-bfw,J0:ready-bf,J2:fixed-1f1b,J2:ready-bfw}" \
    >"$out/pipeline.md" 2>"$out/pipeline.log"
  rc=$?
  echo "pipeline table exit $rc" >>"$out/pipeline.log"
  [ $rc -eq 0 ] || failed=1
  tail -3 "$out/pipeline.log"
  log "Python device tests"
  # Their CUDA cases alone (and the comparison with torch's CUDA GradScaler, whose cases are
  # numbered): the CPU ones ran here, and a TorchScript one starts a process of its own that
  # may take minutes.
  RRFP_PYTHONPATH=$pypath timeout "$(cap 120)" "$py" -m pytest -q -p no:cacheprovider \
    -k "cuda or same_bits_as_torchs" tests/python/test_device.py tests/python/test_caller_settings.py \
    tests/python/test_grad_scaler.py >"$out/python-tests.log" 2>&1
  rc=$?
  echo "python tests exit $rc" >>"$out/python-tests.log"
  [ $rc -eq 0 ] || failed=1
  tail -5 "$out/python-tests.log"
  # A Gloo group first: whether torch's ProcessGroup crosses into the extension at all (the
  # fourth sitting's failure), apart from anything NCCL does.
  for backend in gloo nccl; do
    log "rrfp.Pipeline under torchrun with a $backend default group"
    port=$("$py" tests/python/ports.py)  # free now: a fixed one may be another program's
    PYTHONPATH=$pypath timeout "$(cap 90)" "$py" -m torch.distributed.run --nproc_per_node 1 \
      --master_port "$port" --redirects 1 --tee 1 tests/python/nccl_group.py --backend "$backend" \
      >"$out/$backend-group.log" 2>&1
    rc=$?
    echo "$backend group exit $rc" >>"$out/$backend-group.log"
    [ $rc -eq 0 ] || failed=1
    grep -E "nccl_group.py|Error|exit" "$out/$backend-group.log" | tail -3
  done
}

# One training run: NAME ARGS... -> runs/NAME (its outputs), runs/NAME.log, runs/NAME.cpu
# (STEPS=N before the call: N steps instead). A run that fails, or is stopped at its limit, fails
# the check and is named, as gpu_table.py names it too.
train() {
  local name=$1
  shift
  wanted_run "$name" || return 0
  if [ "$(elapsed)" -gt "$budget" ]; then
    log "skip $name (past the ${budget}s budget)"
    echo "$name" >>"$out/skipped.txt"
    return
  elif [ "$(cap 30)" -lt 30 ]; then
    log "skip $name (under 30 s left before the ${hard}s hard limit)"
    echo "$name" >>"$out/skipped.txt"
    return
  fi
  log "run $name"
  # The corpus is the text task's: `--task image-text` refuses --data (its samples are made),
  # and the fourth sitting's image-text runs ended at once on it.
  local data=(--data .gpu-deps/corpus)
  [[ " $* " == *" image-text "* ]] && data=()
  local TIMEFORMAT='%U %S' limit began
  limit=$(cap 150) began=$(elapsed)
  in_run=1
  # SIGTERM asks `rrfp train` to stop after its step: a step that never ends needs the KILL.
  { time timeout -k 15 "$limit" "$rrfp" train "${dev[@]}" --steps "${STEPS:-$steps}" \
    --warmup 5 --eval-every 0 --eval-batches 1 --timeout 60 "${data[@]}" --out "$runs/$name" \
    "$@" >"$runs/$name.log" 2>&1; } 2>"$runs/$name.cpu"
  local rc=$?
  echo "$rc" >"$runs/$name.rc"  # gpu_table.py names a run that failed after measuring steps
  in_run=
  grep -E "^done|error" "$runs/$name.log" | cut -c1-240
  if [ $rc -ne 0 ]; then
    failed=1
    # 137 is also the out-of-memory killer's: its time limit only where the limit was reached.
    local why=""
    if [ $rc -eq 124 ] || { [ $rc -eq 137 ] && [ $(($(elapsed) - began)) -ge "$limit" ]; }; then
      why=", its time limit"
    elif [ $rc -eq 137 ]; then
      why=", killed before its time limit (out of memory?)"
    elif [ -n "${stop:-}" ]; then
      why=", stopped with the check"
    fi
    log "$name failed (exit $rc$why)"
  fi
  write_summary
  [ -z "${stop:-}" ] || exit 1
}

fixed_blocking=(--hint 1f1b --policy fixed --split-backward off --comm blocking)
fixed=(--hint 1f1b --policy fixed --split-backward off)
bf=(--hint bf --policy ready --split-backward off)
bfw=(--hint bfw --policy ready --split-backward on)
part=(--sm-partitions on)
spin=(--completion spin)
callback=(--completion callback)
window=(--window 2)
# Four times the width and twice the sequence: the GPU's share of each task grows.
big=(--d-model 2048 --heads 16 --max-seq 2048 --max-len 2048 --min-len 1024)
# Most wanted first: a run past the budget is skipped. Each run's name is written out on its
# `train` line: the names GPU_CHECK_ONLY may match are read from those lines, up front. What no
# sitting has yet measured in one
# (docs/results-gpu.md): the four schedules side by side under J0, the twin's source, rrfp.Pipeline
# with its payloads on the device, J2 and J3 and the image-text task with ready BF beside BFW,
# and SM partitions for each schedule. Then the wide model, a window of 2 tasks per stream (w)
# and the ways of learning of completion (poll, the default; spin, s; a host callback, c), which
# the fourth sitting measured.
train j0-fixed-1f1b "${fixed[@]}"
train j0-ready-bf "${bf[@]}"
train j0-ready-bfw "${bfw[@]}"
train j0-fixed-1f1b-blocking "${fixed_blocking[@]}"
# The twin's source: fixed 1F1B with W apart, so that both BF and BFW replay from it.
train twin-fixed-1f1b-split --hint 1f1b --policy fixed --split-backward on
py_table
train j2-fixed-1f1b "${fixed[@]}" --inject-jitter jitter:J2
train j2-ready-bf "${bf[@]}" --inject-jitter jitter:J2
train j2-ready-bfw "${bfw[@]}" --inject-jitter jitter:J2
train j3-fixed-1f1b "${fixed[@]}" --inject-jitter jitter:J3
train j3-ready-bf "${bf[@]}" --inject-jitter jitter:J3
train j3-ready-bfw "${bfw[@]}" --inject-jitter jitter:J3
train img-fixed-1f1b "${fixed[@]}" --task image-text
train img-ready-bf "${bf[@]}" --task image-text
train img-ready-bfw "${bfw[@]}" --task image-text
train j0p-fixed-1f1b "${fixed[@]}" "${part[@]}"
train j0p-ready-bf "${bf[@]}" "${part[@]}"
train j0p-ready-bfw "${bfw[@]}" "${part[@]}"
STEPS=12 train big-fixed-1f1b "${fixed[@]}" "${big[@]}"
STEPS=12 train big-ready-bfw "${bfw[@]}" "${big[@]}"
train j0w-ready-bfw "${bfw[@]}" "${window[@]}"
train j0c-ready-bfw "${bfw[@]}" "${callback[@]}"
train j0s-ready-bfw "${bfw[@]}" "${spin[@]}"

# The twin: every measured step of the source replayed under ready BF and BFW, each within
# what is left before the hard limit; a step not predicted fails the check and is left out.
if wanted twin && [ -f "$runs/twin-fixed-1f1b-split/durations.csv" ]; then
  log "twin"
  pp=$(grep -o 'P=[0-9]*' "$runs/twin-fixed-1f1b-split.log" | head -1 | cut -d= -f2)
  m=$(grep -o 'M=[0-9]*' "$runs/twin-fixed-1f1b-split.log" | head -1 | cut -d= -f2)
  echo "step,hint,predicted_ms" >"$out/twin.csv"
  for s in $(tail -n +2 "$runs/twin-fixed-1f1b-split/durations.csv" | cut -d, -f1 | sort -un); do
    for spec in "bf off" "bfw on"; do
      set -- $spec
      if [ "$(cap 30)" -lt 5 ]; then
        log "twin: stopped at step $s, under 5 s left before the ${hard}s hard limit"
        break 2
      fi
      ms=$(timeout "$(cap 30)" "$rrfp" simulate \
        --replay "$runs/twin-fixed-1f1b-split/durations.csv" --step "$s" --pp "$pp" -m "$m" --hint "$1" --policy ready --split-backward "$2" --json - |
        "$py" -c 'import json, sys; print(json.load(sys.stdin)["runs"][0]["makespan_ms"])')
      if [ -z "$ms" ]; then
        failed=1
        log "twin: step $s under ready $1 was not predicted"
        continue
      fi
      echo "$s,$1,$ms" >>"$out/twin.csv"
    done
  done
fi

exit $failed  # the summary and the archive: finish, on the way out
