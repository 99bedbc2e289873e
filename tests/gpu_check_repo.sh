# Sourced by the tests of scripts/gpu-check.sh: a throwaway repository holding a copy of the
# script and its table maker (a refusal gone missing deletes only that copy), one tracked file
# in docs/ and build*/ ignored. Sets src, tmp (removed at exit, its links resolved as the script
# names it), repo, fails and fail().
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(cd "$(mktemp -d)" && pwd -P)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
repo=$tmp/repo
mkdir -p "$repo/scripts" "$repo/docs"
cp "$src/scripts/gpu-check.sh" "$src/scripts/gpu_table.py" "$repo/scripts/"
echo "a tracked file" >"$repo/docs/notes.md"
printf 'build*/\n' >"$repo/.gitignore"
git -C "$repo" init -q 2>/dev/null && git -C "$repo" add -A 2>/dev/null
# A GPU as nvidia-smi lists one: the script refuses runs on CUDA where nothing sees a GPU.
mkdir -p "$tmp/bin"
printf '#!/bin/sh\n[ "$1" = -L ] && echo "GPU 0: Test GPU (UUID: GPU-0)" || echo "Test GPU, 0.0, 1 MiB, 1 MHz"\n' \
  >"$tmp/bin/nvidia-smi"
chmod +x "$tmp/bin/nvidia-smi"
export PATH="$tmp/bin:$PATH"
