#!/usr/bin/env bash
# `rrfp train --transport mpi` where one process meets what the others do not: a checkpoint that
# rank 0 writes while the others wait for it (under a short --timeout). Each ends as one process
# would: the run completes, or every process exits with the refusing one's line, in seconds.
# Usage: mpi_train_faults.sh path/to/rrfp
set -uo pipefail
rrfp=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")  # absolute: ranks start elsewhere
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mpi=("$here/mpirun.sh")
tiny=(--pp 2 -m 4 --d-model 16 --heads 2 --layers 4 --max-seq 32 --max-len 32 --min-len 8
  --eval-every 0 --eval-batches 1 --timeout 60)

# A 306 MB checkpoint under --timeout 1: the others wait for rank 0 to gather, write and fsync
# it (3.8 s on the 2-core reference VM) for --timeout plus 1 s per 10 MB. The job was ended at
# its first save: "MPI_Allgather (between steps) did not finish within 1 s".
start=$SECONDS
timeout 300 "${mpi[@]}" 2 "$rrfp" train --transport mpi --d-model 512 --heads 8 --layers 8 \
  --pp 2 -m 2 --max-len 8 --min-len 8 --max-seq 8 --eval-every 0 --eval-batches 1 --steps 2 \
  --timeout 1 --save-every 1 --out "$out/save" >"$out/save.log" 2>&1
rc=$?
[ $rc -eq 0 ] && [ -s "$out/save/checkpoint.bin" ] ||
  { tail -5 "$out/save.log"; fail "checkpoints under --timeout 1: mpirun exited $rc"; }
echo "two 306 MB checkpoints under --timeout 1: written in a run of $((SECONDS - start)) s"

echo "PASS"
