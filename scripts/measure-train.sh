#!/usr/bin/env bash
# Measures `rrfp train` (docs/results-train.md): throughput at P=2 and P=4, and fixed 1F1B
# against rrfp BF and BFW under injected jitter and on the image-text model, and the
# simulator's prediction for the jitter runs. Writes docs/data/train-{runs,predictions}.csv.
# Usage: scripts/measure-train.sh [build dir] [output dir] (a Release build with LibTorch; idle
# machine). The output dir defaults to docs/data.
set -euo pipefail
# A folder given is the caller's (it was read from the repository's root).
given() { case $1 in /*) echo "$1" ;; *) echo "$PWD/$1" ;; esac; }
# A third argument was ignored, and an output folder given as measure-runtime.sh takes it
# went unsaid, the repository's tables overwritten.
[ $# -le 2 ] || { echo "$0: takes [build dir] [output dir], got $# arguments" >&2; exit 2; }
build=$(given "${1:-$(dirname "$0")/../build}")
dest=$(given "${2:-$(dirname "$0")/../docs/data}")
cd "$(dirname "$0")/.."
rrfp=$build/rrfp
# Before any output is touched: a wrong folder emptied the committed table, then failed.
[ -f "$rrfp" ] && [ -x "$rrfp" ] ||
  { echo "$0: no $rrfp (give a Release build folder with LibTorch)" >&2; exit 2; }
# The output folder made and tried first: one that could not be made or written failed at the
# end, its minutes of measurements thrown away.
mkdir -p "$dest" && [ -w "$dest" ] || { echo "$0: cannot write to $dest" >&2; exit 2; }
# The tables are written aside and moved into the output dir once whole (a failure or Ctrl-C midway
# left them cut short), and the runs' outputs go to a folder of this run's, removed after.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
csv=$work/train-runs.csv
echo "config,pp,hint,policy,jitter,steps,tokens_per_s,ms_per_step,bubble_pct,overhead_pct,first_loss,last_loss,val_loss" >"$csv"
run() {  # run CONFIG STEPS args...
  local config=$1 steps=$2; shift 2
  local line
  line=$("$rrfp" train --steps "$steps" --warmup 5 --eval-every 0 --eval-batches 2 --out "$work/run" "$@" | grep '^done:')
  echo "$config: $line" >&2
  echo "$line" | awk -v c="$config" -v s="$steps" -v args="$*" '
    { pp = 4; hint = "bfw"; pol = "ready"; jit = "none"
      n = split(args, a, " ")
      for (i = 1; i < n; ++i) {
        if (a[i] == "--pp") pp = a[i+1]; if (a[i] == "--hint") hint = a[i+1]
        if (a[i] == "--policy") pol = a[i+1]; if (a[i] == "--inject-jitter") jit = a[i+1] }
      match($0, /loss [0-9.]+ -> [0-9.]+/); split(substr($0, RSTART + 5, RLENGTH - 5), l, " -> ")
      match($0, /validation [0-9.]+/); v = substr($0, RSTART + 11, RLENGTH - 11)
      match($0, /[0-9]+ tok\/s/); t = substr($0, RSTART, RLENGTH - 6)
      match($0, /[0-9.]+ ms\/step/); ms = substr($0, RSTART, RLENGTH - 8)
      match($0, /bubble [0-9.]+%/); b = substr($0, RSTART + 7, RLENGTH - 8)
      match($0, /overhead [0-9.]+%/); o = substr($0, RSTART + 9, RLENGTH - 10)
      print c "," pp "," hint "," pol "," jit "," s "," t "," ms "," b "," o "," l[1] "," l[2] "," v }' >>"$csv"
}
run throughput 100 --pp 2
run throughput 100 --pp 4
for j in jitter:J2 jitter:J3; do
  run jitter 60 --inject-jitter "$j" --hint 1f1b --policy fixed --split-backward off
  run jitter 60 --inject-jitter "$j" --hint bf --policy ready --split-backward off
  run jitter 60 --inject-jitter "$j" --hint bfw --policy ready
done
for h in "1f1b --policy fixed --split-backward off" "bf --policy ready --split-backward off" "bfw --policy ready"; do
  # shellcheck disable=SC2086
  run image-text 100 --task image-text --hint $h
done
# The simulator's prediction: replay a clean run's measured task durations (the last step of
# a 40-step run) with the same jitter preset injected, averaged over 10 jitter seeds.
pred=$work/train-predictions.csv
echo "jitter,hint,policy,simulated_ms_per_step" >"$pred"
"$rrfp" train --steps 40 --eval-every 0 --hint 1f1b --policy fixed --split-backward off \
  --out "$work/clean-1f1b" >/dev/null
"$rrfp" train --steps 40 --eval-every 0 --out "$work/clean-bfw" >/dev/null
for j in none jitter:J2 jitter:J3; do
  for spec in "1f1b fixed 1f1b off" "bf ready 1f1b off" "bfw ready bfw on"; do
    set -- $spec
    total=0
    # A replay takes a jitter preset alone, and a seed only with one: without jitter nothing is
    # drawn, and one replay is the prediction.
    seeds=(1 2 3 4 5 6 7 8 9 10); [ "$j" = none ] && seeds=(none)
    for seed in "${seeds[@]}"; do
      jitter=(); [ "$j" = none ] || jitter=(--workload "$j" --seed "$seed")
      ms=$("$rrfp" simulate --replay "$work/clean-$3/durations.csv" --pp 4 -m 8 "${jitter[@]}" \
        --hint "$1" --policy "$2" --split-backward "$4" --json - |
        python3 -c "import json, sys; print(json.load(sys.stdin)['runs'][0]['makespan_ms'])") ||
        { echo "$0: the replay of $j $1 failed" >&2; exit 1; }
      total=$(python3 -c "print($total + $ms)")
    done
    echo "$j,$1,$2,$(python3 -c "print(round($total / ${#seeds[@]}, 1))")" >>"$pred"
  done
done
mkdir -p "$dest"
mv "$csv" "$pred" "$dest/"
echo "wrote $dest/train-runs.csv and $dest/train-predictions.csv" >&2
