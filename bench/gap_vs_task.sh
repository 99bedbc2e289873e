#!/usr/bin/env bash
# The dispatch gap of `rrfp run` as a function of how long the tasks are: every task of a
# `uniform` workload lasts FORWARD_US (B 2x, no jitter), at P=1 (one thread, no messages) and
# P=2. The runtime does the same work between two tasks whatever their length; where the gap
# still grows with it, the machine is refilling caches the task's time let go cold
# (bench_runtime's BM_TouchAfterBusy measures that alone). One or two builds, alternating,
# three times each; the median of the three medians is printed.
# Usage: bench/gap_vs_task.sh RRFP [RRFP_B]        (about 10 s a build on a 2-core VM)
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) ends the script, not an empty column
if [ $# -lt 1 ] || [ ! -f "$1" ] || [ ! -x "$1" ] || { [ $# -gt 1 ] && { [ ! -f "$2" ] || [ ! -x "$2" ]; }; }; then
  echo "usage: $0 RRFP [RRFP_B] (rrfp binaries of Release builds)" >&2
  exit 2
fi
builds=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); seed 1"
printf '%-8s %4s %10s' task_us P "$(basename "$(dirname "$1")")"
[ $# -gt 1 ] && printf ' %10s' "$(basename "$(dirname "$2")")"
printf '   (dispatch gap median, us)\n'
for us in 50 200 1000 5000; do
  echo "{\"preset\": \"uniform\", \"forward_us\": $us, \"compute_sigma\": 0}" >"$work/w.json"
  for p in 1 2; do
    declare -A got=()
    for i in 1 2 3; do
      for b in "${!builds[@]}"; do
        # Its stderr is shown where it fails (it was thrown away, the script ending unsaid).
        "${builds[$b]}" run --pp $p -m 32 --hint bf --policy ready --repeat 3 \
          --workload-file "$work/w.json" >"$work/out" 2>"$work/err" ||
          { cat "$work/err" >&2; echo "$0: ${builds[$b]} run failed (above)" >&2; exit 1; }
        g=$(sed -n 's/.*dispatch gap.* median \([0-9.]*\) us.*/\1/p' "$work/out")
        [ -n "$g" ] || { echo "$0: ${builds[$b]}: no dispatch gap in its report" >&2; exit 1; }
        got[$b]="${got[$b]:-} $g"
      done
    done
    printf '%-8s %4s' "$us" "$p"
    for b in "${!builds[@]}"; do
      # shellcheck disable=SC2086
      median=$(/usr/bin/python3 -c 'import sys, statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' ${got[$b]})
      printf ' %10s' "$median"
    done
    printf '\n'
    unset got
  done
done
