#!/usr/bin/env bash
# example_out_of_memory.sh PYTHON EXAMPLE: examples/transformer_lm.py asked for more memory than
# there is ends in one line (exit 1) naming the task, the bytes and the flags that lower them,
# where it ended in a traceback. The process's address space is capped at 6 GiB, so that the
# 25.6 GB attention matrix of --seq 20000 fails to allocate on any machine (where memory is
# overcommitted, it would otherwise be handed out and filled).
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 PYTHON EXAMPLE" >&2; exit 2; }
out=$( (ulimit -v $((6 * 1024 * 1024)) && exec timeout 120 "$1" "$2" --d-model 32 --layers 2 \
  --seq 20000 --steps 1) 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 1 ] || { echo "FAIL: exit $rc, expected 1" >&2; exit 1; }
[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || { echo "FAIL: not one line" >&2; exit 1; }
for want in "transformer_lm.py: stage 0: task F c0 m0 failed" "allocate" \
  "(lower --seq, --rows, --d-model or --microbatches)"; do
  grep -qF -- "$want" <<<"$out" || { echo "FAIL: no '$want'" >&2; exit 1; }
done
echo "ok"
