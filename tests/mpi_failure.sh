#!/usr/bin/env bash
# A rank that dies (kill -9) or stops answering (SIGSTOP) mid-step ends the whole mpirun job
# within the watchdog timeout, with an error naming that rank; mpirun exits non-zero and no
# rrfp process is left behind. Usage: mpi_failure.sh path/to/rrfp
set -uo pipefail
rrfp=$1
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
marker="--seed 4242"  # tells this test's processes apart from anything else running

# The rrfp process of MPI rank $1 (Open MPI puts the rank in each process's environment).
pid_of_rank() {
  for p in $(pgrep -f "rrfp run .*$marker"); do
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
  left=$(pgrep -f "rrfp run .*$marker" || true)
  [ -z "$left" ] || { kill -9 $left; fail "$sig: processes left behind: $left"; }
  echo "$sig: mpirun exited $rc after $((SECONDS - start)) s; the lines naming rank 2:"
  grep -E "rank 2|mpi rank 2" "$log" | head -3 | cut -c1-400
  grep -qE "$2" "$log" || { cat "$log"; fail "$sig: no error matching '$2'"; }
}

# Killed: Open MPI notices the death and ends the job, naming the rank.
run_case KILL "process rank 2 .* exited on signal 9"
# Silent (stopped): the peers' watchdog names what they wait for, MPI_Abort ends the job.
run_case STOP "run failed on mpi rank [0-9]: no progress .*\(mpi rank 2\)"
# Bad input under mpirun: one line from rank 0, every process exits 2.
"$here/mpirun.sh" 3 "$rrfp" run --transport mpi --pp 2 -m 4 $marker >"$log" 2>&1
rc=$?
[ $rc -eq 2 ] || { cat "$log"; fail "bad layout: mpirun exited $rc, not 2"; }
[ "$(grep -c 'rrfp: error: mpirun -np 3: the layout --pp 2' "$log")" -eq 1 ] ||
  { cat "$log"; fail "bad layout: not exactly one line naming the layout"; }
echo "bad layout: exit 2, one line"
# Bad training input that only some ranks could detect must still stop every rank: an
# unwritable --out (rank 0 writes the outputs) and checkpoints (not supported across processes).
if ! "$rrfp" train --steps 0 2>&1 | grep -q "no LibTorch"; then
  for args in "--out /proc/rrfp-out" "--save-every 1 --out $(dirname "$log")/rrfp-mpi-out"; do
    timeout 60 "$here/mpirun.sh" 2 "$rrfp" train --transport mpi --pp 2 --steps 1 $args \
      $marker >"$log" 2>&1
    rc=$?
    [ $rc -eq 2 ] || { cat "$log"; fail "train $args: mpirun exited $rc, not 2"; }
    [ "$(grep -c 'rrfp: error: ' "$log")" -eq 1 ] ||
      { cat "$log"; fail "train $args: not exactly one error line"; }
    echo "train $args: exit 2, one line"
  done
fi
echo "ok"
