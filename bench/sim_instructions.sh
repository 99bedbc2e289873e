#!/usr/bin/env bash
# Instructions per simulated task, two builds side by side: the simulator's hot loop
# (bench_core's two simulate benchmarks, P=64 V=2 M=512, ready BF and fixed interleaved 1F1B)
# run once under callgrind, which counts every instruction executed inside simulate() and
# simulates the branch predictor; then one decision (`BM_DecideAndCommit`: a peek and a commit
# among 1,000 ready forwards, under BF and the adaptive rule). Unlike a timing, the count does
# not move with the machine's load or speed, so a change of a few percent shows in one run.
# Usage: bench/sim_instructions.sh BEFORE_DIR AFTER_DIR   (each holding a Release bench_core)
# About 10 s (both builds, on a 2-core VM). Needs valgrind (scripts/install-deps.sh installs it).
set -euo pipefail
# A failure inside $(...) ends the script: a failed count printed an empty column and 0.000x.
shopt -s inherit_errexit
if [ $# -ne 2 ] || [ ! -x "$1/bench_core" ] || [ ! -x "$2/bench_core" ]; then
  echo "usage: $0 BEFORE_DIR AFTER_DIR (each with a Release bench_core)" >&2
  exit 2
fi
command -v valgrind >/dev/null || { echo "$0: needs valgrind (apt-get install valgrind)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tasks=131072  # P=64 x V=2 x M=512 x (F, B)

# Runs one iteration of a bench_core benchmark under callgrind, counting only inside the named
# functions: "instructions mispredicted-branches", each divided by N.
counted() {  # counted DIR FILTER N FUNCTION...
  local dir=$1 filter=$2 n=$3 toggles=()
  shift 3
  for f in "$@"; do toggles+=("--toggle-collect=$f"); done
  valgrind --tool=callgrind --branch-sim=yes "${toggles[@]}" --callgrind-out-file="$tmp/out" \
    "$dir/bench_core" --benchmark_filter="$filter" --benchmark_min_time=0.001 >"$tmp/log" 2>&1 ||
    { tail -n 5 "$tmp/log" >&2; echo "$0: $dir/bench_core failed under valgrind" >&2; exit 1; }
  # One iteration: the first already takes longer than the minimum time under callgrind.
  grep -q " 1 items_per_second" "$tmp/log" || { echo "$0: expected one iteration" >&2; exit 1; }
  awk -v n="$n" '/^events:/ {for (i = 2; i <= NF; ++i) col[$i] = i}
    /^summary:/ {printf "%.1f %.2f", $(col["Ir"]) / n, $(col["Bcm"]) / n}' "$tmp/out"
}

count() {  # count DIR BENCHMARK -> per simulated task
  local r
  r=$(counted "$1" "Multimodal/$2\$" $tasks 'rrfp::simulate(*')
  # The count is divided by the benchmark's tasks: a benchmark of another shape would divide wrong.
  grep -q "tasks=131.072k" "$tmp/log" || { echo "$0: expected 131,072 tasks" >&2; exit 1; }
  echo "$r"
}

# One decision: peek() and commit() counted, 1,000 of them in one iteration of the benchmark.
decide() {  # decide DIR RULE -> per decision
  counted "$1" "DecideAndCommit/$2\$" 1000 'rrfp::StageArbiter::peek*' 'rrfp::StageArbiter::commit*'
}

row() {  # row LABEL BEFORE AFTER (each "instructions mispredictions")
  read -r bi bm <<<"$2"
  read -r ai am <<<"$3"
  [ -n "$bi" ] && [ -n "$ai" ] || { echo "$0: $1: no count read" >&2; exit 1; }
  printf '%-24s %14s %7s %14s %7s %7.3fx\n' "$1" "$bi" "$bm" "$ai" "$am" \
    "$(awk -v a="$ai" -v b="$bi" 'BEGIN {print a / b}')"
}

printf '%-24s %22s %22s %8s\n' benchmark "before (instr, mispr)" "after (instr, mispr)" "instr"
# Counted into variables first: a substitution's failure, given as an argument, was lost.
for b in ready_bf fixed_interleaved_1f1b; do
  before=$(count "$1" $b)
  after=$(count "$2" $b)
  row "$b" "$before" "$after"
done
echo "per decision (peek + commit among 1,000 ready forwards):"
for r in bf adaptive; do
  before=$(decide "$1" $r)
  after=$(decide "$2" $r)
  row "decide+commit $r" "$before" "$after"
done
