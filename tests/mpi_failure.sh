#!/usr/bin/env bash
# A rank that dies (kill -9) or stops answering (SIGSTOP) mid-step ends the whole mpirun job
# within the watchdog timeout, with an error naming the dead rank, or, for a silent one, what
# the first rank to time out waits for and from whom (below); a rank stopped during start-up or
# shutdown ends it within the start-up deadline (10 s), the others naming the MPI call they
# waited in. mpirun exits non-zero and no rrfp process is left behind.
# Usage: mpi_failure.sh path/to/rrfp [ON|OFF: whether the build has LibTorch]
set -uo pipefail
rrfp=$1
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The training checks run where this build has LibTorch (train_gate.sh).
torch=${2:-}
source "$here/train_gate.sh"
# Tells this test's processes apart from anything else running, another run of this test
# included (two suites on one machine, each with "--seed 4242", killed each other's processes
# and reported them as left behind): a seed of its own, matched as a whole word.
marker="--seed $((4242000 + $$))"
mine="$marker( |\$)"

# The rrfp process of MPI rank $1 (Open MPI puts the rank in each process's environment).
pid_of_rank() {
  for p in $(pgrep -f "rrfp run .*$mine"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$p"
      return
    fi
  done
}

# run_case SIGNAL: starts a 4-stage job, signals rank 2 once it computes, checks the ending.
run_case() {
  local sig=$1
  local start=$SECONDS
  "$here/mpirun.sh" 4 "$rrfp" run --transport mpi --pp 4 -m 64 --hint 1f1b --policy fixed \
    --workload uniform --timeout 3 $marker >"$log" 2>&1 &
  local job=$!
  local victim=""
  for _ in $(seq 100); do
    victim=$(pid_of_rank 2)
    [ -n "$victim" ] && grep -q "running" "$log" && break
    sleep 0.1
  done
  [ -n "$victim" ] || { kill -9 $job; fail "$sig: rank 2 never started"; }
  sleep 0.5  # mid-step
  kill "-$sig" "$victim"
  local waited=0
  while kill -0 $job 2>/dev/null && [ $waited -lt 300 ]; do
    sleep 0.1
    waited=$((waited + 1))
  done
  kill -0 $job 2>/dev/null && { kill -9 $job; fail "$sig: the job still runs 30 s later"; }
  wait $job
  local rc=$?
  [ $rc -ne 0 ] || fail "$sig: mpirun exited 0"
  local left
  left=$(pgrep -f "rrfp run .*$mine" || true)
  [ -z "$left" ] || { kill -9 $left; fail "$sig: processes left behind: $left"; }
  echo "$sig: mpirun exited $rc after $((SECONDS - start)) s; the lines naming rank 2:"
  grep -E "rank 2|mpi rank 2" "$log" | head -3 | cut -c1-400
  grep -qE "$2" "$log" || { cat "$log"; fail "$sig: no error matching '$2'"; }
}

# Killed: Open MPI notices the death and ends the job, naming the rank.
run_case KILL "process rank 2 .* exited on signal 9"
# Silent (stopped): the watchdog of the first rank to stall names what that rank waits for and
# from which rank, and MPI_Abort ends the job. Its neighbours usually stall first, but under
# load rank 0, waiting on rank 1, may time out first (seen once under ctest -j2 on 2 cores): it
# then asks rank 1 what it waits for, and rank 2 in turn, which does not answer; either way the
# line names rank 2. The first to time out tells the others, so a rank may report that one's
# stall, naming it first. A rank held up in one of the job's collectives between steps names
# the call instead.
run_case STOP "run failed on mpi rank [0-9]: (stage [0-9] \(mpi rank [0-9]\) failed step [0-9]+: )?no progress .*\(mpi rank 2\)|mpi rank [0-9]: MPI_[A-Za-z_]+.* did not finish within"
# Interrupted alone (a SIGINT sent to rank 2, not passed on by mpirun): rank 2 says so and names
# itself; only rank 0's "stopped by SIGTERM", which mpirun then sent it, was said.
run_case INT "rrfp run: mpi rank 2: stopped by SIGINT sent to this process alone; nothing written"
# stop_case PHASE CALL [NAMED]: rank 2 stops itself (SIGSTOP) on reaching PHASE (the
# RRFP_FAULT_STOP hook of dist/mpi_world.cpp); the others must give up within the start-up
# deadline, naming the call (and NAMED: the process they have not heard from).
stop_case() {
  local phase=$1 call=$2 named=${3:-}
  local start=$SECONDS
  # --timeout 10: the deadline at start-up and shutdown is 10 s whatever it is, and mid-step a
  # busy machine must not stall the step first. One short run before the shutdown: its four
  # runs and their warm-ups took 15 s of the 30 allowed idle, 28 s on a loaded machine.
  # timeout -k: if mpirun itself ignores the TERM, the KILL 10 s later still ends the case.
  RRFP_FAULT_STOP=$phase:2 timeout -k 10 60 "$here/mpirun.sh" 4 "$rrfp" run --transport mpi \
    --pp 4 -m 4 --workload uniform --hint 1f1b --policy fixed --warmup 0 --warmup-extra 0 \
    --timeout 10 $marker >"$log" 2>&1
  local rc=$?
  local took=$((SECONDS - start))
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    # Say what every process left was doing (state T = stopped), then clean up.
    ps -o pid,stat,wchan:20,args -p "$(pgrep -d, -f "rrfp run .*$mine" || echo 1)" || true
    tail -n 20 "$log"
    pkill -9 -f "rrfp run .*$mine" || true
    fail "stopped at $phase: the job still ran after 60 s (timeout exit $rc)"
  fi
  [ $rc -ne 0 ] || { cat "$log"; fail "stopped at $phase: mpirun exited 0"; }
  [ $took -lt 30 ] || fail "stopped at $phase: the job took $took s (deadline 10 s)"
  grep -q "mpi rank [013]: $call did not finish within 10 s: $named" "$log" ||
    { cat "$log"; fail "stopped at $phase: no line naming $call${named:+ and '$named'}"; }
  local left
  left=$(pgrep -f "rrfp run .*$mine" || true)
  [ -z "$left" ] || { kill -9 $left; fail "stopped at $phase: processes left behind: $left"; }
  echo "stopped at $phase: mpirun exited $rc after $took s:"
  grep "did not finish" "$log" | head -1
}
stop_case startup "MPI_Init_thread (start-up)"
# The job's gathers and barriers name the process that has not come (they named none).
stop_case shutdown "MPI_Barrier (shutdown)" "mpi rank 2 has not come to it"
stop_case gather "MPI_Allgather (between steps)" "mpi rank 2 has not come to it"
# Bad input under mpirun: one line from rank 0, every process exits 2. The layout is refused
# before any run starts, in run's own flags (its line named --dp, which run does not have,
# after "running fixed 1f1b (blocking) over 3 mpi ranks ...").
timeout -k 5 60 "$here/mpirun.sh" 3 "$rrfp" run --transport mpi --pp 2 -m 4 $marker >"$log" 2>&1
rc=$?
[ $rc -eq 2 ] || { cat "$log"; fail "bad layout: mpirun exited $rc, not 2"; }
[ "$(grep -c 'rrfp: error: mpirun -np 3: the layout --pp 2 x --tp 1 needs 2 ranks' "$log")" -eq 1 ] ||
  { cat "$log"; fail "bad layout: not exactly one line naming the layout"; }
! grep -qE "^running|--dp" "$log" || { cat "$log"; fail "bad layout: a run started, or --dp named"; }
# The ranks mpirun ends once rank 0 has exited end quietly (they added "stopped by SIGTERM").
! grep -q "stopped by" "$log" || { cat "$log"; fail "bad layout: a rank said it was stopped"; }
echo "bad layout: exit 2, one line"
# Stage 0, waiting at the drain for stage 1's first backward (gpipe: stage 1 runs its four
# forwards of 0.6 s first), sees no progress of its own for 1 s: under --timeout 1 it fails, and
# says why. Once: rank 1, told of it, leaves the saying and the job's end to it (a rank told of
# a failure said it again; rank 0, in its task, said "stopped by SIGTERM; nothing written" as
# mpirun ended the job). Rank 1 finishes a task every 0.6 s meanwhile, so it never stalls on
# its own (a forward of 1.5 s longer than --timeout stalled both ranks at the same moment,
# and now and then both said so).
slow=$(dirname "$log")/rrfp-slow-tasks.json
echo '{"preset": "uniform", "forward_us": 600000}' >"$slow"
timeout -k 5 60 "$here/mpirun.sh" 2 "$rrfp" run --transport mpi --pp 2 -m 4 --workload-file "$slow" \
  --hint gpipe --policy fixed --timeout 1 --warmup 0 $marker >"$log" 2>&1
rc=$?
rm -f "$slow"
[ $rc -ne 0 ] && [ "$(grep -c 'rrfp: run failed' "$log")" -eq 1 ] &&
  grep -q "run failed on mpi rank 0: no progress for" "$log" &&
  grep -q "this process watches its own stages only" "$log" && ! grep -q "stopped by" "$log" ||
  { cat "$log"; fail "a drain stall: exit $rc, not one line saying why"; }
echo "a drain stall: one line, naming the watchdog's view"
# Rank 0 merges and keeps every timed step's whole record: its memory is checked as one
# process's (it was not, and ran 175 MB under a limit of 105), and it says so once.
tiny=$(dirname "$log")/rrfp-tiny-tasks.json
echo '{"preset": "uniform", "forward_us": 0.5, "bytes_per_token": 0.001}' >"$tiny"
RRFP_MEMORY_LIMIT=100M timeout -k 5 60 "$here/mpirun.sh" 2 "$rrfp" run --transport mpi --pp 2 \
  -m 5000 --workload-file "$tiny" --hint 1f1b --policy fixed --repeat 100 $marker >"$log" 2>&1
rc=$?
rm -f "$tiny"
[ $rc -eq 2 ] && [ "$(grep -c 'rrfp: error: ' "$log")" -eq 1 ] &&
  grep -q "run: 1 run of 20000 tasks, 100 timed steps each: about .* MB of memory; RRFP_MEMORY_LIMIT allows" "$log" ||
  { cat "$log"; fail "rank 0's records past the memory limit: exit $rc, not one line"; }
echo "rank 0's records past the memory limit: exit 2, one line"
# A flag's range checked before the job forms is said once too (it came once per process),
# and so is run's default transport under mpirun (each process ran the whole job in threads).
for case in "--timeout: must be between 0 and 86400 seconds, got -1|--transport mpi --timeout -1" \
  "--transport inproc on mpi rank 0: mpirun started 2 processes|--workload uniform"; do
  want=${case%%|*} args=${case#*|}
  # shellcheck disable=SC2086
  timeout -k 5 60 "$here/mpirun.sh" 2 "$rrfp" run --pp 2 -m 4 $args $marker >"$log" 2>&1
  rc=$?
  [ $rc -eq 2 ] && [ "$(grep -c 'rrfp: error: ' "$log")" -eq 1 ] && grep -qF -- "$want" "$log" &&
    ! grep -qE "^running|stopped by" "$log" ||
    { cat "$log"; fail "run $args under mpirun: exit $rc, not one line saying \"$want\""; }
  echo "run $args under mpirun: exit 2, one line"
done
# calibrate likewise: each process calibrated in its own threads, all writing one file, exit 0.
calfile=$(dirname "$log")/rrfp-cal-$$.json
timeout -k 5 60 "$here/mpirun.sh" 2 "$rrfp" calibrate --seconds 1 --out "$calfile" \
  >"$log" 2>&1
rc=$?
[ $rc -eq 2 ] && [ "$(grep -c 'rrfp: error: ' "$log")" -eq 1 ] && [ ! -e "$calfile" ] &&
  grep -qF -- "--transport inproc on mpi rank 0: mpirun started 2 processes" "$log" ||
  { cat "$log"; rm -f "$calfile"; fail "calibrate under mpirun without --transport mpi: exit $rc"; }
echo "calibrate under mpirun without --transport mpi: exit 2, one line"
# A flag that does not parse: one line too (it came once per process).
"$here/mpirun.sh" 3 "$rrfp" run --transport mpi --pp 2 --no-such-flag $marker >"$log" 2>&1
rc=$?
[ $rc -eq 2 ] && [ "$(grep -c 'rrfp: error: ' "$log")" -eq 1 ] ||
  { cat "$log"; fail "an unknown flag under mpirun: exit $rc, not one line"; }
echo "unknown flag: exit 2, one line"
# Bad training input must stop every rank with one line: an unwritable --out (rank 0 writes
# the outputs) and a checkpoint to resume that is not there (every rank reads it).
if ! "$rrfp" train --steps 0 2>&1 | grep -q "no LibTorch"; then
  # Each case: "the message|the arguments".
  ckpt=$(dirname "$log")/no-such-checkpoint.bin
  for case in "--out: cannot write to directory '/proc/rrfp-out'|--out /proc/rrfp-out" \
    "--resume: '$ckpt' does not exist|--resume $ckpt --out $(dirname "$log")/rrfp-mpi-out"; do
    want=${case%%|*} args=${case#*|}
    # shellcheck disable=SC2086
    timeout 60 "$here/mpirun.sh" 2 "$rrfp" train --transport mpi --pp 2 --steps 1 $args \
      $marker >"$log" 2>&1
    rc=$?
    [ $rc -eq 2 ] || { cat "$log"; fail "train $args: mpirun exited $rc, not 2"; }
    [ "$(grep -c 'rrfp: error: ' "$log")" -eq 1 ] ||
      { cat "$log"; fail "train $args: not exactly one error line"; }
    grep -qF -- "rrfp: error: $want" "$log" ||
      { cat "$log"; fail "train $args: the error line does not say \"$want\""; }
    echo "train $args: exit 2, one line: $want"
  done
  # Ctrl-C or a batch system's SIGTERM reaches mpirun, which passes SIGTERM to every process:
  # each finishes the step it is in (they agree on the last one), writes its outputs and exits.
  # Open MPI kills the processes a second after passing SIGTERM on (odls_base_sigkill_timeout),
  # so these steps are short; SIGUSR1, which mpirun forwards as it is, waits for any step. A
  # loaded machine took up to 1.9 s from SIGTERM to the outputs: TERM runs with 5 s of grace
  # (docs/mpi.md says how).
  # signal_mpirun SIGNAL (its name without SIG)
  signal_mpirun() {
    local sig=$1
    out=$(dirname "$log")/rrfp-mpi-stop
    rm -rf "$out"
    OMPI_MCA_odls_base_sigkill_timeout=5 "$here/mpirun.sh" 2 "$rrfp" train --transport mpi --pp 2 --d-model 32 --layers 4 \
      --eval-every 0 --steps 5000 --out "$out" $marker >"$log" 2>&1 &
    job=$!
    for _ in $(seq 600); do
      [ -f "$out/loss.csv" ] && [ "$(wc -l <"$out/loss.csv")" -gt 4 ] && break
      sleep 0.1
    done
    kill "-$sig" $job
    start=$SECONDS
    for _ in $(seq 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
    kill -0 $job 2>/dev/null && { kill -9 $job; fail "$sig to mpirun: still running 30 s later"; }
    wait $job
    rc=$?
    rows=$(($(wc -l <"$out/loss.csv") - 1))
    last=$(tail -n 1 "$out/loss.csv" | cut -d, -f1)
    # mpirun exits 1 when its processes ended by SIGTERM's exit (143), and 138 for SIGUSR1,
    # which it forwards as it is (docs/mpi.md).
    want=1
    [ "$sig" = USR1 ] && want=138
    [ $rc -eq $want ] || fail "$sig to mpirun: exit $rc, want $want"
    [ "$rows" -ge 4 ] && [ "$rows" = "$last" ] ||
      fail "$sig to mpirun: loss.csv has $rows rows, last step $last"
    # mpirun forwards each process's output in the pieces it reads, so another process's line
    # ("SIGTERM taken: ...") can land inside rank 0's (seen once under load: "sto" ... "pped
    # by"): the log is read with the lines joined and those lines taken out.
    joined=$(tr -d '\n' <"$log" |
      sed -E 's/rrfp train: SIG[A-Z0-9]+ taken: [^;]*; a(nother| second) signal stops it at once//g')
    grep -q "stopped by SIG$sig after step $last of 5000" <<<"$joined" ||
      { tail -c 600 "$log"; fail "$sig to mpirun: no stop line naming step $last"; }
    grep -q "wrote $out/loss.csv" <<<"$joined" || fail "$sig to mpirun: outputs not written"
    left=$(pgrep -f "rrfp train .*$mine" || true)
    [ -z "$left" ] || { kill -9 $left; fail "$sig to mpirun: processes left behind: $left"; }
    echo "$sig to mpirun: stopped after step $last in $((SECONDS - start)) s, $rows loss rows, mpirun exit $rc"
    rm -rf "$out"
  }
  signal_mpirun TERM
  signal_mpirun USR1
fi

# A process stopped in a calibration's ping-pong (calibrate, run --compare): the job ends within
# --timeout, naming what it waited for (the ping-pong waited 60 s whatever --timeout said): the
# round trips, or the collective between two rounds where the stop came after a round's last
# message.
cal=$(dirname "$log")/rrfp-mpi-cal-$$.json
"$here/mpirun.sh" 2 "$rrfp" calibrate --transport mpi --timeout 3 --seconds 20 --out "$cal" \
  >"$log" 2>&1 &
job=$!
victim=""
for _ in $(seq 100); do
  for p in $(pgrep -f "rrfp calibrate .*$cal"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$p
  done
  [ -n "$victim" ] && break
  sleep 0.1
done
[ -n "$victim" ] || { kill -9 $job; fail "calibrate: rank 1 never started"; }
sleep 4  # into the 20 s of round trips
kill -STOP "$victim"
start=$SECONDS
for _ in $(seq 300); do kill -0 $job 2>/dev/null || break; sleep 0.1; done
kill -0 $job 2>/dev/null && { kill -9 $job; pkill -9 -f "rrfp calibrate .*$cal"; fail "calibrate: still running 30 s after rank 1 stopped"; }
wait $job
rc=$?
left=$(pgrep -f "rrfp calibrate .*$cal" || true)
[ -z "$left" ] || { kill -9 $left; fail "calibrate: processes left behind: $left"; }
[ $rc -ne 0 ] || fail "calibrate with rank 1 stopped: exit 0"
[ $((SECONDS - start)) -le 15 ] || fail "calibrate: ended $((SECONDS - start)) s after rank 1 stopped"
grep -qE "(no message|messages|did not finish) within 3 s" "$log" ||
  { grep rrfp "$log" | head -3; fail "calibrate: no line naming the wait of 3 s"; }
echo "calibrate with rank 1 stopped: ended $((SECONDS - start)) s later, exit $rc"
rm -f "$cal"

# Processes with different command lines (mpirun's "prog args : -np 1 prog other args"): refused
# on every process at start-up, rank 0 naming where they differ, exit 2. A different --lr trained
# on silently with other losses; a different --steps failed on a message of the wrong size.
start=$SECONDS
"$here/mpirun.sh" 1 "$rrfp" run --transport mpi --pp 2 -m 8 --workload uniform $marker : \
  -np 1 "$rrfp" run --transport mpi --pp 2 -m 16 --workload uniform $marker >"$log" 2>&1
rc=$?
[ $rc -eq 2 ] || { tail -5 "$log"; fail "different command lines: exit $rc, want 2"; }
grep -q "rrfp: error: mpirun: every process must run the same command line; rank(s) 1 differ from rank 0's at argument 7: '16' where rank 0 has '8'" "$log" ||
  { tail -5 "$log"; fail "different command lines: no line naming the argument"; }
echo "different command lines: refused in $((SECONDS - start)) s"

# `rrfp run` where the processes, each in a working folder of its own (as on two nodes), read
# different files or run under different limits. Every check of the inputs is agreed over the
# job: every process exits 2 in seconds, the first refusing rank's line said once. A refusal
# on rank 1 alone was never printed, and rank 0 waited in MPI_Comm_split until --timeout.
rabs=$(cd "$(dirname "$rrfp")" && pwd)/$(basename "$rrfp")  # absolute: ranks start elsewhere
nodes=$(mktemp -d)
trap 'rm -f "$log"; rm -rf "$nodes"' EXIT
mkdir -p "$nodes/a/sub" "$nodes/b" "$nodes/c" "$nodes/d" "$nodes/w1" "$nodes/w2"
(cd "$nodes/a" && "$rabs" schedule show --pp 2 -m 4 --hint gpipe --out h.txt >/dev/null) &&
  (cd "$nodes/b" && "$rabs" schedule show --pp 2 -m 4 --hint 1f1b --out h.txt >/dev/null) ||
  fail "the hint files"
echo "garbage hint" >"$nodes/c/h.txt"
echo '{"forward_us": 1000}' >"$nodes/w1/w.json"
echo '{"forward_us": 20000}' >"$nodes/w2/w.json"
two_ranks=(--pp 2 -m 4 --policy fixed --timeout 30)
# on_nodes DIR_OF_RANK_0 DIR_OF_RANK_1 ENV_OF_RANK_1 ARGS...: one rrfp run per folder.
on_nodes() {
  local a=$1 b=$2 e=$3
  shift 3
  # shellcheck disable=SC2086
  timeout -k 5 90 "$here/mpirun.sh" 1 -wdir "$a" "$rabs" run --transport mpi "$@" $marker : \
    -np 1 -wdir "$b" env $e "$rabs" run --transport mpi "$@" $marker >"$log" 2>&1
}
# run_refused WANT DIR_OF_RANK_0 DIR_OF_RANK_1 ENV_OF_RANK_1 ARGS...: exit 2 within 15 s (the
# --timeout is 30), exactly one error line, saying WANT, and no run started.
run_refused() {
  local want=$1 start=$SECONDS
  shift
  on_nodes "$@"
  local rc=$? took=$((SECONDS - start))
  [ $rc -eq 2 ] && [ $took -lt 15 ] && [ "$(grep -c "^rrfp: error" "$log")" -eq 1 ] &&
    grep -qF -- "rrfp: error: $want" "$log" && ! grep -q "^running" "$log" ||
    { grep -E "rrfp|running" "$log" | head -5; fail "want '$want': mpirun exited $rc after $took s"; }
  echo "refused in $took s: $want"
}
run_refused "mpi rank 1: h.txt:1: expected 'stage N: TASK ...', got 'garbage hint'" "$nodes/a" "$nodes/c" "" "${two_ranks[@]}" \
  --workload uniform --hint h.txt
run_refused "mpi rank 1: --hint: 'h.txt' does not exist" "$nodes/a" "$nodes/d" "" \
  "${two_ranks[@]}" --workload uniform --hint h.txt
run_refused "mpi rank 1: run: 1 run of" "$nodes/a" "$nodes/a" RRFP_MEMORY_LIMIT=1 \
  "${two_ranks[@]}" --workload uniform --hint 1f1b
# Files that parse on every rank but differ: each process ran its own schedule (or durations),
# and the mixed run was reported as one, exit 0.
run_refused "mpirun: every process must read the same --hint; 'h.txt' holds other bytes on rank(s) 1 than on rank 0" \
  "$nodes/a" "$nodes/b" "" "${two_ranks[@]}" --workload uniform --hint h.txt
run_refused "mpirun: every process must read the same --workload-file; 'w.json' holds other bytes on rank(s) 1 than on rank 0" \
  "$nodes/w1" "$nodes/w2" "" "${two_ranks[@]}" --workload-file w.json --hint 1f1b --per-stage
# Rank 0 writes every report: a folder for --json that only its node has is enough.
on_nodes "$nodes/a" "$nodes/b" "" "${two_ranks[@]}" --workload uniform --hint 1f1b \
  --json sub/o.json --trace sub/t.json
rc=$?
[ $rc -eq 0 ] && [ -s "$nodes/a/sub/o.json" ] && [ -s "$nodes/a/sub/t.json" ] ||
  { grep -E "rrfp|running" "$log" | head -5; fail "--json in a folder only rank 0 has: exit $rc"; }
echo "--json and --trace in a folder only rank 0 has: written"
echo "ok"
