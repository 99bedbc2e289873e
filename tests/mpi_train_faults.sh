#!/usr/bin/env bash
# `rrfp train --transport mpi` where one process meets what the others do not: a checkpoint that
# rank 0 writes while the others wait for it (under a short --timeout), an input missing on one
# node only (--data, --resume), a checkpoint of another task, an output taken by a directory
# during the run, a hint that is a FIFO, and failures every process meets alike. Each ends as one process would: the run completes, or every process exits
# with the refusing one's line, in seconds. Usage: mpi_train_faults.sh path/to/rrfp
set -uo pipefail
rrfp=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")  # absolute: ranks start elsewhere
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpi=("$here/mpirun.sh")
tiny=(--pp 2 -m 4 --d-model 16 --heads 2 --layers 4 --max-seq 32 --max-len 32 --min-len 8
  --eval-every 0 --eval-batches 1 --timeout 60)

# A 306 MB checkpoint under --timeout 3: the others wait for rank 0 to gather, write and fsync
# it (6 s on the 2-core reference VM) for --timeout plus 1 s per 10 MB. The job was ended at
# its first save: "MPI_Allgather (between steps) did not finish within 1 s". (--timeout 3, not
# 1: under load on a 2-core CI runner one W task of this model, 0.3 s when idle, took 1 s, and
# this test runs beside one other; the write still takes twice --timeout.)
start=$SECONDS
timeout 300 "${mpi[@]}" 2 "$rrfp" train --transport mpi --d-model 512 --heads 8 --layers 8 \
  --pp 2 -m 2 --max-len 8 --min-len 8 --max-seq 8 --eval-every 0 --eval-batches 1 --steps 2 \
  --timeout 3 --save-every 1 --out "$out/save" >"$out/save.log" 2>&1
rc=$?
[ $rc -eq 0 ] && [ -s "$out/save/checkpoint.bin" ] ||
  { tail -5 "$out/save.log"; fail "checkpoints under --timeout 3: mpirun exited $rc"; }
echo "two 306 MB checkpoints under --timeout 3: written in a run of $((SECONDS - start)) s"

# refused WANT DIR_OF_RANK_0 DIR_OF_RANK_1 ARGS...: the two ranks in their own working folders
# (as on two nodes); exit 2 in seconds with exactly one error line, containing WANT.
refused() {
  local want=$1 a=$2 b=$3
  shift 3
  local start=$SECONDS
  timeout 120 "${mpi[@]}" 1 -wdir "$a" "$rrfp" train --transport mpi "$@" : \
    -np 1 -wdir "$b" "$rrfp" train --transport mpi "$@" >"$out/r.log" 2>&1
  local rc=$? took=$((SECONDS - start))
  [ $rc -eq 2 ] && [ $took -lt 30 ] && [ "$(grep -c "^rrfp: error" "$out/r.log")" -eq 1 ] &&
    grep -qF -- "rrfp: error: $want" "$out/r.log" ||
    { grep rrfp "$out/r.log"; fail "want '$want': mpirun exited $rc after $took s"; }
  echo "refused in $took s: $want"
}
mkdir -p "$out/n0/corp" "$out/n1"
cp /usr/share/common-licenses/GPL-3 "$out/n0/corp/"
# --data where rank 1's node has no such folder: its refusal was never printed, and rank 0
# waited in the job's next collective until --timeout.
refused "mpi rank 1: --data: 'corp' does not exist" "$out/n0" "$out/n1" "${tiny[@]}" \
  --data corp --steps 2 --out "$out/d"
# --resume where rank 1's node has no checkpoint at that path.
mkdir -p "$out/n1/corp" && cp "$out/n0/corp/GPL-3" "$out/n1/corp/"
(cd "$out/n0" && timeout 120 "$rrfp" train "${tiny[@]}" --data corp --steps 2 --save-every 2 \
  --out ck >/dev/null 2>&1) || fail "the run whose checkpoint is resumed"
refused "mpi rank 1: --resume: 'ck/checkpoint.bin' does not exist" "$out/n0" "$out/n1" \
  "${tiny[@]}" --data corp --steps 4 --resume ck/checkpoint.bin --out "$out/r"
# Hint files that parse on both nodes but differ: each process ordered its stage's tasks by its
# own copy, and the job trained on with a mixed trace.
(cd "$out/n0" && "$rrfp" schedule show --pp 2 -m 4 --hint gpipe --out h.txt >/dev/null) &&
  (cd "$out/n1" && "$rrfp" schedule show --pp 2 -m 4 --hint 1f1b --out h.txt >/dev/null) ||
  fail "the hint files"
refused "mpirun: every process must read the same --hint; 'h.txt' holds other bytes on rank(s) 1 than on rank 0" \
  "$out/n0" "$out/n1" "${tiny[@]}" --data corp --steps 2 --hint h.txt --out "$out/h"
# A corpus that differs between the nodes: stage 0 trained on one text and the last stage scored
# it against another, exit 0.
mkdir -p "$out/n0/c2" "$out/n1/c2" && cp /usr/share/common-licenses/GPL-3 "$out/n0/c2/" &&
  cp /usr/share/common-licenses/Apache-2.0 "$out/n1/c2/" || fail "the corpora"
refused "--data: every process must read the same corpus; 'c2' holds other files on rank(s) 1 than on rank 0" \
  "$out/n0" "$out/n1" "${tiny[@]}" --data c2 --steps 2 --out "$out/c2"
# A checkpoint that differs between the nodes (a stale copy): the processes resumed at steps 2
# and 1 and failed inside the run with a library's message ("vector::_M_range_check").
(cd "$out/n1" && timeout 120 "$rrfp" train "${tiny[@]}" --data corp --steps 1 --save-every 1 \
  --out ck >/dev/null 2>&1) || fail "the run of the stale checkpoint"
refused "--resume: every process must resume from the same checkpoint; 'ck/checkpoint.bin' holds another on rank(s) 1 (step 1) than on rank 0 (step 2;" \
  "$out/n0" "$out/n1" "${tiny[@]}" --data corp --steps 4 --resume ck/checkpoint.bin --out "$out/r2"

# An image-text checkpoint resumed by a text run: refused as one process refuses it (each
# process checked only its own tensors, and the job trained on without the image encoder).
tiny_it=(--pp 2 -m 4 --d-model 16 --heads 2 --layers 4 --max-seq 32 --eval-every 0
  --eval-batches 1 --timeout 60)
timeout 120 "$rrfp" train "${tiny_it[@]}" --task image-text --max-images 2 --steps 2 \
  --save-every 2 --out "$out/it" >"$out/it.log" 2>&1 || { cat "$out/it.log"; fail "image-text run"; }
start=$SECONDS
timeout 120 "${mpi[@]}" 2 "$rrfp" train --transport mpi "${tiny[@]}" --steps 4 \
  --resume "$out/it/checkpoint.bin" --out "$out/t" >"$out/t.log" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q 'was written by a run of --task "image-text"; this run.s is "text"' "$out/t.log" ||
  { grep rrfp "$out/t.log"; fail "an image-text checkpoint resumed by a text job: mpirun exited $rc"; }
echo "an image-text checkpoint refused by a text job in $((SECONDS - start)) s"

# trace.json taken by a directory during the run: rank 0's failure ends the job at once, exit 1
# (rank 0 exited 2 naming --trace, and rank 1 waited for it until --timeout).
start=$SECONDS
timeout 300 "${mpi[@]}" 2 "$rrfp" train --transport mpi "${tiny[@]}" --steps 40 \
  --out "$out/o" >"$out/o.log" 2>&1 &
job=$!
for _ in $(seq 300); do [ -s "$out/o/loss.csv" ] && break; sleep 0.1; done
mkdir "$out/o/trace.json"
wait $job
rc=$?
[ $rc -eq 1 ] && [ $((SECONDS - start)) -lt 50 ] &&
  grep -q "rrfp: run failed on mpi rank 0: --out: '$out/o/trace.json' is a directory" "$out/o.log" ||
  { grep rrfp "$out/o.log"; fail "trace.json a directory under mpirun: exit $rc after $((SECONDS - start)) s"; }
echo "trace.json a directory: the job failed in $((SECONDS - start)) s"

# A hint file that is a FIFO on every node: the processes compare their copies' bytes before
# the hint is read, and that comparison waited in the FIFO's open past --timeout (a device
# such as /dev/zero, in its read). The hint's reader refuses it, as in one process.
mkfifo "$out/n0/h.fifo" "$out/n1/h.fifo"
refused "--hint: 'h.fifo' is not a regular file" "$out/n0" "$out/n1" "${tiny[@]}" \
  --steps 2 --hint h.fifo --out "$out/f"

# A FIFO at loss.csv in rank 1's --out only: refused before the first step by rank 1, agreed by
# both (it was an error of the run: each process printed its own line and the job aborted).
mkdir -p "$out/n0/fo" "$out/n1/fo" && mkfifo "$out/n1/fo/loss.csv"
refused "mpi rank 1: --out: 'fo/loss.csv' is a FIFO, not a file" "$out/n0" "$out/n1" \
  "${tiny[@]}" --steps 2 --out fo

# Rank 1 under another intra-op thread count: the job trains, and rank 0 says once that its
# bits match no one-process run's (it was silent).
timeout 120 "${mpi[@]}" 1 -x OMP_NUM_THREADS=1 "$rrfp" train --transport mpi "${tiny[@]}" \
  --steps 1 --out "$out/omp" : -np 1 -x OMP_NUM_THREADS=2 "$rrfp" train --transport mpi \
  "${tiny[@]}" --steps 1 --out "$out/omp" >"$out/omp.log" 2>&1 &&
  [ "$(grep -c "warning: OMP_NUM_THREADS: the processes compute with other intra-op thread \
counts (rank 0 1, rank 1 2)" "$out/omp.log")" -eq 1 ] ||
  { grep rrfp "$out/omp.log"; fail "rank 1 under OMP_NUM_THREADS=2: no warning, or not one"; }
echo "rank 1 under OMP_NUM_THREADS=2: said once"

# A --dp far past the processes: refused as the layout, where the memory its replicas would
# take was refused first, naming --microbatches.
refused "mpirun -np 2: the layout --pp 2 x --tp 1 x --dp 3000000 needs 6000000 ranks" \
  "$out/n0" "$out/n1" "${tiny[@]}" --dp 3000000 --steps 2 --out "$out/dp"

# one_line WANT RC: a failure every process meets alike (its outcome is agreed over the job)
# ends it with exit 1 and one line in $out/x.log, no "SIGTERM" line after it: each process
# printed it, and mpirun's signal to a process still in its shutdown added "stopping after the
# current step". The progress before it comes as lines: mpirun gives each process a terminal
# of its own whatever its own output is, and the redraws went into the file.
one_line() {
  local want=$1 rc=$2
  [ "$rc" -eq 1 ] && [ "$(grep -cE "^rrfp: |SIGTERM" "$out/x.log")" -eq 1 ] &&
    ! grep -q $'\r' "$out/x.log" && grep -q "^rrfp: run failed: $want" "$out/x.log" ||
    { grep rrfp "$out/x.log"; fail "want one line '$want': mpirun exited $rc"; }
}
start=$SECONDS
timeout 120 "${mpi[@]}" 4 "$rrfp" train --transport mpi "${tiny[@]}" --dp 2 --lr 1000 \
  --warmup 1 --clip 0 --weight-decay 0 --steps 10 --out "$out/lr" >"$out/x.log" 2>&1
one_line "step [0-9]*: the .* is .*; training stops" $?
echo "a diverged run: one line in $((SECONDS - start)) s"
# A checkpoint rank 0 cannot write (its temporary file's name taken by a folder during the
# run): rank 0's reason, once.
start=$SECONDS
timeout 300 "${mpi[@]}" 2 "$rrfp" train --transport mpi "${tiny[@]}" --steps 400 \
  --save-every 200 --out "$out/ct" >"$out/x.log" 2>&1 &
job=$!
for _ in $(seq 300); do [ -s "$out/ct/loss.csv" ] && break; sleep 0.1; done
mkdir "$out/ct/checkpoint.bin.tmp"
wait $job
one_line ".*checkpoint\.bin\.tmp" $?
echo "a checkpoint rank 0 cannot write: one line in $((SECONDS - start)) s"
# A signal sent to rank 1 alone during set-up (here, reading 100 MB of corpus) ends the job
# with rank 1's own line: only rank 0's "stopped by SIGTERM", which mpirun sent it next, was
# said. Sent once both processes are rrfp-train, whose handlers take a signal held back
# across the exec.
mkdir -p "$out/big"
yes "a line of a large corpus, read before the first step" | head -c 100000000 >"$out/big/a.txt"
timeout 300 "${mpi[@]}" 2 "$rrfp" train --transport mpi "${tiny[@]}" --steps 5 --data "$out/big" \
  --out "$out/su" >"$out/su.log" 2>&1 &
job=$!
rank1=
for _ in $(seq 3000); do
  for p in $(pgrep -f "rrfp-train.*--out $out/su"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && rank1=$p
  done
  [ -n "$rank1" ] && break
  sleep 0.01
done
[ -n "$rank1" ] && kill -INT "$rank1"
wait $job
rc=$?
[ $rc -ne 0 ] && grep -qx "rrfp train: mpi rank 1: stopped by SIGINT sent to this process alone; nothing written" "$out/su.log" ||
  { tail -5 "$out/su.log"; fail "SIGINT to rank 1 alone in set-up: exit $rc"; }
rm -rf "$out/big"
echo "SIGINT to rank 1 alone during set-up: its own line"
# Sent to rank 1 alone once steps run, it is taken at once in rank 1's own words (nothing was
# said until the job stopped after its step), and the job stops after the step, 143.
timeout 300 "${mpi[@]}" 2 "$rrfp" train --transport mpi "${tiny[@]}" --steps 400 --out "$out/al" \
  >"$out/al.log" 2>&1 &
job=$!
for _ in $(seq 3000); do [ -s "$out/al/loss.csv" ] && [ "$(wc -l <"$out/al/loss.csv")" -ge 2 ] && break; sleep 0.01; done
rank1=
for p in $(pgrep -f "rrfp-train.*--out $out/al"); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && rank1=$p
done
[ -n "$rank1" ] && kill -TERM "$rank1"
wait $job
rc=$?
[ $rc -eq 143 ] &&
  grep -q "^rrfp train: mpi rank 1: SIGTERM, sent to this process alone, taken: stopping after the current step" "$out/al.log" ||
  { tail -5 "$out/al.log"; fail "SIGTERM to rank 1 alone mid-run: exit $rc"; }
echo "SIGTERM to rank 1 alone mid-run: its own acknowledgement"
# A process stopped (SIGSTOP, a hung node) at its first data-parallel gradient sum, hook of
# dist/mpi_world.cpp: the job ends within the deadline, a line naming the stopped process by
# its job rank (rank 3 is rank 1 of its gradient sum's group). No line named it: "a process of
# the job is stopped, gone or far behind", from each process that waited.
start=$SECONDS
RRFP_FAULT_STOP=dp-gather:3 timeout -k 10 90 "${mpi[@]}" 4 "$rrfp" train --transport mpi \
  --pp 2 --dp 2 -m 2 --d-model 16 --heads 2 --layers 4 --max-seq 32 --max-len 32 --min-len 8 \
  --eval-every 0 --eval-batches 1 --timeout 5 --steps 2 --warmup 0 --out "$out/dps" >"$out/dps.log" 2>&1
rc=$?
took=$((SECONDS - start))
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -lt 60 ] &&
  grep -qE "did not finish within 5 s: mpi (rank 3 has|ranks [0-9, and]*3 have) not come to it" \
    "$out/dps.log" || { grep rrfp "$out/dps.log"; fail "a process stopped at a gradient sum: exit $rc"; }
echo "a process stopped at a gradient sum: named, the job ended in $took s"
echo "PASS"
