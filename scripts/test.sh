#!/usr/bin/env bash
# Builds rrfp and runs the whole suite: the Release build's ctest, then the core and runtime
# tests under AddressSanitizer+UBSan and ThreadSanitizer. Says how long each part took, last.
# RRFP_SKIP_SANITIZERS=1 skips the sanitizer builds (quick local runs).
#
# The sanitizer trees compile while the Release tests run, at idle CPU priority (SCHED_IDLE):
# the tests leave a third of 2 cores unused (they wait for deadlines, processes and each
# other), which the compilers take without taking any from a test, since a test's thread that
# wakes preempts them. Their output goes to build-sanitizers.log, shown if they fail.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
took=()
# Runs WHAT... and notes how long it took under NAME.
timed() {  # NAME WHAT...
  local name=$1 start=$SECONDS
  shift
  "$@"
  took+=("$(printf '%-44s %4d s' "$name" $((SECONDS - start)))")
}
builds_pid=
finish() {
  [ -n "$builds_pid" ] && kill -- "-$builds_pid" 2>/dev/null  # its group: ninja, compilers
  echo "== scripts/test.sh: each part's time (in all $((SECONDS / 60)) min $((SECONDS % 60)) s)"
  printf '   %s\n' "${took[@]}"
}
trap finish EXIT
sanitized() {  # configures and builds the tree of sanitizer $1: what the labels below run
  cmake -S . -B "build-$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRRFP_SANITIZE="$1" \
    -DRRFP_BUILD_BENCH=OFF && cmake --build "build-$1" -j "$jobs" --target core_runtime_tests
}
# At idle priority where the system allows it, else at the lowest nice.
idle() {
  if chrt --idle 0 true 2>/dev/null; then chrt --idle 0 "$@"; else nice -n 19 "$@"; fi
}

timed "Release build" bash -c "cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release &&
                                 cmake --build build -j $jobs"
sanitizers=1
[ "${RRFP_SKIP_SANITIZERS:-0}" = 1 ] && sanitizers=0
if [ $sanitizers = 1 ]; then
  export -f sanitized
  export jobs
  builds_start=$SECONDS
  set -m  # the builds in a process group of their own, which an early exit stops whole
  idle bash -c 'sanitized address && sanitized thread' >build-sanitizers.log 2>&1 &
  builds_pid=$!
  set +m
fi
timed "Release tests" ctest --test-dir build --output-on-failure -j "$jobs"
[ $sanitizers = 1 ] || exit 0
wait_builds() {
  local rc=0
  wait "$builds_pid" || rc=$?
  builds_pid=
  if [ $rc -ne 0 ]; then
    tail -n 60 build-sanitizers.log
    echo "scripts/test.sh: the sanitizer builds failed (build-sanitizers.log)"
    return $rc
  fi
  took+=("$(printf '%-44s %4d s' "sanitizer builds in all, from the tests' start" \
    $((SECONDS - builds_start)))")
}
timed "sanitizer builds after the tests" wait_builds
for san in address thread; do
  # Sanitizers slow the property suite several-fold: 100 seeds per hint there, 500 above.
  RRFP_TEST_SEEDS=100 timed "$san sanitizer tests" \
    ctest --test-dir "build-$san" -L 'core|runtime' -LE cli --output-on-failure -j "$jobs"
done
