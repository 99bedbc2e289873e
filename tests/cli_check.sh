# Sourced by the CLI's bad-input scripts: $1 the rrfp binary, $2 (ON or OFF) whether the
# build has LibTorch; sets rrfp, tmp (removed at exit), fails, trains, and check().
set -u
rrfp=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
# The training checks run where this build has LibTorch (train_gate.sh).
torch=${2:-}
source "$(dirname "${BASH_SOURCE[0]}")/train_gate.sh"
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
