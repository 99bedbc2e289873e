#!/usr/bin/env bash
# scripts/gpu-check.sh's OUT: a folder that is not empty, the repository, a folder holding it
# or one inside its tracked tree is refused (exit 2, one line naming OUT), with nothing in it
# touched; a fresh empty one ends with the summary and the archive alone, the caller's
# console.log kept. (It archived the whole of OUT and deleted it, and resolved OUT after
# changing to the repository root: `gpu-check.sh .` from elsewhere deleted the source tree.)
# No GPU needed. The script runs from a copy in a throwaway repository, so that a refusal gone
# missing deletes only that copy.
source "$(dirname "$0")/gpu_check_repo.sh"
# What a folder holds, names and contents: the same before and after a refused run.
state() { (cd "$1" && find . | LC_ALL=C sort && find . -type f -exec md5sum {} + | LC_ALL=C sort); }
export GPU_CHECK_NO_BUILD=1 GPU_CHECK_HARD=20 GPU_CHECK_SECONDS=0
# refused "WANT" DIR-TO-RUN-IN OUT [FOLDER THAT MUST BE UNTOUCHED...]
refused() {
  local want=$1 cwd=$2 out=$3
  shift 3
  local d before=()
  for d in "$repo" "$@"; do before+=("$(state "$d")"); done
  (cd "$cwd" && timeout 60 "$repo/scripts/gpu-check.sh" "$out") >"$tmp/stdout" 2>"$tmp/stderr"
  local rc=$?
  if [ $rc -ne 2 ] || [ "$(wc -l <"$tmp/stderr")" -ne 1 ] || ! grep -qF -- "$want" "$tmp/stderr"; then
    fail "gpu-check.sh $out (in $cwd): exit $rc, want 2 and one line with '$want':"
    cat "$tmp/stderr"
  fi
  [ -s "$tmp/stdout" ] && fail "gpu-check.sh $out (in $cwd) ran: $(head -3 "$tmp/stdout")"
  local i=0
  for d in "$repo" "$@"; do
    [ "${before[$i]}" = "$(state "$d")" ] || fail "gpu-check.sh $out (in $cwd) changed $d"
    i=$((i + 1))
  done
}

# Runs on CUDA where nothing sees a GPU (no nvidia-smi listing one, an interpreter whose torch
# sees none): refused up front, where every part ran to its failure and came back exit 1. The
# word cuda elsewhere in the arguments is no device.
mkdir -p "$tmp/nogpu"
printf '#!/bin/sh\nexit 9\n' >"$tmp/nogpu/nvidia-smi"
printf '#!/bin/sh\nexit 3\n' >"$tmp/nogpu/python"
chmod +x "$tmp/nogpu/nvidia-smi" "$tmp/nogpu/python"
PATH="$tmp/nogpu:$PATH" PYTHON="$tmp/nogpu/python" \
  refused "gpu-check: no GPU here (nvidia-smi lists none or is not installed" "$tmp" "$tmp/nogpu-out"
[ -e "$tmp/nogpu-out" ] && fail "no GPU: OUT was made"
PATH="$tmp/nogpu:$PATH" PYTHON="$tmp/nogpu/python" GPU_CHECK_ARGS='--device=cuda:1' \
  refused "gpu-check: no GPU here" "$tmp" "$tmp/nogpu-out"
PATH="$tmp/nogpu:$PATH" PYTHON="$tmp/nogpu/python" GPU_CHECK_ARGS='--device cpu --data /x/cuda' \
  timeout 60 "$repo/scripts/gpu-check.sh" "$tmp/nogpu-cpu" >"$tmp/stdout" 2>"$tmp/stderr"
grep -q "no GPU here" "$tmp/stderr" && fail "--device cpu with cuda in a path: refused as no GPU"
mkdir -p "$tmp/full/sub"
echo "results of another run" >"$tmp/full/keep.txt"
echo "more" >"$tmp/full/sub/keep.txt"
refused "OUT $tmp/full is not empty" "$tmp" "$tmp/full" "$tmp/full"
refused "OUT $tmp/full is not empty" "$tmp/full" . "$tmp/full"
refused "OUT $tmp/full is not empty" "$tmp/full/sub" .. "$tmp/full"
refused "OUT $repo is the repository" "$tmp" "$repo"
refused "OUT $repo is the repository" "$repo" .
refused "OUT $repo is the repository" "$repo/docs" ..
refused "OUT $tmp contains the repository $repo" "$repo" ..
refused "OUT $repo/scripts lies inside the repository $repo" "$repo" scripts
refused "OUT $repo/docs/new lies inside the repository $repo" "$tmp" "$repo/docs/new"
[ -e "$repo/docs/new" ] && fail "a refused OUT was made: $repo/docs/new"
touch "$tmp/a-file"
refused "OUT $tmp/a-file is not a folder" "$tmp" "$tmp/a-file"

# A fresh folder (here holding the caller's console.log alone): the summary, the archive of
# what the script wrote, and the console as it was; its work folder gone. Without a GPU the
# checks fail, so the exit status is not looked at.
mkdir -p "$tmp/fresh"
echo "the caller's console" >"$tmp/fresh/console.log"
(cd "$tmp" && timeout 60 "$repo/scripts/gpu-check.sh" fresh) >"$tmp/stdout" 2>&1
left=$(cd "$tmp/fresh" && ls -A | LC_ALL=C sort | tr '\n' ' ')
[ "$left" = "console.log gpu-check.tgz summary.md " ] || {
  fail "a fresh OUT holds '$left', not console.log, gpu-check.tgz and summary.md:"
  tail -5 "$tmp/stdout"
}
[ "$(cat "$tmp/fresh/console.log" 2>/dev/null)" = "the caller's console" ] || fail "console.log changed"
tar tzf "$tmp/fresh/gpu-check.tgz" 2>/dev/null | grep -qx "./versions.txt" ||
  fail "the archive lacks versions.txt"

[ "$fails" -eq 0 ] || exit 1
echo "gpu-check OUT: refusals and clean-up ok"
