#!/usr/bin/env bash
# Progress and estimates of long work on stderr (core/progress_line.hpp): on a terminal a line
# redrawn in place, erased at the end; into a file nothing for a short run (a line at most every
# 30 s for a long one: the ProgressLine tests). Usage: cli_progress.sh PATH/TO/rrfp
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cli_check.sh"
# Progress of a simulation of a million tasks or more: on a terminal (script(1) gives the run
# one), a line per 2^20 tasks ended, erased at the end; into a file, nothing.
big=(simulate --pp 512 -m 1024 --hint 1f1b --policy fixed)
# The command strings script(1) gives a shell: paths quoted for it (a build under "a b" ran "a").
q=$(printf '%q' "$rrfp") qtmp=$(printf '%q' "$tmp")
if command -v script >/dev/null; then
  script -qec "$q ${big[*]}" /dev/null >"$tmp/tty" 2>&1
  grep -q "fixed 1f1b (async): 1048576 of 1048576 tasks (100%)" "$tmp/tty" ||
    { echo "FAIL: no progress on a terminal"; fails=$((fails + 1)); }
fi
"$rrfp" "${big[@]}" >/dev/null 2>"$tmp/notty"
[ ! -s "$tmp/notty" ] || { echo "FAIL: progress written to a file"; fails=$((fails + 1)); }
# sweep too (it wrote "sweep: 10/48 grid points" into a file, carriage returns and all).
"$rrfp" sweep --pp 2 --mb-factors 1 --seeds 1 --workloads uniform --csv "$tmp/sw.csv" \
  >/dev/null 2>"$tmp/sw.err"
[ ! -s "$tmp/sw.err" ] || { echo "FAIL: sweep progress written to a file"; fails=$((fails + 1)); }
# A grid of many small points announces what its runs cost beside their tasks: counted by its
# tasks alone, 200,000 points of P = 1 said nothing (2.4 s of work), and took 75 s. Stopped by
# SIGINT after 3 s (the line comes before any point runs; the margin is for a loaded machine).
if command -v script >/dev/null; then
  script -qec "timeout -s INT 3 $q sweep --pp 1 --mb-factors 1 --seeds 200000 --workloads \
    uniform --csv $qtmp/many.csv" /dev/null >"$tmp/tty" 2>&1
  grep -q "sweep: 200000 grid points, runs of up to 3 tasks: about 400 MB of memory and 12 s of" \
    "$tmp/tty" || { echo "FAIL: a grid of small points under-announced:"; head -c 300 "$tmp/tty"
                    fails=$((fails + 1)); }
fi
# What reports no progress of its own is said by a thread of its own, with the seconds it took
# on a terminal: plan's search (an evaluation of minutes, its set-up of 51 s at P=M=4500 said
# nothing), calibrate's sizes (a minute silent). The line is drawn each second: each run below
# lasts a few, so that a machine busy with other tests still draws one.
if command -v script >/dev/null; then
  script -qec "$q plan --pp 64 -m 128 --budget 4" /dev/null >"$tmp/tty" 2>&1
  tr '\r' '\n' <"$tmp/tty" | grep -aEq "^search: [0-9]+ orders done, best [0-9.]+ ms \([0-9]+ s\)" ||
    { echo "FAIL: plan's search said nothing on a terminal:"; head -c 300 "$tmp/tty"
      fails=$((fails + 1)); }
  script -qec "$q calibrate --sizes 128M --seconds 3" /dev/null >"$tmp/tty" 2>&1
  tr '\r' '\n' <"$tmp/tty" | grep -aq "^calibrate: size 1 of 1, 134217728 bytes ([0-9]* s)" ||
    { echo "FAIL: calibrate said nothing on a terminal:"; head -c 300 "$tmp/tty"
      fails=$((fails + 1)); }
  # A signal's line ends the drawn line first: it was appended to it ("... (2 s)rrfp calibrate:
  # stopped by SIGTERM"). The signal comes half-way between two redraws, well before the
  # calibration ends (about 8 s with --streams; without, one size ended in under 3 s, close
  # behind a signal at 2 s that also fell on a redraw: the check failed now and then).
  script -qec "timeout -s TERM 2.5 $q calibrate --sizes 128M --streams" /dev/null \
    >"$tmp/tty" 2>&1
  tr '\r' '\n' <"$tmp/tty" | grep -aq "^$(printf '\033')\[Krrfp calibrate: stopped by SIGTERM" ||
    { echo "FAIL: a signal's line joined the drawn progress line:"; cat -v "$tmp/tty" | head -c 400
      fails=$((fails + 1)); }
fi
"$rrfp" plan --pp 64 -m 128 --budget 1.5 >/dev/null 2>"$tmp/plan.err"
[ ! -s "$tmp/plan.err" ] || { echo "FAIL: plan's progress written to a file:"; cat "$tmp/plan.err"
                              fails=$((fails + 1)); }
echo "cli progress checks: $fails failed"
[ "$fails" -eq 0 ]
