#!/usr/bin/env bash
# Builds rrfp and runs the whole suite: the Release build's ctest, then the core and runtime
# tests under AddressSanitizer+UBSan and ThreadSanitizer. Says how long each part took, last.
# RRFP_SKIP_SANITIZERS=1 skips the sanitizer builds (quick local runs).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
took=()
# Runs WHAT... and notes how long it took under NAME.
timed() {  # NAME WHAT...
  local name=$1 start=$SECONDS
  shift
  "$@"
  took+=("$(printf '%-28s %4d s' "$name" $((SECONDS - start)))")
}
summary() {
  echo "== scripts/test.sh: each part's time (in all $((SECONDS / 60)) min $((SECONDS % 60)) s)"
  printf '   %s\n' "${took[@]}"
}
trap summary EXIT
# The preset gives the options' defaults: a build/ configured before without LibTorch or MPI
# kept that, and its suite passed without their tests.
timed "Release build" bash -c "cmake --preset release && cmake --build build -j $jobs"
timed "Release tests" ctest --test-dir build --output-on-failure -j "$jobs"
[ "${RRFP_SKIP_SANITIZERS:-0}" = 1 ] && exit 0
for san in address thread; do
  dir=build-$san
  timed "$san sanitizer build" bash -c "cmake -S . -B $dir -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DRRFP_SANITIZE=$san -DRRFP_BUILD_BENCH=OFF &&
    cmake --build $dir -j $jobs --target core_runtime_tests"  # what the labels below run
  # Sanitizers slow the property suite several-fold: 100 seeds per hint under ASan+UBSan, 500
  # above. TSan finds races between threads, and the core's property and fuzz tests run on one:
  # under it they run 20 seeds and 300 fuzz inputs, not 3,000-4,000 (the runtime's tests, which
  # start threads, keep their 4 seeds; the parallel simulator's its 20). The layers checks
  # compile, running nothing: once above.
  seeds=100 fuzz=""
  [ $san = thread ] && seeds=20 fuzz=300
  RRFP_TEST_SEEDS=$seeds RRFP_FUZZ_ITERS=$fuzz timed "$san sanitizer tests" \
    ctest --test-dir "$dir" -L 'core|runtime' -LE 'cli|layers' --output-on-failure -j "$jobs"
done
