#!/usr/bin/env bash
# `cmake --install`: the programs land in PREFIX/bin and run from there, `rrfp train` finding
# its rrfp-train beside it (it refuses where none is). Usage: cli_install.sh CMAKE BUILD_DIR
# [ON|OFF: whether the build has LibTorch].
set -u
cmake=$1 build=$2 torch=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$cmake" --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 ||
  fail "cmake --install: $(tail -3 "$tmp/install.log")"
rrfp=$tmp/prefix/bin/rrfp
[ -x "$rrfp" ] || fail "no executable $rrfp after the install: $(cat "$tmp/install.log")"
source "$here/train_gate.sh"  # the installed rrfp's word on whether it trains
cd "$tmp" || exit 1
"$rrfp" schedule show --pp 2 -m 2 --hint 1f1b >show.txt 2>&1 || fail "installed rrfp: $(cat show.txt)"
grep -q '^stage 1 | ' show.txt || fail "installed rrfp schedule show: $(cat show.txt)"
if [ "$trains" = ON ]; then
  [ -x "$tmp/prefix/bin/rrfp-train" ] || fail "no rrfp-train beside the installed rrfp"
  "$rrfp" train --pp 2 -m 2 --steps 1 --warmup 0 --d-model 16 --heads 2 --layers 2 --max-seq 32 \
    --max-len 32 --min-len 8 --eval-every 0 --eval-batches 1 --out trained >train.log 2>&1 ||
    fail "installed rrfp train: $(tail -2 train.log)"
  grep -q '^done: 1 step' train.log || fail "installed rrfp train: $(tail -2 train.log)"
elif [ -e "$tmp/prefix/bin/rrfp-train" ]; then
  fail "rrfp-train installed by a build without LibTorch"
fi
echo "install checks passed"
