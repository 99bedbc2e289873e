# Sourced by the CLI's bad-input scripts: $1 the rrfp binary, $2 (ON or OFF) whether the
# build has LibTorch; sets rrfp, tmp (removed at exit), fails, trains, and check().
set -u
rrfp=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
# The training checks run where this build has LibTorch. The build says whether it has
# (RRFP_TORCH, the second argument) and rrfp must agree: a build whose rrfp-train is missing
# fails here instead of skipping those checks.
torch=${2:-}
# (Captured, not piped into grep: under pipefail rrfp's exit 2 would fail the pipeline.)
said=$("$rrfp" train --steps 0 2>&1)
case $said in *"no LibTorch"*) trains=OFF ;; *) trains=ON ;; esac
if [ -n "$torch" ] && [ "$torch" != "$trains" ]; then
  echo "FAIL: the build has RRFP_TORCH=$torch, but rrfp train says training is $trains:"
  echo "$said"
  exit 1
fi
check() {  # check "expected substring" args...
  local want=$1; shift
  "$rrfp" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? lines
  lines=$(wc -l <"$tmp/err")
  if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL: rrfp $* -> rc=$rc, $lines stderr line(s), want '$want':"; cat "$tmp/err"
    fails=$((fails + 1))
  fi
}
