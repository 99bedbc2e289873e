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
