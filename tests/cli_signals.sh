#!/usr/bin/env bash
# `rrfp plan` and `rrfp sweep` under SIGTERM: the work stops at its next safe point and what it
# had is written (the best order so far, the grid points done), with one line saying so and
# exit 143. Killed outright (the default action, what they did before) they wrote nothing.
# `simulate` and `run` stop at once with one line, exit 143 or 130, and write nothing.
# Usage: cli_signals.sh PATH/TO/rrfp
source "$(dirname "$0")/run_script.sh"

# Waits (at most 30 s) until process $1 catches SIGTERM (its handler is installed): the
# signal then tests the command, not how fast it started.
wait_handler() {
  for _ in $(seq 1 300); do
    local mask
    mask=$(awk '/^SigCgt:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
    [ -n "$mask" ] && (((0x$mask >> 14) & 1)) && return 0
    sleep 0.1
  done
  return 1
}

# Stops process $1 with SIGTERM (or signal $3) after $2 s; its exit status in $rc, at most
# 30 s later.
stop_after() {
  wait_handler "$1" || fail "process $1 never installed its SIGTERM handler"
  sleep "$2"
  kill -"${3:-TERM}" "$1"
  local start=$SECONDS
  wait "$1"
  rc=$?
  [ $((SECONDS - start)) -le 30 ] || fail "took $((SECONDS - start)) s to stop after its signal"
}

# plan: a 10-minute budget stopped after a second reports and writes the best order so far,
# which reproduces its makespan when simulated.
"$rrfp" plan --pp 4 -m 8 --budget 600 --exact off --out "$tmp/best.json" \
  --json "$tmp/plan.json" >"$tmp/plan.log" 2>&1 &
pid=$!
stop_after $pid 1
pid=
[ "$rc" -eq 143 ] || fail "plan: exit $rc, want 143"
grep -q "rrfp plan: stopped by SIGTERM before its budget was spent" "$tmp/plan.log" ||
  fail "plan: no line saying it stopped: $(tail -2 "$tmp/plan.log")"
grep -qx "rrfp plan: SIGTERM taken: stopping after the order it is evaluating, then running the best order found for the report and writing it; a second signal stops it at once" \
  "$tmp/plan.log" || fail "plan: SIGTERM not acknowledged as it came"
grep -q '"stopped_by": "SIGTERM"' "$tmp/plan.json" || fail "plan: its JSON does not say it stopped"
if [ -s "$tmp/best.json" ] && [ -s "$tmp/plan.json" ]; then
  want=$(/usr/bin/python3 -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["plan"]["makespan_ms"])' "$tmp/plan.json")
  "$rrfp" simulate --pp 4 -m 8 --hint "$tmp/best.json" --policy fixed >"$tmp/sim.log" 2>&1 ||
    fail "plan: its order does not simulate: $(tail -1 "$tmp/sim.log")"
  grep -q " $want " "$tmp/sim.log" || fail "plan: the order does not simulate to its $want ms"
else
  fail "plan: wrote no order or report after SIGTERM"
fi

# Before its search, plan has nothing to keep: a signal in its set-up (the model of a large
# run, seconds here) ends it at once (it went on, deaf to SIGTERM, for minutes at scale).
"$rrfp" plan --pp 256 -m 8192 --budget 600 --exact off --json "$tmp/big.json" \
  >"$tmp/bigplan.log" 2>&1 &
pid=$!
# Signalled as soon as its handler is in: its set-up takes seconds here (6 s on 2 cores), and a
# tenth of that on a machine many times faster. Within 2 s: the exit frees 0.7 GB, slower on a
# machine busy with other tests.
wait_handler $pid || fail "plan never installed its SIGTERM handler"
kill -TERM $pid
start=$(date +%s%N)
wait $pid
rc=$?
pid=
took_ms=$((($(date +%s%N) - start) / 1000000))
[ "$rc" -eq 143 ] && [ "$took_ms" -lt 2000 ] ||
  fail "plan in its set-up: exit $rc after $took_ms ms, want 143 at once"
grep -qx "rrfp plan: stopped by SIGTERM; nothing written" "$tmp/bigplan.log" ||
  fail "plan in its set-up: $(tail -1 "$tmp/bigplan.log")"
[ -e "$tmp/big.json" ] && fail "plan in its set-up wrote --json"

# sweep: stopped mid-grid, the CSV and the summary hold the points done, and the summary and
# stdout say how many.
echo "an earlier run's" >"$tmp/sweep.csv"
"$rrfp" sweep --pp 64,128 --seeds 10 --csv "$tmp/sweep.csv" --md "$tmp/sweep.md" \
  >"$tmp/sweep.log" 2>&1 &
pid=$!
stop_after $pid 2  # past its first grid point, before which a signal keeps nothing
pid=
[ "$rc" -eq 143 ] || fail "sweep: exit $rc, want 143"
grep -qx "rrfp sweep: SIGTERM taken: stopping after the current grid point; a second signal stops it at once" \
  "$tmp/sweep.log" || fail "sweep: SIGTERM not acknowledged as it came"
line=$(grep "rrfp sweep: stopped by SIGTERM" "$tmp/sweep.log")
done_points=$(echo "$line" | sed -n 's/.*hold the \([0-9]*\) of 80 grid points.*/\1/p')
# Under names of their own: a partial CSV under --csv's name read as a smaller grid's.
if [ -z "$done_points" ] || [ ! -s "$tmp/sweep.partial.csv" ] || [ ! -s "$tmp/sweep.partial.md" ] ||
  [ "$(cat "$tmp/sweep.csv")" != "an earlier run's" ] || [ -e "$tmp/sweep.md" ]; then
  fail "sweep: no stop line or no partial CSV and summary: $(tail -2 "$tmp/sweep.log")"
else
  grep -qF "; $tmp/sweep.partial.csv and $tmp/sweep.partial.md hold the $done_points of 80 grid points done before it ($tmp/sweep.csv, an earlier run's, is left as it was)" \
    "$tmp/sweep.log" || fail "sweep: the stop line: $line"
  rows=$(($(wc -l <"$tmp/sweep.partial.csv") - 1))
  [ "$done_points" -lt 80 ] || fail "sweep: it ran the whole grid before stopping"
  # Each grid point writes one row per run: 3 fixed baselines and the 2 hints.
  [ "$rows" -eq $((done_points * 5)) ] || fail "sweep: $rows CSV rows for $done_points points"
  grep -q "^$rows runs (stopped by SIGTERM after $done_points of 80 grid points); CSV: $tmp/sweep.partial.csv" \
    "$tmp/sweep.log" || fail "sweep: the summary line"
  # The summary file says it is partial itself (it read as a smaller grid's once stderr was gone).
  head -1 "$tmp/sweep.partial.md" | grep -q "^\*\*Partial: stopped by SIGTERM after $done_points of 80 grid points" ||
    fail "sweep: the summary file does not say it is partial: $(head -1 "$tmp/sweep.partial.md")"
  # A whole grid after it says the partial files are there (they read as this run's).
  "$rrfp" sweep --pp 4 --seeds 1 --workloads language --csv "$tmp/sweep.csv" --md "$tmp/sweep.md" \
    >"$tmp/whole.log" 2>&1 || fail "sweep: a whole grid: exit $?"
  grep -qF "; CSV: $tmp/sweep.csv; $tmp/sweep.partial.csv and $tmp/sweep.partial.md, of an earlier grid that was stopped, left as they were" \
    "$tmp/whole.log" || fail "sweep: a whole grid: $(tail -1 "$tmp/whole.log")"
fi

# A second signal ends sweep at once, and says so (it ended without a word): here during its
# second grid point (P=1024, seconds), the first signal taken after the first point (P=4). A
# CSV of an earlier run under the name is left, and the line says it was there (it read as
# this run's).
echo "an earlier run's" >"$tmp/sweep2.csv"
"$rrfp" sweep --workloads language --pp 4,1024 --mb-factors 2 --seeds 1 --csv "$tmp/sweep2.csv" \
  --quiet >"$tmp/sweep2.log" 2>&1 &
pid=$!
wait_handler $pid || fail "sweep never installed its SIGTERM handler"
sleep 1.5
kill -TERM $pid
stop_after $pid 0.5
pid=
[ "$rc" -eq 143 ] || fail "sweep, a second signal: exit $rc, want 143"
[ "$(cat "$tmp/sweep2.log")" = "rrfp sweep: SIGTERM taken: stopping after the current grid point; a second signal stops it at once
rrfp sweep: stopped at once by a second SIGTERM; what it had not yet written is missing; $tmp/sweep2.csv was there before it began" ] ||
  fail "sweep, a second signal: $(cat "$tmp/sweep2.log")"
[ "$(cat "$tmp/sweep2.csv")" = "an earlier run's" ] || fail "sweep, a second signal: wrote its CSV"

# simulate and run keep nothing worth writing half done: a signal ends them at once with one
# line and 128 + the signal, and no output (they died without a word).
"$rrfp" simulate --pp 1024 -m 2048 --hint 1f1b --policy fixed --json "$tmp/sim.json" \
  >"$tmp/simsig.log" 2>&1 &
pid=$!
stop_after $pid 0.3
pid=
[ "$rc" -eq 143 ] || fail "simulate: exit $rc, want 143"
[ "$(cat "$tmp/simsig.log")" = "rrfp simulate: stopped by SIGTERM; nothing written" ] ||
  fail "simulate: $(cat "$tmp/simsig.log")"
[ -e "$tmp/sim.json" ] && fail "simulate: wrote --json after SIGTERM"
# SIGUSR1, which mpirun passes on to every process as it is (docs/mpi.md: the signal to stop a
# job with), alike: its default action ended simulate, run and calibrate without a word.
"$rrfp" simulate --pp 1024 -m 2048 --hint 1f1b --policy fixed --json "$tmp/sim1.json" \
  >"$tmp/simusr1.log" 2>&1 &
pid=$!
stop_after $pid 0.3 USR1
pid=
[ "$rc" -eq 138 ] && [ "$(cat "$tmp/simusr1.log")" = "rrfp simulate: stopped by SIGUSR1; nothing written" ] ||
  fail "simulate, SIGUSR1: exit $rc: $(cat "$tmp/simusr1.log")"
# A second signal while the outputs are written ends simulate there, and its line says they may
# be incomplete (it said "nothing written"). The trace goes into a pipe whose reader never
# reads, so the writing waits in it: the first SIGTERM is held, the second ends the process.
mkfifo "$tmp/trace.fifo"
(exec 3<"$tmp/trace.fifo" && sleep 30) &
reader=$!
"$rrfp" simulate --pp 8 -m 64 --hint bf --policy ready --trace "$tmp/trace.fifo" \
  >"$tmp/simsig2.log" 2>&1 &
pid=$!
wait_handler $pid || fail "simulate never installed its handler"
sleep 2
kill -TERM $pid
sleep 0.5
kill -TERM $pid
wait $pid
rc=$?
pid=
kill $reader 2>/dev/null
[ "$rc" -eq 143 ] || fail "simulate, a second signal while writing: exit $rc, want 143"
grep -qx "rrfp simulate: stopped by SIGTERM, a second signal, while its outputs were written; some may be missing or incomplete" \
  "$tmp/simsig2.log" || fail "simulate, a second signal while writing: $(cat "$tmp/simsig2.log")"
# The first was said at once (a minute of writing a large trace went without a word, and a
# second Ctrl-C then lost the outputs).
[ "$(grep -c "SIGTERM taken" "$tmp/simsig2.log")" = 1 ] &&
  grep -qx "rrfp simulate: SIGTERM taken: it stops once its outputs are written, complete; a second signal stops it at once, some of them missing or incomplete" \
    "$tmp/simsig2.log" || fail "simulate, the first signal while writing: $(cat "$tmp/simsig2.log")"
# SIGINT to run's emulated step (1 s forwards), under job control: a background job of a
# script ignores SIGINT otherwise.
printf '{"preset": "uniform", "forward_us": 1e6}' >"$tmp/slow.json"
set -m
"$rrfp" run --pp 2 -m 4 --hint 1f1b --policy fixed --workload-file "$tmp/slow.json" \
  --json "$tmp/run.json" >"$tmp/runsig.log" 2>&1 &
pid=$!
wait_handler $pid || fail "run never installed its handler"
sleep 1
kill -INT $pid
wait $pid
rc=$?
set +m
pid=
[ "$rc" -eq 130 ] || fail "run: exit $rc, want 130"
grep -qx "rrfp run: stopped by SIGINT; nothing written" "$tmp/runsig.log" ||
  fail "run: $(tail -1 "$tmp/runsig.log")"
[ -e "$tmp/run.json" ] && fail "run: wrote --json after SIGINT"
# SIGHUP (a closed terminal) and SIGXCPU (a soft CPU time limit) end run as SIGTERM does, and
# SIGHUP ends predict (reading a 40 MB trace), schedule show and calibrate at their work, each
# in one line, exit 128 + the signal.
"$rrfp" simulate --pp 32 -m 4096 --hint 1f1b --policy fixed --trace "$tmp/big.json" >/dev/null ||
  fail "simulate wrote no trace for predict"
for case in "run HUP 129" "run XCPU 152" "predict HUP 129" "show HUP 129" "calibrate HUP 129"; do
  read -r cmd sig want <<<"$case"
  case $cmd in
  run) args=(run --pp 2 -m 4 --hint 1f1b --policy fixed --workload-file "$tmp/slow.json") ;;
  predict) args=(predict "$tmp/big.json") ;;
  show) args=(schedule show --pp 1024 -m 4096 --out "$tmp/show.txt") ;;
  calibrate) args=(calibrate --streams --sizes 8,1K,4K,16K,64K,256K,1M,4M,16M,64M --out "$tmp/cal.json") ;;
  esac
  "$rrfp" "${args[@]}" >"$tmp/$cmd$sig.log" 2>&1 &
  pid=$!
  stop_after $pid 0.2 "$sig"  # each works for seconds here: 16x or more of the delay
  pid=
  [ "$rc" -eq "$want" ] && tail -1 "$tmp/$cmd$sig.log" | grep -q "stopped by SIG$sig.*; nothing written$" ||
    fail "$cmd, SIG$sig: exit $rc, want $want: $(tail -1 "$tmp/$cmd$sig.log")"
done
[ -e "$tmp/show.txt" ] || [ -e "$tmp/cal.json" ] && fail "schedule show or calibrate wrote after SIGHUP"
# An inherited SIG_IGN is kept: a job started with SIGINT ignored runs on through one (its
# steps take 3 s or more: the signal comes while it runs).
printf '{"preset": "uniform", "forward_us": 1e5}' >"$tmp/brisk.json"
(
  trap '' INT
  exec "$rrfp" run --pp 2 -m 16 --hint 1f1b --policy fixed --workload-file "$tmp/brisk.json" \
    --rounds 1 --warmup 0 --warmup-extra 0
) >"$tmp/ign.log" 2>&1 &
pid=$!
wait_handler $pid || fail "run never installed its handler"
sleep 0.5
kill -INT $pid || fail "run with SIGINT ignored: it ended before the signal"
wait $pid
rc=$?
pid=
[ "$rc" -eq 0 ] && ! grep -q "SIGINT" "$tmp/ign.log" ||
  fail "run with SIGINT ignored: exit $rc: $(tail -1 "$tmp/ign.log")"
# With stderr's reader gone, the signal's acknowledgement there does not end sweep before its
# files (SIGPIPE killed it, the points done unwritten): they are written, then the exit is
# SIGPIPE's, 141, as for any command whose last lines cannot be printed.
"$rrfp" sweep --pp 64,128 --seeds 10 --csv "$tmp/nopipe.csv" >/dev/null 2> >(exit 0) &
pid=$!
stop_after $pid 2
pid=
[ "$rc" -eq 141 ] && [ "$(wc -l <"$tmp/nopipe.partial.csv")" -gt 1 ] ||
  fail "sweep with stderr's reader gone: exit $rc, CSV: $(wc -l <"$tmp/nopipe.partial.csv" 2>&1)"
# A closed terminal (SIGHUP) stops sweep as SIGTERM does (it was killed with nothing written).
"$rrfp" sweep --pp 64,128 --seeds 10 --csv "$tmp/hup.csv" >"$tmp/hup.log" 2>&1 &
pid=$!
stop_after $pid 2 HUP
pid=
[ "$rc" -eq 129 ] || fail "sweep: exit $rc after SIGHUP, want 129"
grep -q "rrfp sweep: stopped by SIGHUP" "$tmp/hup.log" || fail "sweep: $(tail -1 "$tmp/hup.log")"
[ -s "$tmp/hup.partial.csv" ] || fail "sweep: no CSV after SIGHUP"
# The soft CPU time limit (SIGXCPU, repeated each second past it) stops sweep as SIGTERM does,
# its repeats no second request (its default action ended the work without a word, nothing
# written); here sent three times, as the kernel would.
"$rrfp" sweep --pp 64,128 --seeds 10 --csv "$tmp/xcpu.csv" >"$tmp/xcpu.log" 2>&1 &
pid=$!
wait_handler $pid || fail "sweep never installed its handler"
sleep 2
kill -XCPU $pid && sleep 0.5 && kill -XCPU $pid 2>/dev/null && sleep 0.5 && kill -XCPU $pid 2>/dev/null
wait $pid
rc=$?
pid=
[ "$rc" -eq 152 ] || fail "sweep: exit $rc after SIGXCPU, want 152"
grep -q "rrfp sweep: stopped by SIGXCPU (its CPU time limit)" "$tmp/xcpu.log" ||
  fail "sweep: $(tail -1 "$tmp/xcpu.log")"
[ -s "$tmp/xcpu.partial.csv" ] || fail "sweep: no CSV after SIGXCPU"
# The watchdog does not take a suspended process for a stalled one: stopped (Ctrl-Z) for longer
# than --timeout and continued, a run goes on (it failed: "no progress for 4001 ms").
printf '{"preset": "uniform", "forward_us": 2e5}' >"$tmp/paced.json"
"$rrfp" run --pp 2 -m 4 --hint 1f1b --policy fixed --workload-file "$tmp/paced.json" \
  --timeout 2 >"$tmp/stop.log" 2>&1 &
pid=$!
wait_handler $pid || fail "run never installed its handler"
sleep 1
kill -STOP $pid
sleep 4
kill -CONT $pid
wait $pid
rc=$?
pid=
[ "$rc" -eq 0 ] || fail "run stopped for 4 s under --timeout 2: exit $rc: $(tail -1 "$tmp/stop.log")"
ls -A "$tmp" | grep -q '^\.rrfp-' && fail "a temporary was left behind"

# SIGPIPE ignored (`trap '' PIPE`, as service managers and CI runners start commands): a reader
# gone ends the command as the signal would, exit 141 and no line. Past stdio's 4 KiB buffer
# the failed write came before the last flush, whose errno was asked: "rrfp: run failed:
# writing standard output failed", exit 1.
(
  trap '' PIPE
  "$rrfp" schedule show --pp 64 -m 512 2>"$tmp/pipe1.err" | head -1 >/dev/null
  echo "${PIPESTATUS[0]}" >"$tmp/pipe1.rc"
  # The reader closes before the command starts (on a busy machine the short report went into
  # the pipe before its reader had closed it, exit 0).
  { for _ in $(seq 1000); do [ -e "$tmp/pipe2.closed" ] && break; sleep 0.01; done
    "$rrfp" simulate --pp 2 -m 4 --json - 2>"$tmp/pipe2.err"; } |
    (exec 0<&-; touch "$tmp/pipe2.closed"; sleep 1)
  echo "${PIPESTATUS[0]}" >"$tmp/pipe2.rc"
)
for n in 1 2; do
  [ "$(cat "$tmp/pipe$n.rc")" = 141 ] && [ ! -s "$tmp/pipe$n.err" ] ||
    fail "SIGPIPE ignored, a closed pipe ($n): exit $(cat "$tmp/pipe$n.rc"), $(cat "$tmp/pipe$n.err")"
done

[ $fails -eq 0 ] && echo "cli_signals: all passed"
exit $((fails > 0))
